//! Pass `plan_pipeline`: which pipelined loop becomes an mbarrier pipeline fed by TMA.
//!
//! Requires: tile-level IR with instructions chosen (`select_instructions`: the producers'
//! `cp.async`, the operand tiles' layouts). Ensures: on a target with bulk tensor copies
//! (sm_90+) and unless `Options::no_tma`, the first `T.Pipelined(n, num_stages ≥ 2)` loop
//! among the kernel's top-level statements whose producers (`inject_pipeline::producers`)
//! a bulk tensor copy can all carry out (`lower::tma::fit`: whole shared tiles in wgmma's
//! panel layout, same dtype, zero padding, 16-byte strides), whose bounds read no memory,
//! in a kernel of whole warpgroups, has those producers marked `CopyInst::Tma`:
//! `plan_warp_roles` gives it a producer warpgroup and `inject_pipeline` expands it (a full
//! and an empty mbarrier per stage). The report says, for a loop that stays on cp.async,
//! why. Does not: rewrite loops, or change the user's `num_stages`.

use crate::lower::tma::{self, reads_memory};
use crate::{inject_pipeline, Ctx};
use tile_ir::*;

pub fn plan_pipeline(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    if !ctx.target.caps.tma || !ctx.target.caps.mbarrier_tx {
        return Ok(m);
    }
    // pipelined loops inside other statements: the role split is of the whole kernel
    let mut nested = Vec::new();
    for s in &m.kernel.body {
        let inside: &[Stmt] = match s {
            Stmt::For { body, .. } => body,
            Stmt::If { .. } => std::slice::from_ref(s),
            _ => &[],
        };
        walk_stmts(inside, &mut |x| {
            if let Stmt::For { kind: ForKind::Pipelined { stages, .. }, loc, .. } = x {
                if *stages >= 2 {
                    nested.push((*loc, *stages));
                }
            }
        });
    }
    for (loc, stages) in nested {
        let at = m.sources.short(loc).unwrap_or_default();
        ctx.report.push(format!(
            "{at}: T.Pipelined(num_stages={stages}) stays on cp.async, not TMA: it is inside another statement (warp specialization splits the whole kernel around a top-level loop)"
        ));
    }
    let mut planned = false;
    for k in 0..m.kernel.body.len() {
        let Stmt::For { start, extent, kind: ForKind::Pipelined { stages, .. }, body, loc, .. } =
            &m.kernel.body[k]
        else {
            continue;
        };
        if *stages < 2 {
            continue;
        }
        let at = m.sources.short(*loc).unwrap_or_default();
        let why_not = if ctx.options.no_tma {
            Some("TMA is off (tma=False)".to_string())
        } else if m.own_warp_roles() {
            Some("the kernel places its own warp roles and barriers (T.ws, T.alloc_barrier)".to_string())
        } else if m.cluster_ops() {
            // the producer warpgroup would have to join every T.cluster_sync of the consumers
            Some(
                "the kernel works across its thread-block cluster itself (T.cluster_sync, T.copy_cluster)"
                    .to_string(),
            )
        } else if planned {
            Some("only the first pipelined loop of a kernel is warp-specialized".to_string())
        } else if !m.kernel.threads.is_multiple_of(128) {
            Some(format!("threads={} is not whole warpgroups (a multiple of 128)", m.kernel.threads))
        } else if m.kernel.threads + 128 > ctx.target.limits.max_threads {
            Some(format!("threads={} leaves no room for a producer warpgroup", m.kernel.threads))
        } else if !read_only_loads(&m, start) || !read_only_loads(&m, extent) {
            // the producer warpgroup evaluates the bounds itself: from tensors, not from what
            // the consumers computed before the loop (a T.alloc_var, a fragment)
            Some("its bounds read memory that the kernel writes (a variable, a tile): the producer warpgroup could not compute them".to_string())
        } else {
            let producers = inject_pipeline::producers(&m, body);
            // the producer fills its tiles while the consumers still run the statements
            // before the loop: no other statement may use them
            let used_outside = producers.iter().find_map(|&p| {
                let Stmt::Copy(op) = &body[p] else { return None };
                let outside = m
                    .kernel
                    .body
                    .iter()
                    .enumerate()
                    .any(|(j, s)| j != k && inject_pipeline::touches(s, op.dst.buf));
                outside.then(|| m.buffer(op.dst.buf).name.clone())
            });
            let mut filled = std::collections::BTreeSet::new();
            let shared_tile = producers.iter().find_map(|&p| {
                let Stmt::Copy(op) = &body[p] else { return None };
                (!filled.insert(op.dst.buf)).then(|| m.buffer(op.dst.buf).name.clone())
            });
            if producers.is_empty() {
                Some("no copy from global into a shared tile to run ahead".to_string())
            } else if let Some(tile) = shared_tile {
                Some(format!(
                    "several copies fill parts of '{tile}' (a TMA pipeline takes one copy per tile)"
                ))
            } else if let Some(tile) = used_outside {
                Some(format!("its tile '{tile}' is also used outside the loop"))
            } else {
                producers.iter().find_map(|&p| {
                    let Stmt::Copy(op) = &body[p] else { unreachable!("producers are copies") };
                    tma::fit(&m, op, &ctx.target).err().map(|why| {
                        let (s, d) = (&m.buffer(op.src.buf).name, &m.buffer(op.dst.buf).name);
                        format!("T.copy {s} -> {d}: {why}")
                    })
                })
            }
        };
        if let Some(why) = why_not {
            ctx.report
                .push(format!("{at}: T.Pipelined(num_stages={stages}) stays on cp.async, not TMA: {why}"));
            continue;
        }
        planned = true;
        tma_epilogues(&mut m, k, ctx);
        let Stmt::For { body, .. } = &m.kernel.body[k] else { unreachable!() };
        let producers = inject_pipeline::producers(&m, body);
        let Stmt::For { body, .. } = &mut m.kernel.body[k] else { unreachable!() };
        let mut copies = Vec::new();
        for p in producers {
            if let Stmt::Copy(op) = &mut body[p] {
                op.inst = Some(CopyInst::Tma);
                copies.push((op.loc, op.src.buf, op.dst.buf));
            }
        }
        // select_instructions' line for each such copy said cp.async: it is TMA now
        for (loc, src, dst) in copies {
            let at = m.sources.short(loc).unwrap_or_default();
            let (s, d) = (&m.buffer(src).name, &m.buffer(dst).name);
            let before = format!("{at}: T.copy {s} -> {d}: cp.async");
            for line in ctx.report.iter_mut().filter(|l| l.starts_with(&before)) {
                *line = format!(
                    "{at}: T.copy {s} -> {d}: TMA (a bulk tensor copy by the producer warpgroup), zero-filled past the edge"
                );
            }
        }
        prefetch_before(&mut m, k, ctx);
    }
    Ok(m)
}

/// The copies before the TMA loop at `k` that its producer warpgroup can issue too (an
/// attention kernel's Q tile): from a global tensor the kernel never writes into a shared
/// tile that only this copy writes and no statement after the loop touches, at a position
/// the producer computes itself (block indices, sizes, parameters, read-only loads), whole
/// tiles in wgmma's layout (`tma::fit`) — marked `CopyInst::Tma`. `inject_pipeline` gives
/// each a full and an empty barrier of its own: a persistent kernel's producer loads the
/// next tile's copy as soon as the consumers' loop is done with this one, beside their
/// epilogue. The tile can then share no bytes with another (the producer writes it while
/// the consumers run anything), so a copy is left to the consumers when the shared tiles
/// without sharing would not fit; and with thread-block clusters (not planned here).
fn prefetch_before(m: &mut Module, k: usize, ctx: &mut Ctx) {
    if crate::plan_warp_roles::cluster_wanted(m, ctx).is_some() {
        return;
    }
    let Stmt::For { body, kind: ForKind::Pipelined { stages, .. }, .. } = &m.kernel.body[k] else { return };
    let ring: std::collections::BTreeSet<BufferId> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Copy(op) if op.inst == Some(CopyInst::Tma) => Some(op.dst.buf),
            _ => None,
        })
        .collect();
    let stages = *stages as i64;
    // the shared bytes with no tile overlaid on another: every tile, the ring's times its
    // stages, the staging tiles of the epilogue's stores, the barriers, and 1 KB for the
    // lowering's scratch (cross-warp reductions)
    let mut bytes: i64 = m
        .buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.scope == Scope::Shared && b.alias_of.is_none())
        .map(|(i, b)| b.bytes() * if ring.contains(&BufferId(i as u32)) { stages } else { 1 })
        .sum();
    walk_stmts(&m.kernel.body, &mut |s| {
        if let Stmt::Copy(op) = s {
            if matches!(op.inst, Some(CopyInst::Staged { .. } | CopyInst::StagedTma)) {
                let (src, dst) = (m.buffer(op.src.buf), m.buffer(op.dst.buf));
                bytes += src.num_elements() * dst.dtype.bytes() as i64;
            }
        }
    });
    bytes += 3 * 8 * stages + 1024;
    let movable = |v: &Var| matches!(v.kind, VarKind::BlockIdx(_) | VarKind::Param | VarKind::Size { .. });
    for j in 0..k {
        let Stmt::Copy(op) = &m.kernel.body[j] else { continue };
        let (src, dst) = (op.src.buf, op.dst.buf);
        if op.atomic.is_some()
            || m.buffer(src).scope != Scope::Global
            || m.buffer(dst).scope != Scope::Shared
            || m.kernel.body.iter().any(|s| inject_pipeline::writes(s, src))
            || m.buffers.iter().any(|b| b.alias_of == Some(dst))
        {
            continue;
        }
        let only_here = m.kernel.body.iter().enumerate().all(|(i, s)| {
            i == j
                || (i < k && !inject_pipeline::touches(s, dst))
                || (i == k && !inject_pipeline::writes(s, dst))
                || (i > k && !inject_pipeline::touches(s, dst))
        });
        let mut placed = true;
        tile_ir::stmt_exprs(&m.kernel.body[j], &mut |e| {
            e.walk(&mut |x| match x {
                Expr::Var { id, .. } => placed &= movable(m.var(*id)),
                Expr::Load { buf, .. } => {
                    placed &= m.buffer(*buf).scope == Scope::Global
                        && !m.kernel.body.iter().any(|s| inject_pipeline::writes(s, *buf))
                }
                _ => {}
            })
        });
        if !only_here || !placed || tma::fit(m, op, &ctx.target).is_err() {
            continue;
        }
        let at = m.sources.short(op.loc).unwrap_or_default();
        let (s, d) = (m.buffer(src).name.clone(), m.buffer(dst).name.clone());
        let need = bytes + 16;
        if need as u64 > ctx.target.limits.shared_bytes {
            ctx.report.push(format!(
                "{at}: T.copy {s} -> {d} stays with the consumers, not the producer warpgroup: filled ahead it could share no bytes with another tile, and the tiles would need {need} bytes of shared memory (of {})",
                ctx.target.limits.shared_bytes
            ));
            continue;
        }
        bytes = need;
        if let Stmt::Copy(op) = &mut m.kernel.body[j] {
            op.inst = Some(CopyInst::Tma);
        }
        ctx.report.push(format!(
            "{at}: T.copy {s} -> {d}: TMA by the producer warpgroup, once per tile on a barrier of its own (a persistent kernel loads the next tile's during this one's epilogue)"
        ));
    }
}

/// The staged accumulator stores after the TMA loop at `k` leave their staging tile by bulk
/// tensor stores, where they can (`lower::tma::store_fit`).
fn tma_epilogues(m: &mut Module, k: usize, ctx: &mut Ctx) {
    for j in k + 1..m.kernel.body.len() {
        let Stmt::Copy(op) = &m.kernel.body[j] else { continue };
        if !matches!(op.inst, Some(CopyInst::Staged { .. })) {
            continue;
        }
        let at = m.sources.short(op.loc).unwrap_or_default();
        let (s, d) = (m.buffer(op.src.buf).name.clone(), m.buffer(op.dst.buf).name.clone());
        let fit =
            if ctx.options.no_tma_store { Err("tma_store=False".to_string()) } else { tma::store_fit(m, op) };
        match fit {
            Ok(()) => {
                ctx.report.push(format!(
                    "{at}: T.copy {s} -> {d}: through a swizzled panel tile and TMA stores (one thread; the next tile's copies go on)"
                ));
                if let Stmt::Copy(op) = &mut m.kernel.body[j] {
                    op.inst = Some(CopyInst::StagedTma);
                }
            }
            Err(why) => ctx.report.push(format!("{at}: T.copy {s} -> {d} is not stored by TMA: {why}")),
        }
    }
}

/// Whether every load in `e` reads a global tensor that no statement of the kernel writes
/// (a sequence length, a page count): a value every warp can read for itself.
fn read_only_loads(m: &Module, e: &Expr) -> bool {
    if !reads_memory(e) {
        return true;
    }
    let mut bufs = std::collections::BTreeSet::new();
    e.walk(&mut |x| {
        if let Expr::Load { buf, .. } = x {
            bufs.insert(*buf);
        }
    });
    bufs.iter().all(|&b| {
        m.buffer(b).scope == Scope::Global && !m.kernel.body.iter().any(|s| inject_pipeline::writes(s, b))
    })
}
