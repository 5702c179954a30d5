//! Pass `lower_tile_ops`: tile ops to per-thread code.
//!
//! Requires: tile-level IR with layouts (`infer_layouts`) and barriers (`insert_syncs`).
//! Ensures: thread-level IR. Fragments are per-thread register arrays (scope `local`,
//! shape `[slots]`); `parallel` loops, copies and fills are per-thread loops over register
//! slots, with 16-byte vector accesses where the data is contiguous and aligned and a
//! guarded scalar path at ragged edges; reductions fold registers, then warp shuffles, then
//! shared memory across warps; every global access is bounds-checked (loads past the edge
//! read the pad value, stores past it are dropped), so nothing is ever written out of bounds;
//! stores outside parallel loops to global or shared memory are made by thread 0;
//! `print` and `device_assert` become `printf` and `__trap` (see `debug.rs`); with
//! `lineinfo`, each tile op is preceded by a `SourceLine` naming the user's line.
//! Does not: place shared buffers (`plan_shared_memory`).

mod debug;

use crate::Ctx;
use tile_ir::simplify::{known_multiple, simplify, to_affine};
use tile_ir::verify::{resolve_copy, resolve_region, ResolvedRegion};
use tile_ir::*;

pub fn lower_tile_ops(m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let mut non_negative_vars = std::collections::BTreeSet::new();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::For { var, start, .. } = s {
            if start.as_int().is_some_and(|v| v >= 0) {
                non_negative_vars.insert(*var);
            }
        }
    });
    let user_vars = m.vars.len() as u32;
    let mut lw = Lowerer {
        shared_limit: ctx.target.shared_limit,
        non_negative_vars,
        user_vars,
        m,
        diags: Vec::new(),
        report: Vec::new(),
        tid: VarId(0),
        lineinfo: ctx.options.lineinfo,
        block_coords: Vec::new(),
    };
    lw.tid = lw.m.thread_idx();
    lw.block_coords = debug::block_coords(&mut lw.m);
    let body = std::mem::take(&mut lw.m.kernel.body);
    // gemm accumulators start at zero, so `T.gemm` into a never-cleared accumulator (the
    // articles' GEMM) sums from 0
    let mut accumulators = std::collections::BTreeSet::new();
    walk_stmts(&body, &mut |s| {
        if let Stmt::Gemm { c, .. } = s {
            accumulators.insert(*c);
        }
    });
    let mut prologue = Vec::new();
    for c in accumulators {
        let b = lw.m.buffer(c).clone();
        let zero = if b.dtype.is_float() {
            Expr::Const { value: ConstValue::Float(0.0), dtype: b.dtype }
        } else {
            Expr::int_of(0, b.dtype)
        };
        let s = lw.m.add_var("s", VarKind::Loop, DType::I32);
        let slots = b.layout.as_ref().map(|l| l.slots()).unwrap_or(0);
        prologue.push(unrolled(
            s,
            slots,
            vec![Stmt::Store { buf: c, idx: vec![Expr::var(s, DType::I32)], value: zero, loc: b.loc }],
        ));
    }
    let mut body = lw.block(body);
    prologue.append(&mut body);
    let body = prologue;
    let Lowerer { mut m, diags, report, .. } = lw;
    if !diags.is_empty() {
        return Err(diags);
    }
    m.kernel.body = body;
    for b in m.buffers.iter_mut() {
        if b.scope == Scope::Fragment {
            let slots = b.layout.as_ref().map(|l| l.slots()).unwrap_or(1);
            b.scope = Scope::Local;
            b.shape = vec![slots];
        }
    }
    m.level = Level::Thread;
    ctx.report.extend(report);
    Ok(m)
}

/// Builds the code of one vector chunk from (digit values, first index) per dimension.
type ChunkBuilder<'a> = dyn FnMut(&mut Lowerer, &[Vec<Expr>], &[Expr]) -> Vec<Stmt> + 'a;

struct Lowerer {
    /// Shared memory one block may use on the target, in bytes.
    shared_limit: u64,
    /// User loop variables that start at a non-negative constant.
    non_negative_vars: std::collections::BTreeSet<VarId>,
    /// Variables with ids from here on were made by this pass (thread coordinates, loop
    /// counters from 0): never negative.
    user_vars: u32,
    m: Module,
    diags: Vec<Diagnostic>,
    report: Vec<String>,
    tid: VarId,
    /// Precede each tile op with a `SourceLine` (`#line` directives in the CUDA).
    lineinfo: bool,
    /// `blockIdx.{x,y,z}` for printed messages (empty when nothing prints).
    block_coords: Vec<Expr>,
}

/// Where the current element sits: per loop dimension, the value of each layout digit
/// (loop variables, thread coordinates, the vector lane) and the resulting index.
struct Element {
    values: Vec<Vec<Expr>>,
    index: Vec<Expr>,
}

fn i32c(v: i64) -> Expr {
    Expr::int(v)
}

fn add(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Add, a, b)
}

fn mul(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Mul, a, b)
}

fn and(a: Option<Expr>, b: Expr) -> Option<Expr> {
    // flatten b and skip conjuncts that are already there (guards repeat across accesses)
    if let Expr::Binary { op: BinOp::And, a: x, b: y, .. } = b {
        return and(and(a, *x), *y);
    }
    if b.as_int() == Some(1) {
        return a;
    }
    let Some(a) = a else { return Some(b) };
    let key = format!("{b:?}");
    let mut present = false;
    let mut stack = vec![&a];
    while let Some(e) = stack.pop() {
        if format!("{e:?}") == key {
            present = true;
            break;
        }
        if let Expr::Binary { op: BinOp::And, a: x, b: y, .. } = e {
            stack.push(x);
            stack.push(y);
        }
    }
    Some(if present { a } else { Expr::binary(BinOp::And, a, b) })
}

/// `0 <= i < n` for an index of any integer type; the lower bound is left out when `i`
/// cannot be negative.
fn in_range(i: &Expr, n: i64, non_negative: &dyn Fn(&Expr) -> bool) -> Expr {
    let dt = i.dtype();
    if let Some(c) = simplify(i.clone()).as_int() {
        return Expr::bool(c >= 0 && c < n);
    }
    let hi = Expr::binary(BinOp::Lt, i.clone(), Expr::int_of(n, dt));
    if non_negative(i) {
        return hi;
    }
    let lo = Expr::binary(BinOp::Ge, i.clone(), Expr::int_of(0, dt));
    Expr::binary(BinOp::And, lo, hi)
}

fn identity(kind: ReduceKind, dt: DType) -> Expr {
    let f = |v: f64| Expr::Const { value: ConstValue::Float(v), dtype: dt };
    let i = |v: i64| Expr::int_of(v, dt);
    match (kind, dt.is_float()) {
        (ReduceKind::Sum | ReduceKind::AbsMax, true) => f(0.0),
        (ReduceKind::Sum | ReduceKind::AbsMax, false) => i(0),
        (ReduceKind::Max, true) => f(f64::NEG_INFINITY),
        (ReduceKind::Min, true) => f(f64::INFINITY),
        (ReduceKind::Max, false) => i(match dt {
            DType::I8 => i8::MIN as i64,
            DType::I16 => i16::MIN as i64,
            DType::I32 => i32::MIN as i64,
            DType::I64 => i64::MIN,
            _ => 0,
        }),
        (ReduceKind::Min, false) => i(match dt {
            DType::I8 => i8::MAX as i64,
            DType::U8 => u8::MAX as i64,
            DType::I16 => i16::MAX as i64,
            DType::I32 => i32::MAX as i64,
            DType::U32 => u32::MAX as i64,
            _ => i64::MAX,
        }),
    }
}

fn combine(kind: ReduceKind, acc: Expr, x: Expr) -> Expr {
    match kind {
        ReduceKind::Sum => Expr::binary(BinOp::Add, acc, x),
        ReduceKind::Max | ReduceKind::AbsMax => Expr::binary(BinOp::Max, acc, x),
        ReduceKind::Min => Expr::binary(BinOp::Min, acc, x),
    }
}

impl Lowerer {
    /// Is `e` non-negative for every value its variables can take?
    fn non_negative(&self, e: &Expr) -> bool {
        match e {
            Expr::Const { value: ConstValue::Int(v), .. } => *v >= 0,
            Expr::Var { id, .. } => {
                id.0 >= self.user_vars
                    || self.non_negative_vars.contains(id)
                    || matches!(self.m.var(*id).kind, VarKind::BlockIdx(_) | VarKind::ThreadIdx)
            }
            Expr::Binary {
                op: BinOp::Add | BinOp::Mul | BinOp::Min | BinOp::Max | BinOp::BitAnd,
                a,
                b,
                ..
            } => self.non_negative(a) && self.non_negative(b),
            Expr::Binary { op: BinOp::FloorDiv | BinOp::FloorMod, a, b, .. } => {
                self.non_negative(a) && b.as_int().is_some_and(|v| v > 0)
            }
            Expr::Cast { a, dtype } => {
                let widening = a.dtype().bytes() < dtype.bytes()
                    || (a.dtype().is_signed() && a.dtype().bytes() == dtype.bytes());
                dtype.is_int() && a.dtype().is_int() && widening && self.non_negative(a)
            }
            _ => false,
        }
    }

    fn temp(&mut self, name: &str, value: Expr) -> (Stmt, Expr) {
        let dt = value.dtype();
        let v = self.m.add_var(name, VarKind::Temp, dt);
        (Stmt::Let { var: v, value }, Expr::var(v, dt))
    }

    fn local_buffer(&mut self, name: &str, dtype: DType, n: i64) -> BufferId {
        self.m.add_buffer(Buffer {
            name: name.to_string(),
            scope: Scope::Local,
            dtype,
            shape: vec![n],
            loc: Loc::UNKNOWN,
            layout: None,
            shared_offset: None,
            swizzle: false,
        })
    }

    fn tid(&self) -> Expr {
        Expr::var(self.tid, DType::I32)
    }

    fn comment(&self, what: &str, loc: Loc) -> Stmt {
        match self.m.sources.short(loc) {
            Some(s) => Stmt::Comment(format!("{s}: {what}")),
            None => Stmt::Comment(what.to_string()),
        }
    }

    /// Lower statements that run once per block.
    fn block(&mut self, body: Vec<Stmt>) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in body {
            if self.lineinfo && s.loc().is_known() {
                out.push(Stmt::SourceLine(s.loc()));
            }
            match s {
                Stmt::Parallel { vars, extents, body, loc, layout } => {
                    out.push(self.comment("T.Parallel", loc));
                    let l = layout.expect("infer_layouts gives every parallel loop a layout");
                    out.extend(self.parallel(&vars, &extents, &body, &l, loc));
                }
                Stmt::Copy { src, dst, pad, loc } => {
                    out.push(self.comment("T.copy", loc));
                    out.extend(self.copy(&src, &dst, pad, loc, false));
                }
                Stmt::Fill { dst, value, loc } => {
                    out.push(self.comment("T.fill", loc));
                    out.extend(self.fill(&dst, value, loc));
                }
                Stmt::Reduce { kind, src, dst, dim, clear, loc } => {
                    out.push(self.comment(&format!("T.reduce_{}", kind.name()), loc));
                    out.extend(self.reduce(kind, src, dst, dim, clear, loc));
                }
                Stmt::Async { body } => {
                    for st in body {
                        if let Stmt::Copy { src, dst, pad, loc } = st {
                            out.push(self.comment("T.copy (issued ahead by the pipeline)", loc));
                            out.extend(self.copy(&src, &dst, pad, loc, true));
                        }
                    }
                }
                Stmt::Gemm {
                    a,
                    b,
                    c,
                    transpose_a,
                    transpose_b,
                    policy,
                    clear_accum,
                    loc,
                    a_stage,
                    b_stage,
                } => {
                    out.push(self.comment("T.gemm", loc));
                    let operands = [(a, a_stage), (b, b_stage)];
                    out.extend(self.gemm(operands, c, transpose_a, transpose_b, policy, clear_accum, loc));
                }
                Stmt::For { var, start, extent, kind, body, loc } => {
                    let kind = match kind {
                        ForKind::Pipelined { stages } => {
                            let at = self.m.sources.short(loc).unwrap_or_default();
                            self.report.push(format!(
                                "{at}: T.Pipelined(num_stages={stages}) runs as a serial loop: this loop has no asynchronous copies to overlap"
                            ));
                            ForKind::Serial
                        }
                        k => k,
                    };
                    let body = self.block(body);
                    out.push(Stmt::For { var, start, extent, kind, body, loc });
                }
                Stmt::If { cond, then, otherwise, loc } => {
                    let then = self.block(then);
                    let otherwise = self.block(otherwise);
                    // a condition reading a global tensor past its edge reads zero, as
                    // at tile level
                    out.push(Stmt::If { cond: self.guard_loads(cond), then, otherwise, loc });
                }
                Stmt::Print { what, msg, block, loc } => {
                    out.push(self.comment("T.print", loc));
                    out.extend(self.print_once(what, &msg, block.as_deref(), loc));
                }
                Stmt::DeviceAssert { cond, msg, loc } => {
                    out.push(self.comment("T.device_assert", loc));
                    out.extend(self.assert_once(cond, &msg, loc));
                }
                Stmt::Store { buf, idx, value, loc } | Stmt::AtomicAdd { buf, idx, value, loc }
                    if self.m.buffer(buf).scope == Scope::Local =>
                {
                    out.push(Stmt::Store { buf, idx, value, loc });
                }
                s @ (Stmt::Store { .. } | Stmt::AtomicAdd { .. }) => {
                    // once per block: thread 0 writes
                    let loc = s.loc();
                    let guarded = self.guard_globals(vec![s]);
                    let one = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
                    out.push(Stmt::If { cond: one, then: guarded, otherwise: vec![], loc });
                }
                other => out.push(other),
            }
        }
        out
    }

    /// Bounds-check every global access of thread-level statements: loads past the edge
    /// read their `oob` value (zero by default), stores past it are dropped.
    fn guard_globals(&self, body: Vec<Stmt>) -> Vec<Stmt> {
        let guard_expr = |e: Expr| self.guard_loads(e);
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::Store { buf, idx, value, loc } => {
                    let value = guard_expr(value);
                    let idx: Vec<Expr> = idx.into_iter().map(guard_expr).collect();
                    out.push(self.guard_store(Stmt::Store { buf, idx, value, loc }));
                }
                Stmt::AtomicAdd { buf, idx, value, loc } => {
                    let value = guard_expr(value);
                    let idx: Vec<Expr> = idx.into_iter().map(guard_expr).collect();
                    out.push(self.guard_store(Stmt::AtomicAdd { buf, idx, value, loc }));
                }
                Stmt::If { cond, then, otherwise, loc } => out.push(Stmt::If {
                    cond: guard_expr(cond),
                    then: self.guard_globals(then),
                    otherwise: self.guard_globals(otherwise),
                    loc,
                }),
                Stmt::For { var, start, extent, kind, body, loc } => out.push(Stmt::For {
                    var,
                    start: guard_expr(start),
                    extent: guard_expr(extent),
                    kind,
                    body: self.guard_globals(body),
                    loc,
                }),
                Stmt::Let { var, value } => out.push(Stmt::Let { var, value: guard_expr(value) }),
                Stmt::Printf { format, args } => {
                    out.push(Stmt::Printf { format, args: args.into_iter().map(guard_expr).collect() })
                }
                other => out.push(other),
            }
        }
        out
    }

    /// `e` with every global load bounds-checked: past the edge it reads its `oob` value
    /// (zero by default).
    fn guard_loads(&self, e: Expr) -> Expr {
        let m = &self.m;
        let non_negative = |e: &Expr| self.non_negative(e);
        e.map(&mut |x| match x {
            Expr::Load { buf, idx, dtype, loc, oob } if m.buffer(buf).scope == Scope::Global => {
                let shape = &m.buffer(buf).shape;
                let mut cond = None;
                for (d, i) in idx.iter().enumerate() {
                    cond = and(cond, in_range(i, shape[d], &non_negative));
                }
                let fallback = match oob {
                    Some(o) => Expr::cast(*o, dtype),
                    None => {
                        if dtype.is_float() {
                            Expr::Const { value: ConstValue::Float(0.0), dtype }
                        } else {
                            Expr::int_of(0, dtype)
                        }
                    }
                };
                let load = Expr::Load { buf, idx, dtype, loc, oob: None };
                match cond.map(simplify) {
                    Some(c) if c.as_int() == Some(1) => load,
                    Some(c) => Expr::select(c, load, fallback),
                    None => load,
                }
            }
            other => other,
        })
    }

    fn guard_store(&self, s: Stmt) -> Stmt {
        let (Stmt::Store { buf, idx, loc, .. } | Stmt::AtomicAdd { buf, idx, loc, .. }) = &s else {
            return s;
        };
        let b = self.m.buffer(*buf);
        if b.scope != Scope::Global {
            return s;
        }
        let mut cond = None;
        for (d, i) in idx.iter().enumerate() {
            cond = and(cond, in_range(i, b.shape[d], &|e| self.non_negative(e)));
        }
        match cond.map(simplify) {
            Some(c) if c.as_int() == Some(1) => s,
            Some(c) => {
                let loc = *loc;
                Stmt::If { cond: c, then: vec![s], otherwise: vec![], loc }
            }
            None => s,
        }
    }

    /// Per-thread loops over a layout's elements: `element` builds the code for one vector
    /// chunk (all lanes of the last dimension's vector digit), given each dimension's digit
    /// values (the vector digit's as 0) and the chunk's first index.
    fn for_each_chunk(&mut self, l: &FragmentLayout, element: &mut ChunkBuilder<'_>) -> Vec<Stmt> {
        let n = l.dims.len();
        let vector = l.vector_width() > 1;
        let mut prologue = Vec::new();
        let mut values: Vec<Vec<Expr>> = Vec::new();
        let mut loops: Vec<(VarId, i64)> = Vec::new();
        for (d, ds) in l.dims.iter().enumerate() {
            let mut vs = Vec::new();
            for (k, g) in ds.iter().enumerate() {
                match g.source {
                    Source::Thread(stride) => {
                        let v = Expr::binary(
                            BinOp::FloorMod,
                            Expr::binary(BinOp::FloorDiv, self.tid(), i32c(stride)),
                            i32c(g.size),
                        );
                        let (st, e) = self.temp(&format!("t{d}"), simplify(v));
                        prologue.push(st);
                        vs.push(e);
                    }
                    Source::Slot(_) if vector && d == n - 1 && k == 0 => vs.push(i32c(0)),
                    Source::Slot(_) => {
                        let v = self.m.add_var(&format!("o{d}"), VarKind::Loop, DType::I32);
                        loops.push((v, g.size));
                        vs.push(Expr::var(v, DType::I32));
                    }
                }
            }
            values.push(vs);
        }
        let base: Vec<Expr> = l
            .dims
            .iter()
            .enumerate()
            .map(|(d, ds)| {
                let mut e = i32c(0);
                for (k, g) in ds.iter().enumerate() {
                    e = add(e, mul(values[d][k].clone(), i32c(g.step)));
                }
                simplify(e)
            })
            .collect();
        let mut body = element(self, &values, &base);
        // ragged dimensions: skip chunks past the extent
        let mut cond = None;
        for (d, first) in base.iter().enumerate() {
            if l.span(d) > l.extents[d] {
                cond = and(cond, Expr::binary(BinOp::Lt, first.clone(), i32c(l.extents[d])));
            }
        }
        if let Some(c) = cond {
            body = vec![Stmt::If { cond: c, then: body, otherwise: vec![], loc: Loc::UNKNOWN }];
        }
        for (v, size) in loops.into_iter().rev() {
            body = vec![Stmt::For {
                var: v,
                start: i32c(0),
                extent: i32c(size),
                kind: ForKind::Unroll,
                body,
                loc: Loc::UNKNOWN,
            }];
        }
        if (l.active_threads as u32) < self.m.kernel.threads {
            body = vec![Stmt::If {
                cond: Expr::binary(BinOp::Lt, self.tid(), i32c(l.active_threads)),
                then: body,
                otherwise: vec![],
                loc: Loc::UNKNOWN,
            }];
        }
        prologue.extend(body);
        prologue
    }

    /// Register slot of a fragment element whose buffer dimensions are fed by loop
    /// dimensions `dims` (the fragment's digits match the loop's, checked by infer_layouts).
    fn slot(&self, buf: BufferId, dims: &[usize], el: &Element) -> Expr {
        let l = self.m.buffer(buf).layout.as_ref().expect("fragment layout");
        let mut slot = i32c(0);
        for (k, d) in dims.iter().enumerate() {
            for (j, g) in l.dims[k].iter().enumerate() {
                if let Source::Slot(stride) = g.source {
                    slot = add(slot, mul(el.values[*d][j].clone(), i32c(stride)));
                }
            }
        }
        simplify(slot)
    }

    /// Rewrite a parallel-loop body for one element: fragment accesses become register
    /// slots, loop variables become the element's indices.
    fn instantiate(&self, body: &[Stmt], vars: &[VarId], el: &Element) -> Vec<Stmt> {
        let m = &self.m;
        let frag_index = |buf: BufferId, idx: &[Expr]| -> Option<Vec<Expr>> {
            if m.buffer(buf).scope != Scope::Fragment {
                return None;
            }
            let dims: Vec<usize> = idx
                .iter()
                .map(|i| match i {
                    Expr::Var { id, .. } => vars.iter().position(|v| v == id).unwrap_or(0),
                    _ => 0,
                })
                .collect();
            Some(vec![self.slot(buf, &dims, el)])
        };
        let subst = |e: Expr| -> Expr {
            let e = e.map(&mut |x| match x {
                Expr::Load { buf, idx, dtype, loc, oob } => match frag_index(buf, &idx) {
                    Some(slot) => Expr::Load { buf, idx: slot, dtype, loc, oob },
                    None => Expr::Load { buf, idx, dtype, loc, oob },
                },
                other => other,
            });
            let mut e = e;
            for (d, v) in vars.iter().enumerate() {
                e = e.substitute(*v, &el.index[d]);
            }
            simplify(e)
        };
        let mut out = Vec::new();
        for s in body {
            out.push(match s.clone() {
                Stmt::Store { buf, idx, value, loc } => {
                    let idx = frag_index(buf, &idx).unwrap_or_else(|| idx.into_iter().map(&subst).collect());
                    Stmt::Store { buf, idx, value: subst(value), loc }
                }
                Stmt::AtomicAdd { buf, idx, value, loc } => Stmt::AtomicAdd {
                    buf,
                    idx: idx.into_iter().map(&subst).collect(),
                    value: subst(value),
                    loc,
                },
                Stmt::If { cond, then, otherwise, loc } => Stmt::If {
                    cond: subst(cond),
                    then: self.instantiate(&then, vars, el),
                    otherwise: self.instantiate(&otherwise, vars, el),
                    loc,
                },
                Stmt::For { var, start, extent, kind, body, loc } => Stmt::For {
                    var,
                    start: subst(start),
                    extent: subst(extent),
                    kind: if matches!(kind, ForKind::Pipelined { .. }) { ForKind::Serial } else { kind },
                    body: self.instantiate(&body, vars, el),
                    loc,
                },
                Stmt::Print { what: Printed::Value(value), msg, block, loc } => {
                    self.print_element(subst(value), &msg, block.as_deref(), vars, &el.index, loc)
                }
                Stmt::DeviceAssert { cond, msg, loc } => {
                    self.assert_element(subst(cond), &msg, vars, &el.index, loc)
                }
                other => other,
            });
        }
        out
    }

    /// In a loop laid out over a replicated fragment several threads run each iteration;
    /// only the first of them may write memory that other threads see.
    fn first_replica_writes(&self, body: &[Stmt], l: &FragmentLayout) -> Vec<Stmt> {
        if l.replicated.is_empty() {
            return body.to_vec();
        }
        let mut first = None;
        for &(threads, stride) in &l.replicated {
            let bits = Expr::binary(
                BinOp::FloorMod,
                Expr::binary(BinOp::FloorDiv, self.tid(), i32c(stride)),
                i32c(threads),
            );
            first = and(first, Expr::binary(BinOp::Eq, simplify(bits), i32c(0)));
        }
        let first = first.expect("non-empty");
        body.iter()
            .map(|s| match s {
                Stmt::Store { buf, loc, .. } | Stmt::AtomicAdd { buf, loc, .. }
                    if matches!(self.m.buffer(*buf).scope, Scope::Global | Scope::Shared) =>
                {
                    Stmt::If { cond: first.clone(), then: vec![s.clone()], otherwise: vec![], loc: *loc }
                }
                // one message per element, not one per replica
                Stmt::Print { loc, .. } | Stmt::DeviceAssert { loc, .. } => {
                    Stmt::If { cond: first.clone(), then: vec![s.clone()], otherwise: vec![], loc: *loc }
                }
                other => other.clone(),
            })
            .collect()
    }

    fn parallel(
        &mut self,
        vars: &[VarId],
        extents: &[i64],
        body: &[Stmt],
        l: &FragmentLayout,
        loc: Loc,
    ) -> Vec<Stmt> {
        let n = vars.len();
        let width = l.vector_width();
        if l.dims.len() != n || l.shape() != extents || extents[n - 1] % width != 0 {
            self.diags.push(Diagnostic::bug(format!("layout {l} does not fit loop extents {extents:?}")));
            return vec![];
        }
        let body = self.first_replica_writes(body, l);
        let vars = vars.to_vec();
        let at = self.m.sources.short(loc).unwrap_or_default();
        let mut reported = false;
        self.for_each_chunk(l, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let el = element_at(values, base, lane_var, width);
            let scalar_body = lw.instantiate(&body, &vars, &el);
            let scalar_body = lw.guard_globals(scalar_body);
            let scalar = if width > 1 {
                vec![Stmt::For {
                    var: lane_var,
                    start: i32c(0),
                    extent: i32c(width),
                    kind: ForKind::Unroll,
                    body: scalar_body.clone(),
                    loc,
                }]
            } else {
                scalar_body.iter().cloned().map(|s| substitute_stmt(s, lane_var, &i32c(0))).collect()
            };
            if width == 1 || !body.iter().all(|s| matches!(s, Stmt::Store { .. })) {
                return scalar;
            }
            let raw = lw.instantiate(&body, &vars, &el);
            match lw.vectorize(&raw, lane_var, width) {
                Some((vector, cond, desc)) => {
                    if !reported {
                        lw.report.push(format!("{at}: {desc}"));
                        reported = true;
                    }
                    match cond {
                        Some(c) => vec![Stmt::If { cond: c, then: vector, otherwise: scalar, loc }],
                        None => vector,
                    }
                }
                None => scalar,
            }
        })
    }

    /// Vector form of one chunk: contiguous global/shared accesses become vector loads and
    /// stores of up to 16 bytes. Returns the code, the condition under which the whole chunk
    /// is in bounds (None: always), and a line for the report.
    fn vectorize(
        &mut self,
        body: &[Stmt],
        lane: VarId,
        width: i64,
    ) -> Option<(Vec<Stmt>, Option<Expr>, String)> {
        struct Access {
            key: String,
            buf: BufferId,
            idx0: Vec<Expr>,
            w: i64,
            temp: BufferId,
        }
        let mut loads: Vec<Access> = Vec::new();
        let mut stores: Vec<Access> = Vec::new();
        let mut cond: Option<Expr> = None;
        let zero = i32c(0);
        // can `buf[idx]` (idx depending on the lane) be read as vectors of w lanes?
        let vector_width = |m: &Module, buf: BufferId, idx: &[Expr]| -> Option<(Vec<Expr>, i64)> {
            let b = m.buffer(buf);
            if !matches!(b.scope, Scope::Global | Scope::Shared) {
                return None;
            }
            let n = idx.len();
            if idx[..n - 1].iter().any(|i| i.uses_var(lane)) {
                return None;
            }
            let last = to_affine(&idx[n - 1]);
            let lane_key = format!("{:?}", Expr::var(lane, DType::I32));
            let coeff = last.terms.get(&lane_key).map(|(c, _)| *c).unwrap_or(0);
            let rest_uses_lane = last.terms.iter().any(|(k, (_, e))| *k != lane_key && e.uses_var(lane));
            if coeff != 1 || rest_uses_lane {
                return None;
            }
            let idx0: Vec<Expr> = idx.iter().map(|i| simplify(i.clone().substitute(lane, &zero))).collect();
            let strides = b.strides();
            let mut w = width;
            while w > 1
                && (w * b.dtype.bytes() as i64 > 16
                    || !known_multiple(&idx0[n - 1], w)
                    || strides[..n - 1].iter().any(|s| s % w != 0)
                    || (b.scope == Scope::Shared && b.bytes() % 16 != 0 && w * (b.dtype.bytes() as i64) > 4))
            {
                w /= 2;
            }
            (w > 1).then_some((idx0, w))
        };
        // collect vectorizable loads
        let mut candidates: Vec<(String, BufferId, Vec<Expr>)> = Vec::new();
        for s in body {
            let Stmt::Store { idx, value, .. } = s else {
                return None;
            };
            for e in idx.iter().chain(std::iter::once(value)) {
                e.walk(&mut |x| {
                    if let Expr::Load { buf, idx, .. } = x {
                        candidates.push((format!("{:?}", (buf, idx)), *buf, idx.clone()));
                    }
                });
            }
        }
        for (key, buf, idx) in candidates {
            if loads.iter().any(|a| a.key == key) {
                continue;
            }
            if let Some((idx0, w)) = vector_width(&self.m, buf, &idx) {
                let dt = self.m.buffer(buf).dtype;
                let name = format!("{}_v", self.m.buffer(buf).name);
                let temp = self.local_buffer(&name, dt, width);
                loads.push(Access { key, buf, idx0, w, temp });
            }
        }
        for s in body {
            if let Stmt::Store { buf, idx, .. } = s {
                if let Some((idx0, w)) = vector_width(&self.m, *buf, idx) {
                    let dt = self.m.buffer(*buf).dtype;
                    let name = format!("{}_out", self.m.buffer(*buf).name);
                    let temp = self.local_buffer(&name, dt, width);
                    stores.push(Access { key: format!("{:?}", (buf, idx)), buf: *buf, idx0, w, temp });
                }
            }
        }
        if loads.is_empty() && stores.is_empty() {
            return None;
        }
        // the chunk takes the vector path only when every vector access is fully in bounds
        for a in loads.iter().chain(stores.iter()) {
            let b = self.m.buffer(a.buf);
            if b.scope != Scope::Global {
                continue;
            }
            let n = a.idx0.len();
            for d in 0..n - 1 {
                cond = and(cond, in_range(&a.idx0[d], b.shape[d], &|e| self.non_negative(e)));
            }
            let last = &a.idx0[n - 1];
            let dt = last.dtype();
            if !self.non_negative(last) {
                cond = and(cond, Expr::binary(BinOp::Ge, last.clone(), Expr::int_of(0, dt)));
            }
            cond = and(
                cond,
                Expr::binary(
                    BinOp::Le,
                    simplify(add(last.clone(), Expr::int_of(width, dt))),
                    Expr::int_of(b.shape[n - 1], dt),
                ),
            );
        }
        let mut out = Vec::new();
        let vec_copies = |a: &Access, load: bool| -> Vec<Stmt> {
            let n = a.idx0.len();
            (0..width / a.w)
                .map(|k| {
                    let mut idx = a.idx0.clone();
                    idx[n - 1] = simplify(add(idx[n - 1].clone(), Expr::int_of(k * a.w, idx[n - 1].dtype())));
                    if load {
                        Stmt::VecCopy {
                            dst: a.temp,
                            dst_idx: vec![i32c(k * a.w)],
                            src: a.buf,
                            src_idx: idx,
                            width: a.w as u32,
                        }
                    } else {
                        Stmt::VecCopy {
                            dst: a.buf,
                            dst_idx: idx,
                            src: a.temp,
                            src_idx: vec![i32c(k * a.w)],
                            width: a.w as u32,
                        }
                    }
                })
                .collect()
        };
        for a in &loads {
            out.extend(vec_copies(a, true));
        }
        let lane_e = Expr::var(lane, DType::I32);
        let replace = |e: Expr| -> Expr {
            e.map(&mut |x| match x {
                Expr::Load { buf, idx, dtype, loc, oob } => {
                    let key = format!("{:?}", (&buf, &idx));
                    match loads.iter().find(|a| a.key == key) {
                        Some(a) => Expr::load(a.temp, vec![lane_e.clone()], dtype),
                        None => Expr::Load { buf, idx, dtype, loc, oob },
                    }
                }
                other => other,
            })
        };
        let mut lane_body = Vec::new();
        for s in body {
            let Stmt::Store { buf, idx, value, loc } = s.clone() else { unreachable!() };
            let key = format!("{:?}", (&buf, &idx));
            let value = replace(value);
            match stores.iter().find(|a| a.key == key) {
                Some(a) => lane_body.push(Stmt::Store { buf: a.temp, idx: vec![lane_e.clone()], value, loc }),
                None => lane_body.push(Stmt::Store { buf, idx, value, loc }),
            }
        }
        let lane_body = self.guard_globals(lane_body);
        out.push(Stmt::For {
            var: lane,
            start: i32c(0),
            extent: i32c(width),
            kind: ForKind::Unroll,
            body: lane_body,
            loc: Loc::UNKNOWN,
        });
        for a in &stores {
            out.extend(vec_copies(a, false));
        }
        let describe = |a: &Access| {
            format!(
                "{} x{} ({} bytes)",
                self.m.buffer(a.buf).name,
                a.w,
                a.w * self.m.buffer(a.buf).dtype.bytes() as i64
            )
        };
        let desc = format!(
            "vector loads [{}], vector stores [{}]",
            loads.iter().map(describe).collect::<Vec<_>>().join(", "),
            stores.iter().map(describe).collect::<Vec<_>>().join(", ")
        );
        Some((out, cond.map(simplify), desc))
    }

    fn copy(
        &mut self,
        src: &Region,
        dst: &Region,
        pad: Option<Expr>,
        loc: Loc,
        asynchronous: bool,
    ) -> Vec<Stmt> {
        let (s, d) = match resolve_copy(&self.m, src, dst, loc) {
            Ok(x) => x,
            Err(e) => {
                self.diags.push(e);
                return vec![];
            }
        };
        let (sb, db) = (self.m.buffer(s.buf).clone(), self.m.buffer(d.buf).clone());
        if !asynchronous {
            if let Some(code) = self.staged_store(src, dst, pad.clone(), loc) {
                return code;
            }
        }
        if sb.scope == Scope::Local || db.scope == Scope::Local {
            self.diags
                .push(Diagnostic::error("T.copy to or from a local buffer is not supported", loc).with_help(
                "local buffers are per thread; copy into a fragment, or assign elements in a T.Parallel loop",
            ));
            return vec![];
        }
        // the side whose layout decides the thread mapping
        let anchor = if sb.scope == Scope::Fragment {
            &s
        } else if db.scope == Scope::Fragment || sb.scope == Scope::Global {
            &d
        } else {
            &s
        };
        for (side, b) in [(&s, &sb), (&d, &db)] {
            if b.scope == Scope::Fragment
                && (side.extents != b.shape
                    || side.starts.iter().any(|e| simplify(e.clone()).as_int() != Some(0)))
            {
                self.diags.push(Diagnostic::error(
                    format!(
                        "T.copy of part of fragment '{}' is not supported; copy the whole fragment",
                        b.name
                    ),
                    loc,
                ));
                return vec![];
            }
        }
        let loop_shape = anchor.shape();
        let vars: Vec<VarId> = (0..loop_shape.len())
            .map(|k| self.m.add_var(&format!("c{k}"), VarKind::Loop, DType::I32))
            .collect();
        let index_side = |r: &ResolvedRegion| -> Vec<Expr> {
            // non-unit kept dims of r consume non-unit loop dims in order
            let mut loop_dims = (0..loop_shape.len()).filter(|k| loop_shape[*k] != 1);
            (0..r.extents.len())
                .map(|d| {
                    let start = r.starts[d].clone();
                    if r.kept[d] && r.extents[d] != 1 {
                        let k = loop_dims.next().expect("copy shapes agree");
                        let v = Expr::var(vars[k], DType::I32);
                        simplify(add(start.clone(), Expr::cast(v, start.dtype())))
                    } else {
                        start
                    }
                })
                .collect()
        };
        let src_idx = index_side(&s);
        let dst_idx = index_side(&d);
        let pad = pad.map(|p| Box::new(Expr::cast(p, sb.dtype)));
        let load = Expr::Load { buf: s.buf, idx: src_idx, dtype: sb.dtype, loc, oob: pad };
        let store = Stmt::Store { buf: d.buf, idx: dst_idx, value: Expr::cast(load, db.dtype), loc };
        let layout = match (sb.layout.as_ref(), db.layout.as_ref()) {
            (Some(a), Some(b)) if a != b => {
                self.diags.push(
                    Diagnostic::error(
                        format!(
                            "layout conflict: T.copy between fragments '{}' and '{}' laid out differently",
                            sb.name, db.name
                        ),
                        loc,
                    )
                    .with_label(sb.loc, format!("'{}' is {a}", sb.name))
                    .with_label(db.loc, format!("'{}' is {b}", db.name)),
                );
                return vec![];
            }
            (Some(a), _) => a.clone(),
            (_, Some(b)) => b.clone(),
            _ => FragmentLayout::blocked(
                &loop_shape,
                self.m.kernel.threads,
                sb.dtype.bytes().min(db.dtype.bytes()),
            ),
        };
        if asynchronous {
            let why = match self.async_copy(&vars, &store, &layout) {
                Ok(code) => {
                    let at = self.m.sources.short(loc).unwrap_or_default();
                    self.report.push(format!(
                        "{at}: T.copy {} -> {}: cp.async 16 bytes, zero-filled past the edge",
                        sb.name, db.name
                    ));
                    return code;
                }
                Err(why) => why,
            };
            let at = self.m.sources.short(loc).unwrap_or_default();
            self.report
                .push(format!("{at}: T.copy {} -> {} is synchronous, not cp.async: {why}", sb.name, db.name));
        }
        self.parallel(&vars, &loop_shape, &[store], &layout, loc)
    }

    /// A fragment whose threads hold fewer than 16 contiguous bytes of a row (mma
    /// accumulators hold pairs) is stored to global memory through a swizzled shared tile, so
    /// the global writes are 16-byte vectors along rows (coalesced). None when that does not
    /// apply or the shared memory is not there.
    fn staged_store(&mut self, src: &Region, dst: &Region, pad: Option<Expr>, loc: Loc) -> Option<Vec<Stmt>> {
        let (sb, db) = (self.m.buffer(src.buf).clone(), self.m.buffer(dst.buf).clone());
        let layout = sb.layout.as_ref()?;
        if sb.scope != Scope::Fragment
            || db.scope != Scope::Global
            || sb.shape.len() != 2
            || !src.dims.is_empty()
        {
            return None;
        }
        let eb = db.dtype.bytes() as i64;
        let row_bytes = sb.shape[1] * eb;
        if layout.vector_width() * eb >= 16 || row_bytes < 16 || row_bytes & (row_bytes - 1) != 0 {
            return None;
        }
        let stage_bytes = (sb.num_elements() * eb) as u64;
        let used: u64 =
            self.m.buffers.iter().filter(|b| b.scope == Scope::Shared).map(|b| b.bytes() as u64 + 16).sum();
        if used + stage_bytes > self.shared_limit {
            return None;
        }
        let stage = self.m.add_buffer(Buffer {
            name: format!("{}_stage", sb.name),
            scope: Scope::Shared,
            dtype: db.dtype,
            shape: sb.shape.clone(),
            loc,
            layout: None,
            shared_offset: None,
            swizzle: true,
        });
        let at = self.m.sources.short(loc).unwrap_or_default();
        self.report.push(format!(
            "{at}: T.copy {} -> {} staged through shared memory ({stage_bytes} bytes, swizzled) for 16-byte stores",
            sb.name, db.name
        ));
        let whole = Region { buf: stage, dims: vec![], loc };
        let mut code = vec![Stmt::Sync];
        code.extend(self.copy(src, &whole, None, loc, false));
        code.push(Stmt::Sync);
        code.extend(self.copy(&whole, dst, pad, loc, false));
        Some(code)
    }

    /// A global→shared copy as one 16-byte `cp.async` per vector chunk, reading only the
    /// bytes inside the tensor and zero-filling the rest. Err says why it cannot be.
    fn async_copy(&mut self, vars: &[VarId], store: &Stmt, l: &FragmentLayout) -> Result<Vec<Stmt>, String> {
        let Stmt::Store { buf: dst, value, .. } = store else { return Err("not a plain copy".into()) };
        let Expr::Load { buf: src, oob, .. } = strip_cast(value) else {
            return Err("not a plain copy".into());
        };
        let (sb, db) = (self.m.buffer(*src).clone(), self.m.buffer(*dst).clone());
        if sb.dtype != db.dtype {
            return Err(format!("it converts {} to {}", sb.dtype, db.dtype));
        }
        if oob.as_ref().is_some_and(|p| !is_zero(p)) {
            return Err("its pad value is not 0 (cp.async can only zero-fill)".into());
        }
        let width = l.vector_width();
        let eb = sb.dtype.bytes() as i64;
        if width * eb != 16 {
            return Err(format!(
                "the tile's rows do not split into 16-byte vectors ({width} elements of {eb} bytes)"
            ));
        }
        let mut failure = None;
        let (dst, src) = (*dst, *src);
        let code = self.for_each_chunk(l, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let el = element_at(values, base, lane_var, width);
            let Some(Stmt::Store { idx: dst_idx, value, .. }) = lw.instantiate(std::slice::from_ref(store), vars, &el).pop() else {
                failure = Some("internal: copy body".to_string());
                return vec![];
            };
            let Expr::Load { idx: src_idx, .. } = strip_cast(&value).clone() else {
                failure = Some("internal: copy body".to_string());
                return vec![];
            };
            let zero = i32c(0);
            let at_lane0 = |idx: &[Expr]| idx.iter().map(|i| simplify(i.clone().substitute(lane_var, &zero))).collect::<Vec<_>>();
            for (b, idx) in [(&sb, &src_idx), (&db, &dst_idx)] {
                let n = idx.len();
                let last = to_affine(&idx[n - 1]);
                let lane_key = format!("{:?}", Expr::var(lane_var, DType::I32));
                let contiguous = last.terms.get(&lane_key).map(|(c, _)| *c) == Some(1)
                    && idx[..n - 1].iter().all(|i| !i.uses_var(lane_var));
                let first = at_lane0(idx);
                let aligned = known_multiple(&first[n - 1], width) && b.strides()[..n - 1].iter().all(|s| s % width == 0);
                if !contiguous || !aligned {
                    failure = Some(format!("'{}' is not read/written in aligned 16-byte vectors (a row length not a multiple of {width}?)", b.name));
                    return vec![];
                }
            }
            let (s0, d0) = (at_lane0(&src_idx), at_lane0(&dst_idx));
            let n = s0.len();
            let mut valid = None;
            for (i, extent) in s0.iter().zip(&sb.shape).take(n - 1) {
                valid = and(valid, in_range(i, *extent, &|e| lw.non_negative(e)));
            }
            let last = s0[n - 1].clone();
            if !lw.non_negative(&last) {
                valid = and(valid, Expr::binary(BinOp::Ge, last.clone(), Expr::int_of(0, last.dtype())));
            }
            let extent = Expr::int_of(sb.shape[n - 1], last.dtype());
            valid = and(valid, Expr::binary(BinOp::Lt, last.clone(), extent.clone()));
            let valid = simplify(valid.expect("at least one condition"));
            let remaining = Expr::binary(BinOp::Min, Expr::binary(BinOp::Sub, extent, last.clone()), Expr::int_of(width, last.dtype()));
            let bytes = Expr::cast(Expr::binary(BinOp::Mul, remaining, Expr::int_of(eb, last.dtype())), DType::I32);
            let src_bytes = simplify(Expr::select(valid.clone(), bytes, i32c(0)));
            // a safe address even when nothing is read
            let safe: Vec<Expr> = s0.iter().map(|i| simplify(Expr::select(valid.clone(), i.clone(), Expr::int_of(0, i.dtype())))).collect();
            vec![Stmt::AsyncCopy { dst, dst_idx: d0, src, src_idx: safe, src_bytes }]
        });
        match failure {
            Some(why) => Err(why),
            None => Ok(code),
        }
    }

    fn fill(&mut self, dst: &Region, value: Expr, loc: Loc) -> Vec<Stmt> {
        let r = match resolve_region(&self.m, dst, None) {
            Ok(r) => r,
            Err(e) => {
                self.diags.push(e);
                return vec![];
            }
        };
        let b = self.m.buffer(r.buf).clone();
        let value = Expr::cast(value, b.dtype);
        match b.scope {
            Scope::Fragment | Scope::Local => {
                let whole =
                    r.extents == b.shape && r.starts.iter().all(|e| simplify(e.clone()).as_int() == Some(0));
                if !whole {
                    self.diags.push(Diagnostic::error(
                        format!(
                            "T.fill of part of {} '{}' is not supported; fill it whole",
                            b.scope.name(),
                            b.name
                        ),
                        loc,
                    ));
                    return vec![];
                }
                let slots = match &b.layout {
                    Some(l) => l.slots(),
                    None => b.num_elements(),
                };
                let v = self.m.add_var("s", VarKind::Loop, DType::I32);
                let flat = if b.scope == Scope::Fragment || b.shape.len() == 1 {
                    vec![Expr::var(v, DType::I32)]
                } else {
                    // a multi-dimensional local buffer: unflatten
                    let strides = b.strides();
                    strides
                        .iter()
                        .zip(&b.shape)
                        .map(|(s, e)| {
                            Expr::binary(
                                BinOp::FloorMod,
                                Expr::binary(BinOp::FloorDiv, Expr::var(v, DType::I32), i32c(*s)),
                                i32c(*e),
                            )
                        })
                        .collect()
                };
                vec![Stmt::For {
                    var: v,
                    start: i32c(0),
                    extent: i32c(slots),
                    kind: ForKind::Unroll,
                    body: vec![Stmt::Store { buf: r.buf, idx: flat, value, loc }],
                    loc,
                }]
            }
            Scope::Shared | Scope::Global => {
                let shape = r.shape();
                let vars: Vec<VarId> = (0..shape.len())
                    .map(|k| self.m.add_var(&format!("f{k}"), VarKind::Loop, DType::I32))
                    .collect();
                let mut k = 0;
                let idx: Vec<Expr> = (0..r.extents.len())
                    .map(|d| {
                        if r.kept[d] {
                            let v = Expr::var(vars[k], DType::I32);
                            k += 1;
                            let start = r.starts[d].clone();
                            simplify(add(start.clone(), Expr::cast(v, start.dtype())))
                        } else {
                            r.starts[d].clone()
                        }
                    })
                    .collect();
                let layout = FragmentLayout::blocked(&shape, self.m.kernel.threads, b.dtype.bytes());
                let store = Stmt::Store { buf: r.buf, idx, value, loc };
                self.parallel(&vars, &shape, &[store], &layout, loc)
            }
        }
    }

    /// `T.gemm` with both operands in shared memory: per warp, `ldmatrix` loads the
    /// operand fragments of each k-step (transposing 16-bit tiles stored the other way;
    /// int8 tiles that would need a transpose are gathered element by element) and
    /// `mma.sync` accumulates into the accumulator fragment's registers.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &mut self,
        operands: [(BufferId, Option<Expr>); 2],
        c: BufferId,
        ta: bool,
        tb: bool,
        policy: WarpPolicy,
        clear: bool,
        loc: Loc,
    ) -> Vec<Stmt> {
        let [(a, a_stage), (b, b_stage)] = operands;
        // a multi-buffered operand (leading stage dimension): its indices start with the stage
        let a_prefix: Vec<Expr> = a_stage.into_iter().collect();
        let b_prefix: Vec<Expr> = b_stage.into_iter().collect();
        let with_prefix =
            |prefix: &[Expr], idx: Vec<Expr>| prefix.iter().cloned().chain(idx).collect::<Vec<_>>();
        let (mut ab, mut bb, cb) =
            (self.m.buffer(a).clone(), self.m.buffer(b).clone(), self.m.buffer(c).clone());
        let tile_bytes = |b: &Buffer| b.bytes() / b.shape[..b.shape.len() - 2].iter().product::<i64>();
        ab.shape = ab.shape[ab.shape.len() - 2..].to_vec();
        bb.shape = bb.shape[bb.shape.len() - 2..].to_vec();
        // A may live in registers (a fragment written element by element) in the mma
        // A-operand layout infer_layouts gave it; B comes from shared memory
        let a_in_registers = ab.scope == Scope::Fragment;
        if a_in_registers && (ta || ab.layout.is_none()) {
            self.diags.push(
                Diagnostic::error("T.gemm with a transposed A operand in registers is not supported", loc)
                    .with_help("keep A in registers as an (M, K) fragment, or copy it into a shared tile"),
            );
            return vec![];
        }
        let b_in_registers = bb.scope == Scope::Fragment;
        if b_in_registers && (tb || bb.layout.is_none()) {
            self.diags.push(
                Diagnostic::error("T.gemm with a transposed B operand in registers is not supported", loc)
                    .with_help("keep B in registers as a (K, N) fragment, or copy it into a shared tile"),
            );
            return vec![];
        }
        if (!a_in_registers && ab.scope != Scope::Shared) || (!b_in_registers && bb.scope != Scope::Shared) {
            self.diags.push(Diagnostic::bug("gemm operands are neither shared tiles nor fragments"));
            return vec![];
        }
        let Some(shape) = crate::gemm::mma_shape(ab.dtype) else {
            self.diags.push(Diagnostic::bug(format!("gemm of {}", ab.dtype)));
            return vec![];
        };
        let (m, n) = (cb.shape[0], cb.shape[1]);
        let k = if ta { ab.shape[0] } else { ab.shape[1] };
        let kstep = shape.k();
        if k % kstep != 0 {
            self.diags.push(
                Diagnostic::error(
                    format!("T.gemm: K={k} is not a multiple of {kstep}, the K of one {} tensor-core step", ab.dtype),
                    loc,
                )
                .with_help(format!(
                    "use block_K a multiple of {kstep}; a ragged K is handled by the copies (they pad with zeros)"
                )),
            );
            return vec![];
        }
        let (wm, wn) = match crate::gemm::warp_grid(policy, m, n, self.m.kernel.threads as i64 / 32) {
            Ok(g) => g,
            Err(why) => {
                self.diags.push(Diagnostic::error(format!("T.gemm: {why}"), loc));
                return vec![];
            }
        };
        let (tile_m, tile_n) = (m / wm, n / wn);
        let (mi_count, ni_count) = (tile_m / 16, tile_n / 8);
        // swizzle the operand tiles so ldmatrix reads 8 rows from 8 distinct bank groups
        for (id, buf) in [(a, &ab), (b, &bb)] {
            if buf.scope != Scope::Shared {
                continue;
            }
            let row_bytes = buf.shape[1] * buf.dtype.bytes() as i64;
            let power_of_two = row_bytes >= 16 && row_bytes & (row_bytes - 1) == 0;
            if power_of_two && tile_bytes(self.m.buffer(id)) % 128 == 0 && !self.m.buffer(id).swizzle {
                self.m.buffer_mut(id).swizzle = true;
                let at = self.m.sources.short(buf.loc).unwrap_or_default();
                self.report
                    .push(format!("{at}: shared tile '{}' swizzled (16-byte chunks XOR line % 8)", buf.name));
            }
        }
        let sixteen_bit = ab.dtype.bytes() == 2;
        // per k-step: 4 32-bit registers of A per 16-row piece, 2 of B per 8-column piece
        let a_elems = 16 / ab.dtype.bytes() as i64;
        let b_elems = a_elems / 2;
        let a_regs = if a_in_registers {
            a
        } else {
            self.local_buffer(&format!("{}_frag", ab.name), ab.dtype, mi_count * a_elems)
        };
        let b_regs = if b_in_registers {
            b
        } else {
            self.local_buffer(&format!("{}_frag", bb.name), bb.dtype, ni_count * b_elems)
        };
        let at = self.m.sources.short(loc).unwrap_or_default();
        let how = if a_in_registers && b_in_registers {
            "A and B from registers"
        } else if b_in_registers {
            "A by ldmatrix, B from registers"
        } else if a_in_registers {
            "A from registers, B by ldmatrix"
        } else if sixteen_bit || (!ta && tb) {
            "ldmatrix"
        } else {
            "ldmatrix and element gathers"
        };
        self.report.push(format!(
            "{at}: T.gemm {m}x{n}x{k} {}: mma.sync.{shape:?}, {wm}x{wn} warps of {tile_m}x{tile_n}, operands by {how}",
            ab.dtype
        ));

        let mut out = Vec::new();
        let (s_lane, lane) = self.temp("lane", rem(self.tid(), 32));
        let (s_wm, warp_m) = self.temp("warp_m", div(div(self.tid(), 32), wn));
        let (s_wn, warp_n) = self.temp("warp_n", rem(div(self.tid(), 32), wn));
        out.extend([s_lane, s_wm, s_wn]);
        if clear {
            let s = self.m.add_var("s", VarKind::Loop, DType::I32);
            let zero = if cb.dtype.is_float() {
                Expr::Const { value: ConstValue::Float(0.0), dtype: cb.dtype }
            } else {
                Expr::int_of(0, cb.dtype)
            };
            let slots = cb.layout.as_ref().map(|l| l.slots()).unwrap_or(0);
            out.push(unrolled(
                s,
                slots,
                vec![Stmt::Store { buf: c, idx: vec![Expr::var(s, DType::I32)], value: zero, loc }],
            ));
        }
        let kk_var = self.m.add_var("kk", VarKind::Loop, DType::I32);
        let kk = Expr::var(kk_var, DType::I32);
        let mut step = Vec::new();
        // A fragments
        let mi_var = self.m.add_var("mi", VarKind::Loop, DType::I32);
        let mi = Expr::var(mi_var, DType::I32);
        let a_offset = mul(mi.clone(), i32c(a_elems));
        let m0 = add(mul(warp_m.clone(), i32c(tile_m)), mul(mi.clone(), i32c(16)));
        let a_load = if !ta {
            // rows m0 + lane % 16, 16-byte column chunk lane / 16
            let row = add(m0.clone(), rem(lane.clone(), 16));
            let col = add(mul(kk.clone(), i32c(kstep)), mul(div(lane.clone(), 16), i32c(a_elems)));
            let src_idx = with_prefix(&a_prefix, vec![simplify(row), simplify(col)]);
            vec![Stmt::Ldmatrix {
                dst: a_regs,
                dst_offset: a_offset,
                count: 4,
                trans: false,
                src: a,
                src_idx,
            }]
        } else if sixteen_bit {
            let kr = add(
                add(mul(kk.clone(), i32c(16)), rem(lane.clone(), 8)),
                mul(div(lane.clone(), 16), i32c(8)),
            );
            let mc = add(m0.clone(), mul(rem(div(lane.clone(), 8), 2), i32c(8)));
            let src_idx = with_prefix(&a_prefix, vec![simplify(kr), simplify(mc)]);
            vec![Stmt::Ldmatrix { dst: a_regs, dst_offset: a_offset, count: 4, trans: true, src: a, src_idx }]
        } else {
            // int8 stored K x M: gather the m16n8k32 A fragment (register r, byte q)
            let mut v = Vec::new();
            for r in 0..4 {
                for q in 0..4 {
                    let row = add(add(m0.clone(), div(lane.clone(), 4)), i32c((r % 2) * 8));
                    let kc = add(mul(kk.clone(), i32c(32)), i32c((r / 2) * 16 + q));
                    let kc = add(kc, mul(rem(lane.clone(), 4), i32c(4)));
                    v.push(Stmt::Store {
                        buf: a_regs,
                        idx: vec![simplify(add(a_offset.clone(), i32c(r * 4 + q)))],
                        value: Expr::load(
                            a,
                            with_prefix(&a_prefix, vec![simplify(kc), simplify(row)]),
                            ab.dtype,
                        ),
                        loc,
                    });
                }
            }
            v
        };
        if !a_in_registers {
            step.push(unrolled(mi_var, mi_count, a_load));
        }
        if !b_in_registers {
            // B fragments: with an even number of 8-column pieces, one ldmatrix.x4 loads two of
            // them (lanes 16-31 address the second), else ldmatrix.x2 per piece
            let paired = ni_count % 2 == 0 && (tb || sixteen_bit);
            if paired {
                let nj_var = self.m.add_var("nj", VarKind::Loop, DType::I32);
                let nj = Expr::var(nj_var, DType::I32);
                let b_offset = mul(nj.clone(), i32c(2 * b_elems));
                let n0 = add(mul(warp_n.clone(), i32c(tile_n)), mul(nj.clone(), i32c(16)));
                let load = if tb {
                    // stored N x K: rows n0 + (lane / 16) * 8 + lane % 8, 16-byte chunk (lane / 8) % 2
                    let row = add(add(n0, mul(div(lane.clone(), 16), i32c(8))), rem(lane.clone(), 8));
                    let col =
                        add(mul(kk.clone(), i32c(kstep)), mul(rem(div(lane.clone(), 8), 2), i32c(a_elems)));
                    let src_idx = with_prefix(&b_prefix, vec![simplify(row), simplify(col)]);
                    Stmt::Ldmatrix {
                        dst: b_regs,
                        dst_offset: b_offset,
                        count: 4,
                        trans: false,
                        src: b,
                        src_idx,
                    }
                } else {
                    // stored K x N: rows k = kk * 16 + lane % 16, columns n0 + (lane / 16) * 8
                    let kr = add(mul(kk.clone(), i32c(16)), rem(lane.clone(), 16));
                    let col = add(n0, mul(div(lane.clone(), 16), i32c(8)));
                    let src_idx = with_prefix(&b_prefix, vec![simplify(kr), simplify(col)]);
                    Stmt::Ldmatrix {
                        dst: b_regs,
                        dst_offset: b_offset,
                        count: 4,
                        trans: true,
                        src: b,
                        src_idx,
                    }
                };
                step.push(unrolled(nj_var, ni_count / 2, vec![load]));
            } else {
                let ni_var = self.m.add_var("ni", VarKind::Loop, DType::I32);
                let ni = Expr::var(ni_var, DType::I32);
                let b_offset = mul(ni.clone(), i32c(b_elems));
                let n0 = add(mul(warp_n.clone(), i32c(tile_n)), mul(ni.clone(), i32c(8)));
                let b_load = if tb {
                    // stored N x K: rows n0 + lane % 8, 16-byte chunk (lane / 8) % 2
                    let row = add(n0.clone(), rem(lane.clone(), 8));
                    let col =
                        add(mul(kk.clone(), i32c(kstep)), mul(rem(div(lane.clone(), 8), 2), i32c(a_elems)));
                    let src_idx = with_prefix(&b_prefix, vec![simplify(row), simplify(col)]);
                    vec![Stmt::Ldmatrix {
                        dst: b_regs,
                        dst_offset: b_offset,
                        count: 2,
                        trans: false,
                        src: b,
                        src_idx,
                    }]
                } else if sixteen_bit {
                    let kr = add(mul(kk.clone(), i32c(16)), rem(lane.clone(), 16));
                    let src_idx = with_prefix(&b_prefix, vec![simplify(kr), simplify(n0.clone())]);
                    vec![Stmt::Ldmatrix {
                        dst: b_regs,
                        dst_offset: b_offset,
                        count: 2,
                        trans: true,
                        src: b,
                        src_idx,
                    }]
                } else {
                    // int8 stored K x N: gather the m16n8k32 B fragment (register r, byte q)
                    let mut v = Vec::new();
                    for r in 0..2 {
                        for q in 0..4 {
                            let kc = add(
                                add(mul(kk.clone(), i32c(32)), i32c(r * 16 + q)),
                                mul(rem(lane.clone(), 4), i32c(4)),
                            );
                            let col = add(n0.clone(), div(lane.clone(), 4));
                            v.push(Stmt::Store {
                                buf: b_regs,
                                idx: vec![simplify(add(b_offset.clone(), i32c(r * 4 + q)))],
                                value: Expr::load(
                                    b,
                                    with_prefix(&b_prefix, vec![simplify(kc), simplify(col)]),
                                    bb.dtype,
                                ),
                                loc,
                            });
                        }
                    }
                    v
                };
                step.push(unrolled(ni_var, ni_count, b_load));
            }
        }
        // the products, accumulator registers ordered [mi][ni][4]
        let mi2 = self.m.add_var("mi", VarKind::Loop, DType::I32);
        let ni2 = self.m.add_var("ni", VarKind::Loop, DType::I32);
        let (mi2e, ni2e) = (Expr::var(mi2, DType::I32), Expr::var(ni2, DType::I32));
        let mma = Stmt::Mma {
            shape,
            a: a_regs,
            // registers of piece mi: per k-step 4 32-bit registers; the A fragment holds all k-steps
            a_offset: if a_in_registers {
                simplify(add(mul(mi2e.clone(), i32c((k / kstep) * a_elems)), mul(kk.clone(), i32c(a_elems))))
            } else {
                mul(mi2e.clone(), i32c(a_elems))
            },
            b: b_regs,
            // registers of piece ni: per k-step 2 32-bit registers; the B fragment holds all k-steps
            b_offset: if b_in_registers {
                simplify(add(mul(ni2e.clone(), i32c((k / kstep) * b_elems)), mul(kk.clone(), i32c(b_elems))))
            } else {
                mul(ni2e.clone(), i32c(b_elems))
            },
            c,
            c_offset: simplify(mul(add(mul(mi2e, i32c(ni_count)), ni2e), i32c(4))),
        };
        step.push(unrolled(mi2, mi_count, vec![unrolled(ni2, ni_count, vec![mma])]));
        out.push(unrolled(kk_var, k / kstep, step));
        out
    }

    fn reduce(
        &mut self,
        kind: ReduceKind,
        src: BufferId,
        dst: BufferId,
        dim: usize,
        clear: bool,
        loc: Loc,
    ) -> Vec<Stmt> {
        let sb = self.m.buffer(src).clone();
        let db = self.m.buffer(dst).clone();
        let (Some(sl), Some(dl)) = (sb.layout.clone(), db.layout.clone()) else {
            self.diags.push(Diagnostic::bug("reduction operands without layouts"));
            return vec![];
        };
        let expect = sl.reduced(dim);
        if expect != dl {
            self.diags.push(
                Diagnostic::error(
                    format!("layout conflict: '{}' cannot hold the reduction of '{}'", db.name, sb.name),
                    loc,
                )
                .with_label(db.loc, format!("'{}' is {dl}", db.name))
                .with_label(sb.loc, format!("reducing '{}' ({sl}) over dim {dim} needs {expect}", sb.name))
                .with_help("give the result its own fragment, first written by this reduction"),
            );
            return vec![];
        }
        let acc_dt = if sb.dtype.is_float() && sb.dtype.bytes() < 4 { DType::F32 } else { sb.dtype };
        let dst_slots = dl.slots();
        let partial = self.local_buffer(&format!("{}_red", db.name), acc_dt, dst_slots);
        let reduced_threads = sl.thread_digits(dim);
        let mut out = vec![Stmt::For {
            var: self.m.add_var("s", VarKind::Loop, DType::I32),
            start: i32c(0),
            extent: i32c(dst_slots),
            kind: ForKind::Unroll,
            body: vec![],
            loc,
        }];
        // initialise partials to the identity (threads holding nothing keep it)
        if let Stmt::For { var, body, .. } = &mut out[0] {
            *body = vec![Stmt::Store {
                buf: partial,
                idx: vec![Expr::var(*var, DType::I32)],
                value: identity(kind, acc_dt),
                loc,
            }];
        }
        // fold this thread's elements: a parallel walk over the source layout
        let keep: Vec<usize> = (0..sl.dims.len()).filter(|d| *d != dim).collect();
        let n = sl.dims.len();
        let width = sl.vector_width();
        let body = self.for_each_chunk(&sl, &mut |lw, values, base| {
            let lane_var = lw.m.add_var("e", VarKind::Loop, DType::I32);
            let el = element_at(values, base, lane_var, width);
            let src_slot = lw.slot(src, &(0..n).collect::<Vec<_>>(), &el);
            let dst_slot =
                if db.shape == [1] && keep.is_empty() { i32c(0) } else { lw.slot(dst, &keep, &el) };
            let mut x = Expr::cast(Expr::load(src, vec![src_slot], sb.dtype), acc_dt);
            if kind == ReduceKind::AbsMax {
                x = Expr::unary(UnOp::Abs, x);
            }
            let cur = Expr::load(partial, vec![dst_slot.clone()], acc_dt);
            let st = Stmt::Store { buf: partial, idx: vec![dst_slot], value: combine(kind, cur, x), loc };
            if width > 1 {
                vec![Stmt::For {
                    var: lane_var,
                    start: i32c(0),
                    extent: i32c(width),
                    kind: ForKind::Unroll,
                    body: vec![st],
                    loc,
                }]
            } else {
                vec![substitute_stmt(st, lane_var, &i32c(0))]
            }
        });
        out.extend(body);
        // across threads: shuffles within a warp, shared memory across warps
        let mut warp_masks = Vec::new();
        let mut block_masks = Vec::new();
        for &(size, stride) in &reduced_threads {
            let mut k = 1;
            while k < size {
                let mask = stride * k;
                if mask < 32 {
                    warp_masks.push(mask as u32);
                } else {
                    block_masks.push(mask);
                }
                k *= 2;
            }
        }
        let slot_var = self.m.add_var("s", VarKind::Loop, DType::I32);
        let slot = Expr::var(slot_var, DType::I32);
        if !warp_masks.is_empty() {
            let mut st = Vec::new();
            for mask in &warp_masks {
                let cur = Expr::load(partial, vec![slot.clone()], acc_dt);
                let other = Expr::ShflXor { a: Box::new(cur.clone()), mask: *mask, dtype: acc_dt };
                st.push(Stmt::Store {
                    buf: partial,
                    idx: vec![slot.clone()],
                    value: combine(kind, cur, other),
                    loc,
                });
            }
            out.push(Stmt::For {
                var: slot_var,
                start: i32c(0),
                extent: i32c(dst_slots),
                kind: ForKind::Unroll,
                body: st,
                loc,
            });
            self.report.push(format!(
                "{}: reduce_{} over {} threads: warp shuffles (xor {:?})",
                self.m.sources.short(loc).unwrap_or_default(),
                kind.name(),
                reduced_threads.iter().map(|(size, _)| size).product::<i64>(),
                warp_masks
            ));
        }
        if !block_masks.is_empty() {
            let active = sl.active_threads;
            let scratch = self.m.add_buffer(Buffer {
                name: format!("{}_xwarp", db.name),
                scope: Scope::Shared,
                dtype: acc_dt,
                shape: vec![dst_slots, active],
                loc,
                layout: None,
                shared_offset: None,
                swizzle: false,
            });
            let is_active = Expr::binary(BinOp::Lt, self.tid(), i32c(active));
            let s1 = self.m.add_var("s", VarKind::Loop, DType::I32);
            let s1e = Expr::var(s1, DType::I32);
            out.push(Stmt::Sync);
            out.push(Stmt::If {
                cond: is_active.clone(),
                then: vec![Stmt::For {
                    var: s1,
                    start: i32c(0),
                    extent: i32c(dst_slots),
                    kind: ForKind::Unroll,
                    body: vec![Stmt::Store {
                        buf: scratch,
                        idx: vec![s1e.clone(), self.tid()],
                        value: Expr::load(partial, vec![s1e.clone()], acc_dt),
                        loc,
                    }],
                    loc,
                }],
                otherwise: vec![],
                loc,
            });
            out.push(Stmt::Sync);
            // combine the partials of every thread that differs only in the cross-warp bits
            let all_bits: i64 = block_masks.iter().sum();
            let base = Expr::binary(BinOp::BitAnd, self.tid(), i32c(!all_bits));
            let s2 = self.m.add_var("s", VarKind::Loop, DType::I32);
            let s2e = Expr::var(s2, DType::I32);
            let mut fold = identity(kind, acc_dt);
            for subset in 0..(1i64 << block_masks.len()) {
                let offset: i64 = block_masks
                    .iter()
                    .enumerate()
                    .filter(|(b, _)| subset >> b & 1 == 1)
                    .map(|(_, m)| m)
                    .sum();
                let member = simplify(Expr::binary(BinOp::BitOr, base.clone(), i32c(offset)));
                fold = combine(kind, fold, Expr::load(scratch, vec![s2e.clone(), member], acc_dt));
            }
            out.push(Stmt::If {
                cond: is_active,
                then: vec![Stmt::For {
                    var: s2,
                    start: i32c(0),
                    extent: i32c(dst_slots),
                    kind: ForKind::Unroll,
                    body: vec![Stmt::Store { buf: partial, idx: vec![s2e], value: fold, loc }],
                    loc,
                }],
                otherwise: vec![],
                loc,
            });
            out.push(Stmt::Sync);
            self.report.push(format!(
                "{}: reduce_{} across warps through shared memory ({} bytes)",
                self.m.sources.short(loc).unwrap_or_default(),
                kind.name(),
                dst_slots * active * acc_dt.bytes() as i64
            ));
        }
        // write the result
        let s3 = self.m.add_var("s", VarKind::Loop, DType::I32);
        let s3e = Expr::var(s3, DType::I32);
        let result = Expr::load(partial, vec![s3e.clone()], acc_dt);
        let value = if clear {
            Expr::cast(result, db.dtype)
        } else {
            let old = Expr::cast(Expr::load(dst, vec![s3e.clone()], db.dtype), acc_dt);
            Expr::cast(combine(kind, old, result), db.dtype)
        };
        out.push(Stmt::For {
            var: s3,
            start: i32c(0),
            extent: i32c(dst_slots),
            kind: ForKind::Unroll,
            body: vec![Stmt::Store { buf: dst, idx: vec![s3e], value, loc }],
            loc,
        });
        out
    }
}

/// The element of a chunk at vector lane `lane` (a loop variable over `width` lanes).
fn element_at(values: &[Vec<Expr>], base: &[Expr], lane: VarId, width: i64) -> Element {
    let mut values = values.to_vec();
    let mut index = base.to_vec();
    if width > 1 {
        let n = values.len();
        let lane = Expr::var(lane, DType::I32);
        values[n - 1][0] = lane.clone();
        index[n - 1] = simplify(add(base[n - 1].clone(), lane));
    }
    Element { values, index }
}

fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast { a, .. } => strip_cast(a),
        other => other,
    }
}

fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::Const { value: ConstValue::Int(0), .. } => true,
        Expr::Const { value: ConstValue::Float(f), .. } => *f == 0.0 && f.is_sign_positive(),
        Expr::Cast { a, .. } => is_zero(a),
        _ => false,
    }
}

fn unrolled(var: VarId, extent: i64, body: Vec<Stmt>) -> Stmt {
    Stmt::For { var, start: i32c(0), extent: i32c(extent), kind: ForKind::Unroll, body, loc: Loc::UNKNOWN }
}

fn div(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorDiv, a, i32c(b))
}

fn rem(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorMod, a, i32c(b))
}

fn substitute_stmt(s: Stmt, v: VarId, with: &Expr) -> Stmt {
    let e = |x: Expr| simplify(x.substitute(v, with));
    let es = |xs: Vec<Expr>| xs.into_iter().map(|x| simplify(x.substitute(v, with))).collect::<Vec<_>>();
    let ss = |xs: Vec<Stmt>| xs.into_iter().map(|x| substitute_stmt(x, v, with)).collect::<Vec<_>>();
    match s {
        Stmt::Store { buf, idx, value, loc } => Stmt::Store { buf, idx: es(idx), value: e(value), loc },
        Stmt::AtomicAdd { buf, idx, value, loc } => {
            Stmt::AtomicAdd { buf, idx: es(idx), value: e(value), loc }
        }
        Stmt::If { cond, then, otherwise, loc } => {
            Stmt::If { cond: e(cond), then: ss(then), otherwise: ss(otherwise), loc }
        }
        Stmt::For { var, start, extent, kind, body, loc } => {
            Stmt::For { var, start: e(start), extent: e(extent), kind, body: ss(body), loc }
        }
        Stmt::Let { var, value } => Stmt::Let { var, value: e(value) },
        Stmt::VecCopy { dst, dst_idx, src, src_idx, width } => {
            Stmt::VecCopy { dst, dst_idx: es(dst_idx), src, src_idx: es(src_idx), width }
        }
        Stmt::Printf { format, args } => Stmt::Printf { format, args: es(args) },
        other => other,
    }
}
