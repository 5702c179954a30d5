//! The text form of the IR, for dumps (`TILERS_DUMP_IR`) and tests; [`crate::text`] reads
//! the tile-level form back. Names are made unique (`%i`, `%i.1`) so the text is unambiguous.

use crate::ir::*;
use std::collections::BTreeSet;
use std::fmt::Write;

/// Unique display names of a module's variables and buffers, in id order.
struct Names {
    vars: Vec<String>,
    buffers: Vec<String>,
}

impl Names {
    fn new(m: &Module) -> Names {
        let unique = |names: Vec<&str>| {
            let mut taken = BTreeSet::new();
            names
                .into_iter()
                .map(|n| {
                    let base = if n.is_empty() {
                        "v".to_string()
                    } else {
                        n.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '.', "_")
                    };
                    let mut name = base.clone();
                    let mut k = 1;
                    while !taken.insert(name.clone()) {
                        name = format!("{base}.{k}");
                        k += 1;
                    }
                    name
                })
                .collect::<Vec<_>>()
        };
        Names {
            vars: unique(m.vars.iter().map(|v| v.name.as_str()).collect()),
            buffers: unique(m.buffers.iter().map(|b| b.name.as_str()).collect()),
        }
    }
}

thread_local! {
    static NAMES: std::cell::RefCell<Option<Names>> = const { std::cell::RefCell::new(None) };
}

fn var_name(m: &Module, v: VarId) -> String {
    NAMES
        .with(|n| n.borrow().as_ref().map(|n| n.vars[v.0 as usize].clone()))
        .unwrap_or_else(|| m.var(v).name.clone())
}

fn buf_name(m: &Module, b: BufferId) -> String {
    NAMES
        .with(|n| n.borrow().as_ref().map(|n| n.buffers[b.0 as usize].clone()))
        .unwrap_or_else(|| m.buffer(b).name.clone())
}

/// The module as text, with a `// file:line` comment on each statement that has one.
pub fn print_module(m: &Module) -> String {
    print_with(m, true)
}

/// The module as text without source locations (what [`crate::text::parse_text`] reproduces).
pub fn print_module_bare(m: &Module) -> String {
    print_with(m, false)
}

fn print_with(m: &Module, locations: bool) -> String {
    NAMES.with(|n| *n.borrow_mut() = Some(Names::new(m)));
    LOCATIONS.with(|l| l.set(locations));
    let out = print_inner(m);
    NAMES.with(|n| *n.borrow_mut() = None);
    out
}

thread_local! {
    static LOCATIONS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

fn print_inner(m: &Module) -> String {
    let mut out = String::new();
    let params: Vec<String> = m
        .params
        .iter()
        .map(|p| match p {
            Param::Tensor { buffer, .. } => {
                let b = m.buffer(*buffer);
                format!("{}: {}{:?}", buf_name(m, *buffer), b.dtype, b.shape)
            }
            Param::Scalar { var, .. } => format!("%{}: {}", var_name(m, *var), m.var(*var).dtype),
        })
        .collect();
    let mut blocks: Vec<(u8, VarId)> = m
        .vars
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match v.kind {
            VarKind::BlockIdx(axis) => Some((axis, VarId(i as u32))),
            _ => None,
        })
        .collect();
    blocks.sort();
    let blocks: Vec<String> = blocks.iter().map(|(_, v)| format!("%{}", var_name(m, *v))).collect();
    let grid: Vec<String> = m.kernel.grid.iter().map(|g| expr(m, g)).collect();
    let level = match m.level {
        Level::Tile => "tile",
        Level::Thread => "thread",
    };
    let _ = writeln!(
        out,
        "kernel {}({}) blocks({}) grid({}) threads={} level={} {{",
        m.name,
        params.join(", "),
        blocks.join(", "),
        grid.join(", "),
        m.kernel.threads,
        level
    );
    for b in &m.buffers {
        if b.scope == crate::Scope::Global {
            continue;
        }
        let id = BufferId(m.buffers.iter().position(|x| std::ptr::eq(x, b)).unwrap_or(0) as u32);
        let _ = write!(out, "  {} {}: {}{:?}", b.scope.name(), buf_name(m, id), b.dtype, b.shape);
        if let Some(off) = b.shared_offset {
            let _ = write!(out, " at smem+{off}");
        }
        if b.swizzle {
            let _ = write!(out, " swizzled");
        }
        if let Some(l) = &b.layout {
            let _ = write!(out, "  // {l}");
        }
        out.push('\n');
    }
    stmts(m, &m.kernel.body, 1, &mut out);
    out.push_str("}\n");
    out
}

fn loc_comment(m: &Module, loc: crate::Loc) -> String {
    if !LOCATIONS.with(|l| l.get()) {
        return String::new();
    }
    m.sources.short(loc).map(|s| format!("  // {s}")).unwrap_or_default()
}

fn stmts(m: &Module, body: &[Stmt], depth: usize, out: &mut String) {
    for s in body {
        stmt(m, s, depth, out);
    }
}

fn region(m: &Module, r: &Region) -> String {
    let dims: Vec<String> = r
        .dims
        .iter()
        .map(|d| match d {
            RegionDim::Index(e) => expr(m, e),
            RegionDim::Slice { start, stop } => format!("{}:{}", expr(m, start), expr(m, stop)),
            RegionDim::Origin(e) => format!("{}:+", expr(m, e)),
        })
        .collect();
    format!("{}[{}]", buf_name(m, r.buf), dims.join(", "))
}

fn idx(m: &Module, idx: &[Expr]) -> String {
    idx.iter().map(|e| expr(m, e)).collect::<Vec<_>>().join(", ")
}

fn stmt(m: &Module, s: &Stmt, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let lc = loc_comment(m, s.loc());
    match s {
        Stmt::Store { buf, idx: i, value, .. } => {
            let _ = writeln!(out, "{pad}{}[{}] = {}{lc}", buf_name(m, *buf), idx(m, i), expr(m, value));
        }
        Stmt::AtomicAdd { buf, idx: i, value, .. } => {
            let _ =
                writeln!(out, "{pad}atomic_add {}[{}], {}{lc}", buf_name(m, *buf), idx(m, i), expr(m, value));
        }
        Stmt::Copy { src, dst, pad: p, .. } => {
            let padding = p.as_ref().map(|p| format!(" pad={}", expr(m, p))).unwrap_or_default();
            let _ = writeln!(out, "{pad}copy {} -> {}{padding}{lc}", region(m, src), region(m, dst));
        }
        Stmt::Fill { dst, value, .. } => {
            let _ = writeln!(out, "{pad}fill {}, {}{lc}", region(m, dst), expr(m, value));
        }
        Stmt::Reduce { kind, src, dst, dim, clear, .. } => {
            let _ = writeln!(
                out,
                "{pad}reduce_{} {} -> {} dim={dim} clear={clear}{lc}",
                kind.name(),
                buf_name(m, *src),
                buf_name(m, *dst)
            );
        }
        Stmt::Gemm { a, b, c, transpose_a, transpose_b, policy, clear_accum, a_stage, b_stage, .. } => {
            let stage =
                |s: &Option<Expr>| s.as_ref().map(|e| format!("[{}]", expr(m, e))).unwrap_or_default();
            let _ = writeln!(
                out,
                "{pad}gemm {}{}{} x {}{}{} -> {} policy={} clear_accum={clear_accum}{lc}",
                buf_name(m, *a),
                stage(a_stage),
                if *transpose_a { "^T" } else { "" },
                buf_name(m, *b),
                stage(b_stage),
                if *transpose_b { "^T" } else { "" },
                buf_name(m, *c),
                policy.name()
            );
        }
        Stmt::Parallel { vars, extents, body, layout, .. } => {
            let names: Vec<String> = vars.iter().map(|v| format!("%{}", var_name(m, *v))).collect();
            let l = layout.as_ref().map(|l| format!("  // threads: {l}")).unwrap_or_default();
            let _ = writeln!(out, "{pad}parallel ({}) in {:?} {{{lc}{l}", names.join(", "), extents);
            stmts(m, body, depth + 1, out);
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::For { var, start, extent, kind, body, .. } => {
            let k = match kind {
                ForKind::Serial => "for".to_string(),
                ForKind::Unroll => "unroll".to_string(),
                ForKind::Pipelined { stages } => format!("pipelined(stages={stages})"),
            };
            let _ = writeln!(
                out,
                "{pad}{k} %{} in {}..+{} {{{lc}",
                var_name(m, *var),
                expr(m, start),
                expr(m, extent)
            );
            stmts(m, body, depth + 1, out);
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::If { cond, then, otherwise, .. } => {
            let _ = writeln!(out, "{pad}if {} {{{lc}", expr(m, cond));
            stmts(m, then, depth + 1, out);
            if !otherwise.is_empty() {
                let _ = writeln!(out, "{pad}}} else {{");
                stmts(m, otherwise, depth + 1, out);
            }
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::Let { var, value } => {
            let _ = writeln!(out, "{pad}let %{} = {}", var_name(m, *var), expr(m, value));
        }
        Stmt::VecCopy { dst, dst_idx, src, src_idx, width } => {
            let _ = writeln!(
                out,
                "{pad}vec{width} {}[{}] <- {}[{}]",
                buf_name(m, *dst),
                idx(m, dst_idx),
                buf_name(m, *src),
                idx(m, src_idx)
            );
        }
        Stmt::Ldmatrix { dst, dst_offset, count, trans, src, src_idx } => {
            let _ = writeln!(
                out,
                "{pad}ldmatrix.x{count}{} {}[{}..] <- {}[{}]",
                if *trans { ".trans" } else { "" },
                buf_name(m, *dst),
                expr(m, dst_offset),
                buf_name(m, *src),
                idx(m, src_idx)
            );
        }
        Stmt::Mma { shape, a, a_offset, b, b_offset, c, c_offset } => {
            let _ = writeln!(
                out,
                "{pad}mma.{shape:?} {}[{}..] += {}[{}..] * {}[{}..]",
                buf_name(m, *c),
                expr(m, c_offset),
                buf_name(m, *a),
                expr(m, a_offset),
                buf_name(m, *b),
                expr(m, b_offset)
            );
        }
        Stmt::Async { body } => {
            let _ = writeln!(out, "{pad}async {{");
            stmts(m, body, depth + 1, out);
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::AsyncCommit => {
            let _ = writeln!(out, "{pad}async_commit");
        }
        Stmt::AsyncWait { pending } => {
            let _ = writeln!(out, "{pad}async_wait {pending}");
        }
        Stmt::AsyncCopy { dst, dst_idx, src, src_idx, src_bytes } => {
            let _ = writeln!(
                out,
                "{pad}cp.async16 {}[{}] <- {}[{}] ({} bytes)",
                buf_name(m, *dst),
                idx(m, dst_idx),
                buf_name(m, *src),
                idx(m, src_idx),
                expr(m, src_bytes)
            );
        }
        Stmt::Sync => {
            let _ = writeln!(out, "{pad}sync");
        }
        Stmt::Comment(c) => {
            let _ = writeln!(out, "{pad}// {c}");
        }
    }
}

pub fn expr(m: &Module, e: &Expr) -> String {
    match e {
        Expr::Const { value, dtype } => match value {
            ConstValue::Int(i) if *dtype == crate::DType::I32 => format!("{i}"),
            ConstValue::Int(i) => format!("{i}:{dtype}"),
            ConstValue::Float(f) => format!("{f:?}:{dtype}"),
        },
        Expr::Var { id, .. } => format!("%{}", var_name(m, *id)),
        Expr::Load { buf, idx: i, oob, .. } => {
            let o = oob.as_ref().map(|o| format!(" else {}", expr(m, o))).unwrap_or_default();
            format!("{}[{}{o}]", buf_name(m, *buf), idx(m, i))
        }
        Expr::Binary { op, a, b, .. } => format!("{}({}, {})", op.name(), expr(m, a), expr(m, b)),
        Expr::Unary { op, a, .. } => format!("{}({})", op.name(), expr(m, a)),
        Expr::Cast { a, dtype } => format!("cast<{dtype}>({})", expr(m, a)),
        Expr::Select { cond, a, b, .. } => {
            format!("select({}, {}, {})", expr(m, cond), expr(m, a), expr(m, b))
        }
        Expr::ShflXor { a, mask, .. } => format!("shfl_xor({}, {mask})", expr(m, a)),
    }
}
