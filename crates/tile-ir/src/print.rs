//! The text form of the IR, for dumps (`TILERS_DUMP_IR`) and tests.

use crate::ir::*;
use std::fmt::Write;

pub fn print_module(m: &Module) -> String {
    let mut out = String::new();
    let params: Vec<String> = m
        .params
        .iter()
        .map(|p| match p {
            Param::Tensor { name, buffer } => {
                let b = m.buffer(*buffer);
                format!("{name}: {}{:?}", b.dtype, b.shape)
            }
            Param::Scalar { name, var } => format!("{name}: {}", m.var(*var).dtype),
        })
        .collect();
    let grid: Vec<String> = m.kernel.grid.iter().map(|g| expr(m, g)).collect();
    let level = match m.level {
        Level::Tile => "tile",
        Level::Thread => "thread",
    };
    let _ = writeln!(
        out,
        "kernel {}({}) grid({}) threads={} level={} {{",
        m.name,
        params.join(", "),
        grid.join(", "),
        m.kernel.threads,
        level
    );
    for b in &m.buffers {
        if b.scope == crate::Scope::Global {
            continue;
        }
        let _ = write!(out, "  {} {}: {}{:?}", b.scope.name(), b.name, b.dtype, b.shape);
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
    format!("{}[{}]", m.buffer(r.buf).name, dims.join(", "))
}

fn idx(m: &Module, idx: &[Expr]) -> String {
    idx.iter().map(|e| expr(m, e)).collect::<Vec<_>>().join(", ")
}

fn stmt(m: &Module, s: &Stmt, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    let lc = loc_comment(m, s.loc());
    match s {
        Stmt::Store { buf, idx: i, value, .. } => {
            let _ = writeln!(out, "{pad}{}[{}] = {}{lc}", m.buffer(*buf).name, idx(m, i), expr(m, value));
        }
        Stmt::AtomicAdd { buf, idx: i, value, .. } => {
            let _ = writeln!(
                out,
                "{pad}atomic_add {}[{}], {}{lc}",
                m.buffer(*buf).name,
                idx(m, i),
                expr(m, value)
            );
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
                m.buffer(*src).name,
                m.buffer(*dst).name
            );
        }
        Stmt::Gemm { a, b, c, transpose_a, transpose_b, policy, clear_accum, a_stage, b_stage, .. } => {
            let stage =
                |s: &Option<Expr>| s.as_ref().map(|e| format!("[{}]", expr(m, e))).unwrap_or_default();
            let _ = writeln!(
                out,
                "{pad}gemm {}{}{} x {}{}{} -> {} policy={} clear_accum={clear_accum}{lc}",
                m.buffer(*a).name,
                stage(a_stage),
                if *transpose_a { "^T" } else { "" },
                m.buffer(*b).name,
                stage(b_stage),
                if *transpose_b { "^T" } else { "" },
                m.buffer(*c).name,
                policy.name()
            );
        }
        Stmt::Parallel { vars, extents, body, layout, .. } => {
            let names: Vec<String> = vars.iter().map(|v| format!("%{}", m.var(*v).name)).collect();
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
                m.var(*var).name,
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
            let _ = writeln!(out, "{pad}let %{} = {}", m.var(*var).name, expr(m, value));
        }
        Stmt::VecCopy { dst, dst_idx, src, src_idx, width } => {
            let _ = writeln!(
                out,
                "{pad}vec{width} {}[{}] <- {}[{}]",
                m.buffer(*dst).name,
                idx(m, dst_idx),
                m.buffer(*src).name,
                idx(m, src_idx)
            );
        }
        Stmt::Ldmatrix { dst, dst_offset, count, trans, src, src_idx } => {
            let _ = writeln!(
                out,
                "{pad}ldmatrix.x{count}{} {}[{}..] <- {}[{}]",
                if *trans { ".trans" } else { "" },
                m.buffer(*dst).name,
                expr(m, dst_offset),
                m.buffer(*src).name,
                idx(m, src_idx)
            );
        }
        Stmt::Mma { shape, a, a_offset, b, b_offset, c, c_offset } => {
            let _ = writeln!(
                out,
                "{pad}mma.{shape:?} {}[{}..] += {}[{}..] * {}[{}..]",
                m.buffer(*c).name,
                expr(m, c_offset),
                m.buffer(*a).name,
                expr(m, a_offset),
                m.buffer(*b).name,
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
                m.buffer(*dst).name,
                idx(m, dst_idx),
                m.buffer(*src).name,
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
        Expr::Var { id, .. } => format!("%{}", m.var(*id).name),
        Expr::Load { buf, idx: i, oob, .. } => {
            let o = oob.as_ref().map(|o| format!(" else {}", expr(m, o))).unwrap_or_default();
            format!("{}[{}{o}]", m.buffer(*buf).name, idx(m, i))
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
