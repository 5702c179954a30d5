//! Pass `inject_pipeline`: software pipelining of `T.Pipelined(n, num_stages=s)` loops.
//!
//! Requires: tile-level IR with layouts. Ensures: in a pipelined loop with `s ≥ 2`, the
//! copies from global into shared tiles (the *producers*) run `s − 1` iterations ahead of
//! the rest of the body (the *consumers*): each such tile gets a leading stage dimension of
//! `s`; iteration `i` reads stage `i % s`; the copies of iteration `i + s − 1` are issued
//! asynchronously (`Async`, lowered to `cp.async`) into the stage iteration `i − 1` used:
//!
//! ```text
//! for p in 0..s-1:  if p < n { async copies(p) }   commit
//! for i in 0..n:    wait(s-2)  sync  if i+s-1 < n { async copies(i+s-1) }  commit  consumers(i)
//! wait(0)
//! ```
//! The barrier after the wait both publishes iteration `i`'s data and proves every thread
//! finished iteration `i − 1`, whose stage is refilled next.
//!
//! With a `wgmma` gemm among the consumers, a `fence.proxy.async` precedes the barrier (the
//! copies' writes become visible to the tensor core's reads). When the loop has three stages
//! or more and the gemm's accumulator is touched by no other consumer, the gemm returns with
//! its group in flight (`wait_group 1`, `GemmInst::in_flight`) so that the next k-tile's
//! wgmmas are issued before it completes; the copies then run `s − 2` iterations ahead, into
//! the stage of iteration `i − 2`, whose wgmmas the wait of iteration `i − 1` retired in
//! every warpgroup before the barrier; after the loop a `wait_group 0` drains the last.
//!
//! A loop whose producers `plan_pipeline` gave to TMA takes the warp-specialized form
//! instead (`mbarrier.rs`): the whole kernel splits into the user's threads consuming and a
//! producer warpgroup issuing bulk tensor copies, on a full and an empty mbarrier per stage.
//!
//! Loops of fewer stages, or with
//! no producers (or tiles also written by other statements), run as serial loops, and the
//! lowering report says why. Does not: choose instructions (`select_instructions` gave each
//! producer `cp.async` or, where it cannot, an ordinary copy, which the same barriers order).

mod mbarrier;
mod schedule;

use crate::Ctx;
use std::collections::{BTreeMap, BTreeSet};
use tile_ir::*;

pub fn inject_pipeline(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let body = std::mem::take(&mut m.kernel.body);
    // a multi-buffered tile used outside its loops: each such use gets its stage first
    let mut cur: BTreeMap<BufferId, Outside> = BTreeMap::new();
    walk_stmts(&body, &mut |s| {
        if let Stmt::For { kind: ForKind::Pipelined { stages, .. }, body, .. } = s {
            for t in ring_of(&m, body, *stages) {
                cur.insert(t, Outside::At(Expr::int(0)));
            }
        }
    });
    let mut body =
        if cur.is_empty() { body } else { stage_outside(&m, body, &mut cur).map_err(|d| vec![d])?.0 };
    // the cp.async rings: a stage dimension per tile, as deep as its deepest loop's
    let mut rings = BTreeMap::new();
    // the warp-specialized loop (plan_pipeline marked its producers TMA) splits the kernel
    let tma_loop = m.kernel.roles.and_then(|_| {
        body.iter().position(|s| {
            matches!(s, Stmt::For { kind: ForKind::Pipelined { .. }, body, .. }
                if body.iter().any(|b| matches!(b, Stmt::Copy(CopyOp { inst: Some(CopyInst::Tma), .. }))))
        })
    });
    m.kernel.body = match tma_loop {
        Some(k) => {
            let post = body.split_off(k + 1);
            let the_loop = body.pop().expect("the loop is at k");
            let pre = block(&mut m, body, ctx, &mut rings).map_err(|d| vec![d])?;
            let post = block(&mut m, post, ctx, &mut rings).map_err(|d| vec![d])?;
            mbarrier::warp_specialize(&mut m, pre, the_loop, post, ctx)?
        }
        None => block(&mut m, body, ctx, &mut rings).map_err(|d| vec![d])?,
    };
    for (t, stages) in rings {
        m.buffer_mut(t).shape.insert(0, Dim::Fixed(stages as i64));
    }
    Ok(m)
}

/// Where the accesses of a multi-buffered tile outside its pipelined loops point.
#[derive(Clone)]
enum Outside {
    /// This stage: 0 before its first loop (and after a loop of no iterations), the stage of
    /// the last iteration after a loop of the same block.
    At(Expr),
    /// Multi-buffered by the loop at this location inside another statement: not known here.
    Lost(Loc),
}

/// The tiles a pipelined loop of `stages` multi-buffers: its producers' (two stages or more).
fn ring_of(m: &Module, body: &[Stmt], stages: u32) -> BTreeSet<BufferId> {
    if stages < 2 {
        return BTreeSet::new();
    }
    producers(m, body)
        .into_iter()
        .filter_map(|k| match &body[k] {
            Stmt::Copy(op) => Some(op.dst.buf),
            _ => None,
        })
        .collect()
}

/// Gives every access of a multi-buffered tile outside its own pipelined loops a stage
/// (`cur`: each tile's, updated as the statements go by): what the threads wrote into it
/// before the loop is stage 0, which the loop's first iteration fills; after the loop it
/// holds the last iteration's tile (stage `max(n - 1, 0) % s`), until another loop of the
/// block refills it. A use after a loop nested in another statement (no stage known there),
/// or by a statement that cannot name a stage, is an error at its line. Returns the
/// statements and the tiles that loops inside them multi-buffer (with those loops).
fn stage_outside(
    m: &Module,
    body: Vec<Stmt>,
    cur: &mut BTreeMap<BufferId, Outside>,
) -> Result<(Vec<Stmt>, BTreeMap<BufferId, Loc>), Diagnostic> {
    let mut out = Vec::with_capacity(body.len());
    let mut ringed = BTreeMap::new();
    // tiles multi-buffered inside a child block lose their stage here
    let lose = |cur: &mut BTreeMap<BufferId, Outside>,
                inner: &BTreeMap<BufferId, Loc>,
                ringed: &mut BTreeMap<BufferId, Loc>| {
        for (&t, &at) in inner {
            cur.insert(t, Outside::Lost(at));
            ringed.insert(t, at);
        }
    };
    for s in body {
        match s {
            Stmt::For { var, start, extent, kind: kind @ ForKind::Pipelined { .. }, body, loc } => {
                let ForKind::Pipelined { stages, .. } = kind else { unreachable!("matched") };
                let own = ring_of(m, &body, stages);
                // inside, the loop's own tiles are the pipeline's to stage
                let mut inner: BTreeMap<BufferId, Outside> =
                    cur.iter().filter(|(t, _)| !own.contains(t)).map(|(t, o)| (*t, o.clone())).collect();
                let (body, nested) = stage_outside(m, body, &mut inner)?;
                lose(cur, &nested, &mut ringed);
                let n = Expr::cast(extent.clone(), DType::I32);
                let last = simplify::simplify(Expr::binary(
                    BinOp::FloorMod,
                    Expr::binary(BinOp::Max, Expr::binary(BinOp::Sub, n, Expr::int(1)), Expr::int(0)),
                    Expr::int(stages as i64),
                ));
                for &t in &own {
                    cur.insert(t, Outside::At(last.clone()));
                    ringed.insert(t, loc);
                }
                out.push(Stmt::For { var, start, extent, kind, body, loc });
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let head = outside_leaf(m, Stmt::For { var, start, extent, kind, body: vec![], loc }, cur)?;
                let Stmt::For { var, start, extent, kind, .. } = head else { unreachable!("a loop") };
                let mut inner = cur.clone();
                let (body, nested) = stage_outside(m, body, &mut inner)?;
                lose(cur, &nested, &mut ringed);
                out.push(Stmt::For { var, start, extent, kind, body, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let head = outside_leaf(m, Stmt::If { cond, then: vec![], otherwise: vec![], loc }, cur)?;
                let Stmt::If { cond, .. } = head else { unreachable!("an if") };
                let (mut a, mut b) = (cur.clone(), cur.clone());
                let (then, nested_then) = stage_outside(m, then, &mut a)?;
                let (otherwise, nested_else) = stage_outside(m, otherwise, &mut b)?;
                lose(cur, &nested_then, &mut ringed);
                lose(cur, &nested_else, &mut ringed);
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.push(outside_leaf(m, other, cur)?),
        }
    }
    Ok((out, ringed))
}

/// One statement (with no pipelined loop inside) outside the loops of the tiles it uses.
fn outside_leaf(m: &Module, mut s: Stmt, cur: &BTreeMap<BufferId, Outside>) -> Result<Stmt, Diagnostic> {
    for (&t, where_) in cur {
        if !touches(&s, t) {
            continue;
        }
        let name = &m.buffer(t).name;
        let mut unstaged = None;
        walk_stmts(std::slice::from_ref(&s), &mut |x| {
            let what = match x {
                Stmt::Reduce(op) if op.src == t || op.dst == t => Some("a reduction"),
                Stmt::Gemm(op) if op.c == t => Some("a gemm's accumulator"),
                Stmt::Inst(i) if i.accesses().iter().any(|a| a.buf == t) => Some("an instruction"),
                _ => None,
            };
            if let (None, Some(w)) = (&unstaged, what) {
                unstaged = Some((w, x.loc()));
            }
        });
        match where_ {
            Outside::Lost(at) => {
                let at = m.sources.short(*at).unwrap_or_default();
                return Err(Diagnostic::error(
                    format!(
                        "'{name}' is multi-buffered by the T.Pipelined loop at {at} (a buffer per stage in flight), which runs inside another statement: outside that loop it can be used only in the loop's own block"
                    ),
                    s.loc(),
                )
                .with_help(format!("move this use into the block of the loop at {at}, or copy '{name}' into another shared tile there")));
            }
            Outside::At(stage) => {
                if let Some((what, loc)) = unstaged {
                    return Err(Diagnostic::error(
                        format!(
                            "'{name}' is multi-buffered by a T.Pipelined loop (a buffer per stage in flight): {what} on it outside the loop is not supported"
                        ),
                        if loc == Loc::UNKNOWN { s.loc() } else { loc },
                    )
                    .with_help(format!("copy '{name}' into another shared tile and use that")));
                }
                s = select_stage(s, &BTreeSet::from([t]), stage);
            }
        }
    }
    Ok(s)
}

fn block(
    m: &mut Module,
    body: Vec<Stmt>,
    ctx: &mut Ctx,
    rings: &mut BTreeMap<BufferId, u32>,
) -> Result<Vec<Stmt>, Diagnostic> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::For { var, start, extent, kind: ForKind::Pipelined { stages, schedule }, body, loc } => {
                let sched = schedule.map(|k| m.schedules[k as usize].clone());
                let (mut stmts, prologue) =
                    pipeline(m, var, start, extent, stages, sched.as_ref(), body, loc, ctx, rings)?;
                // the prologue's copies start before the statements above the loop that they
                // do not depend on (a tile filled by the threads, an accumulator cleared): the
                // first stages' memory latency overlaps that work instead of following it
                let rest = stmts.split_off(prologue);
                let mut at = out.len();
                while at > 0 && prologue > 0 && can_run_after(&out[at - 1], &stmts) {
                    at -= 1;
                }
                if at < out.len() {
                    let before =
                        out.iter().skip(at).filter(|s| !matches!(s, Stmt::Comment(_) | Stmt::SourceLine(_)));
                    ctx.report.push(format!(
                        "{}: T.Pipelined: the first stages' copies are issued before the {} statement(s) above the loop, which they do not depend on",
                        m.sources.short(loc).unwrap_or_default(),
                        before.count()
                    ));
                }
                out.splice(at..at, stmts);
                out.extend(rest);
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let body = block(m, body, ctx, rings)?;
                out.push(Stmt::For { var, start, extent, kind, body, loc });
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let then = block(m, then, ctx, rings)?;
                let otherwise = block(m, otherwise, ctx, rings)?;
                out.push(Stmt::If { cond, then, otherwise, loc });
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Shared buffers written by a statement (children included).
fn shared_writes(m: &Module, s: &Stmt, out: &mut BTreeSet<BufferId>) {
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        let target = match st {
            Stmt::Store { buf, .. } | Stmt::Atomic { buf, .. } => Some(*buf),
            Stmt::Copy(CopyOp { dst, .. }) | Stmt::Fill { dst, .. } => Some(dst.buf),
            _ => None,
        };
        if let Some(b) = target {
            if m.buffer(b).scope == Scope::Shared {
                out.insert(b);
            }
        }
    });
}

/// The producers of a pipelined loop's body (their positions): copies from global into a
/// shared tile that nothing else in the body writes — the first copy into each tile, or
/// every copy into it when they fill fixed, disjoint parts of it (a tile of KV pages, a
/// copy per page). `select_instructions` gives them `cp.async` where it can, this pass runs
/// them ahead.
pub fn producers(m: &Module, body: &[Stmt]) -> BTreeSet<usize> {
    let is_candidate = |s: &Stmt| {
        matches!(s, Stmt::Copy(CopyOp { src, dst, atomic: None, .. })
            if m.buffer(src.buf).scope == Scope::Global && m.buffer(dst.buf).scope == Scope::Shared)
    };
    let mut others_write = BTreeSet::new();
    for s in body.iter().filter(|s| !is_candidate(s)) {
        shared_writes(m, s, &mut others_write);
    }
    // the candidate copies into each tile, in order
    let mut by_tile: std::collections::BTreeMap<BufferId, Vec<usize>> = Default::default();
    for (k, s) in body.iter().enumerate() {
        if let Stmt::Copy(op) = s {
            if is_candidate(s) && !others_write.contains(&op.dst.buf) {
                by_tile.entry(op.dst.buf).or_default().push(k);
            }
        }
    }
    let mut out = BTreeSet::new();
    for (tile, copies) in by_tile {
        let boxes: Option<Vec<Vec<(i64, i64)>>> = copies
            .iter()
            .map(|&k| match &body[k] {
                Stmt::Copy(op) => fixed_box(m, tile, &op.dst.dims),
                _ => None,
            })
            .collect();
        let disjoint = boxes.is_some_and(|b| {
            (0..b.len()).all(|i| {
                (i + 1..b.len()).all(|j| b[i].iter().zip(&b[j]).any(|(x, y)| x.1 <= y.0 || y.1 <= x.0))
            })
        });
        if disjoint {
            out.extend(copies);
        } else {
            out.insert(copies[0]);
        }
    }
    out
}

/// The part of shared tile `b` a copy writes, `[lo, hi)` per dimension, when every bound is
/// a number (`tile[p * 16:(p + 1) * 16, :]` with `p` fixed at trace time).
fn fixed_box(m: &Module, b: BufferId, dims: &[RegionDim]) -> Option<Vec<(i64, i64)>> {
    let extents = m.buffer(b).extents();
    let mut out = Vec::new();
    for (d, &n) in extents.iter().enumerate() {
        out.push(match dims.get(d) {
            None => (0, n),
            Some(RegionDim::Index(e)) => {
                let i = e.as_int()?;
                (i, i + 1)
            }
            Some(RegionDim::Slice { start, stop }) => (start.as_int()?, stop.as_int()?),
            Some(RegionDim::Origin(_)) => return None,
        });
    }
    Some(out)
}

#[allow(clippy::too_many_arguments)]
fn pipeline(
    m: &mut Module,
    var: VarId,
    start: Expr,
    extent: Expr,
    stages: u32,
    sched: Option<&Schedule>,
    body: Vec<Stmt>,
    loc: Loc,
    ctx: &mut Ctx,
    rings: &mut BTreeMap<BufferId, u32>,
) -> Result<(Vec<Stmt>, usize), Diagnostic> {
    let at = m.sources.short(loc).unwrap_or_default();
    let serial = |body: Vec<Stmt>| {
        vec![Stmt::For {
            var,
            start: start.clone(),
            extent: extent.clone(),
            kind: ForKind::Serial,
            body,
            loc,
        }]
    };
    let no_producers = sched.is_some() && stages >= 2 && producers(m, &body).is_empty();
    if stages < 2 || no_producers {
        ctx.report.push(format!(
            "{at}: T.Pipelined(num_stages={stages}) runs as a serial loop{}",
            if no_producers { ": no copy from global into a shared tile to run ahead" } else { "" }
        ));
        if let Some(sc) = sched {
            // no ring: every statement is scheduled, the loop's own buffers checked
            let all: Vec<(usize, &Stmt)> = body.iter().enumerate().collect();
            let plan = schedule::plan(m, sc, body.len(), &all, &BTreeSet::new(), loc)?;
            ctx.report.push(schedule::describe(m, &plan, &all, &at));
            let n = simplify::simplify(Expr::cast(extent.clone(), DType::I32));
            let start_i32 = Expr::cast(start.clone(), DType::I32);
            let vt = m.var(var).dtype;
            let mut group = |_: &mut Module, g: usize, l: Expr, _: bool| {
                let at_iter = Expr::cast(Expr::binary(BinOp::Add, start_i32.clone(), l), vt);
                vec![schedule::Item::Stmt {
                    s: schedule::at_iteration(body[g].clone(), var, &at_iter),
                    stage: 0,
                }]
            };
            return Ok((schedule::expand(m, &plan, &n, loc, &BTreeSet::new(), &mut group).stmts(loc), 0));
        }
        return Ok((serial(body), 0));
    }
    let producer_at = producers(m, &body);
    let body = match sched {
        Some(sc) => {
            let consumers: Vec<(usize, &Stmt)> =
                body.iter().enumerate().filter(|(k, _)| !producer_at.contains(k)).collect();
            let ring: BTreeSet<BufferId> = producer_at
                .iter()
                .filter_map(|&k| match &body[k] {
                    Stmt::Copy(op) => Some(op.dst.buf),
                    _ => None,
                })
                .collect();
            let plan = schedule::plan(m, sc, body.len(), &consumers, &ring, loc)?;
            if plan.span > 0 {
                // (a step's order across stages is no order within one iteration)
                ctx.report.push(format!(
                    "{at}: T.Pipelined(stage=...): the consumers' stages are honoured only in the warp-specialized (TMA) pipeline; on cp.async the body runs in source order with the copies {} iteration(s) ahead",
                    stages - 1
                ));
            } else {
                ctx.report.push(schedule::describe(m, &plan, &consumers, &at));
            }
            let emit: Vec<usize> =
                if plan.span > 0 { (0..consumers.len()).collect() } else { plan.emit.clone() };
            // the consumers in the order of order=, the producers where they were
            let order: Vec<usize> = emit.iter().map(|&g| consumers[g].0).collect();
            let mut slots: Vec<Option<Stmt>> = body.into_iter().map(Some).collect();
            let mut out = Vec::new();
            let mut next = order.into_iter();
            for k in 0..slots.len() {
                if producer_at.contains(&k) {
                    out.push(slots[k].take().expect("each statement once"));
                } else if let Some(g) = next.next() {
                    out.push(slots[g].take().expect("each statement once"));
                }
            }
            out
        }
        None => body,
    };
    let mut tiles = BTreeSet::new();
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for (k, s) in body.into_iter().enumerate() {
        match &s {
            Stmt::Copy(op) if producer_at.contains(&k) => {
                tiles.insert(op.dst.buf);
                producers.push(s)
            }
            _ => consumers.push(s),
        }
    }
    if producers.is_empty() {
        ctx.report.push(format!(
            "{at}: T.Pipelined(num_stages={stages}) runs as a serial loop: no copy from global into a shared tile to run ahead"
        ));
        consumers.extend(producers);
        return Ok((serial(consumers), 0));
    }
    // a wgmma consumer: fence its operands' writes; keep its group in flight when it can
    let wgmma_at: Vec<usize> =
        consumers.iter().enumerate().filter(|(_, c)| is_wgmma(c)).map(|(k, _)| k).collect();
    let drain = keep_in_flight(&mut consumers, stages);
    // iterations the copies run ahead
    let ahead = if drain.is_some() { stages - 2 } else { stages - 1 };
    // multi-buffer the tiles (their stage dimensions go in at the end of the pass: a tile
    // may be refilled by several loops, each using `stages` of its buffers)
    for &t in &tiles {
        let deepest = rings.entry(t).or_insert(stages);
        *deepest = (*deepest).max(stages);
    }
    let names: Vec<String> = tiles.iter().map(|t| m.buffer(*t).name.clone()).collect();
    ctx.report.push(format!(
        "{at}: T.Pipelined(num_stages={stages}): copies into {} issued {ahead} iteration(s) ahead, {stages} buffers each{}",
        names.join(", "),
        if drain.is_some() { "; the wgmma group of each k-tile stays in flight into the next" } else { "" }
    ));
    let s = stages as i64;
    let iv = Expr::var(var, DType::I32);
    let start_i32 = Expr::cast(start.clone(), DType::I32);
    let i = simplify::simplify(Expr::binary(BinOp::Sub, iv.clone(), start_i32.clone()));
    let n = Expr::cast(extent.clone(), DType::I32);
    let stage_of = |j: Expr| simplify::simplify(Expr::binary(BinOp::FloorMod, j, Expr::int(s)));
    // the producers of iteration j (an i32 expression), writing stage j % s
    let issue = |j: Expr| -> Stmt {
        let at_iter = simplify::simplify(Expr::binary(BinOp::Add, start_i32.clone(), j.clone()));
        let copies = producers
            .iter()
            .map(|p| {
                let p = map_stmt_exprs(p.clone(), &mut |e| match e {
                    Expr::Var { id, .. } if id == var => Expr::cast(at_iter.clone(), m.var(var).dtype),
                    other => other,
                });
                match p {
                    Stmt::Copy(mut op) => {
                        op.dst.dims.insert(0, RegionDim::Index(stage_of(j.clone())));
                        Stmt::Copy(op)
                    }
                    other => other,
                }
            })
            .collect();
        let guard = Expr::binary(BinOp::Lt, j, n.clone());
        Stmt::If {
            cond: simplify::simplify(guard),
            then: vec![Stmt::Async { body: copies }],
            otherwise: vec![],
            loc,
        }
    };
    // consumers read stage i % s
    let stage = stage_of(i.clone());
    let consumers: Vec<Stmt> = consumers.into_iter().map(|c| select_stage(c, &tiles, &stage)).collect();

    let mut out = Vec::new();
    let d = ahead as i64;
    // the prologue: `out[..2 * d]`
    for p in 0..d {
        out.push(issue(Expr::int(p)));
        out.push(Stmt::inst(inst::AsyncCommit));
    }
    let mut loop_body = vec![Stmt::inst(inst::AsyncWait { pending: ahead - 1 })];
    if !wgmma_at.is_empty() {
        loop_body.push(Stmt::inst(inst::FenceProxyAsync));
    }
    loop_body.push(Stmt::inst(inst::Sync));
    loop_body.push(issue(simplify::simplify(Expr::binary(BinOp::Add, i, Expr::int(d)))));
    loop_body.push(Stmt::inst(inst::AsyncCommit));
    loop_body.extend(consumers);
    out.push(Stmt::For { var, start, extent, kind: ForKind::Serial, body: loop_body, loc });
    out.push(Stmt::inst(inst::AsyncWait { pending: 0 }));
    if let Some(acc) = drain {
        out.push(Stmt::inst(inst::WgmmaWait { pending: 0, acc: vec![acc], boundary: false }));
    }
    Ok((out, 2 * d as usize))
}

/// Whether a pipeline's prologue (`prologue`: its first stages' copies and commits) may run
/// before statement `s`, which precedes the loop, instead of after it: `s` is work of the
/// threads alone (stores, fills, `T.Parallel` loops, copies by the threads, serial loops and
/// branches of those: no barrier, instruction, asynchronous copy or collective that could
/// wait on the prologue's groups), writes nothing the prologue reads or writes (its global
/// sources, the loop bound's operands, its shared tiles), reads none of its tiles, and binds
/// no variable the prologue uses.
fn can_run_after(s: &Stmt, prologue: &[Stmt]) -> bool {
    let mut simple = true;
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        simple &= match st {
            Stmt::Store { .. }
            | Stmt::Fill { .. }
            | Stmt::Parallel { .. }
            | Stmt::Comment(_)
            | Stmt::SourceLine(_) => true,
            Stmt::Copy(op) => op.atomic.is_none() && matches!(op.inst, None | Some(CopyInst::Threads)),
            Stmt::For { kind, .. } => matches!(kind, ForKind::Serial | ForKind::Unroll),
            Stmt::If { .. } => true,
            _ => false,
        };
    });
    if !simple {
        return false;
    }
    // what the prologue reads (buffers, variables) and writes (its tiles)
    let mut reads = BTreeSet::new();
    let mut vars = BTreeSet::new();
    let mut tiles = BTreeSet::new();
    walk_stmts(prologue, &mut |st| {
        stmt_exprs(st, &mut |e| {
            e.walk(&mut |x| match x {
                Expr::Load { buf, .. } => {
                    reads.insert(*buf);
                }
                Expr::Var { id, .. } => {
                    vars.insert(*id);
                }
                _ => {}
            })
        });
        if let Stmt::Copy(op) = st {
            reads.insert(op.src.buf);
            tiles.insert(op.dst.buf);
        }
    });
    let mut binds = false;
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        binds |= matches!(st, Stmt::Let { var, .. } | Stmt::For { var, .. } if vars.contains(var));
        if let Stmt::Parallel { vars: vs, .. } = st {
            binds |= vs.iter().any(|v| vars.contains(v));
        }
    });
    !binds && !reads.iter().any(|&b| writes(s, b)) && !tiles.iter().any(|&b| touches(s, b))
}

/// With three stages or more and one wgmma gemm among the consumers whose accumulator no
/// other consumer touches and whose operands no other consumer writes (a register-A
/// fragment or a shared tile the loop body fills: the next iteration would overwrite them
/// under the group still reading them), that gemm returns with its group in flight
/// (`GemmInst::in_flight`); the accumulator, which the loop then drains, or None.
pub(crate) fn keep_in_flight(consumers: &mut [Stmt], stages: u32) -> Option<BufferId> {
    let wgmma_at: Vec<usize> =
        consumers.iter().enumerate().filter(|(_, c)| is_wgmma(c)).map(|(k, _)| k).collect();
    if stages < 3 || wgmma_at.len() != 1 {
        return None;
    }
    let k = wgmma_at[0];
    let Stmt::Gemm(op) = &consumers[k] else { unreachable!("is_wgmma") };
    let (acc, a, b) = (op.c, op.a, op.b);
    if consumers.iter().enumerate().any(|(j, s)| j != k && (touches(s, acc) || writes(s, a) || writes(s, b)))
    {
        return None;
    }
    let Stmt::Gemm(op) = &mut consumers[k] else { unreachable!("is_wgmma") };
    let inst = op.inst.as_mut()?;
    inst.in_flight = true;
    Some(acc)
}

/// A `T.gemm` that `select_instructions` gave a `wgmma`.
pub fn is_wgmma(s: &Stmt) -> bool {
    matches!(s, Stmt::Gemm(GemmOp { inst: Some(i), .. }) if i.atom.scope == target::ThreadScope::Warpgroup)
}

/// Whether a statement (with its children) reads or writes `buf`.
pub(crate) fn touches(s: &Stmt, buf: BufferId) -> bool {
    let mut found = false;
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        stmt_exprs(st, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf: b, .. } = x {
                    found |= *b == buf;
                }
            })
        });
        found |= match st {
            Stmt::Store { buf: b, .. } | Stmt::Atomic { buf: b, .. } => *b == buf,
            Stmt::Copy(op) => op.src.buf == buf || op.dst.buf == buf,
            Stmt::Fill { dst, .. } => dst.buf == buf,
            Stmt::Reduce(op) => op.src == buf || op.dst == buf,
            Stmt::Gemm(op) => op.a == buf || op.b == buf || op.c == buf,
            Stmt::Print { what: Printed::Tile(r), .. } => r.buf == buf,
            Stmt::Inst(i) => i.accesses().iter().any(|a| a.buf == buf),
            _ => false,
        };
    });
    found
}

/// Whether a statement (with its children) writes `buf`.
pub(crate) fn writes(s: &Stmt, buf: BufferId) -> bool {
    let mut found = false;
    walk_stmts(std::slice::from_ref(s), &mut |st| {
        found |= match st {
            Stmt::Store { buf: b, .. } | Stmt::Atomic { buf: b, .. } => *b == buf,
            Stmt::Copy(op) => op.dst.buf == buf,
            Stmt::Fill { dst, .. } => dst.buf == buf,
            Stmt::Reduce(op) => op.dst == buf,
            Stmt::Gemm(op) => op.c == buf,
            Stmt::Inst(i) => {
                i.accesses().iter().any(|a| a.buf == buf && a.kind == tile_ir::inst::AccessKind::Write)
            }
            _ => false,
        };
    });
    found
}

/// Point every access of a multi-buffered tile at `stage`.
fn select_stage(s: Stmt, tiles: &BTreeSet<BufferId>, stage: &Expr) -> Stmt {
    let loads = |e: Expr| {
        e.map(&mut |x| match x {
            Expr::Load { buf, mut idx, dtype, loc, oob } if tiles.contains(&buf) => {
                idx.insert(0, stage.clone());
                Expr::Load { buf, idx, dtype, loc, oob }
            }
            other => other,
        })
    };
    let region = |mut r: Region| {
        if tiles.contains(&r.buf) {
            r.dims.insert(0, RegionDim::Index(stage.clone()));
        }
        Region { dims: r.dims.into_iter().map(|d| map_region_dim(d, &loads)).collect(), ..r }
    };
    let body = |b: Vec<Stmt>| b.into_iter().map(|x| select_stage(x, tiles, stage)).collect::<Vec<_>>();
    match s {
        Stmt::Copy(op) => {
            Stmt::Copy(CopyOp { src: region(op.src), dst: region(op.dst), pad: op.pad.map(loads), ..op })
        }
        Stmt::Fill { dst, value, loc } => Stmt::Fill { dst: region(dst), value: loads(value), loc },
        Stmt::Store { buf, mut idx, value, loc } => {
            idx = idx.into_iter().map(loads).collect();
            if tiles.contains(&buf) {
                idx.insert(0, stage.clone());
            }
            Stmt::Store { buf, idx, value: loads(value), loc }
        }
        Stmt::Atomic { mode, buf, mut idx, value, prev, loc } => {
            idx = idx.into_iter().map(loads).collect();
            if tiles.contains(&buf) {
                idx.insert(0, stage.clone());
            }
            Stmt::Atomic { mode, buf, idx, value: loads(value), prev, loc }
        }
        Stmt::Gemm(op) => Stmt::Gemm(GemmOp {
            a_stage: if tiles.contains(&op.a) { Some(stage.clone()) } else { op.a_stage },
            b_stage: if tiles.contains(&op.b) { Some(stage.clone()) } else { op.b_stage },
            ..op
        }),
        Stmt::Parallel { vars, extents, body: b, loc, layout } => {
            Stmt::Parallel { vars, extents, body: body(b), loc, layout }
        }
        Stmt::Print { what: Printed::Tile(r), msg, block, loc } => {
            Stmt::Print { what: Printed::Tile(region(r)), msg, block, loc }
        }
        Stmt::For { var, start, extent, kind, body: b, loc } => {
            Stmt::For { var, start: loads(start), extent: loads(extent), kind, body: body(b), loc }
        }
        Stmt::If { cond, then, otherwise, loc } => {
            Stmt::If { cond: loads(cond), then: body(then), otherwise: body(otherwise), loc }
        }
        leaf => map_stmt_exprs(leaf, &mut |e| match e {
            Expr::Load { buf, mut idx, dtype, loc, oob } if tiles.contains(&buf) => {
                idx.insert(0, stage.clone());
                Expr::Load { buf, idx, dtype, loc, oob }
            }
            other => other,
        }),
    }
}

fn map_region_dim(d: RegionDim, f: &dyn Fn(Expr) -> Expr) -> RegionDim {
    match d {
        RegionDim::Index(e) => RegionDim::Index(f(e)),
        RegionDim::Origin(e) => RegionDim::Origin(f(e)),
        RegionDim::Slice { start, stop } => RegionDim::Slice { start: f(start), stop: f(stop) },
    }
}
