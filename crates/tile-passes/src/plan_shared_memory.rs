//! Pass `plan_shared_memory`: place every shared buffer in the block's dynamic shared
//! memory and check the total against the target's limit.
//!
//! Requires: thread-level IR (lowering may add scratch buffers). Ensures: every shared
//! buffer has `shared_offset`, 16-byte aligned (128 for swizzled tiles, so their bank
//! pattern holds); two buffers share bytes only when their lifetimes (spans of units: the
//! top-level statements, a top-level loop's body unfolded into units of its own) are
//! separated by a barrier, with every `cp.async` into the earlier one waited for before it —
//! the epilogue's staging tile of a pipelined GEMM reuses the operand tiles' memory (in a
//! warp-specialized kernel the consumers' statements are the top level, and the tiles the
//! producer fills live from the role split on). Two buffers used only inside one unfolded
//! loop also need a barrier on the way round (the second's last use in an iteration before
//! the first's use in the next); where a pair lacks a barrier, the pass inserts a copy of
//! one of that loop's own unit-level barriers when that places the later buffer lower (the
//! output staging tile of a persistent attention kernel over Q's tile) — for a tile of
//! 4 KiB or more only: a barrier each iteration costs more than a few bytes save. The total fits the
//! target, else a diagnostic naming each buffer and its bytes; the report says which buffers
//! share bytes. Does not: unfold nested loops, add a barrier after an asynchronous write, or
//! split a statement's lifetime more finely than a unit.

use crate::Ctx;
use std::collections::{BTreeMap, BTreeSet};
use tile_ir::inst::AccessKind;
use tile_ir::{
    stmt_exprs, walk_stmts, BufferId, Diagnostic, Expr, ForKind, Inst, Instruction, Module, Scope, Stmt,
};

pub const ALIGN: u64 = 16;

/// Buffers a statement (with its children) reads or writes; `async_dst` collects those
/// written by `cp.async`.
fn uses(s: &Stmt, out: &mut BTreeSet<BufferId>, async_dst: &mut BTreeSet<BufferId>) {
    walk_stmts(std::slice::from_ref(s), &mut |s| {
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    out.insert(*buf);
                }
            })
        });
        match s {
            Stmt::Store { buf, .. } | Stmt::Atomic { buf, .. } => {
                out.insert(*buf);
            }
            Stmt::Inst(i) => {
                for a in i.accesses() {
                    out.insert(a.buf);
                    if a.kind == AccessKind::Write && i.effects().asynchronous {
                        async_dst.insert(a.buf);
                    }
                }
            }
            // tile-level statements do not reach this pass; count their buffers anyway
            Stmt::Copy(op) => {
                out.extend([op.src.buf, op.dst.buf]);
            }
            Stmt::Fill { dst, .. } => {
                out.insert(dst.buf);
            }
            Stmt::Reduce(op) => {
                out.extend([op.src, op.dst]);
            }
            Stmt::Gemm(op) => {
                out.extend([op.a, op.b, op.c]);
            }
            Stmt::Print { what: tile_ir::Printed::Tile(r), .. } => {
                out.insert(r.buf);
            }
            _ => {}
        }
    });
}

/// Lifetimes `(first, last)` of the shared buffers over the kernel's units — its top-level
/// statements, with the body of a top-level loop (a persistent kernel's tile loop) unfolded
/// into units of its own — and whether two of them may share memory.
struct Lifetimes {
    span: Vec<Option<(usize, usize)>>,
    /// The unfolded loop (units `start..=end`) a buffer is used in alone, if any.
    inner: Vec<Option<usize>>,
    loops: Vec<(usize, usize)>,
    /// Per unit: in the consumers' branch of a warp-specialized kernel.
    region: Vec<bool>,
    async_dst: BTreeSet<BufferId>,
    syncs: Vec<usize>,
    waits_all: Vec<usize>,
    /// Per unit: a barrier of all the unit's threads placed there (a template for one more).
    barrier_at: Vec<Option<Stmt>>,
}

/// A unit-level barrier of every thread that runs the units: `__syncthreads`, or the named
/// barrier a role's statements use for it (not an arrive, not a warpgroup's turn).
fn full_barrier(s: &Stmt) -> Option<Stmt> {
    match s {
        Stmt::Inst(Inst::Sync(_)) => Some(s.clone()),
        Stmt::Inst(Inst::NamedBarrier(b)) if !b.arrive => Some(s.clone()),
        _ => None,
    }
}

impl Lifetimes {
    fn of(m: &Module) -> Lifetimes {
        // a warp-specialized kernel: the consumers' statements count as top-level ones; the
        // producer's tiles live from the split (its first copies may land while the
        // consumers still run the statements before the loop) to their last use
        let split = m.role_split();
        // each with whether it belongs to the consumers' branch (its barriers order only them)
        let mut top: Vec<(&Stmt, bool)> = Vec::new();
        let mut producer: Option<(&[Stmt], usize)> = None;
        for (i, s) in m.kernel.body.iter().enumerate() {
            match s {
                Stmt::If { then, otherwise, .. } if Some(i) == split => {
                    producer = Some((otherwise, top.len()));
                    top.extend(then.iter().map(|t| (t, true)));
                }
                other => top.push((other, false)),
            }
        }
        // a top-level loop's body unfolds into units (one iteration's order)
        let mut units: Vec<(&Stmt, Option<usize>)> = Vec::new();
        let mut region = Vec::new();
        let mut loops = Vec::new();
        let mut producer_at = 0;
        for (i, &(s, consumer)) in top.iter().enumerate() {
            if producer.is_some_and(|(_, first)| first == i) {
                producer_at = units.len();
            }
            match s {
                Stmt::For { body, kind: ForKind::Serial, .. } if !body.is_empty() => {
                    let l = loops.len();
                    loops.push((units.len(), units.len() + body.len() - 1));
                    units.extend(body.iter().map(|b| (b, Some(l))));
                    region.extend(body.iter().map(|_| consumer));
                }
                other => {
                    units.push((other, None));
                    region.push(consumer);
                }
            }
        }
        let mut span = vec![None; m.buffers.len()];
        let mut home: Vec<Option<Option<usize>>> = vec![None; m.buffers.len()];
        let mut async_dst = BTreeSet::new();
        let (mut syncs, mut waits_all) = (Vec::new(), Vec::new());
        let mut barrier_at = Vec::new();
        for (i, (s, l)) in units.iter().enumerate() {
            barrier_at.push(full_barrier(s));
            if let Stmt::Inst(inst) = s {
                let e = inst.effects();
                if e.barrier {
                    syncs.push(i);
                }
                if e.waits_for == Some(0) {
                    waits_all.push(i);
                }
            }
            let mut used = BTreeSet::new();
            uses(s, &mut used, &mut async_dst);
            // a view of another dtype lives in its tile's bytes: its uses are the tile's
            let used: BTreeSet<BufferId> = used.into_iter().map(|b| m.storage(b)).collect();
            for b in used {
                let e: &mut Option<(usize, usize)> = &mut span[b.0 as usize];
                *e = Some(match *e {
                    None => (i, i),
                    Some((first, _)) => (first, i),
                });
                let h = &mut home[b.0 as usize];
                *h = Some(match *h {
                    None => *l,
                    Some(prev) if prev == *l => prev,
                    Some(_) => None,
                });
            }
        }
        if let Some((stmts, _)) = producer {
            let mut used = BTreeSet::new();
            for s in stmts {
                uses(s, &mut used, &mut async_dst);
            }
            let used: BTreeSet<BufferId> = used.into_iter().map(|b| m.storage(b)).collect();
            for b in used {
                let e: &mut Option<(usize, usize)> = &mut span[b.0 as usize];
                *e = Some(match *e {
                    None => (producer_at, producer_at),
                    Some((f, l)) => (f.min(producer_at), l.max(producer_at)),
                });
                home[b.0 as usize] = Some(None);
            }
        }
        // a buffer used in a loop and outside it is live over the whole loop
        let inner: Vec<Option<usize>> = home.iter().map(|h| h.flatten()).collect();
        for (b, e) in span.iter_mut().enumerate() {
            if let (Some((first, last)), None) = (e.as_mut(), inner[b]) {
                for &(ls, le) in &loops {
                    if *first <= le && *last >= ls {
                        *first = (*first).min(ls);
                        *last = (*last).max(le);
                    }
                }
            }
        }
        // a tile that other blocks of the cluster write (T.copy_cluster) may be reached
        // whenever they run: it lives, alone in its bytes, over the whole kernel
        let mut inner = inner;
        let units = region.len();
        for b in &m.buffers {
            if let (Scope::Cluster, Some(root)) = (b.scope, b.alias_of) {
                span[root.0 as usize] = Some((0, units.saturating_sub(1)));
                inner[root.0 as usize] = None;
            }
        }
        Lifetimes { span, inner, loops, region, async_dst, syncs, waits_all, barrier_at }
    }

    /// The unit before which a barrier orders `a`'s last use before `b`'s first (a barrier
    /// found between them: `None`), or, with `insert`, where one would have to go; `Err`
    /// when no barrier can do it.
    fn order(&self, a: BufferId, b: BufferId, insert: bool) -> Result<Option<usize>, ()> {
        let (Some((_, last)), Some((first, _))) = (self.span[a.0 as usize], self.span[b.0 as usize]) else {
            return Err(());
        };
        if last >= first {
            return Err(());
        }
        let waited = |sync: usize| {
            !self.async_dst.contains(&a) || self.waits_all.iter().any(|&w| w > last && w < sync)
        };
        if let Some(&sync) = self.syncs.iter().find(|&&s| s > last && s < first) {
            return if waited(sync) { Ok(None) } else { Err(()) };
        }
        // one more barrier, right before b's first use: at the level both live on (one
        // unfolded loop's body, or the units outside loops), whose units every thread that
        // runs them reaches; not after an async write of a
        let level = self.inner[a.0 as usize];
        if insert
            && level == self.inner[b.0 as usize]
            && self.loop_of(first) == level
            && !self.async_dst.contains(&a)
        {
            return Ok(Some(first));
        }
        Err(())
    }

    fn loop_of(&self, unit: usize) -> Option<usize> {
        self.loops.iter().position(|&(ls, le)| unit >= ls && unit <= le)
    }

    /// `a` is dead, with every thread past its last use, before `b`'s first use — and, in
    /// one loop, `b` before `a`'s first use in the next iteration. The barriers to add.
    fn before(&self, a: BufferId, b: BufferId, insert: bool) -> Option<Vec<usize>> {
        let mut adds = Vec::new();
        adds.extend(self.order(a, b, insert).ok()?);
        let (ia, ib) = (self.inner[a.0 as usize], self.inner[b.0 as usize]);
        if let (Some(la), Some(lb)) = (ia, ib) {
            if la == lb {
                // the wrap: b's last use in iteration t, a's first in t + 1
                let (ls, le) = self.loops[la];
                let (Some((first_a, _)), Some((_, last_b))) =
                    (self.span[a.0 as usize], self.span[b.0 as usize])
                else {
                    return None;
                };
                let wraps = self.syncs.iter().any(|&s| (s > last_b && s <= le) || (s >= ls && s < first_a));
                if !wraps {
                    if !insert || self.async_dst.contains(&b) {
                        return None;
                    }
                    adds.push(first_a);
                } else if self.async_dst.contains(&b) {
                    return None;
                }
            }
        }
        Some(adds)
    }

    fn disjoint(&self, a: BufferId, b: BufferId, insert: bool) -> Option<Vec<usize>> {
        self.before(a, b, insert).or_else(|| self.before(b, a, insert))
    }

    /// A barrier of the units' threads to insert at unit `at`: a copy of one its level (its
    /// loop's body, or the units outside loops, in the same role region) already has.
    fn template(&self, at: usize) -> Option<Stmt> {
        let level = (self.loop_of(at), self.region[at]);
        (0..self.barrier_at.len())
            .filter(|&u| (self.loop_of(u), self.region[u]) == level)
            .find_map(|u| self.barrier_at[u].clone())
    }
}

/// Insert each barrier before its unit (unit numbering as in [`Lifetimes::of`]).
fn insert_barriers(m: &mut Module, barriers: &BTreeMap<usize, Stmt>) {
    let split = m.role_split();
    let mut counter = 0usize;
    let mut body = std::mem::take(&mut m.kernel.body);
    fn rebuild(
        list: Vec<Stmt>,
        counter: &mut usize,
        barriers: &BTreeMap<usize, Stmt>,
        unfold: bool,
    ) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in list {
            match s {
                Stmt::For { var, start, extent, kind: kind @ ForKind::Serial, body, loc }
                    if unfold && !body.is_empty() =>
                {
                    let body = rebuild(body, counter, barriers, false);
                    out.push(Stmt::For { var, start, extent, kind, body, loc });
                }
                other => {
                    out.extend(barriers.get(counter).cloned());
                    *counter += 1;
                    out.push(other);
                }
            }
        }
        out
    }
    let mut out = Vec::new();
    for (i, s) in body.drain(..).enumerate() {
        match s {
            Stmt::If { cond, then, otherwise, loc } if Some(i) == split => {
                let then = rebuild(then, &mut counter, barriers, true);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.extend(rebuild(vec![other], &mut counter, barriers, true)),
        }
    }
    m.kernel.body = out;
}

pub fn plan_shared_memory(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let lifetimes = Lifetimes::of(&m);
    // first fit, in declaration order: the lowest aligned offset that overlaps no placed
    // buffer whose lifetime overlaps this one's — inside an unfolded loop, with a barrier
    // added where the pair needs one, when there is a barrier of that loop to copy
    let mut placed: Vec<(BufferId, u64, u64)> = Vec::new();
    let mut added: BTreeSet<usize> = BTreeSet::new();
    let mut total = 0u64;
    let shared: Vec<BufferId> = (0..m.buffers.len() as u32)
        .map(BufferId)
        .filter(|b| m.buffer(*b).scope == Scope::Shared && m.buffer(*b).alias_of.is_none())
        .collect();
    let views: Vec<(BufferId, BufferId)> = m
        .buffers
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.alias_of.map(|r| (BufferId(i as u32), r)))
        .collect();
    for &(view, root) in &views {
        let (v, r) = (m.buffer(view), m.buffer(root));
        // a cluster view (T.copy_cluster) is the root in each block of the cluster
        if v.scope == Scope::Shared && v.bytes() != r.bytes() {
            return Err(vec![Diagnostic::error(
                format!(
                    "'{}' (a T.view of '{}' as {}) covers {} bytes, but '{}' is now {} bytes: the pipeline multi-buffered one of them",
                    v.name, r.name, v.dtype, v.bytes(), r.name, r.bytes()
                ),
                v.loc,
            )
            .with_help("view a tile no T.Pipelined loop copies into, or copy into the view's tile yourself")]);
        }
    }
    for id in shared {
        let b = m.buffer(id);
        // 128 bytes keep the XOR pattern on the banks; wgmma's layouts, which the hardware
        // swizzles on physical addresses, start on the swizzle's period
        let align = b.shared_align().max(ALIGN);
        let size = b.bytes() as u64;
        let fits = |extra: &BTreeSet<usize>, adds: &[usize]| {
            adds.iter().all(|u| extra.contains(u) || lifetimes.template(*u).is_some())
        };
        let mut busy: Vec<(u64, u64, Option<Vec<usize>>)> = placed
            .iter()
            .map(|(other, start, end)| {
                let adds = lifetimes.disjoint(*other, id, true).filter(|adds| fits(&added, adds));
                (*start, *end, adds)
            })
            .filter(|(_, _, adds)| adds.as_ref().is_none_or(|a| !a.is_empty()))
            .collect();
        busy.sort_by_key(|(s, e, _)| (*s, *e));
        // first fit with the existing barriers only, then allowing the added ones; the
        // barriers kept are those of the pairs the chosen offset actually overlaps
        let place = |allow: bool| {
            let mut offset = 0u64;
            for (start, end, adds) in &busy {
                let overlaps = offset + size > *start && offset < *end;
                if overlaps && !(allow && adds.is_some()) {
                    offset = offset.max(end.div_ceil(align) * align);
                }
            }
            offset
        };
        // a barrier added to every loop iteration is not worth saving a few bytes: only a
        // tile of `elide_syncs::LARGE_TILE` bytes or more (an output staging tile) gets one
        let plain = place(false);
        let with = if b.bytes() >= crate::elide_syncs::LARGE_TILE { place(true) } else { plain };
        let offset = plain.min(with);
        if with < plain {
            for (start, end, adds) in &busy {
                if offset + size > *start && offset < *end {
                    added.extend(adds.iter().flatten().copied());
                }
            }
        }
        m.buffer_mut(id).shared_offset = Some(offset);
        placed.push((id, offset, offset + size));
        total = total.max(offset + size);
    }
    for &(view, root) in &views {
        let at = m.buffer(root).shared_offset;
        m.buffer_mut(view).shared_offset = at;
    }
    if !added.is_empty() {
        // `fits` checked that each has a barrier to copy
        let barriers: BTreeMap<usize, Stmt> =
            added.iter().filter_map(|&u| lifetimes.template(u).map(|t| (u, t))).collect();
        insert_barriers(&mut m, &barriers);
    }
    // which buffers share bytes (their lifetimes do not overlap), for the report
    let mut shares = Vec::new();
    for (i, &(a, s0, e0)) in placed.iter().enumerate() {
        for &(b, s1, e1) in &placed[..i] {
            if s0 < e1 && s1 < e0 {
                shares.push(format!("'{}' with '{}'", m.buffer(a).name, m.buffer(b).name));
            }
        }
    }
    // a base aligned above 16 bytes is made by rounding up at run time: room for it
    let base_align = m.shared_base_align();
    let total = total.div_ceil(ALIGN) * ALIGN + base_align.saturating_sub(16);
    if total > ctx.target.limits.shared_bytes {
        let list: Vec<String> = m
            .buffers
            .iter()
            .filter(|b| b.scope == Scope::Shared)
            .map(|b| format!("'{}' {:?} {}: {} bytes", b.name, b.extents(), b.dtype, b.bytes()))
            .collect();
        let first =
            m.buffers.iter().find(|b| b.scope == Scope::Shared).map(|b| b.loc).unwrap_or(m.kernel.loc);
        return Err(vec![Diagnostic::error(
            format!(
                "the kernel needs {total} bytes of shared memory, above the {} bytes a block may use on {}: {}",
                ctx.target.limits.shared_bytes,
                ctx.target.arch,
                list.join("; ")
            ),
            first,
        )
        .with_help("use smaller tiles (block_M, block_N, block_K) or fewer pipeline stages")]);
    }
    // each buffer's bytes and place, in declaration order
    let each: Vec<String> = placed
        .iter()
        .map(|&(b, start, end)| format!("'{}' {} at {start}", m.buffer(b).name, end - start))
        .collect();
    let listed = if each.is_empty() { String::new() } else { format!(" ({})", each.join(", ")) };
    if shares.is_empty() {
        ctx.report.push(format!("shared memory: {total} bytes{listed}"));
    } else {
        ctx.report.push(format!(
            "shared memory: {total} bytes{listed}; buffers whose lifetimes do not overlap share bytes: {}",
            shares.join(", ")
        ));
    }
    Ok(m)
}
