//! The text form of the IR, for dumps (`TILERS_DUMP_IR`) and tests; [`crate::text`] reads
//! the tile-level form back. Names are made unique (`%i`, `%i.1`) so the text is unambiguous.

use crate::inst::{Instruction, TextNames};
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

/// Prints one module: its unique names and whether to show source locations.
struct Printer<'a> {
    m: &'a Module,
    names: Names,
    locations: bool,
}

/// The module as text, with a `// file:line` comment on each statement that has one.
pub fn print_module(m: &Module) -> String {
    Printer { m, names: Names::new(m), locations: true }.module()
}

/// The module as text without source locations (what [`crate::text::parse_text`] reproduces).
pub fn print_module_bare(m: &Module) -> String {
    Printer { m, names: Names::new(m), locations: false }.module()
}

impl Printer<'_> {
    fn var_name(&self, v: VarId) -> String {
        self.names.vars[v.0 as usize].clone()
    }

    fn buf_name(&self, b: BufferId) -> String {
        self.names.buffers[b.0 as usize].clone()
    }

    fn module(&self) -> String {
        let m = self.m;
        let mut out = String::new();
        let params: Vec<String> = m
            .params
            .iter()
            .map(|p| match p {
                Param::Tensor { buffer, .. } => {
                    let b = m.buffer(*buffer);
                    format!("{}: {}{:?}", self.buf_name(*buffer), b.dtype, b.shape)
                }
                Param::Scalar { var, .. } => format!("%{}: {}", self.var_name(*var), m.var(*var).dtype),
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
        let blocks: Vec<String> = blocks.iter().map(|(_, v)| format!("%{}", self.var_name(*v))).collect();
        let grid: Vec<String> = m.kernel.grid.iter().map(|g| self.expr(g)).collect();
        let level = match m.level {
            Level::Tile => "tile",
            Level::Thread => "thread",
        };
        let raster = match m.kernel.raster {
            Some(r) => {
                format!(" raster_panel={} raster_order={}", r.panel, if r.by_rows { "row" } else { "col" })
            }
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "kernel {}({}) blocks({}) grid({}) threads={}{raster} level={} {{",
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
            let _ = write!(out, "  {} {}: {}{:?}", b.scope.name(), self.buf_name(id), b.dtype, b.shape);
            if let Some(off) = b.shared_offset {
                let _ = write!(out, " at smem+{off}");
            }
            if let Some(s) = b.swizzle {
                let _ = write!(out, " {s}");
            }
            if let Some(l) = &b.layout {
                let _ = write!(out, "  // {l}");
            }
            out.push('\n');
        }
        self.stmts(&m.kernel.body, 1, &mut out);
        out.push_str("}\n");
        out
    }

    fn loc_comment(&self, loc: crate::Loc) -> String {
        if !self.locations {
            return String::new();
        }
        self.m.sources.short(loc).map(|s| format!("  // {s}")).unwrap_or_default()
    }

    fn stmts(&self, body: &[Stmt], depth: usize, out: &mut String) {
        for s in body {
            self.stmt(s, depth, out);
        }
    }

    fn region(&self, r: &Region) -> String {
        let dims: Vec<String> = r
            .dims
            .iter()
            .map(|d| match d {
                RegionDim::Index(e) => self.expr(e),
                RegionDim::Slice { start, stop } => format!("{}:{}", self.expr(start), self.expr(stop)),
                RegionDim::Origin(e) => format!("{}:+", self.expr(e)),
            })
            .collect();
        format!("{}[{}]", self.buf_name(r.buf), dims.join(", "))
    }

    fn idx(&self, idx: &[Expr]) -> String {
        idx.iter().map(|e| self.expr(e)).collect::<Vec<_>>().join(", ")
    }

    fn stmt(&self, s: &Stmt, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        let lc = self.loc_comment(s.loc());
        match s {
            Stmt::Store { buf, idx: i, value, .. } => {
                let _ =
                    writeln!(out, "{pad}{}[{}] = {}{lc}", self.buf_name(*buf), self.idx(i), self.expr(value));
            }
            Stmt::AtomicAdd { buf, idx: i, value, .. } => {
                let _ = writeln!(
                    out,
                    "{pad}atomic_add {}[{}], {}{lc}",
                    self.buf_name(*buf),
                    self.idx(i),
                    self.expr(value)
                );
            }
            Stmt::Copy(op) => {
                let padding = op.pad.as_ref().map(|p| format!(" pad={}", self.expr(p))).unwrap_or_default();
                let inst = op.inst.map(|i| format!(" by {}", copy_inst_text(i))).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{pad}copy {} -> {}{padding}{inst}{lc}",
                    self.region(&op.src),
                    self.region(&op.dst)
                );
            }
            Stmt::Fill { dst, value, .. } => {
                let _ = writeln!(out, "{pad}fill {}, {}{lc}", self.region(dst), self.expr(value));
            }
            Stmt::Reduce(op) => {
                let _ = writeln!(
                    out,
                    "{pad}reduce_{} {} -> {} dim={} clear={}{lc}",
                    op.kind.name(),
                    self.buf_name(op.src),
                    self.buf_name(op.dst),
                    op.dim,
                    op.clear
                );
            }
            Stmt::Gemm(op) => {
                let stage =
                    |s: &Option<Expr>| s.as_ref().map(|e| format!("[{}]", self.expr(e))).unwrap_or_default();
                let inst = op
                    .inst
                    .map(|i| {
                        format!(
                            " by {} warps={}x{} a={} b={}",
                            i.atom.name,
                            i.warps_m,
                            i.warps_n,
                            i.a.name(),
                            i.b.name()
                        )
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{pad}gemm {}{}{} x {}{}{} -> {} policy={} clear_accum={}{inst}{lc}",
                    self.buf_name(op.a),
                    stage(&op.a_stage),
                    if op.transpose_a { "^T" } else { "" },
                    self.buf_name(op.b),
                    stage(&op.b_stage),
                    if op.transpose_b { "^T" } else { "" },
                    self.buf_name(op.c),
                    op.policy.name(),
                    op.clear_accum
                );
            }
            Stmt::Parallel { vars, extents, body, layout, .. } => {
                let names: Vec<String> = vars.iter().map(|v| format!("%{}", self.var_name(*v))).collect();
                let l = layout.as_ref().map(|l| format!("  // threads: {l}")).unwrap_or_default();
                let _ = writeln!(out, "{pad}parallel ({}) in {:?} {{{lc}{l}", names.join(", "), extents);
                self.stmts(body, depth + 1, out);
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
                    self.var_name(*var),
                    self.expr(start),
                    self.expr(extent)
                );
                self.stmts(body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::If { cond, then, otherwise, .. } => {
                let _ = writeln!(out, "{pad}if {} {{{lc}", self.expr(cond));
                self.stmts(then, depth + 1, out);
                if !otherwise.is_empty() {
                    let _ = writeln!(out, "{pad}}} else {{");
                    self.stmts(otherwise, depth + 1, out);
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Print { what, msg, block, .. } => {
                let shown = match what {
                    Printed::Value(e) => self.expr(e),
                    Printed::Tile(r) => format!("tile {}", self.region(r)),
                };
                let only = block
                    .as_ref()
                    .map(|b| {
                        let coords: Vec<String> = b.iter().map(|x| x.to_string()).collect();
                        format!(" block=({})", coords.join(", "))
                    })
                    .unwrap_or_default();
                let _ = writeln!(out, "{pad}print {shown}, {msg:?}{only}{lc}");
            }
            Stmt::DeviceAssert { cond, msg, .. } => {
                let _ = writeln!(out, "{pad}assert {}, {msg:?}{lc}", self.expr(cond));
            }
            Stmt::SourceLine(loc) => {
                let at = self.m.sources.short(*loc).unwrap_or_else(|| "?".into());
                let _ = writeln!(out, "{pad}line {at}");
            }
            Stmt::Let { var, value } => {
                let _ = writeln!(out, "{pad}let %{} = {}", self.var_name(*var), self.expr(value));
            }
            Stmt::Inst(i) => {
                let _ = writeln!(out, "{pad}{}", i.text(self));
            }
            Stmt::Async { body } => {
                let _ = writeln!(out, "{pad}async {{");
                self.stmts(body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Comment(c) => {
                let _ = writeln!(out, "{pad}// {c}");
            }
        }
    }

    fn expr_text(&self, e: &Expr) -> String {
        match e {
            Expr::Const { value, dtype } => match value {
                ConstValue::Int(i) if *dtype == crate::DType::I32 => format!("{i}"),
                ConstValue::Int(i) => format!("{i}:{dtype}"),
                ConstValue::Float(f) => format!("{f:?}:{dtype}"),
            },
            Expr::Var { id, .. } => format!("%{}", self.var_name(*id)),
            Expr::Load { buf, idx: i, oob, .. } => {
                let o = oob.as_ref().map(|o| format!(" else {}", self.expr(o))).unwrap_or_default();
                format!("{}[{}{o}]", self.buf_name(*buf), self.idx(i))
            }
            Expr::Binary { op, a, b, .. } => format!("{}({}, {})", op.name(), self.expr(a), self.expr(b)),
            Expr::Unary { op, a, .. } => format!("{}({})", op.name(), self.expr(a)),
            Expr::Cast { a, dtype } => format!("cast<{dtype}>({})", self.expr(a)),
            Expr::Select { cond, a, b, .. } => {
                format!("select({}, {}, {})", self.expr(cond), self.expr(a), self.expr(b))
            }
            Expr::ShflXor { a, mask, .. } => format!("shfl_xor({}, {mask})", self.expr(a)),
        }
    }
}

impl TextNames for Printer<'_> {
    fn buffer(&self, b: BufferId) -> String {
        self.buf_name(b)
    }
    fn expr(&self, e: &Expr) -> String {
        self.expr_text(e)
    }
}

/// How a copy is carried out, as the text IR writes it (`by cp.async`).
pub fn copy_inst_text(i: CopyInst) -> String {
    match i {
        CopyInst::Threads => "threads".into(),
        CopyInst::CpAsync => "cp.async".into(),
        CopyInst::Staged { stmatrix: None } => "staged".into(),
        CopyInst::Staged { stmatrix: Some(atom) } => format!("staged.{}", atom.name),
    }
}
