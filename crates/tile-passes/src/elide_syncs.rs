//! Pass `elide_syncs`: drop a block barrier (`__syncthreads`) that orders nothing — when no
//! memory access between the barrier kept before it and it conflicts with one between it and
//! the next barrier.
//!
//! Lowering places barriers per tile op: a reduction across warps writes its partials to
//! shared memory between a barrier before (the scratch's last readers done) and one after
//! (the reads of the next use done), and `insert_syncs` orders tile ops one pair at a time. In
//! a loop body holding several such ops, most of these barriers order accesses that another
//! barrier already orders: decode attention's KV loop had eight a tile, four of them redundant.
//!
//! Requires: thread-level IR, before `plan_shared_memory` (which then places tiles over each
//! other only where a barrier still separates their lifetimes). Ensures: a
//! `sync` is removed only when it lies in a statement list between two other `sync`s of that
//! list (through `if true` groups), and the accesses between the last kept barrier and it
//! (shared bytes, global buffers: reads, writes, atomics, `cp.async` writes counted at their
//! issue) conflict with none between it and the next — two accesses conflict when one writes
//! what the other touches. A list's first and last barrier stay (they order it against what
//! comes before and after, a loop's other iterations included), and so does every barrier next
//! to anything this pass does not model: waits (`cp.async`, mbarrier, wgmma), fences, bulk
//! copies, cluster and named barriers, atomics with a memory order, extern calls, prints,
//! asserts, and nested statements
//! holding a barrier. Does not: touch a warp-specialized kernel, move a barrier, or remove a
//! named barrier.

use crate::Ctx;
use std::collections::BTreeSet;
use tile_ir::inst::{AccessKind, Inst};
use tile_ir::{
    stmt_exprs, walk_stmts, BufferId, Diagnostic, Expr, Instruction, MemoryOrder, Module, Scope, Stmt,
};

/// Shared tiles of at least this many bytes keep the barriers `plan_shared_memory` may
/// place them over each other by (see [`Touched::conflicts`]).
pub const LARGE_TILE: i64 = 4096;

/// What a stretch of statements touches: buffers by their storage (a view is its tile).
#[derive(Clone, Default)]
struct Touched {
    reads: BTreeSet<BufferId>,
    writes: BTreeSet<BufferId>,
    /// Shared tiles of `LARGE_TILE` bytes or more, read or written.
    large: BTreeSet<BufferId>,
    /// Something not modeled: conflicts with everything.
    opaque: bool,
}

impl Touched {
    fn add(&mut self, o: &Touched) {
        self.reads.extend(&o.reads);
        self.writes.extend(&o.writes);
        self.large.extend(&o.large);
        self.opaque |= o.opaque;
    }
    /// Whether a barrier between `self` and `o` orders something: one writes what the
    /// other touches — or each touches large tiles the other does not: `plan_shared_memory`
    /// (after this pass) may then place one over the other by that barrier, which keeps a
    /// kernel's shared memory (its occupancy, its fit) as it was; small scratch (cross-warp
    /// partials) gets bytes of its own instead.
    fn conflicts(&self, o: &Touched) -> bool {
        self.opaque
            || o.opaque
            || !self.writes.is_disjoint(&o.writes)
            || !self.writes.is_disjoint(&o.reads)
            || !self.reads.is_disjoint(&o.writes)
            || (self.large.difference(&o.large).next().is_some()
                && o.large.difference(&self.large).next().is_some())
    }
}

struct Cx<'a> {
    m: &'a Module,
}

impl Cx<'_> {
    /// Record an access of `buf`; registers (fragments, locals) are per thread.
    fn access(&self, t: &mut Touched, buf: BufferId, write: bool) {
        let root = self.m.storage(buf);
        let b = self.m.buffer(root);
        match b.scope {
            Scope::Shared | Scope::Global => {
                if b.scope == Scope::Shared && b.bytes() >= LARGE_TILE {
                    t.large.insert(root);
                }
                if write {
                    t.writes.insert(root);
                } else {
                    t.reads.insert(root);
                }
            }
            Scope::Fragment | Scope::Local => {}
            _ => t.opaque = true,
        }
    }

    fn exprs(&self, t: &mut Touched, s: &Stmt) {
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    self.access(t, *buf, false);
                }
            })
        });
    }

    /// What one statement and its children touch (barriers inside them included: the
    /// caller treats a statement holding a barrier as a boundary, not as accesses).
    fn touched(&self, stmts: &[Stmt]) -> Touched {
        let mut t = Touched::default();
        walk_stmts(stmts, &mut |s| {
            self.exprs(&mut t, s);
            match s {
                Stmt::Store { buf, .. } => self.access(&mut t, *buf, true),
                // an atomic with an order releases or acquires the block's other accesses
                Stmt::Atomic { mode, .. } if mode.order != MemoryOrder::Relaxed => t.opaque = true,
                Stmt::Atomic { buf, .. } => self.access(&mut t, *buf, true),
                Stmt::Inst(i) => match i {
                    Inst::VecCopy(_)
                    | Inst::VecAtomic(_)
                    | Inst::Ldmatrix(_)
                    | Inst::Stmatrix(_)
                    | Inst::Mma(_)
                    | Inst::AsyncCopy(_)
                    | Inst::AsyncCommit(_)
                    | Inst::SyncWarp(_) => {
                        for a in i.accesses() {
                            self.access(&mut t, a.buf, a.kind == AccessKind::Write);
                        }
                    }
                    _ => t.opaque = true,
                },
                Stmt::For { .. }
                | Stmt::If { .. }
                | Stmt::Let { .. }
                | Stmt::Comment(_)
                | Stmt::SourceLine(_) => {}
                _ => t.opaque = true,
            }
        });
        t
    }
}

fn is_sync(s: &Stmt) -> bool {
    matches!(s, Stmt::Inst(Inst::Sync(_)))
}

/// An `if true` with no else: a group of statements, transparent to barriers.
fn is_group(s: &Stmt) -> bool {
    matches!(s, Stmt::If { cond, otherwise, .. } if otherwise.is_empty() && cond.as_int() == Some(1))
}

fn holds_barrier(stmts: &[Stmt]) -> bool {
    let mut found = false;
    walk_stmts(stmts, &mut |s| {
        if let Stmt::Inst(i) = s {
            found |= i.effects().barrier || i.effects().mbarrier || s.is_cluster_barrier();
        }
    });
    found
}

/// One statement list flattened through its groups: accesses and barriers in order, each
/// barrier numbered by its place in the kernel's pre-order walk.
enum Event {
    Touch(Touched),
    Sync(usize),
}

/// The events of `stmts`, numbering every `sync` in pre-order (the order [`remove`] walks)
/// from `next_id` on; those of nested lists are counted, not listed.
fn events(cx: &Cx, stmts: &[Stmt], next_id: &mut usize, out: &mut Vec<Event>) {
    for s in stmts {
        if is_sync(s) {
            out.push(Event::Sync(*next_id));
            *next_id += 1;
        } else if is_group(s) {
            let Stmt::If { then, .. } = s else { unreachable!() };
            events(cx, then, next_id, out);
        } else {
            walk_stmts(std::slice::from_ref(s), &mut |x| *next_id += is_sync(x) as usize);
            let t = if holds_barrier(std::slice::from_ref(s)) {
                Touched { opaque: true, ..Touched::default() }
            } else {
                cx.touched(std::slice::from_ref(s))
            };
            out.push(Event::Touch(t));
        }
    }
}

/// Decide which barriers of one list go, then recurse into nested lists.
fn decide(cx: &Cx, stmts: &[Stmt], next_id: &mut usize, gone: &mut BTreeSet<usize>) {
    let mut evs = Vec::new();
    let start = *next_id;
    events(cx, stmts, next_id, &mut evs);
    // since the last barrier kept (None before the list's first barrier)
    let mut since: Option<Touched> = None;
    for (k, e) in evs.iter().enumerate() {
        match e {
            Event::Touch(t) => {
                if let Some(s) = since.as_mut() {
                    s.add(t);
                }
            }
            Event::Sync(id) => {
                let Some(before) = since.as_ref() else {
                    since = Some(Touched::default());
                    continue;
                };
                // the accesses up to the next barrier of the list, if there is one
                let mut after = Touched::default();
                let mut next = false;
                for e in &evs[k + 1..] {
                    match e {
                        Event::Touch(t) => after.add(t),
                        Event::Sync(_) => {
                            next = true;
                            break;
                        }
                    }
                }
                if next && !before.conflicts(&after) {
                    gone.insert(*id);
                } else {
                    since = Some(Touched::default());
                }
            }
        }
    }
    // nested lists (loop bodies, branches): each on its own, numbered from where they lie
    let mut id = start;
    decide_nested(cx, stmts, &mut id, gone);
}

/// Walk `stmts` in the pre-order of [`events`], deciding every nested (non-group) list.
fn decide_nested(cx: &Cx, stmts: &[Stmt], id: &mut usize, gone: &mut BTreeSet<usize>) {
    for s in stmts {
        if is_sync(s) {
            *id += 1;
        } else if is_group(s) {
            let Stmt::If { then, .. } = s else { unreachable!() };
            decide_nested(cx, then, id, gone);
        } else {
            for body in s.bodies() {
                decide(cx, body, id, gone);
            }
        }
    }
}

/// Remove the barriers numbered in `gone` (pre-order, as [`events`] numbers them).
fn remove(stmts: Vec<Stmt>, id: &mut usize, gone: &BTreeSet<usize>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        if is_sync(&s) {
            let keep = !gone.contains(id);
            *id += 1;
            if keep {
                out.push(s);
            }
            continue;
        }
        out.push(match s {
            Stmt::Parallel { vars, extents, body, loc, layout } => {
                Stmt::Parallel { vars, extents, body: remove(body, id, gone), loc, layout }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                Stmt::For { var, start, extent, kind, body: remove(body, id, gone), loc }
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let then = remove(then, id, gone);
                let otherwise = remove(otherwise, id, gone);
                Stmt::If { cond, then, otherwise, loc }
            }
            Stmt::Async { body } => Stmt::Async { body: remove(body, id, gone) },
            other => other,
        });
    }
    out
}

pub fn elide_syncs(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    if m.role_split().is_some() {
        return Ok(m);
    }
    let mut gone = BTreeSet::new();
    let mut total = 0usize;
    walk_stmts(&m.kernel.body, &mut |s| total += is_sync(s) as usize);
    let mut id = 0;
    decide(&Cx { m: &m }, &m.kernel.body, &mut id, &mut gone);
    debug_assert_eq!(id, total);
    if gone.is_empty() {
        return Ok(m);
    }
    let body = std::mem::take(&mut m.kernel.body);
    let mut id = 0;
    m.kernel.body = remove(body, &mut id, &gone);
    ctx.report.push(format!(
        "{} of the kernel's {} block barriers order no access another barrier does not: removed",
        gone.len(),
        total
    ));
    Ok(m)
}
