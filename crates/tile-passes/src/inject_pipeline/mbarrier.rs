//! The warp-specialized form of a pipelined loop whose producers are TMA copies
//! (`plan_pipeline` chose it, `plan_warp_roles` added the producer warpgroup):
//!
//! ```text
//! if tid == 0 { for s: mbarrier_init full[s], 1; mbarrier_init empty[s], threads }  fence_mbarrier_init
//! sync
//! if tid < threads {                         // the user's threads: the consumers
//!   setmaxnreg inc C
//!   ...statements before the loop...
//!   for i in 0..n: mbarrier_wait full[i % s] parity (i / s) % 2
//!                  consumers(i)              // reading stage i % s
//!                  mbarrier_arrive empty[i % s]      (wgmma in flight: empty[(i-1) % s] once i > 0)
//!   ...statements after the loop...
//! } else {                                   // the producer warpgroup
//!   setmaxnreg dec P
//!   if tid == threads {                      // one thread issues
//!     for i in 0..n: mbarrier_wait empty[i % s] parity (i / s + 1) % 2
//!                    mbarrier_arrive full[i % s] expect_tx <bytes of every tile>
//!                    tma_load ... on full[i % s]          (per producer and panel)
//!   }
//! }
//! ```
//! A fresh barrier's preceding phase counts as complete, so the producer's first pass over
//! the ring does not wait; from then on it refills a stage once all `threads` consumers
//! released it. The consumers wait for the bytes of their stage on its full barrier (TMA
//! writes are async-proxy writes that the completed phase makes visible, to wgmma too: no
//! proxy fence). Every role runs the same trip count, so a loop of 0 iterations passes no
//! barrier and nothing waits forever. The consumers' barriers become named barriers over
//! their threads (`lower_tile_ops`), never `__syncthreads`, which the producers do not reach.

use super::{keep_in_flight, select_stage};
use crate::lower::tma;
use crate::Ctx;
use std::collections::BTreeSet;
use tile_ir::simplify::simplify;
use tile_ir::*;

/// How a persistent kernel numbers its tiles: the grid it walks and its raster.
struct Persistent {
    grid: [i64; 3],
    raster: Option<Raster>,
}

/// The persistent plan of the kernel (`WarpRoles::persistent`), taking its raster (the
/// tile loop numbers the tiles panel by panel itself, so `rasterize` has nothing to do).
fn persistent_plan(m: &mut Module) -> Option<Persistent> {
    m.tiles()?;
    let mut grid = [1i64; 3];
    for (axis, g) in m.kernel.grid.iter().enumerate().take(3) {
        grid[axis] = g.as_int()?;
    }
    Some(Persistent { grid, raster: m.kernel.raster.take() })
}

/// `for t in 0..ceildiv(tiles - blockIdx.x, gridDim.x) { tile = blockIdx.x + t * gridDim.x;
/// bx, by, bz of tile; body }`.
fn tile_loop(m: &mut Module, plan: &Persistent, t: VarId, body: Vec<Stmt>, loc: Loc) -> Stmt {
    let launch = launch_var(m, VarKind::LaunchIdx(0), "launch_x");
    let launched = launch_var(m, VarKind::LaunchDim(0), "launched");
    let [gx, gy, gz] = plan.grid;
    let tiles = gx * gy * gz;
    let bin = Expr::binary;
    let (l, g) = (Expr::var(launch, DType::I32), Expr::var(launched, DType::I32));
    let count = bin(
        BinOp::Add,
        bin(BinOp::FloorDiv, bin(BinOp::Sub, Expr::int(tiles - 1), l.clone()), g.clone()),
        Expr::int(1),
    );
    let tile = m.add_var("tile_id", VarKind::Temp, DType::I32);
    let mut lets = vec![Stmt::Let {
        var: tile,
        value: simplify(bin(BinOp::Add, l, bin(BinOp::Mul, Expr::var(t, DType::I32), g))),
    }];
    let tile_e = Expr::var(tile, DType::I32);
    let block_var = |m: &Module, axis: u8| {
        m.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32))
    };
    let plane = gx * gy;
    let in_plane = if gz > 1 {
        simplify(bin(BinOp::FloorMod, tile_e.clone(), Expr::int(plane)))
    } else {
        tile_e.clone()
    };
    let (x, y) = match plan.raster {
        Some(r) => {
            let (mut raster, x, y) = crate::rasterize::raster_lets(m, in_plane, gx, gy, r);
            lets.append(&mut raster);
            (x, y)
        }
        None => (
            simplify(bin(BinOp::FloorMod, in_plane.clone(), Expr::int(gx))),
            simplify(bin(BinOp::FloorDiv, in_plane, Expr::int(gx))),
        ),
    };
    let z = simplify(bin(BinOp::FloorDiv, tile_e, Expr::int(plane)));
    for (axis, value) in [(0u8, x), (1, y), (2, z)] {
        if let Some(v) = block_var(m, axis) {
            lets.push(Stmt::Let { var: v, value });
        }
    }
    lets.extend(body);
    Stmt::For { var: t, start: Expr::int(0), extent: simplify(count), kind: ForKind::Serial, body: lets, loc }
}

fn launch_var(m: &mut Module, kind: VarKind, name: &str) -> VarId {
    match m.vars.iter().position(|v| v.kind == kind) {
        Some(i) => VarId(i as u32),
        None => m.add_var(name, kind, DType::I32),
    }
}

/// Shared int64 barrier words, one per stage.
fn barriers(m: &mut Module, name: &str, stages: u32, loc: Loc) -> BufferId {
    m.add_buffer(Buffer {
        name: name.to_string(),
        scope: Scope::Shared,
        dtype: DType::I64,
        shape: fixed_dims(&[stages as i64]),
        loc,
        layout: None,
        shared_offset: None,
        panel: None,
        swizzle: None,
    })
}

/// The kernel body with its pipelined loop at `at` (producers marked `CopyInst::Tma`)
/// warp-specialized; `pre` and `post` (already pipelined themselves) run on the consumers.
#[allow(clippy::too_many_arguments)]
pub(super) fn warp_specialize(
    m: &mut Module,
    pre: Vec<Stmt>,
    the_loop: Stmt,
    post: Vec<Stmt>,
    ctx: &mut Ctx,
) -> Result<Vec<Stmt>, Vec<Diagnostic>> {
    let Stmt::For { var, start, extent, kind: ForKind::Pipelined { stages }, body, loc } = the_loop else {
        return Err(vec![Diagnostic::bug("warp_specialize: not a pipelined loop")]);
    };
    let roles = m.kernel.roles.ok_or_else(|| vec![Diagnostic::bug("warp_specialize without roles")])?;
    let at = m.sources.short(loc).unwrap_or_default();
    let threads = m.kernel.threads;
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    for s in body {
        match s {
            Stmt::Copy(op) if op.inst == Some(CopyInst::Tma) => producers.push(op),
            other => consumers.push(other),
        }
    }
    // the boxes of each producer, from its tile before multi-buffering
    let mut plans = Vec::new();
    for op in &producers {
        plans.push(
            tma::fit(m, op, &ctx.target).map_err(|why| vec![Diagnostic::bug(format!("TMA plan: {why}"))])?,
        );
    }
    let tiles: BTreeSet<BufferId> = producers.iter().map(|op| op.dst.buf).collect();
    // a wgmma consumer keeps its group in flight when nothing else touches its accumulator
    // (with two stages that would leave the producer nothing to prefetch into)
    let drain = keep_in_flight(&mut consumers, stages);
    for &t in &tiles {
        m.buffer_mut(t).shape.insert(0, Dim::Fixed(stages as i64));
    }
    let full = barriers(m, "full_bar", stages, loc);
    let empty = barriers(m, "empty_bar", stages, loc);
    let tid = m.thread_idx();
    let tid_e = Expr::var(tid, DType::I32);
    let s = stages as i64;
    let start_i32 = Expr::cast(start.clone(), DType::I32);
    let count_of = |v: VarId| simplify(Expr::binary(BinOp::Sub, Expr::var(v, DType::I32), start_i32.clone()));
    let stage_of = |i: &Expr| simplify(Expr::binary(BinOp::FloorMod, i.clone(), Expr::int(s)));
    let parity_of = |i: &Expr, plus: i64| {
        let round = Expr::binary(BinOp::FloorDiv, i.clone(), Expr::int(s));
        simplify(Expr::binary(
            BinOp::FloorMod,
            Expr::binary(BinOp::Add, round, Expr::int(plus)),
            Expr::int(2),
        ))
    };
    let total: i64 = plans.iter().map(|p| p.bytes).sum();

    // a persistent kernel walks tiles; the ring's position is the k-tiles of the tiles this
    // block walked before (`t * n`) plus this tile's
    let persistent = persistent_plan(m);
    let n = simplify(Expr::cast(extent.clone(), DType::I32));
    let tile_base = |t: Option<VarId>| match t {
        Some(t) => simplify(Expr::binary(BinOp::Mul, Expr::var(t, DType::I32), n.clone())),
        None => Expr::int(0),
    };
    let global = |base: &Expr, i: Expr| simplify(Expr::binary(BinOp::Add, base.clone(), i));

    // the producer: one thread walks the ring
    let ptile = persistent.as_ref().map(|_| m.add_var("tile_p", VarKind::Loop, DType::I32));
    let pbase = tile_base(ptile);
    let pvar = m.add_var(&format!("{}_p", m.var(var).name), VarKind::Loop, m.var(var).dtype);
    let pi = global(&pbase, count_of(pvar));
    let pstage = stage_of(&pi);
    let mut pbody = vec![
        Stmt::inst(inst::MbarrierWait { bar: empty, idx: pstage.clone(), parity: parity_of(&pi, 1) }),
        Stmt::inst(inst::MbarrierArrive { bar: full, idx: pstage.clone(), expect_tx: Some(total) }),
    ];
    let pv = Expr::var(pvar, m.var(var).dtype);
    for (op, plan) in producers.iter().zip(&plans) {
        let op = match map_stmt_exprs(Stmt::Copy(op.clone()), &mut |e| match e {
            Expr::Var { id, .. } if id == var => pv.clone(),
            other => other,
        }) {
            Stmt::Copy(op) => op,
            _ => unreachable!("a copy maps to a copy"),
        };
        pbody.extend(tma::loads(m, &op, plan, Some(&pstage), full, &pstage).map_err(|d| vec![d])?);
    }
    let producer_loop = Stmt::For {
        var: pvar,
        start: start.clone(),
        extent: extent.clone(),
        kind: ForKind::Serial,
        body: pbody,
        loc,
    };
    let producer_work = match (&persistent, ptile) {
        (Some(plan), Some(t)) => vec![tile_loop(m, plan, t, vec![producer_loop], loc)],
        _ => vec![producer_loop],
    };
    let one_thread = Expr::binary(BinOp::Eq, tid_e.clone(), Expr::int(threads as i64));
    let mut producer = Vec::new();
    if roles.producer_regs > 0 {
        producer.push(Stmt::inst(inst::SetMaxNReg { inc: false, regs: roles.producer_regs }));
    }
    producer.push(Stmt::If { cond: one_thread, then: producer_work, otherwise: vec![], loc });

    // the consumers: wait for the stage, compute, release it
    let ctile = persistent.as_ref().map(|_| m.add_var("tile", VarKind::Loop, DType::I32));
    let cbase = tile_base(ctile);
    let local_i = count_of(var);
    let ci = global(&cbase, local_i.clone());
    let cstage = stage_of(&ci);
    let mut cbody =
        vec![Stmt::inst(inst::MbarrierWait { bar: full, idx: cstage.clone(), parity: parity_of(&ci, 0) })];
    cbody.extend(consumers.into_iter().map(|c| select_stage(c, &tiles, &cstage)));
    let release =
        |i: Expr| Stmt::inst(inst::MbarrierArrive { bar: empty, idx: stage_of(&i), expect_tx: None });
    if drain.is_some() {
        // the wgmmas of iteration i - 1 retired at this iteration's wait: release their stage
        cbody.push(Stmt::If {
            cond: simplify(Expr::binary(BinOp::Gt, local_i.clone(), Expr::int(0))),
            then: vec![release(simplify(Expr::binary(BinOp::Sub, ci.clone(), Expr::int(1))))],
            otherwise: vec![],
            loc,
        });
    } else {
        cbody.push(release(cstage.clone()));
    }
    let mut work = pre;
    work.push(Stmt::For { var, start, extent, kind: ForKind::Serial, body: cbody, loc });
    if let Some(acc) = drain {
        work.push(Stmt::inst(inst::WgmmaWait { pending: 0, acc: vec![acc] }));
        // the last k-tile's stage, retired by that wait (the next tile's producer needs it)
        let last = simplify(Expr::binary(BinOp::Sub, global(&cbase, n.clone()), Expr::int(1)));
        work.push(Stmt::If {
            cond: simplify(Expr::binary(BinOp::Gt, n.clone(), Expr::int(0))),
            then: vec![release(last)],
            otherwise: vec![],
            loc,
        });
    }
    work.extend(post);
    let mut consumer = Vec::new();
    if roles.consumer_regs > 0 {
        consumer.push(Stmt::inst(inst::SetMaxNReg { inc: true, regs: roles.consumer_regs }));
    }
    match (&persistent, ctile) {
        (Some(plan), Some(t)) => consumer.push(tile_loop(m, plan, t, work, loc)),
        _ => consumer.extend(work),
    }

    let names: Vec<String> = tiles.iter().map(|t| m.buffer(*t).name.clone()).collect();
    let boxes: Vec<String> = producers
        .iter()
        .zip(&plans)
        .map(|(op, p)| {
            let dims: Vec<String> = p.box_dims.iter().map(|d| d.to_string()).collect();
            let sw = if p.swizzle > 0 { format!(", {}B swizzle", p.swizzle) } else { String::new() };
            format!("{} {}x [{}]{sw}", m.buffer(op.src.buf).name, p.boxes, dims.join(", "))
        })
        .collect();
    ctx.report.push(format!(
        "{at}: T.Pipelined(num_stages={stages}): TMA copies into {} ({}; {total} bytes a stage) by the producer warpgroup, {stages} stages on full/empty mbarriers{}",
        names.join(", "),
        boxes.join("; "),
        if drain.is_some() { "; the wgmma group of each k-tile stays in flight into the next" } else { "" }
    ));

    let mut init = Vec::new();
    for k in 0..s {
        init.push(Stmt::inst(inst::MbarrierInit { bar: full, idx: Expr::int(k), count: 1 }));
        init.push(Stmt::inst(inst::MbarrierInit { bar: empty, idx: Expr::int(k), count: threads }));
    }
    init.push(Stmt::inst(inst::FenceMbarrierInit));
    let first = Expr::binary(BinOp::Eq, tid_e.clone(), Expr::int(0));
    Ok(vec![
        Stmt::If { cond: first, then: init, otherwise: vec![], loc },
        Stmt::inst(inst::Sync),
        Stmt::If { cond: m.consumer_cond(tid), then: consumer, otherwise: producer, loc },
    ])
}
