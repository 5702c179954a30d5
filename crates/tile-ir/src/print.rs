//! The text form of the IR, for dumps (`TILERS_DUMP_IR`, `kernel.ir()`) and tests;
//! [`crate::text`] reads it back (its module doc is the grammar). Names are made unique
//! (`%i`, `%i.1`) so the text is unambiguous.

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
                        n.replace(|c: char| !c.is_alphanumeric() && c != '_' && c != '.', "_")
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

    /// `[%M, 64]`: fixed dimensions as numbers, symbolic sizes as their variables.
    fn shape(&self, shape: &[Dim]) -> String {
        let dims: Vec<String> = shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => n.to_string(),
                Dim::Size(v) => format!("%{}", self.var_name(*v)),
            })
            .collect();
        format!("[{}]", dims.join(", "))
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
                    format!("{}: {}{}", self.buf_name(*buffer), b.dtype, self.shape(&b.shape))
                }
                Param::Scalar { var, .. } => format!("%{}: {}", self.var_name(*var), m.var(*var).dtype),
            })
            .collect();
        let blocks: Vec<String> = block_vars(m).iter().map(|v| format!("%{}", self.var_name(*v))).collect();
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
        let budget = match m.kernel.reg_budget {
            Some(b) => {
                format!(" reg_budget={}/{}{}", b.producer, b.consumer, if b.none { "/none" } else { "" })
            }
            None => String::new(),
        };
        let roles = match m.kernel.roles {
            Some(r) => format!(
                " producers={} producer_regs={} consumer_regs={}{}{}{}{}",
                r.producers,
                r.producer_regs,
                r.consumer_regs,
                if r.persistent { " persistent=1" } else { "" },
                if r.pingpong { " pingpong=1" } else { "" },
                if r.fold { " fold=1" } else { "" },
                if r.cluster_blocks() > 1 {
                    format!(" cluster={}x{}", r.cluster[0], r.cluster[1])
                } else {
                    String::new()
                }
            ),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "kernel {}({}) blocks({}) grid({}) threads={}{user}{raster}{budget}{cluster}{roles} level={} {{",
            m.name,
            params.join(", "),
            blocks.join(", "),
            grid.join(", "),
            m.kernel.threads,
            level,
            user = m.kernel.user_threads.map(|n| format!(" user_threads={n}")).unwrap_or_default(),
            cluster = m.kernel.cluster.map(|[x, y]| format!(" cluster_dims={x}x{y}")).unwrap_or_default(),
        );
        if !vars_follow_definitions(m) {
            self.var_table(&mut out);
        }
        for t in &m.kernel.tensor_maps {
            let dims: Vec<String> = t.box_dims.iter().map(|d| d.to_string()).collect();
            let _ = writeln!(
                out,
                "  tensor_map {} box [{}] swizzle {}",
                self.buf_name(t.tensor),
                dims.join(", "),
                t.swizzle
            );
        }
        for text in &m.kernel.extern_sources {
            let _ = writeln!(out, "  extern_source {text:?}");
        }
        for (i, b) in m.buffers.iter().enumerate() {
            let id = BufferId(i as u32);
            let is_param =
                m.params.iter().any(|p| matches!(p, Param::Tensor { buffer, .. } if *buffer == id));
            if is_param {
                continue;
            }
            let _ = write!(
                out,
                "  {} {}: {}{}",
                b.scope.name(),
                self.buf_name(id),
                b.dtype,
                self.shape(&b.shape)
            );
            if let Some(r) = b.alias_of {
                let _ = write!(out, " alias_of {}", self.buf_name(r));
            }
            if let Some(off) = b.shared_offset {
                let _ = write!(out, " at smem+{off}");
            }
            if let Some(p) = b.panel {
                let _ = write!(out, " panels<{p}>");
            }
            if let Some(s) = b.swizzle {
                let _ = write!(out, " {s}");
            }
            if let Some(l) = &b.layout {
                let _ = write!(out, " {}", layout_text(l, &b.extents()));
            }
            out.push('\n');
        }
        self.stmts(&m.kernel.body, 1, &mut out);
        out.push_str("}\n");
        out
    }

    /// `vars %bx: block_idx.x, %tid: thread_idx, …`: every variable in id order, a line
    /// per hundred-odd characters.
    fn var_table(&self, out: &mut String) {
        let mut line = String::new();
        for (i, v) in self.m.vars.iter().enumerate() {
            let mut entry = format!("%{}: {}", self.names.vars[i], var_kind_text(v.kind));
            if v.dtype != crate::DType::I32 {
                let _ = write!(entry, " {}", v.dtype);
            }
            if !line.is_empty() && line.len() + entry.len() > 96 {
                let _ = writeln!(out, "  vars {line}");
                line.clear();
            }
            if !line.is_empty() {
                line.push_str(", ");
            }
            line.push_str(&entry);
        }
        if !line.is_empty() {
            let _ = writeln!(out, "  vars {line}");
        }
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
            Stmt::Atomic { mode, buf, idx: i, value, prev, .. } => {
                let prev = prev.map(|p| format!(" -> {}", self.buf_name(p))).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{pad}{} {}[{}], {}{prev}{lc}",
                    mode.text(),
                    self.buf_name(*buf),
                    self.idx(i),
                    self.expr(value)
                );
            }
            Stmt::Copy(op) => {
                let padding = op.pad.as_ref().map(|p| format!(" pad={}", self.expr(p))).unwrap_or_default();
                let atomic = op.atomic.map(|m| format!(" {}", m.text())).unwrap_or_default();
                let inst = op.inst.map(|i| format!(" by {}", copy_inst_text(i))).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{pad}copy {} -> {}{padding}{atomic}{inst}{lc}",
                    self.region(&op.src),
                    self.region(&op.dst)
                );
            }
            Stmt::Fill { dst, value, .. } => {
                let _ = writeln!(out, "{pad}fill {}, {}{lc}", self.region(dst), self.expr(value));
            }
            Stmt::Barrier(op) => {
                let at = format!("{}[{}]", self.buf_name(op.bar), self.expr(&op.idx));
                let _ = match &op.kind {
                    BarrierKind::Init { count } => writeln!(out, "{pad}barrier_init {at} count={count}{lc}"),
                    BarrierKind::Arrive => writeln!(out, "{pad}barrier_arrive {at}{lc}"),
                    BarrierKind::ExpectTx { bytes } => {
                        writeln!(out, "{pad}barrier_expect_tx {at} bytes={}{lc}", self.expr(bytes))
                    }
                    BarrierKind::Wait { parity } => {
                        writeln!(out, "{pad}barrier_wait {at} parity={}{lc}", self.expr(parity))
                    }
                    BarrierKind::TmaLoad { copy } => writeln!(
                        out,
                        "{pad}tma_copy {} -> {} on {at}{lc}",
                        self.region(&copy.src),
                        self.region(&copy.dst)
                    ),
                };
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
                            " by {} warps={}x{} a={} b={}{}",
                            i.atom.name,
                            i.warps_m,
                            i.warps_n,
                            i.a.name(),
                            i.b.name(),
                            if i.atom.scope == crate::target::ThreadScope::Warpgroup {
                                format!(
                                    " n={}{}{}",
                                    i.n,
                                    if i.in_flight { " in_flight" } else { "" },
                                    if i.deferred { " deferred" } else { "" }
                                )
                            } else {
                                String::new()
                            }
                        )
                    })
                    .unwrap_or_default();
                let view = |v: &[RegionDim]| {
                    if v.is_empty() {
                        return String::new();
                    }
                    let r = self.region(&Region { buf: op.a, dims: v.to_vec(), loc: crate::Loc::UNKNOWN });
                    format!("@{}", &r[r.find('[').unwrap_or(0)..])
                };
                let _ = writeln!(
                    out,
                    "{pad}gemm {}{}{}{} x {}{}{}{} -> {} policy={} clear_accum={}{inst}{lc}",
                    self.buf_name(op.a),
                    stage(&op.a_stage),
                    view(&op.a_view),
                    if op.transpose_a { "^T" } else { "" },
                    self.buf_name(op.b),
                    stage(&op.b_stage),
                    view(&op.b_view),
                    if op.transpose_b { "^T" } else { "" },
                    self.buf_name(op.c),
                    op.policy.name(),
                    op.clear_accum
                );
            }
            Stmt::Parallel { vars, extents, body, layout, .. } => {
                let names: Vec<String> = vars.iter().map(|v| format!("%{}", self.var_name(*v))).collect();
                let l = layout.as_ref().map(|l| format!(" {}", layout_text(l, extents))).unwrap_or_default();
                let _ = writeln!(out, "{pad}parallel ({}) in {:?}{l} {{{lc}", names.join(", "), extents);
                self.stmts(body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::For { var, start, extent, kind, body, .. } => {
                let k = match kind {
                    ForKind::Serial => "for".to_string(),
                    ForKind::Unroll => "unroll".to_string(),
                    ForKind::Pipelined { stages, schedule: None } => format!("pipelined(stages={stages})"),
                    ForKind::Pipelined { stages, schedule: Some(k) } => {
                        let list = |v: &[i32]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
                        match self.m.schedules.get(*k as usize) {
                            Some(sc) => format!(
                                "pipelined(stages={stages}, stage=[{}], order=[{}])",
                                list(&sc.stage),
                                list(&sc.order)
                            ),
                            None => format!("pipelined(stages={stages}, schedule=#{k}?)"),
                        }
                    }
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
                let _ = writeln!(out, "{pad}line{}", self.loc_comment(*loc));
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
                ConstValue::Int(i) => format!("{}:{dtype}", dtype.int_value(*i)),
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
        CopyInst::Tma => "tma".into(),
        CopyInst::StagedTma => "staged_tma".into(),
        CopyInst::Staged { stmatrix: None } => "staged".into(),
        CopyInst::Staged { stmatrix: Some(atom) } => format!("staged.{}", atom.name),
    }
}

/// A variable's kind as the `vars` table writes it.
pub fn var_kind_text(kind: VarKind) -> std::borrow::Cow<'static, str> {
    if let VarKind::Size { multiple_of } = kind {
        return if multiple_of == 1 {
            "size".into()
        } else {
            format!("size.multiple_of.{multiple_of}").into()
        };
    }
    let text = match kind {
        VarKind::BlockIdx(0) => "block_idx.x",
        VarKind::BlockIdx(1) => "block_idx.y",
        VarKind::BlockIdx(_) => "block_idx.z",
        VarKind::LaunchIdx(0) => "launch_idx.x",
        VarKind::LaunchIdx(1) => "launch_idx.y",
        VarKind::LaunchIdx(_) => "launch_idx.z",
        VarKind::LaunchDim(0) => "launch_dim.x",
        VarKind::LaunchDim(1) => "launch_dim.y",
        VarKind::LaunchDim(_) => "launch_dim.z",
        VarKind::ThreadIdx => "thread_idx",
        VarKind::Loop => "loop",
        VarKind::Param => "param",
        VarKind::Temp => "temp",
        VarKind::Size { .. } => unreachable!("handled above"),
    };
    text.into()
}

/// The variables as the parser makes them from where the text defines them, without a
/// `vars` table: scalar parameters, block indices (axis by position), then loop and `let`
/// variables in the order the body binds them first.
fn vars_by_definition(m: &Module) -> Vec<(VarId, VarKind, crate::DType)> {
    fn body(stmts: &[Stmt], out: &mut Vec<(VarId, VarKind, crate::DType)>) {
        for s in stmts {
            match s {
                Stmt::For { var, .. } => out.push((*var, VarKind::Loop, crate::DType::I32)),
                Stmt::Parallel { vars, .. } => {
                    out.extend(vars.iter().map(|v| (*v, VarKind::Loop, crate::DType::I32)))
                }
                Stmt::Let { var, value } => out.push((*var, VarKind::Temp, value.dtype())),
                _ => {}
            }
            for b in s.bodies() {
                body(b, out);
            }
        }
    }
    let mut out = Vec::new();
    for p in &m.params {
        match p {
            Param::Scalar { var, .. } => out.push((*var, VarKind::Param, m.var(*var).dtype)),
            // a header's symbolic sizes: `size`, int32, unless a `vars` table says more
            Param::Tensor { buffer, .. } => {
                for d in &m.buffer(*buffer).shape {
                    if let Dim::Size(v) = d {
                        out.push((*v, VarKind::Size { multiple_of: 1 }, crate::DType::I32));
                    }
                }
            }
        }
    }
    for (axis, v) in block_vars(m).into_iter().enumerate() {
        out.push((v, VarKind::BlockIdx(axis as u8), crate::DType::I32));
    }
    body(&m.kernel.body, &mut out);
    let mut seen = BTreeSet::new();
    out.retain(|(v, _, _)| seen.insert(*v));
    out
}

/// Does the parser recreate the variables, in id order, from their definitions alone? If
/// not (variables no statement binds, such as `%tid` or those a lowering left unused, or
/// ids out of definition order), the text carries a `vars` table.
fn vars_follow_definitions(m: &Module) -> bool {
    let defined = vars_by_definition(m);
    defined.len() == m.vars.len()
        && defined.iter().enumerate().all(|(i, (v, kind, dtype))| {
            let var = m.var(*v);
            v.0 as usize == i && var.kind == *kind && var.dtype == *dtype
        })
}

/// The block index variables, by axis.
fn block_vars(m: &Module) -> Vec<VarId> {
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
    blocks.into_iter().map(|(_, v)| v).collect()
}

/// A fragment layout in the text IR: `layout(128 threads: (8,2,4,2):(t4,r2,r32,t64),
/// (2,4,8,2):(r1,t1,r4,t32))` — per dimension its digits' sizes, fastest first, and where
/// each comes from (`tS`: `(tid / S) % size`; `rS`: adds `value * S` to the register slot);
/// `; replicated (2):(t32)` for the thread digits whose threads hold the same values. The
/// extents are written first (`layout([128, 128], 128 threads: …)`) when they are not
/// `shape`, the shape of the buffer or loop that carries the layout.
pub fn layout_text(l: &crate::FragmentLayout, shape: &[i64]) -> String {
    use crate::layout::Source;
    let tuple = |items: Vec<String>| format!("({})", items.join(","));
    let dims: Vec<String> = l
        .dims
        .iter()
        .map(|ds| {
            let sizes = ds.iter().map(|g| g.size.to_string()).collect();
            let sources = ds
                .iter()
                .map(|g| match g.source {
                    Source::Thread(s) => format!("t{s}"),
                    Source::Slot(s) => format!("r{s}"),
                })
                .collect();
            format!("{}:{}", tuple(sizes), tuple(sources))
        })
        .collect();
    let extents = if l.extents == shape { String::new() } else { format!("{:?}, ", l.extents) };
    let replicated = if l.replicated.is_empty() {
        String::new()
    } else {
        let sizes = l.replicated.iter().map(|(size, _)| size.to_string()).collect();
        let strides = l.replicated.iter().map(|(_, stride)| format!("t{stride}")).collect();
        format!("; replicated {}:{}", tuple(sizes), tuple(strides))
    };
    format!("layout({extents}{} threads: {}{replicated})", l.active_threads, dims.join(", "))
}
