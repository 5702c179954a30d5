//! Pass `insert_syncs`: a barrier between two tile ops whenever one writes a shared buffer
//! the other reads or writes (threads are mapped differently in each op), including across
//! the back edge of a loop.
//!
//! Requires: tile-level IR with loop layouts. Ensures: no shared-memory hazard between tile
//! ops without a `sync` between them. Does not: order global memory (the user's job, as in
//! CUDA), or order accesses within one op (a parallel loop's iterations are independent).
//!
//! It runs on tile ops, before lowering, because each tile op is where a thread mapping
//! changes; asynchronous copies (cp.async, TMA) will need a thread-level form of it.

use crate::Ctx;
use std::collections::BTreeSet;
use tile_ir::inst::{self, AccessKind};
use tile_ir::{
    stmt_exprs, walk_stmts, BufferId, Diagnostic, Expr, Instruction, Module, Printed, Scope, Stmt,
};

#[derive(Clone, Default, PartialEq)]
struct Pending {
    reads: BTreeSet<BufferId>,
    writes: BTreeSet<BufferId>,
}

pub fn insert_syncs(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let split = m.role_split();
    let body = std::mem::take(&mut m.kernel.body);
    let mut pending = Pending::default();
    let mut out = Vec::new();
    for (k, s) in body.into_iter().enumerate() {
        match s {
            // a warp-specialized kernel: the consumers' statements are ordered among
            // themselves (their barriers become named barriers over them); the producer's
            // TMA copies are ordered by the pipeline's mbarriers
            Stmt::If { cond, then, otherwise, loc } if Some(k) == split => {
                let then = place(&m, then, &mut pending);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.extend(place(&m, vec![other], &mut pending)),
        }
    }
    m.kernel.body = out;
    Ok(m)
}

/// Shared buffers a statement (with its children) reads and writes.
fn accesses(m: &Module, s: &Stmt) -> (BTreeSet<BufferId>, BTreeSet<BufferId>) {
    let shared = |b: BufferId| m.buffer(b).scope == Scope::Shared;
    let mut reads = BTreeSet::new();
    let mut writes = BTreeSet::new();
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        match st {
            Stmt::Store { buf, .. } | Stmt::AtomicAdd { buf, .. } if shared(*buf) => {
                writes.insert(*buf);
            }
            Stmt::Copy(op) => {
                if shared(op.src.buf) {
                    reads.insert(op.src.buf);
                }
                if shared(op.dst.buf) {
                    writes.insert(op.dst.buf);
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
                for a in i.accesses().into_iter().filter(|a| shared(a.buf)) {
                    match a.kind {
                        AccessKind::Read => reads.insert(a.buf),
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
    (reads, writes)
}

fn hazard(p: &Pending, reads: &BTreeSet<BufferId>, writes: &BTreeSet<BufferId>) -> bool {
    writes.iter().any(|w| p.reads.contains(w) || p.writes.contains(w))
        || reads.iter().any(|r| p.writes.contains(r))
}

fn place(m: &Module, body: Vec<Stmt>, pending: &mut Pending) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::For { var, start, extent, kind, body, loc } => {
                // run the body once to learn what it leaves pending at its end, then place
                // barriers for real with that state joined in (the loop's back edge)
                let mut trial = pending.clone();
                let _ = place(m, body.clone(), &mut trial);
                let mut entry = pending.clone();
                entry.reads.extend(trial.reads.iter().copied());
                entry.writes.extend(trial.writes.iter().copied());
                let new_body = place(m, body, &mut entry);
                *pending = entry;
                out.push(Stmt::For { var, start, extent, kind, body: new_body, loc });
            }
            Stmt::If { cond, then, otherwise, loc }
                if then.iter().all(|s| matches!(s, Stmt::Async { .. })) && otherwise.is_empty() =>
            {
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => {
                // a barrier must not be conditional; sync before a branch that touches shared memory
                let (r, w) = accesses(
                    m,
                    &Stmt::If { cond: cond.clone(), then: then.clone(), otherwise: otherwise.clone(), loc },
                );
                if hazard(pending, &r, &w) {
                    out.push(Stmt::inst(inst::Sync));
                    *pending = Pending::default();
                }
                pending.reads.extend(r);
                pending.writes.extend(w);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            Stmt::Inst(i) if i.effects().barrier => {
                *pending = Pending::default();
                out.push(Stmt::Inst(i));
            }
            // ordered by the pipeline's own waits and barriers
            Stmt::Inst(i) if i.effects().only_orders() => out.push(Stmt::Inst(i)),
            s @ Stmt::Async { .. } => out.push(s),
            other => {
                let (r, w) = accesses(m, &other);
                if hazard(pending, &r, &w) {
                    // wgmma reads shared memory in the async proxy: fence the writes first
                    let mut reads_async = false;
                    walk_stmts(std::slice::from_ref(&other), &mut |s| {
                        reads_async |= crate::inject_pipeline::is_wgmma(s);
                    });
                    if reads_async && !pending.writes.is_empty() {
                        out.push(Stmt::inst(inst::FenceProxyAsync));
                    }
                    out.push(Stmt::inst(inst::Sync));
                    *pending = Pending::default();
                }
                pending.reads.extend(r);
                pending.writes.extend(w);
                out.push(other);
            }
        }
    }
    out
}
