//! Pass `insert_syncs`: a barrier between two tile ops whenever one writes a shared buffer
//! the other reads or writes (threads are mapped differently in each op), including across
//! the back edge of a loop.
//!
//! Requires: tile-level IR with loop layouts. Ensures: no shared-memory or scratch
//! (`T.alloc_global`) hazard within a block between tile ops without a `sync` between
//! them. Does not: order the tensor parameters' global memory (the user's job, as in CUDA),
//! order anything between blocks, or order accesses within one op (a parallel loop's
//! iterations are independent).
//!
//! A statement that runs per thread (`tile_ir::per_thread`: it reads the thread index) is
//! ordered as one unit: its threads may diverge inside it, so no barrier goes there.
//!
//! It runs on tile ops, before lowering, because each tile op is where a thread mapping
//! changes; asynchronous copies (cp.async, TMA) will need a thread-level form of it.

use crate::Ctx;
use std::collections::{BTreeMap, BTreeSet};
use tile_ir::inst::{self, AccessKind};
use tile_ir::{
    stmt_exprs, walk_stmts, BarrierKind, BarrierOp, BufferId, Diagnostic, Expr, Inst, Instruction, Module,
    PerThread, Printed, Scope, Stmt,
};

/// Shared (and scratch) buffers read, written, and updated only by atomics: atomics
/// commute with each other, so two of them need no barrier between them.
#[derive(Clone, Default, PartialEq)]
struct Sets {
    reads: BTreeSet<BufferId>,
    writes: BTreeSet<BufferId>,
    atomics: BTreeSet<BufferId>,
    /// Written by a kernel's own `cp.async`: it lands at the kernel's own wait or mbarrier
    /// arrival, which order it; a barrier between two of them would order nothing.
    async_writes: BTreeSet<BufferId>,
}

impl Sets {
    fn add(&mut self, o: &Sets) {
        self.reads.extend(o.reads.iter().copied());
        self.writes.extend(o.writes.iter().copied());
        self.atomics.extend(o.atomics.iter().copied());
        self.async_writes.extend(o.async_writes.iter().copied());
    }
}

/// Accesses since the last barrier: by statements every thread runs, and by each of the
/// kernel's warp-role regions (`T.ws`, by its threads `first..first + count`). A region's
/// accesses are ordered against other regions' by the kernel's own mbarriers, not here;
/// against the rest of the kernel by a `__syncthreads` outside the regions; among
/// themselves by a barrier over the region's threads (a named barrier once lowered).
#[derive(Clone, Default, PartialEq)]
struct Pending {
    kernel: Sets,
    regions: BTreeMap<(u32, u32), Sets>,
}

impl Pending {
    /// The accesses a statement running on `scope` (None: every thread) must be ordered after.
    fn seen_by(&self, scope: Option<(u32, u32)>) -> Sets {
        match scope {
            Some(r) => self.regions.get(&r).cloned().unwrap_or_default(),
            None => {
                let mut all = self.kernel.clone();
                for s in self.regions.values() {
                    all.add(s);
                }
                all
            }
        }
    }
    fn record(&mut self, scope: Option<(u32, u32)>, a: &Sets) {
        let sets = match scope {
            Some(r) => self.regions.entry(r).or_default(),
            None => &mut self.kernel,
        };
        sets.add(a);
    }
    /// A barrier over `scope`'s threads: what it orders is done.
    fn synced(&mut self, scope: Option<(u32, u32)>) {
        match scope {
            Some(r) => {
                self.regions.remove(&r);
            }
            None => *self = Pending::default(),
        }
    }
    fn join(&mut self, other: &Pending) {
        self.kernel.add(&other.kernel);
        for (r, s) in &other.regions {
            self.regions.entry(*r).or_default().add(s);
        }
    }
}

/// What `place` reads of the kernel: the module, and the shared buffers a wgmma reads (in
/// the async proxy: a barrier that orders generic-proxy writes of them fences them first).
struct Cx<'a> {
    m: &'a Module,
    async_reads: BTreeSet<BufferId>,
    per_thread: PerThread,
    /// Threads of a warp-role region write (by ordinary stores or cp.async) a buffer a
    /// wgmma reads: the reader acquires them at an mbarrier wait, after which it fences
    /// the async proxy itself (a cp.async lands when it lands: its writer cannot fence
    /// after it).
    fence_after_waits: bool,
}

impl Cx<'_> {
    /// Whether a barrier ordering `pending` writes must fence them for the async proxy. The
    /// fence belongs to the barrier that orders the write, whichever statement it was placed
    /// for: a barrier placed for another reader of the same writes (a copy of a scale read
    /// before the gemm) leaves nothing pending at the wgmma.
    fn fence(&self, pending: &Sets) -> bool {
        pending
            .writes
            .iter()
            .chain(&pending.atomics)
            .chain(&pending.async_writes)
            .any(|b| self.async_reads.contains(b))
    }
}

pub fn insert_syncs(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let split = m.role_split();
    let body = std::mem::take(&mut m.kernel.body);
    let mut async_reads = BTreeSet::new();
    walk_stmts(&body, &mut |s| {
        if let Stmt::Gemm(op) = s {
            if crate::inject_pipeline::is_wgmma(s) {
                async_reads.extend(
                    [op.a, op.b]
                        .into_iter()
                        .filter(|&b| m.buffer(b).scope == Scope::Shared)
                        .map(|b| m.storage(b)),
                );
            }
        }
    });
    let mut handed = BTreeSet::new();
    for s in &body {
        if let Stmt::If { cond, then, .. } = s {
            if m.thread_range(cond).is_some() {
                let a = accesses_in(&m, then);
                handed.extend(a.writes.into_iter().chain(a.async_writes).chain(a.atomics));
            }
        }
    }
    let fence_after_waits = handed.iter().any(|b| async_reads.contains(b));
    let cx = Cx { m: &m, async_reads, per_thread: PerThread::of(&m), fence_after_waits };
    let mut pending = Pending::default();
    let mut out = Vec::new();
    for (k, s) in body.into_iter().enumerate() {
        match s {
            // a warp-specialized kernel: the consumers' statements are ordered among
            // themselves (their barriers become named barriers over them); the producer's
            // TMA copies are ordered by the pipeline's mbarriers
            Stmt::If { cond, then, otherwise, loc } if Some(k) == split => {
                let then = place(&cx, then, &mut pending, None);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.extend(place(&cx, vec![other], &mut pending, None)),
        }
    }
    m.kernel.body = out;
    Ok(m)
}

/// Shared buffers and global scratch buffers a statement (with its children) reads and
/// writes. Scratch (`T.alloc_global`) is ordered like shared memory within the block: a
/// block that writes partials and reads them back with another thread mapping needs the
/// barrier (`__syncthreads` orders global memory within the block); between blocks
/// nothing is ordered, as in CUDA.
fn accesses(m: &Module, s: &Stmt) -> Sets {
    accesses_in(m, std::slice::from_ref(s))
}

/// `accesses` of a list of statements (a loop's body, without cloning it into a loop).
fn accesses_in(m: &Module, body: &[Stmt]) -> Sets {
    let shared = |b: BufferId| m.buffer(b).scope == Scope::Shared || m.is_scratch(b);
    let mut reads = BTreeSet::new();
    let mut writes = BTreeSet::new();
    let mut atomics = BTreeSet::new();
    let mut async_writes = BTreeSet::new();
    walk_stmts(body, &mut |st| {
        match st {
            Stmt::Store { buf, .. } if shared(*buf) => {
                writes.insert(*buf);
            }
            Stmt::Atomic { buf, .. } if shared(*buf) => {
                atomics.insert(*buf);
            }
            Stmt::Copy(op) => {
                if shared(op.src.buf) {
                    reads.insert(op.src.buf);
                }
                if shared(op.dst.buf) {
                    if op.atomic.is_some() {
                        atomics.insert(op.dst.buf);
                    } else {
                        writes.insert(op.dst.buf);
                    }
                }
            }
            Stmt::Fill { dst, .. } if shared(dst.buf) => {
                writes.insert(dst.buf);
            }
            Stmt::Gemm(op) => {
                reads.extend([op.a, op.b].into_iter().filter(|x| shared(*x)));
            }
            // an instruction says what it reads and writes
            Stmt::Inst(i) => {
                let later = i.effects().asynchronous;
                for a in i.accesses().into_iter().filter(|a| shared(a.buf)) {
                    match a.kind {
                        AccessKind::Read => reads.insert(a.buf),
                        AccessKind::Write if later => async_writes.insert(a.buf),
                        AccessKind::Write => writes.insert(a.buf),
                    };
                }
            }
            Stmt::Print { what: Printed::Tile(r), .. } if shared(r.buf) => {
                reads.insert(r.buf);
            }
            _ => {}
        }
        stmt_exprs(st, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    if shared(*buf) {
                        reads.insert(*buf);
                    }
                }
            })
        });
    });
    // a view of another dtype (`T.view`) is its tile's bytes: one buffer for the hazards
    let root =
        |set: BTreeSet<BufferId>| -> BTreeSet<BufferId> { set.into_iter().map(|b| m.storage(b)).collect() };
    Sets {
        reads: root(reads),
        writes: root(writes),
        atomics: root(atomics),
        async_writes: root(async_writes),
    }
}

/// Must `a` wait for `p` (accesses of other threads, not yet ordered)? A write conflicts
/// with anything, a read with writes and atomics, an atomic with reads and writes.
/// Does `s` hold a `break` of the loop around it (not of a loop inside it)?
fn holds_break(s: &Stmt) -> bool {
    match s {
        Stmt::Inst(Inst::LoopBreak(_)) => true,
        Stmt::If { then, otherwise, .. } => then.iter().chain(otherwise).any(holds_break),
        _ => false,
    }
}

fn hazard(p: &Sets, a: &Sets) -> bool {
    let any = |x: &BTreeSet<BufferId>, y: &BTreeSet<BufferId>| x.iter().any(|b| y.contains(b));
    // a cp.async's write conflicts as a write does, except with another cp.async's
    let (pw, aw) = (&p.writes, &a.writes);
    any(aw, &p.reads)
        || any(aw, pw)
        || any(aw, &p.atomics)
        || any(aw, &p.async_writes)
        || any(&a.async_writes, &p.reads)
        || any(&a.async_writes, pw)
        || any(&a.async_writes, &p.atomics)
        || any(&a.reads, pw)
        || any(&a.reads, &p.async_writes)
        || any(&a.reads, &p.atomics)
        || any(&a.atomics, &p.reads)
        || any(&a.atomics, pw)
        || any(&a.atomics, &p.async_writes)
}

/// A warpgroup's turn (`inject_pipeline`'s warpgroup turns): `if <warpgroup 0> { bar.sync a }
/// else { bar.sync b }`, and its hand-over, the same with `bar.arrive`.
fn turn(s: &Stmt, arrive: bool) -> bool {
    let one = |v: &[Stmt]| matches!(v, [Stmt::Inst(Inst::NamedBarrier(b))] if b.arrive == arrive);
    matches!(s, Stmt::If { then, otherwise, .. } if one(then) && one(otherwise))
}

/// A barrier of all the threads (and the proxy fence before it): before the open turn of a
/// warpgroup, if there is one, where the other warpgroup, waiting for its own turn, could
/// never reach it. The statements of a turn write no shared memory (`inject_pipeline`
/// checks), so what the barrier orders was written before the turn began.
fn push_sync(out: &mut Vec<Stmt>, fence: bool) {
    let open = out.iter().rposition(|s| turn(s, false)).filter(|&k| !out[k..].iter().any(|s| turn(s, true)));
    let at = open.unwrap_or(out.len());
    let mut sync = vec![Stmt::inst(inst::Sync)];
    if fence {
        sync.insert(0, Stmt::inst(inst::FenceProxyAsync));
    }
    out.splice(at..at, sync);
}

/// `s` ordered as one unit: a barrier before it if it conflicts with what is pending.
fn whole(cx: &Cx, s: Stmt, pending: &mut Pending, scope: Option<(u32, u32)>, out: &mut Vec<Stmt>) {
    let a = accesses(cx.m, &s);
    let seen = pending.seen_by(scope);
    if hazard(&seen, &a) {
        push_sync(out, cx.fence(&seen));
        pending.synced(scope);
    }
    pending.record(scope, &a);
    out.push(s);
}

/// Barriers for `body`, which runs on `scope`'s threads (None: every thread).
fn place(cx: &Cx, body: Vec<Stmt>, pending: &mut Pending, scope: Option<(u32, u32)>) -> Vec<Stmt> {
    let m = cx.m;
    let mut out = Vec::new();
    for s in body {
        match s {
            // a statement that runs on each thread on its own (it reads the thread index):
            // its threads may take different paths, so no barrier goes inside it; it is
            // ordered as a whole, as a tile op is (what its threads hand each other inside
            // it is theirs to order, as in CUDA)
            s if cx.per_thread.head(m, &s) => whole(cx, s, pending, scope, &mut out),
            Stmt::For { var, start, extent, kind, body, loc } => {
                // what was left pending before the loop and conflicts with the loop's
                // accesses is ordered once, before it, not by a barrier in every iteration
                // (a write on a path around a guarded prologue, a tile loop's first copy)
                let a = accesses_in(m, &body);
                let seen = pending.seen_by(scope);
                if hazard(&seen, &a) {
                    push_sync(&mut out, cx.fence(&seen));
                    pending.synced(scope);
                }
                // run the body once to learn what it leaves pending at its end, then place
                // barriers for real with that state joined in (the loop's back edge)
                let mut trial = pending.clone();
                let _ = place(cx, body.clone(), &mut trial, scope);
                let mut entry = pending.clone();
                entry.join(&trial);
                // a `break` leaves with what was pending where it ran: all of the body's
                // accesses may be
                let breaks = body.iter().any(holds_break);
                let new_body = place(cx, body, &mut entry, scope);
                *pending = entry;
                if breaks {
                    pending.record(scope, &a);
                }
                out.push(Stmt::For { var, start, extent, kind, body: new_body, loc });
            }
            // a pipeline's prologue: its copies into the stages are ordered after later
            // accesses by the pipeline's own waits and barriers, but not after what other
            // threads still do with those tiles — the last iterations of the same pipeline
            // when it runs again inside an outer loop (stream-K's tile loop)
            Stmt::If { cond, then, otherwise, loc }
                if then.iter().all(|s| matches!(s, Stmt::Async { .. })) && otherwise.is_empty() =>
            {
                let a =
                    accesses(m, &Stmt::If { cond: cond.clone(), then: then.clone(), otherwise: vec![], loc });
                let seen = pending.seen_by(scope);
                if hazard(&seen, &a) {
                    push_sync(&mut out, cx.fence(&seen));
                    pending.synced(scope);
                }
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            Stmt::If { cond, then, otherwise, loc } if scope.is_none() && m.thread_range(&cond).is_some() => {
                // a warp-role region: ordered after the rest of the kernel by a barrier
                // every thread reaches (before it), then among its own threads inside; its
                // `else` holds the chain's other regions (Module::split_role_elses), which
                // run at once with it: the barrier before it orders them too (one inside the
                // `else` would wait for threads that never come)
                let region = m.thread_range(&cond);
                let a = accesses(
                    m,
                    &Stmt::If { cond: cond.clone(), then: then.clone(), otherwise: otherwise.clone(), loc },
                );
                if hazard(&pending.kernel, &a) {
                    if cx.fence(&pending.seen_by(None)) {
                        out.push(Stmt::inst(inst::FenceProxyAsync));
                    }
                    out.push(Stmt::inst(inst::Sync));
                    pending.synced(None);
                }
                let then = place(cx, then, pending, region);
                let otherwise = place(cx, otherwise, pending, None);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => {
                // a tile-level condition is the same on every thread of the block (it reads
                // no thread's own values: verify), so each branch gets its barriers inside;
                // what either leaves pending is pending after the branch
                let a = accesses(m, &Stmt::If { cond: cond.clone(), then: vec![], otherwise: vec![], loc });
                let reads = Sets { reads: a.reads, ..Sets::default() };
                let seen = pending.seen_by(scope);
                if hazard(&seen, &reads) {
                    push_sync(&mut out, cx.fence(&seen));
                    pending.synced(scope);
                }
                pending.record(scope, &reads);
                let mut other = pending.clone();
                let then = place(cx, then, pending, scope);
                let otherwise = place(cx, otherwise, &mut other, scope);
                // a constant condition (the `if true` that groups a scheduled statement's
                // parts) runs one branch: what it leaves pending is all that is; joining the
                // other would keep a write its barrier ordered pending after it, and put a
                // barrier in every iteration of the loop that follows
                match cond.as_int() {
                    Some(0) => *pending = other,
                    Some(_) => {}
                    None => pending.join(&other),
                }
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            // a named barrier the kernel placed orders only the threads it names: all of
            // those the statements run on when its count is theirs (T.sync_threads(3, 256)
            // in a region of 256 threads)
            Stmt::Inst(Inst::NamedBarrier(b)) => {
                let all = scope.map_or(m.kernel.threads, |(_, count)| count);
                if !b.arrive && b.threads == all {
                    pending.synced(scope);
                }
                out.push(Stmt::Inst(Inst::NamedBarrier(b)));
            }
            Stmt::Inst(i) if i.effects().barrier => {
                pending.synced(scope);
                out.push(Stmt::Inst(i));
            }
            // ordered by the pipeline's own waits and barriers
            Stmt::Inst(i) if i.effects().only_orders() => out.push(Stmt::Inst(i)),
            Stmt::Async { body } => {
                let a = accesses_in(m, &body);
                let seen = pending.seen_by(scope);
                if hazard(&seen, &a) {
                    push_sync(&mut out, cx.fence(&seen));
                    pending.synced(scope);
                }
                out.push(Stmt::Async { body });
            }
            // the kernel's own barriers order what they guard; what a wait acquires of
            // another region's writes, a wgmma sees after a proxy fence
            s @ Stmt::Barrier(BarrierOp { kind: BarrierKind::Wait { .. }, .. })
                if scope.is_some() && cx.fence_after_waits =>
            {
                out.push(s);
                out.push(Stmt::inst(inst::FenceProxyAsync));
            }
            s @ Stmt::Barrier(_) => out.push(s),
            other => whole(cx, other, pending, scope, &mut out),
        }
    }
    out
}
