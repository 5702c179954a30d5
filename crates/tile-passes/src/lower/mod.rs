//! Pass `lower_tile_ops`: tile ops to per-thread code, one file per op family.
//!
//! Requires: tile-level IR with layouts (`infer_layouts`), instructions chosen
//! (`select_instructions`: `CopyOp::inst`, `GemmOp::inst`) and barriers (`insert_syncs`).
//! Ensures: thread-level IR. Fragments are per-thread register arrays (scope `local`, shape
//! `[slots]`); `parallel` loops, copies and fills are per-thread loops over register slots
//! (`threads.rs`), with 16-byte vector accesses where the data is contiguous and aligned
//! and a guarded scalar path at ragged edges (`vector.rs`); copies follow their chosen
//! instruction (`copy.rs`); reductions fold registers, then warp shuffles, then shared
//! memory across warps (`reduce.rs`); gemms become their atom's instructions
//! (`gemm/`); every global access is bounds-checked (`guards.rs`: loads past the edge read
//! the pad value, stores past it are dropped), so nothing is ever written out of bounds;
//! stores outside parallel loops to global or shared memory are made by thread 0, except in
//! statements that read the thread index, which every thread runs (`simt.rs`); `print`
//! and `device_assert` become `printf` and `__trap` (`debug.rs`); with `lineinfo`, each
//! tile op is preceded by a `SourceLine` naming the user's line.
//! Does not: choose instructions (`select_instructions` did), place shared buffers
//! (`plan_shared_memory`), or widen index arithmetic (`widen_indices`).
//!
//! Where a new lowering goes: a new copy instruction beside `copy.rs` (a TMA copy in
//! `copy/tma.rs` once copy grows a folder), a new tensor-core family in `gemm/` (`wgmma.rs`
//! beside `mma_sync.rs`).

mod copy;
mod debug;
mod fill;
mod gemm;
mod guards;
mod reduce;
mod regions;
mod simt;
mod stmatrix;
mod threads;
pub mod tma;
mod vector;

use crate::Ctx;
use tile_ir::simplify::simplify;
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
        non_negative_vars,
        user_vars,
        m,
        diags: Vec::new(),
        report: Vec::new(),
        tid: VarId(0),
        lineinfo: ctx.options.lineinfo,
        block_coords: Vec::new(),
        target: ctx.target.clone(),
        regions: Vec::new(),
        per_thread: PerThread::default(),
    };
    lw.per_thread = PerThread::of(&lw.m);
    lw.tid = lw.m.thread_idx();
    lw.block_coords = debug::block_coords(&mut lw.m);
    let body = std::mem::take(&mut lw.m.kernel.body);
    // the kernel's own barriers are initialized by one thread before anything else runs
    let (inits, body): (Vec<Stmt>, Vec<Stmt>) = body
        .into_iter()
        .partition(|s| matches!(s, Stmt::Barrier(BarrierOp { kind: BarrierKind::Init { .. }, .. })));
    let barrier_init = lw.barrier_inits(inits);
    // gemm accumulators start at zero, so `T.gemm` into a never-cleared accumulator (the
    // articles' GEMM) sums from 0
    let mut accumulators = std::collections::BTreeSet::new();
    walk_stmts(&body, &mut |s| {
        if let Stmt::Gemm(op) = s {
            accumulators.insert(op.c);
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
    let split = lw.m.role_split_in(&body);
    if let Some(k) = split {
        // the consumers of a warp-specialized kernel synchronize among themselves: the
        // producer warps never reach their barriers
        if let Stmt::If { then, .. } = &mut body[k] {
            let threads = lw.m.kernel.threads;
            *then = consumer_barriers(std::mem::take(then), threads);
        }
    }
    // the stores of a TMA epilogue are done before the block exits
    let mut stores = false;
    walk_stmts(&body, &mut |s| stores |= matches!(s, Stmt::Inst(Inst::TmaStore(_))));
    if stores {
        // the thread that issued them: thread 0 of each consumer slot
        let mut one = Expr::binary(BinOp::Eq, lw.tid(), i32c(0));
        if lw.m.kernel.roles.is_some_and(|r| r.pingpong) {
            let second = Expr::binary(BinOp::Eq, lw.tid(), i32c(lw.m.kernel.threads as i64));
            one = Expr::binary(BinOp::Or, one, second);
        }
        let wait = Stmt::inst(inst::BulkWait { read: false, pending: 0 });
        body.push(Stmt::If { cond: one, then: vec![wait], otherwise: vec![], loc: Loc::UNKNOWN });
    }
    let mut body = [barrier_init, prologue, body].concat();
    if lw.m.kernel.roles.is_none()
        && lw.m.cluster_blocks() > 1
        && lw.m.buffers.iter().any(|b| b.scope == Scope::Cluster)
    {
        // a kernel reaching other blocks' shared memory: every block of its cluster has
        // started before any is reached — each arrives first thing and waits just before
        // its first reach (or cluster barrier of the user's), the barrier's latency hidden
        // by what runs between, which touches no tile a peer reaches —, and none exits while
        // a peer may still reach it, unless the body's last arrival (cluster_sync or
        // cluster_arrive) follows its last reach (the user's, after the stores into a peer:
        // past its wait no block reaches another)
        let cluster = |b: BufferId| lw.m.buffers[b.0 as usize].scope == Scope::Cluster;
        let views: Vec<BufferId> =
            (0..lw.m.buffers.len() as u32).map(BufferId).filter(|&v| cluster(v)).collect();
        // the tiles peers reach, and every other name for their bytes (a T.view over them)
        let reached = lw.m.peer_reached();
        let roots: Vec<BufferId> =
            (0..lw.m.buffers.len() as u32).map(BufferId).filter(|b| reached[b.0 as usize]).collect();
        let touches =
            |s: &Stmt, bufs: &[BufferId]| bufs.iter().any(|&v| crate::inject_pipeline::touches(s, v));
        let first = body
            .iter()
            .position(|s| touches(s, &views) || touches(s, &roots) || s.is_cluster_barrier())
            .unwrap_or(body.len());
        // the user's last arrival (a cluster_sync, or a cluster_arrive, whose cluster_wait
        // follows: verify checks they alternate)
        let arrival = |s: &Stmt| matches!(s, Stmt::Inst(Inst::ClusterSync(_) | Inst::ClusterArrive(_)));
        let last_reach = body.iter().rposition(|s| touches(s, &views));
        let last_sync = body.iter().rposition(arrival);
        let after_last_reach = matches!((last_reach, last_sync), (Some(r), Some(y)) if y > r);
        if !after_last_reach {
            body.push(Stmt::inst(inst::ClusterSync));
        }
        body.insert(first, Stmt::inst(inst::ClusterWait));
        body.insert(0, Stmt::inst(inst::ClusterArrive));
    }
    let body = std::mem::take(&mut body);
    let Lowerer { mut m, diags, report, .. } = lw;
    if !diags.is_empty() {
        return Err(diags);
    }
    m.kernel.body = body;
    for b in m.buffers.iter_mut() {
        if b.scope == Scope::Fragment {
            let slots = b.layout.as_ref().map(|l| l.slots()).unwrap_or(1);
            b.scope = Scope::Local;
            b.shape = fixed_dims(&[slots]);
        }
    }
    m.level = Level::Thread;
    ctx.report.extend(report);
    Ok(m)
}

impl Lowerer {
    /// Whether `cond` splits a ping-pong kernel's consumers into their two slots.
    fn is_slot_split(&self, cond: &Expr) -> bool {
        self.m.kernel.roles.is_some_and(|r| r.pingpong) && *cond == self.m.slot_cond(self.tid)
    }

    /// The two consumer slots of a ping-pong kernel: each runs the user's code on its own
    /// `threads` threads numbered from 0 (slot 1's are `tid - threads`), its barriers named
    /// barrier 1 + slot among them.
    fn slots(&mut self, cond: Expr, then: Vec<Stmt>, otherwise: Vec<Stmt>, loc: Loc) -> Stmt {
        let threads = self.m.kernel.threads;
        let first = named_barriers(self.block(then), 1, threads);
        let saved = self.tid;
        let local = self.m.add_var("wtid", VarKind::Temp, DType::I32);
        let mut second =
            vec![Stmt::Let { var: local, value: Expr::binary(BinOp::Sub, self.tid(), i32c(threads as i64)) }];
        self.tid = local;
        second.extend(self.block(otherwise));
        self.tid = saved;
        Stmt::If { cond, then: first, otherwise: named_barriers(second, 2, threads), loc }
    }
}

/// Every `__syncthreads` in `body` as `bar.sync 1, threads` (barrier 0 is the block's).
fn consumer_barriers(body: Vec<Stmt>, threads: u32) -> Vec<Stmt> {
    named_barriers(body, 1, threads)
}

/// Every `__syncthreads` in `body` as `bar.sync id, threads`: the barriers of code that only
/// `threads` threads run.
fn named_barriers(body: Vec<Stmt>, id: u32, threads: u32) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Inst(Inst::Sync(_)) => Stmt::inst(inst::NamedBarrier { id, threads, arrive: false }),
            Stmt::For { var, start, extent, kind, body, loc } => {
                Stmt::For { var, start, extent, kind, body: named_barriers(body, id, threads), loc }
            }
            Stmt::If { cond, then, otherwise, loc } => Stmt::If {
                cond,
                then: named_barriers(then, id, threads),
                otherwise: named_barriers(otherwise, id, threads),
                loc,
            },
            other => other,
        })
        .collect()
}

/// Builds the code of one vector chunk from (digit values, first index) per dimension.
type ChunkBuilder<'a> = dyn FnMut(&mut Lowerer, &[Vec<Expr>], &[Expr]) -> Vec<Stmt> + 'a;

struct Lowerer {
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
    target: Target,
    /// The kernel's warp-role regions met so far (first thread, count): region `k`
    /// synchronizes its threads on named barrier `k + 1`.
    regions: Vec<(u32, u32)>,
    /// Which statements run on every thread (`tile_ir::per_thread`).
    per_thread: PerThread,
}

/// Where the current element sits: per loop dimension, the value of each layout digit
/// (loop variables, thread coordinates, the vector lane) and the resulting index.
struct Element {
    values: Vec<Vec<Expr>>,
    index: Vec<Expr>,
    /// The steps of the loop layout's digits (`values` are theirs), per dimension; empty
    /// where the element was not made by a loop over a layout.
    steps: Vec<Vec<i64>>,
}

pub(super) fn i32c(v: i64) -> Expr {
    Expr::int(v)
}

pub(super) fn add(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Add, a, b)
}

pub(super) fn mul(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Mul, a, b)
}

pub(super) fn div(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorDiv, a, i32c(b))
}

pub(super) fn rem(a: Expr, b: i64) -> Expr {
    Expr::binary(BinOp::FloorMod, a, i32c(b))
}

pub(super) fn unrolled(var: VarId, extent: i64, body: Vec<Stmt>) -> Stmt {
    Stmt::For { var, start: i32c(0), extent: i32c(extent), kind: ForKind::Unroll, body, loc: Loc::UNKNOWN }
}

pub(super) fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast { a, .. } => strip_cast(a),
        other => other,
    }
}

pub(super) fn is_zero(e: &Expr) -> bool {
    match e {
        Expr::Const { value: ConstValue::Int(0), .. } => true,
        Expr::Const { value: ConstValue::Float(f), .. } => *f == 0.0 && f.is_sign_positive(),
        Expr::Cast { a, .. } => is_zero(a),
        _ => false,
    }
}

pub(super) fn substitute_stmt(s: Stmt, v: VarId, with: &Expr) -> Stmt {
    let e = |x: Expr| simplify(x.substitute(v, with));
    let es = |xs: Vec<Expr>| xs.into_iter().map(|x| simplify(x.substitute(v, with))).collect::<Vec<_>>();
    let ss = |xs: Vec<Stmt>| xs.into_iter().map(|x| substitute_stmt(x, v, with)).collect::<Vec<_>>();
    match s {
        Stmt::Store { buf, idx, value, loc } => Stmt::Store { buf, idx: es(idx), value: e(value), loc },
        Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
            Stmt::Atomic { mode, buf, idx: es(idx), value: e(value), prev, loc }
        }
        Stmt::If { cond, then, otherwise, loc } => {
            Stmt::If { cond: e(cond), then: ss(then), otherwise: ss(otherwise), loc }
        }
        Stmt::For { var, start, extent, kind, body, loc } => {
            Stmt::For { var, start: e(start), extent: e(extent), kind, body: ss(body), loc }
        }
        Stmt::Let { var, value } => Stmt::Let { var, value: e(value) },
        Stmt::Inst(i) => Stmt::Inst(i.map_exprs(&mut |x| e(x))),
        other => other,
    }
}

impl Lowerer {
    pub(super) fn temp(&mut self, name: &str, value: Expr) -> (Stmt, Expr) {
        let dt = value.dtype();
        let v = self.m.add_var(name, VarKind::Temp, dt);
        (Stmt::Let { var: v, value }, Expr::var(v, dt))
    }

    pub(super) fn local_buffer(&mut self, name: &str, dtype: DType, n: i64) -> BufferId {
        self.m.add_buffer(Buffer {
            name: name.to_string(),
            scope: Scope::Local,
            dtype,
            shape: fixed_dims(&[n]),
            loc: Loc::UNKNOWN,
            layout: None,
            shared_offset: None,
            alias_of: None,
            panel: None,
            swizzle: None,
        })
    }

    /// A shared tile of `shape` the lowering adds (a reduction's cross-warp partials, a
    /// value handed to every thread); `plan_shared_memory` places it.
    pub(super) fn shared_scratch(&mut self, name: String, dtype: DType, shape: &[i64], loc: Loc) -> BufferId {
        self.m.add_buffer(Buffer {
            name,
            scope: Scope::Shared,
            dtype,
            shape: fixed_dims(shape),
            loc,
            layout: None,
            shared_offset: None,
            alias_of: None,
            panel: None,
            swizzle: None,
        })
    }

    pub(super) fn tid(&self) -> Expr {
        Expr::var(self.tid, DType::I32)
    }

    pub(super) fn comment(&self, what: &str, loc: Loc) -> Stmt {
        match self.m.sources.short(loc) {
            Some(s) => Stmt::Comment(format!("{s}: {what}")),
            None => Stmt::Comment(what.to_string()),
        }
    }

    /// A statement outside `T.Parallel`, which every thread runs, with its fragment
    /// accesses as register slots: such fragments are held whole by every thread
    /// (`infer_layouts`). Only the statement's own expressions: the bodies it holds are
    /// lowered on their own (a parallel loop's by its layout).
    fn scalar_fragment_slots(&self, s: Stmt) -> Stmt {
        let m = &self.m;
        let mut slots = |e: Expr| -> Expr {
            e.map(&mut |x| match x {
                Expr::Load { buf, idx, dtype, loc, oob } if m.buffer(buf).scope == Scope::Fragment => {
                    let l = m.buffer(buf).layout.as_ref().expect("fragment layout");
                    Expr::Load { buf, idx: vec![l.slot_of(&idx)], dtype, loc, oob }
                }
                other => other,
            })
        };
        let region = |r: Region, f: &mut dyn FnMut(Expr) -> Expr| map_region(r, &mut |e| f(e));
        match s {
            Stmt::Store { buf, idx, value, loc } => {
                let idx: Vec<Expr> = idx.into_iter().map(&mut slots).collect();
                let idx = match m.buffer(buf).layout.as_ref() {
                    Some(l) if m.buffer(buf).scope == Scope::Fragment => vec![l.slot_of(&idx)],
                    _ => idx,
                };
                Stmt::Store { buf, idx, value: slots(value), loc }
            }
            Stmt::Atomic { mode, buf, idx, value, prev, loc } => Stmt::Atomic {
                mode,
                buf,
                idx: idx.into_iter().map(&mut slots).collect(),
                value: slots(value),
                prev,
                loc,
            },
            Stmt::If { cond, then, otherwise, loc } => Stmt::If { cond: slots(cond), then, otherwise, loc },
            Stmt::For { var, start, extent, kind, body, loc } => {
                Stmt::For { var, start: slots(start), extent: slots(extent), kind, body, loc }
            }
            Stmt::Copy(op) => Stmt::Copy(CopyOp {
                src: region(op.src, &mut slots),
                dst: region(op.dst, &mut slots),
                pad: op.pad.map(&mut slots),
                ..op
            }),
            Stmt::Fill { dst, value, loc } => {
                Stmt::Fill { dst: region(dst, &mut slots), value: slots(value), loc }
            }
            Stmt::Print { what: Printed::Value(v), msg, block, loc } => {
                Stmt::Print { what: Printed::Value(slots(v)), msg, block, loc }
            }
            Stmt::DeviceAssert { cond, msg, loc } => Stmt::DeviceAssert { cond: slots(cond), msg, loc },
            // a kernel's own cp.async or barrier arrival, addressed by register values
            Stmt::Inst(i) => Stmt::Inst(i.map_exprs(&mut slots)),
            other => other,
        }
    }

    /// An element atomic with `return_prev` outside a `T.Parallel` loop: thread 0 makes it
    /// (statements there run once per block) and hands the old value to every thread through
    /// one shared element, between two barriers (the second keeps a loop's next atomic from
    /// overwriting it before every thread has read it).
    fn atomic_once(&mut self, s: Stmt, prev: BufferId) -> Vec<Stmt> {
        let loc = s.loc();
        let dt = self.m.buffer(prev).dtype;
        let name = format!("{}_shared", self.m.buffer(prev).name);
        let handoff = self.shared_scratch(name, dt, &[1], loc);
        let at0 = || vec![i32c(0)];
        let one = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
        let mut then = self.guard_globals(vec![s]);
        then.push(Stmt::Store { buf: handoff, idx: at0(), value: Expr::load(prev, at0(), dt), loc });
        vec![
            Stmt::If { cond: one, then, otherwise: vec![], loc },
            Stmt::inst(inst::Sync),
            Stmt::Store { buf: prev, idx: at0(), value: Expr::load(handoff, at0(), dt), loc },
            Stmt::inst(inst::Sync),
        ]
    }

    /// Lower statements that run once per block.
    pub(super) fn block(&mut self, body: Vec<Stmt>) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in body {
            if self.lineinfo && s.loc().is_known() {
                out.push(Stmt::SourceLine(s.loc()));
            }
            if self.per_thread.head(&self.m, &s) {
                let lowered = self.lower_per_thread(vec![s]);
                match self.m.kernel.user_threads {
                    // threads=n of part of a warp: the threads past n run no code of the user's
                    Some(n) => out.push(Stmt::If {
                        cond: Expr::binary(BinOp::Lt, self.tid(), i32c(n as i64)),
                        then: lowered,
                        otherwise: vec![],
                        loc: Loc::UNKNOWN,
                    }),
                    None => out.extend(lowered),
                }
                continue;
            }
            let s = self.scalar_fragment_slots(s);
            match s {
                Stmt::Parallel { vars, extents, body, loc, layout } => {
                    out.push(self.comment("T.Parallel", loc));
                    let l = layout.expect("infer_layouts gives every parallel loop a layout");
                    out.extend(self.parallel(&vars, &extents, &body, &l, loc));
                }
                Stmt::Copy(op) => {
                    out.push(self.comment("T.copy", op.loc));
                    out.extend(self.copy(&op));
                }
                Stmt::Fill { dst, value, loc } => {
                    out.push(self.comment("T.fill", loc));
                    out.extend(self.fill(&dst, value, loc));
                }
                Stmt::Reduce(op) => {
                    out.push(self.comment(&format!("T.reduce_{}", op.kind.name()), op.loc));
                    out.extend(self.reduce(&op));
                }
                Stmt::Async { body } => {
                    for st in body {
                        if let Stmt::Copy(op) = st {
                            out.push(self.comment("T.copy (issued ahead by the pipeline)", op.loc));
                            out.extend(self.copy(&op));
                        }
                    }
                }
                Stmt::Gemm(op) => {
                    out.push(self.comment("T.gemm", op.loc));
                    out.extend(self.gemm(&op));
                }
                Stmt::For { var, start, extent, kind, body, loc } => {
                    let kind = match kind {
                        ForKind::Pipelined { stages, .. } => {
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
                Stmt::If { cond, then, otherwise, loc } if self.is_slot_split(&cond) => {
                    out.push(self.slots(cond, then, otherwise, loc));
                }
                Stmt::If { cond, then, otherwise, loc } if self.m.thread_range(&cond).is_some() => {
                    let (first, count) = self.m.thread_range(&cond).expect("checked");
                    out.extend(self.region(cond, then, otherwise, first, count, loc));
                }
                Stmt::Barrier(op) => out.extend(self.barrier(op)),
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
                Stmt::Store { buf, idx, value, loc }
                    if matches!(self.m.buffer(buf).scope, Scope::Local | Scope::Fragment) =>
                {
                    // registers: every thread writes its own (a fragment here is held whole
                    // by every thread, so each keeps its copy)
                    out.push(Stmt::Store { buf, idx, value, loc });
                }
                Stmt::Atomic { prev, mode, .. } if mode.order != MemoryOrder::Relaxed => {
                    // the block's atomic with an order: what every thread of the block did
                    // before it is released with it (a barrier, then thread 0's release), and
                    // what the acquire makes visible is every thread's after it
                    let releases = matches!(
                        mode.order,
                        MemoryOrder::Release | MemoryOrder::AcqRel | MemoryOrder::SeqCst
                    );
                    if releases {
                        out.push(Stmt::inst(inst::Sync));
                    }
                    match prev {
                        Some(prev) => out.extend(self.atomic_once(s, prev)),
                        None => {
                            out.push(self.on_thread0(s));
                            if mode.order != MemoryOrder::Release {
                                out.push(Stmt::inst(inst::Sync));
                            }
                        }
                    }
                }
                Stmt::Atomic { prev: Some(prev), .. } => out.extend(self.atomic_once(s, prev)),
                // once per block: thread 0 writes
                s @ (Stmt::Store { .. } | Stmt::Atomic { .. }) => out.push(self.on_thread0(s)),
                // T.call_extern runs on every thread that reaches it, as in CUDA: the loads in
                // its operands are bounds-checked
                Stmt::Inst(i @ (Inst::CallExtern(_) | Inst::BindPointer(_))) => {
                    out.push(Stmt::Inst(i.map_exprs(&mut |x| self.guard_loads(x))));
                }
                // a kernel's own cp.async at addresses every thread computes alike: once per
                // block too (thread 0 issues it; its commit and wait are thread 0's, the
                // others' are empty, and the barrier before a reader orders the rest)
                Stmt::Inst(Inst::AsyncCopy(c)) => {
                    let c = c.map_exprs(&mut |x| self.guard_loads(x));
                    let one = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
                    out.push(Stmt::If {
                        cond: one,
                        then: vec![Stmt::inst(c)],
                        otherwise: vec![],
                        loc: Loc::UNKNOWN,
                    });
                }
                other => out.push(other),
            }
        }
        out
    }
}

impl Lowerer {
    /// A block-level store or atomic run once per block: by thread 0, its global accesses
    /// bounds-checked.
    fn on_thread0(&mut self, s: Stmt) -> Stmt {
        let loc = s.loc();
        let then = self.guard_globals(vec![s]);
        let cond = Expr::binary(BinOp::Eq, self.tid(), i32c(0));
        Stmt::If { cond, then, otherwise: vec![], loc }
    }
}
