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
//! A scheduled loop (`stage=`/`order=`) whose tiles have full barriers of their own also has
//! an empty barrier per tile, each released after the tile's last reader retired, and the
//! producer waits for each before refilling that tile.
//!
//! A fresh barrier's preceding phase counts as complete, so the producer's first pass over
//! the ring does not wait; from then on it refills a stage once all `threads` consumers
//! released it. The consumers wait for the bytes of their stage on its full barrier (TMA
//! writes are async-proxy writes that the completed phase makes visible, to wgmma too: no
//! proxy fence). Every role runs the same trip count, so a loop of 0 iterations passes no
//! barrier and nothing waits forever. The consumers' barriers become named barriers over
//! their threads (`lower_tile_ops`), never `__syncthreads`, which the producers do not reach.
//!
//! With thread-block clusters (`WarpRoles::cluster`) the walk is over groups of tiles, the
//! copies the cluster's blocks share are issued in parts multicast to all of them, a stage
//! is released by lane 0 of each consumer warp to every block's empty barrier (counting
//! consumer warps times blocks), and `cluster_sync` replaces the `sync` after the init and
//! ends the kernel (docs/architecture.md, "Thread-block clusters").

use super::schedule::{self, Item};
use super::{is_wgmma, keep_in_flight, select_stage};
use crate::lower::tma;
use crate::Ctx;
use std::collections::{BTreeMap, BTreeSet};
use tile_ir::simplify::simplify;
use tile_ir::*;

/// How a persistent kernel numbers its tiles: the grid it walks, its raster, and the
/// tiles (`[x, y]`) one thread-block cluster walks together.
struct Persistent {
    grid: [i64; 3],
    raster: Option<Raster>,
    cluster: [i64; 2],
    /// Tiles walked in pairs of about equal work (`WarpRoles::fold`).
    fold: bool,
}

impl Persistent {
    /// Blocks per cluster.
    fn blocks(&self) -> i64 {
        self.cluster[0] * self.cluster[1]
    }
}

/// The persistent plan of the kernel (`WarpRoles::persistent`), taking its raster (the
/// tile loop numbers the tiles panel by panel itself, so `rasterize` has nothing to do).
fn persistent_plan(m: &mut Module) -> Option<Persistent> {
    m.tiles()?;
    let mut grid = [1i64; 3];
    for (axis, g) in m.kernel.grid.iter().enumerate().take(3) {
        grid[axis] = g.as_int()?;
    }
    let cluster = m.kernel.roles.map_or([1, 1], |r| r.cluster).map(|c| c as i64);
    let fold = m.kernel.roles.is_some_and(|r| r.fold);
    Some(Persistent { grid, raster: m.kernel.raster.take(), cluster, fold })
}

/// This block's rank in its cluster of `blocks`: clusters run along the launch's x (of a
/// persistent walk, or the grid's `bx` of a kernel launched a tile per block).
fn cluster_rank(m: &mut Module, blocks: i64) -> Expr {
    let launch = launch_var(m, VarKind::LaunchIdx(0), "launch_x");
    simplify(Expr::binary(BinOp::FloorMod, Expr::var(launch, DType::I32), Expr::int(blocks)))
}

/// The walk's position of this block and its stride: the block and the blocks launched,
/// or, with clusters, the cluster (`blockIdx.x / n`) and the clusters launched.
fn walker(m: &mut Module, plan: &Persistent) -> (Expr, Expr) {
    let launch = launch_var(m, VarKind::LaunchIdx(0), "launch_x");
    let launched = launch_var(m, VarKind::LaunchDim(0), "launched");
    let (l, g) = (Expr::var(launch, DType::I32), Expr::var(launched, DType::I32));
    match plan.blocks() {
        1 => (l, g),
        n => (
            simplify(Expr::binary(BinOp::FloorDiv, l, Expr::int(n))),
            simplify(Expr::binary(BinOp::FloorDiv, g, Expr::int(n))),
        ),
    }
}

/// The tiles (groups of tiles, with clusters; pairs of tiles, folded) this block walks:
/// `ceildiv(tiles - blockIdx.x, gridDim.x)`.
fn block_tiles(m: &mut Module, plan: &Persistent) -> Expr {
    let [gx, gy, gz] = plan.grid;
    let bin = Expr::binary;
    let (l, g) = walker(m, plan);
    let walked = if plan.fold { (gx * gy * gz + 1) / 2 } else { gx * gy * gz / plan.blocks() };
    simplify(bin(
        BinOp::Add,
        bin(BinOp::FloorDiv, bin(BinOp::Sub, Expr::int(walked - 1), l), g),
        Expr::int(1),
    ))
}

/// `for t in 0..ceildiv(tiles - blockIdx.x, gridDim.x) { tile = blockIdx.x + t * gridDim.x;
/// bx, by, bz of tile; body }`. With `slot` `(c, u)` (a ping-pong consumer slot `c` of
/// two), the loop takes every other of the block's tiles, `u = 2 t + c` (a `let`) being
/// the block's tile number.
fn tile_loop(
    m: &mut Module,
    plan: &Persistent,
    t: VarId,
    slot: Option<(u32, VarId)>,
    body: Vec<Stmt>,
    loc: Loc,
) -> Stmt {
    // with clusters, the walk is over groups of `cluster` tiles: the cluster grid's
    let [cx, cy] = plan.cluster;
    let [gx, gy, gz] = [plan.grid[0] / cx, plan.grid[1] / cy, plan.grid[2]];
    let bin = Expr::binary;
    let (l, g) = walker(m, plan);
    let mut count = block_tiles(m, plan);
    let tile = m.add_var("tile_id", VarKind::Temp, DType::I32);
    let mut lets = Vec::new();
    let mut u = Expr::var(t, DType::I32);
    if let Some((c, local)) = slot {
        // slot c runs tiles c, c + 2, ...: ceildiv(count - c, 2) of them
        count = simplify(bin(BinOp::FloorDiv, bin(BinOp::Add, count, Expr::int(1 - c as i64)), Expr::int(2)));
        lets.push(Stmt::Let {
            var: local,
            value: simplify(bin(BinOp::Add, bin(BinOp::Mul, u, Expr::int(2)), Expr::int(c as i64))),
        });
        u = Expr::var(local, DType::I32);
    }
    if plan.fold {
        return fold_loop(m, plan, t, count, tile, body, loc);
    }
    lets.push(Stmt::Let { var: tile, value: simplify(bin(BinOp::Add, l, bin(BinOp::Mul, u, g))) });
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
    let (x, y) = if plan.blocks() > 1 {
        // the block's tile of its cluster's: rank % cx along bx, rank / cx along by
        let rank = cluster_rank(m, plan.blocks());
        let at = |q: Expr, c: i64, r: Expr| simplify(bin(BinOp::Add, bin(BinOp::Mul, q, Expr::int(c)), r));
        (
            at(x, cx, simplify(bin(BinOp::FloorMod, rank.clone(), Expr::int(cx)))),
            at(y, cy, simplify(bin(BinOp::FloorDiv, rank, Expr::int(cx)))),
        )
    } else {
        (x, y)
    };
    for (axis, value) in [(0u8, x), (1, y), (2, z)] {
        if let Some(v) = block_var(m, axis) {
            lets.push(Stmt::Let { var: v, value });
        }
    }
    lets.extend(body);
    Stmt::For { var: t, start: Expr::int(0), extent: simplify(count), kind: ForKind::Serial, body: lets, loc }
}

/// The folded walk (`Persistent::fold`): the tiles in the order of the grid's rows (`by`,
/// then `bz`), each row's `bx` taken as 0, gx - 1, 1, gx - 2, ..., and the block takes pairs
/// of consecutive tiles of that order (pair `p = blockIdx.x + (t / 2) * gridDim.x`, tile
/// `2 p + t % 2`): the two of a pair have about the same work in all (a causal mask's
/// `x + 1` and `gx - x` k-tiles). With an odd number of tiles the last pair has one, and
/// the body is skipped for the missing one (always a block's last: the walk's parities
/// stay as they are).
fn fold_loop(
    m: &mut Module,
    plan: &Persistent,
    t: VarId,
    pairs: Expr,
    tile: VarId,
    body: Vec<Stmt>,
    loc: Loc,
) -> Stmt {
    let [gx, gy, gz] = plan.grid;
    let bin = Expr::binary;
    let (l, g) = walker(m, plan);
    let te = Expr::var(t, DType::I32);
    let pair = bin(BinOp::Add, l, bin(BinOp::Mul, bin(BinOp::FloorDiv, te.clone(), Expr::int(2)), g));
    let value = bin(BinOp::Add, bin(BinOp::Mul, pair, Expr::int(2)), bin(BinOp::FloorMod, te, Expr::int(2)));
    let mut lets = vec![Stmt::Let { var: tile, value: simplify(value) }];
    let tile_e = Expr::var(tile, DType::I32);
    let p = simplify(bin(BinOp::FloorMod, tile_e.clone(), Expr::int(gx)));
    let half = simplify(bin(BinOp::FloorDiv, p.clone(), Expr::int(2)));
    let even = simplify(bin(BinOp::Eq, bin(BinOp::FloorMod, p, Expr::int(2)), Expr::int(0)));
    let x = Expr::select(even, half.clone(), simplify(bin(BinOp::Sub, Expr::int(gx - 1), half)));
    let row = simplify(bin(BinOp::FloorDiv, tile_e.clone(), Expr::int(gx)));
    let y = simplify(bin(BinOp::FloorMod, row.clone(), Expr::int(gy)));
    let z = simplify(bin(BinOp::FloorDiv, row, Expr::int(gy)));
    let block_var = |m: &Module, axis: u8| {
        m.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32))
    };
    for (axis, value) in [(0u8, x), (1, y), (2, z)] {
        if let Some(v) = block_var(m, axis) {
            lets.push(Stmt::Let { var: v, value });
        }
    }
    let tiles = gx * gy * gz;
    if tiles % 2 == 1 {
        let real = simplify(bin(BinOp::Lt, tile_e, Expr::int(tiles)));
        lets.push(Stmt::If { cond: real, then: body, otherwise: vec![], loc });
    } else {
        lets.extend(body);
    }
    let count = simplify(bin(BinOp::Mul, pairs, Expr::int(2)));
    Stmt::For { var: t, start: Expr::int(0), extent: count, kind: ForKind::Serial, body: lets, loc }
}

/// A one-element `int32` array of each thread: a running sum (`T.alloc_var`'s kind).
fn counter(m: &mut Module, name: &str, loc: Loc) -> BufferId {
    m.add_buffer(Buffer {
        name: name.to_string(),
        scope: Scope::Local,
        dtype: DType::I32,
        shape: fixed_dims(&[1]),
        loc,
        layout: None,
        shared_offset: None,
        alias_of: None,
        panel: None,
        swizzle: None,
    })
}

/// `s` with every buffer in `map` replaced by its image (a ping-pong slot's own copies of
/// the consumers' shared tiles).
fn remap_buffers(s: Stmt, map: &BTreeMap<BufferId, BufferId>) -> Stmt {
    let b = |id: BufferId| *map.get(&id).unwrap_or(&id);
    let e = |x: Expr| {
        x.map(&mut |y| match y {
            Expr::Load { buf, idx, dtype, loc, oob } => Expr::Load { buf: b(buf), idx, dtype, loc, oob },
            other => other,
        })
    };
    let region = |r: Region| Region {
        buf: b(r.buf),
        dims: r.dims.into_iter().map(|d| map_region_dim(d, &mut |x| e(x))).collect(),
        ..r
    };
    let body = |v: Vec<Stmt>| v.into_iter().map(|x| remap_buffers(x, map)).collect::<Vec<_>>();
    match s {
        Stmt::Store { buf, idx, value, loc } => {
            Stmt::Store { buf: b(buf), idx: idx.into_iter().map(e).collect(), value: e(value), loc }
        }
        Stmt::Atomic { mode, buf, idx, value, prev, loc } => Stmt::Atomic {
            mode,
            buf: b(buf),
            idx: idx.into_iter().map(e).collect(),
            value: e(value),
            prev: prev.map(b),
            loc,
        },
        Stmt::Copy(op) => {
            Stmt::Copy(CopyOp { src: region(op.src), dst: region(op.dst), pad: op.pad.map(e), ..op })
        }
        Stmt::Fill { dst, value, loc } => Stmt::Fill { dst: region(dst), value: e(value), loc },
        Stmt::Reduce(op) => Stmt::Reduce(ReduceOp { src: b(op.src), dst: b(op.dst), ..op }),
        Stmt::Gemm(op) => Stmt::Gemm(GemmOp { a: b(op.a), b: b(op.b), c: b(op.c), ..op }),
        Stmt::Parallel { vars, extents, body: v, loc, layout } => {
            Stmt::Parallel { vars, extents, body: body(v), loc, layout }
        }
        Stmt::For { var, start, extent, kind, body: v, loc } => {
            Stmt::For { var, start: e(start), extent: e(extent), kind, body: body(v), loc }
        }
        Stmt::If { cond, then, otherwise, loc } => {
            Stmt::If { cond: e(cond), then: body(then), otherwise: body(otherwise), loc }
        }
        Stmt::Print { what: Printed::Tile(r), msg, block, loc } => {
            Stmt::Print { what: Printed::Tile(region(r)), msg, block, loc }
        }
        Stmt::Async { body: v } => Stmt::Async { body: body(v) },
        leaf => map_stmt_exprs(leaf, &mut |x| match x {
            Expr::Load { buf, idx, dtype, loc, oob } => Expr::Load { buf: b(buf), idx, dtype, loc, oob },
            other => other,
        }),
    }
}

/// The shared buffers `stmts` name (loads, stores, regions, gemm operands).
fn shared_buffers(m: &Module, stmts: &[Stmt]) -> BTreeSet<BufferId> {
    let mut out = BTreeSet::new();
    walk_stmts(stmts, &mut |s| {
        let mut see = |id: BufferId| {
            if m.buffer(id).scope == Scope::Shared {
                out.insert(id);
            }
        };
        match s {
            Stmt::Store { buf, .. } | Stmt::Atomic { buf, .. } => see(*buf),
            Stmt::Copy(op) => {
                see(op.src.buf);
                see(op.dst.buf);
            }
            Stmt::Fill { dst, .. } | Stmt::Print { what: Printed::Tile(dst), .. } => see(dst.buf),
            Stmt::Reduce(op) => {
                see(op.src);
                see(op.dst);
            }
            Stmt::Gemm(op) => {
                see(op.a);
                see(op.b);
                see(op.c);
            }
            _ => {}
        }
        stmt_exprs(s, &mut |e| {
            e.walk(&mut |x| {
                if let Expr::Load { buf, .. } = x {
                    see(*buf)
                }
            })
        });
    });
    out
}

fn launch_var(m: &mut Module, kind: VarKind, name: &str) -> VarId {
    match m.vars.iter().position(|v| v.kind == kind) {
        Some(i) => VarId(i as u32),
        None => m.add_var(name, kind, DType::I32),
    }
}

/// Two consumer warpgroups, each on its own rows of every deferred gemm of a scheduled
/// steady state, take turns issuing a step's gemms (FlashAttention-3's ping-pong between
/// warpgroups): warpgroup 0 waits at named barrier `a` before its first gemm and hands over
/// after its last (`bar.arrive b`), warpgroup 1 the other way round; warpgroup 1 lets 0 go
/// first before the steady state and 0 takes the last hand-over after it, so each barrier
/// completes as often as it is waited on. While one warpgroup's wgmmas run, the other
/// computes. Changes no result (the barriers only order issue); false where it does not
/// apply.
fn warpgroup_turns(m: &Module, ex: &mut schedule::Expanded, tid: &Expr, a: u32, loc: Loc) -> bool {
    let deferred: Vec<usize> = ex
        .steady
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Stmt::Gemm(GemmOp { inst: Some(i), .. }) if i.deferred))
        .map(|(k, _)| k)
        .collect();
    let per_warpgroup_rows = deferred.iter().all(
        |&k| matches!(&ex.steady[k], Stmt::Gemm(GemmOp { inst: Some(i), .. }) if i.warps_m == 2 && i.warps_n == 1),
    );
    let (Some(&first), Some(&last)) = (deferred.first(), deferred.last()) else { return false };
    // a turn holds gemms and register work: nothing that writes shared memory or lowers
    // to a barrier of all the threads, which the other warpgroup could not reach
    let registers_only = ex.steady[first..=last].iter().all(|s| {
        let (_, writes) = schedule::effects(s);
        let shared_free = writes.iter().all(|b| m.buffer(*b).scope != Scope::Shared);
        // (a copy between fragments may go through shared memory)
        shared_free && matches!(s, Stmt::Gemm(_) | Stmt::Parallel { .. } | Stmt::Fill { .. } | Stmt::Inst(_))
    });
    if !per_warpgroup_rows || !registers_only {
        return false;
    }
    // the waits of the turn's steady state keep the register work before them in its own
    // basic block (`WgmmaWait::boundary`): measured with the turns on an H100 (causal d=128
    // 0.988x -> 1.027x cuDNN fp16, 0.985x -> 1.018x bf16, bench/results/attention-boundary-
    // 2026-12-06-*); without the turns it measured 3-4% slower (the early wait released the
    // stage sooner), so it stays off there
    for s in ex.steady.iter_mut() {
        if let Stmt::Inst(Inst::WgmmaWait(w)) = s {
            w.boundary = true;
        }
    }
    let b = a + 1;
    let bin = Expr::binary;
    let wg0 = bin(
        BinOp::Eq,
        bin(BinOp::FloorMod, bin(BinOp::FloorDiv, tid.clone(), Expr::int(128)), Expr::int(2)),
        Expr::int(0),
    );
    let bar = |id: u32, arrive: bool| Stmt::inst(inst::NamedBarrier { id, threads: 256, arrive });
    let by_group = |x: Stmt, y: Stmt| Stmt::If { cond: wg0.clone(), then: vec![x], otherwise: vec![y], loc };
    ex.steady.insert(last + 1, by_group(bar(b, true), bar(a, true)));
    ex.steady.insert(first, by_group(bar(a, false), bar(b, false)));
    let wg1 = Expr::unary(UnOp::Not, wg0.clone());
    ex.prologue.push(Stmt::If { cond: wg1, then: vec![bar(a, true)], otherwise: vec![], loc });
    ex.epilogue.insert(0, Stmt::If { cond: wg0.clone(), then: vec![bar(a, false)], otherwise: vec![], loc });
    true
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
        alias_of: None,
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
    let Stmt::For { var, start, extent, kind: ForKind::Pipelined { stages, schedule }, body, loc } = the_loop
    else {
        return Err(vec![Diagnostic::bug("warp_specialize: not a pipelined loop")]);
    };
    let roles = m.kernel.roles.ok_or_else(|| vec![Diagnostic::bug("warp_specialize without roles")])?;
    let at = m.sources.short(loc).unwrap_or_default();
    let threads = m.kernel.threads;
    // the copies before the loop that the producer issues too (plan_pipeline marked them):
    // out of the consumers' statements, each replaced by a wait for its barrier just
    // before the first statement that touches its tile (else at the end)
    let mut once: Vec<CopyOp> = Vec::new();
    let mut pre_rest = Vec::new();
    for s in pre {
        match s {
            Stmt::Copy(op) if op.inst == Some(CopyInst::Tma) => once.push(op),
            other => pre_rest.push(other),
        }
    }
    let pre = pre_rest;
    let once_wait_at: Vec<usize> = once
        .iter()
        .map(|op| pre.iter().position(|s| super::touches(s, op.dst.buf)).unwrap_or(pre.len()))
        .collect();
    let mut once_plans = Vec::new();
    for op in &once {
        once_plans.push(
            tma::fit(m, op, &ctx.target).map_err(|why| vec![Diagnostic::bug(format!("TMA plan: {why}"))])?,
        );
    }
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    let mut consumer_at = Vec::new();
    let body_len = body.len();
    for (k, s) in body.into_iter().enumerate() {
        match s {
            Stmt::Copy(op) if op.inst == Some(CopyInst::Tma) => producers.push(op),
            other => {
                consumer_at.push(k);
                consumers.push(other)
            }
        }
    }
    // the boxes of each producer, from its tile before multi-buffering
    let mut plans = Vec::new();
    for op in &producers {
        plans.push(
            tma::fit(m, op, &ctx.target).map_err(|why| vec![Diagnostic::bug(format!("TMA plan: {why}"))])?,
        );
    }
    // clusters: the copies whose position does not depend on the block index along the
    // cluster are shared, each block issuing its part multicast to all (plan_warp_roles
    // checked that they split); planned before the tiles are multi-buffered
    let cluster = roles.cluster;
    let blocks = roles.cluster_blocks();
    let cluster_axis = match cluster {
        [x, 1] if x > 1 => Some(0u8),
        [1, y] if y > 1 => Some(1u8),
        _ => None,
    };
    let mut shares = Vec::new();
    for (op, plan) in producers.iter().zip(&plans) {
        let share = match cluster_axis {
            Some(axis) => {
                let mut reads = false;
                stmt_exprs(&Stmt::Copy(op.clone()), &mut |e| {
                    e.walk(&mut |x| {
                        reads |=
                            matches!(x, Expr::Var { id, .. } if m.var(*id).kind == VarKind::BlockIdx(axis))
                    })
                });
                match reads {
                    true => None,
                    false => Some(tma::share(m, op, plan, blocks).map_err(|why| vec![Diagnostic::bug(why)])?),
                }
            }
            None => None,
        };
        shares.push(share);
    }
    let tiles: BTreeSet<BufferId> = producers.iter().map(|op| op.dst.buf).collect();
    // a manual schedule (stage=, order=): checked; one of a single stage only reorders
    let mut scheduled = None;
    if let Some(k) = schedule {
        let sc = m.schedules[k as usize].clone();
        let placed: Vec<(usize, &Stmt)> = consumer_at.iter().copied().zip(consumers.iter()).collect();
        let plan = schedule::plan(m, &sc, body_len, &placed, &tiles, loc).map_err(|d| vec![d])?;
        ctx.report.push(schedule::describe(m, &plan, &placed, &at));
        if plan.span == 0 {
            let mut slots: Vec<Option<Stmt>> = std::mem::take(&mut consumers).into_iter().map(Some).collect();
            consumers = plan.emit.iter().map(|&g| slots[g].take().expect("each consumer once")).collect();
        } else {
            scheduled = Some(plan);
        }
    }
    // a wgmma consumer keeps its group in flight when nothing else touches its accumulator
    // (with two stages that would leave the producer nothing to prefetch into)
    let drain = match scheduled {
        Some(_) => None,
        None => keep_in_flight(&mut consumers, stages),
    };
    // the scheduled consumers that read the ring: the first waits for an iteration's stage,
    // the last releases it; the ring holds the iterations between them
    let mut readers = (None, None);
    if let Some(plan) = &scheduled {
        let reads_ring: Vec<bool> =
            consumers.iter().map(|c| schedule::effects(c).0.iter().any(|b| tiles.contains(b))).collect();
        let first =
            plan.emit.iter().copied().filter(|&g| reads_ring[g]).min_by_key(|&g| plan.places[g].stage);
        // (max_by_key keeps the last of equal stages: the later reader in the step's order)
        let last = plan.emit.iter().copied().filter(|&g| reads_ring[g]).max_by_key(|&g| plan.places[g].stage);
        if let (Some(f), Some(l)) = (first, last) {
            let held = plan.places[l].stage - plan.places[f].stage + 1;
            if held > stages {
                return Err(vec![Diagnostic::error(
                    format!(
                        "T.Pipelined(num_stages={stages}): this stage= keeps the tiles of {held} iterations in use at once (read at stages {} to {}): the ring needs num_stages >= {held}",
                        plan.places[f].stage, plan.places[l].stage
                    ),
                    loc,
                )
                .with_help(format!("use num_stages={held} or more"))]);
            }
        }
        readers = (first, last);
    }
    // tiles first read by different statements arrive on full barriers of their own, each
    // waited for just before its first reader (attention: S = Q K^T starts once K is in,
    // while V still arrives); tiles first read together share one (a gemm's A and B)
    let key = |g: usize| match &scheduled {
        Some(plan) => (plan.places[g].stage as usize, plan.emit.iter().position(|&e| e == g).unwrap_or(g)),
        None => (0, g),
    };
    let first_readers: Vec<Option<usize>> = producers
        .iter()
        .map(|op| {
            (0..consumers.len())
                .filter(|&g| {
                    let (reads, writes) = schedule::effects(&consumers[g]);
                    reads.contains(&op.dst.buf) || writes.contains(&op.dst.buf)
                })
                .min_by_key(|&g| key(g))
        })
        .collect();
    let split = blocks == 1
        && producers.len() > 1
        && first_readers.iter().all(|r| r.is_some())
        && first_readers.iter().any(|r| *r != first_readers[0]);
    for &t in &tiles {
        m.buffer_mut(t).shape.insert(0, Dim::Fixed(stages as i64));
    }
    let full = barriers(m, "full_bar", stages, loc);
    // per producer: its full barrier; per consumer: the barriers it waits for first
    let mut fulls = vec![full; producers.len()];
    let mut waits_before: Vec<Vec<BufferId>> = vec![Vec::new(); consumers.len()];
    if split {
        for (p, op) in producers.iter().enumerate().skip(1) {
            let name = format!("full_bar_{}", m.buffer(op.dst.buf).name);
            fulls[p] = barriers(m, &name, stages, loc);
        }
        for (p, r) in first_readers.iter().enumerate() {
            let g = r.expect("split: every tile has a reader");
            if !waits_before[g].contains(&fulls[p]) {
                waits_before[g].push(fulls[p]);
            }
        }
        let names: Vec<String> = producers.iter().map(|op| m.buffer(op.dst.buf).name.clone()).collect();
        ctx.report.push(format!(
            "{at}: a full barrier per tile ({}): each waited for just before the statement that first reads it",
            names.join(", ")
        ));
    }
    let empty = barriers(m, "empty_bar", stages, loc);
    // a scheduled loop whose tiles arrive on barriers of their own also frees them on barriers
    // of their own, each after its last reader retired (FlashAttention-3's K and V
    // pipelines: K of iteration i is free once S = Q K^T retired, while P V still reads V, so
    // the producer refills it a step earlier than one barrier for the stage would let it)
    let per_tile = split && scheduled.is_some();
    let mut empties = vec![empty; producers.len()];
    let mut last_readers: Vec<Option<usize>> = vec![None; producers.len()];
    if per_tile {
        for (p, op) in producers.iter().enumerate() {
            if p > 0 {
                let name = format!("empty_bar_{}", m.buffer(op.dst.buf).name);
                empties[p] = barriers(m, &name, stages, loc);
            }
            last_readers[p] = (0..consumers.len())
                .filter(|&g| {
                    let (reads, writes) = schedule::effects(&consumers[g]);
                    reads.contains(&op.dst.buf) || writes.contains(&op.dst.buf)
                })
                .max_by_key(|&g| key(g));
        }
        let names: Vec<String> = producers.iter().map(|op| m.buffer(op.dst.buf).name.clone()).collect();
        ctx.report.push(format!(
            "{at}: an empty barrier per tile ({}): each released once its last reader retired",
            names.join(", ")
        ));
    }
    // the once-per-tile tiles' last readers in the loop (Q: S = Q K^T): a persistent kernel
    // frees each once that reader's instance of the tile's last iteration retired, as
    // FlashAttention-3 frees Q, so the producer loads the next tile's during this one's last
    // P V and epilogue, not after them. Not where that reader is the unscheduled loop's
    // gemm kept in flight across iterations (it retires at the drain after the loop).
    let once_last: Vec<Option<usize>> = once
        .iter()
        .map(|op| {
            let g = (0..consumers.len())
                .filter(|&g| super::touches(&consumers[g], op.dst.buf))
                .max_by_key(|&g| key(g))?;
            let in_flight = matches!(&consumers[g], Stmt::Gemm(GemmOp { inst: Some(i), .. }) if i.in_flight);
            (!in_flight).then_some(g)
        })
        .collect();
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

    // a folded walk (trip counts that differ from tile to tile): the ring's position at
    // each tile's start is a running sum of the trip counts, which the producer thread and
    // every consumer thread keep alike (each tile's count is the same expression of its bx)
    let fold = persistent.as_ref().is_some_and(|p| p.fold);
    let running = |m: &mut Module, name: &str| {
        fold.then(|| {
            (
                counter(m, &format!("ring_{name}"), loc),
                m.add_var(&format!("ring_base_{name}"), VarKind::Temp, DType::I32),
            )
        })
    };
    let load_base = |ring: BufferId, base: VarId| Stmt::Let {
        var: base,
        value: Expr::load(ring, vec![Expr::int(0)], DType::I32),
    };
    let store_base =
        |ring: BufferId, value: Expr| Stmt::Store { buf: ring, idx: vec![Expr::int(0)], value, loc };

    // the producer: one thread walks the ring
    let ptile = persistent.as_ref().map(|_| m.add_var("tile_p", VarKind::Loop, DType::I32));
    let prun = running(m, "p");
    let pbase = match prun {
        Some((_, v)) => Expr::var(v, DType::I32),
        None => tile_base(ptile),
    };
    let pvar = m.add_var(&format!("{}_p", m.var(var).name), VarKind::Loop, m.var(var).dtype);
    let pi = global(&pbase, count_of(pvar));
    let pstage = stage_of(&pi);
    let arrive = |bar: BufferId, bytes: i64| {
        Stmt::inst(inst::MbarrierArrive {
            bar,
            idx: pstage.clone(),
            expect_tx: Some(bytes),
            cta: None,
            pred: None,
        })
    };
    let empty_wait = |bar: BufferId| {
        Stmt::inst(inst::MbarrierWait { bar, idx: pstage.clone(), parity: parity_of(&pi, 1) })
    };
    let mut pbody = if per_tile { vec![] } else { vec![empty_wait(empty)] };
    if !split {
        pbody.push(arrive(full, total));
    }
    let pv = Expr::var(pvar, m.var(var).dtype);
    let rank = (blocks > 1).then(|| cluster_rank(m, blocks as i64));
    for (p, ((op, plan), share)) in producers.iter().zip(&plans).zip(&shares).enumerate() {
        if per_tile {
            pbody.push(empty_wait(empties[p]));
        }
        if split {
            pbody.push(arrive(fulls[p], plan.bytes));
        }
        let op = match map_stmt_exprs(Stmt::Copy(op.clone()), &mut |e| match e {
            Expr::Var { id, .. } if id == var => pv.clone(),
            other => other,
        }) {
            Stmt::Copy(op) => op,
            _ => unreachable!("a copy maps to a copy"),
        };
        let share = share.map(|sh| (sh, rank.as_ref().expect("a cluster's rank")));
        pbody.extend(tma::loads(m, &op, plan, Some(&pstage), fulls[p], &pstage, share).map_err(|d| vec![d])?);
    }
    let producer_loop = Stmt::For {
        var: pvar,
        start: start.clone(),
        extent: extent.clone(),
        kind: ForKind::Serial,
        body: pbody,
        loc,
    };
    // the once-per-tile copies: barriers of their own, one per consumer slot
    let slots = roles.slots();
    let shared_map: BTreeMap<BufferId, BufferId> = if slots > 1 {
        let mut all = pre.clone();
        all.extend(consumers.iter().cloned());
        all.extend(post.iter().cloned());
        all.extend(once.iter().cloned().map(Stmt::Copy));
        let mut map = BTreeMap::new();
        for id in shared_buffers(m, &all) {
            if tiles.contains(&id) {
                continue; // the ring: filled by the producer for both slots in turn
            }
            let mut copy = m.buffer(id).clone();
            copy.name = format!("{}_slot1", copy.name);
            map.insert(id, m.add_buffer(copy));
        }
        map
    } else {
        BTreeMap::new()
    };
    if persistent.is_some() {
        for (op, g) in once.iter().zip(&once_last) {
            if let Some(g) = g {
                let line = m.sources.short(consumers[*g].loc()).unwrap_or_default();
                ctx.report.push(format!(
                    "{at}: '{}' is freed for the next tile's copy once its last reader ({line}) retired in the loop's last iteration",
                    m.buffer(op.dst.buf).name
                ));
            }
        }
    }
    let mut once_bars = Vec::new();
    for op in &once {
        let name = m.buffer(op.dst.buf).name.clone();
        let full_once = barriers(m, &format!("full_bar_{name}"), slots, loc);
        let empty_once = persistent.is_some().then(|| barriers(m, &format!("empty_bar_{name}"), slots, loc));
        once_bars.push((full_once, empty_once));
    }
    let mut producer_tile = Vec::new();
    if let Some((ring, base)) = prun {
        producer_tile.push(load_base(ring, base));
    }
    if !once.is_empty() {
        // the block's tile (slot c = tile % 2 of two slots, its j-th: tile / 2)
        let t = match ptile {
            Some(t) => Expr::var(t, DType::I32),
            None => Expr::int(0),
        };
        let (slot, j) = match slots {
            1 => (Expr::int(0), t),
            _ => (
                simplify(Expr::binary(BinOp::FloorMod, t.clone(), Expr::int(2))),
                simplify(Expr::binary(BinOp::FloorDiv, t, Expr::int(2))),
            ),
        };
        for c in 0..slots {
            let mut body = Vec::new();
            for ((op, plan), &(full_once, empty_once)) in once.iter().zip(&once_plans).zip(&once_bars) {
                let idx = match slots {
                    1 => slot.clone(),
                    _ => Expr::int(c as i64),
                };
                if let Some(e) = empty_once {
                    let parity = simplify(Expr::binary(
                        BinOp::FloorMod,
                        Expr::binary(BinOp::Add, j.clone(), Expr::int(1)),
                        Expr::int(2),
                    ));
                    body.push(Stmt::inst(inst::MbarrierWait { bar: e, idx: idx.clone(), parity }));
                }
                body.push(Stmt::inst(inst::MbarrierArrive {
                    bar: full_once,
                    idx: idx.clone(),
                    expect_tx: Some(plan.bytes),
                    cta: None,
                    pred: None,
                }));
                let op = match c {
                    0 => op.clone(),
                    _ => match remap_buffers(Stmt::Copy(op.clone()), &shared_map) {
                        Stmt::Copy(op) => op,
                        _ => unreachable!("a copy maps to a copy"),
                    },
                };
                body.extend(tma::loads(m, &op, plan, None, full_once, &idx, None).map_err(|d| vec![d])?);
            }
            match slots {
                1 => producer_tile.extend(body),
                _ => {
                    let this = simplify(Expr::binary(BinOp::Eq, slot.clone(), Expr::int(c as i64)));
                    producer_tile.push(Stmt::If { cond: this, then: body, otherwise: vec![], loc });
                }
            }
        }
    }
    producer_tile.push(producer_loop);
    if let Some((ring, _)) = prun {
        producer_tile.push(store_base(ring, global(&pbase, n.clone())));
    }
    let producer_work = match (&persistent, ptile) {
        (Some(plan), Some(t)) => {
            let mut work: Vec<Stmt> = prun.iter().map(|&(ring, _)| store_base(ring, Expr::int(0))).collect();
            work.push(tile_loop(m, plan, t, None, producer_tile, loc));
            work
        }
        _ => producer_tile,
    };
    let one_thread = Expr::binary(BinOp::Eq, tid_e.clone(), Expr::int(m.consumer_threads() as i64));
    let mut producer = Vec::new();
    if roles.producer_regs > 0 {
        producer.push(Stmt::inst(inst::SetMaxNReg { inc: false, regs: roles.producer_regs }));
    }
    producer.push(Stmt::If { cond: one_thread, then: producer_work, otherwise: vec![], loc });

    // the consumers: wait for the stage, compute, release it — once, or per ping-pong slot
    // on alternate tiles (slot 1 on its own copies of the consumers' shared tiles)
    let mut slot_work = Vec::new();
    let tiles_of_block = persistent.as_ref().map(|plan| block_tiles(m, plan));
    // a gemm accumulator the kernel never clears starts at zero (the lowering zeroes it at
    // the kernel's start): in a persistent walk, at each tile's start
    let mut implicit_zero = Vec::new();
    if persistent.is_some() {
        let mut accs = BTreeSet::new();
        walk_stmts(&consumers, &mut |x| {
            if let Stmt::Gemm(op) = x {
                accs.insert(op.c);
            }
        });
        walk_stmts(&pre, &mut |x| {
            if let Stmt::Fill { dst, .. } = x {
                accs.remove(&dst.buf);
            }
        });
        for c in accs {
            let dtype = m.buffer(c).dtype;
            let zero = if dtype.is_float() {
                Expr::Const { value: ConstValue::Float(0.0), dtype }
            } else {
                Expr::int_of(0, dtype)
            };
            implicit_zero.push(Stmt::Fill { dst: Region { buf: c, dims: vec![], loc }, value: zero, loc });
        }
    }
    // each slot's statements: slot 1's on its own tiles, made first so slot 0 takes the
    // originals
    let mut bodies = Vec::new();
    if slots > 1 {
        let r = |v: &[Stmt]| v.iter().cloned().map(|x| remap_buffers(x, &shared_map)).collect::<Vec<_>>();
        bodies.push((r(&pre), r(&consumers), r(&post)));
    }
    bodies.insert(0, (pre, consumers, post));
    for (c, (pre, consumers, post)) in (0u32..).zip(bodies) {
        let ctile = persistent.as_ref().map(|_| m.add_var("tile", VarKind::Loop, DType::I32));
        // the block's tile number: the loop's counter, or every other one of a slot
        let local = (slots > 1).then(|| m.add_var("tile_local", VarKind::Temp, DType::I32));
        let crun = running(m, "c");
        let cbase = match (local, crun) {
            (Some(u), _) => simplify(Expr::binary(BinOp::Mul, Expr::var(u, DType::I32), n.clone())),
            (None, Some((_, v))) => Expr::var(v, DType::I32),
            (None, None) => tile_base(ctile),
        };
        let local_i = count_of(var);
        let ci = global(&cbase, local_i.clone());
        let cstage = stage_of(&ci);
        let wait = |bar: BufferId| {
            Stmt::inst(inst::MbarrierWait { bar, idx: cstage.clone(), parity: parity_of(&ci, 0) })
        };
        // a stage is released by every consumer thread, or, in a cluster (whose blocks all
        // write every block's stage), by one lane of each consumer warp to every block
        let release_on = |empty: BufferId, i: Expr| -> Vec<Stmt> {
            let idx = stage_of(&i);
            if blocks == 1 {
                return vec![Stmt::inst(inst::MbarrierArrive {
                    bar: empty,
                    idx,
                    expect_tx: None,
                    cta: None,
                    pred: None,
                })];
            }
            let lane0 = Expr::binary(
                BinOp::Eq,
                Expr::binary(BinOp::FloorMod, tid_e.clone(), Expr::int(32)),
                Expr::int(0),
            );
            // predicated, not branched: the warpgroup stays converged between its wgmmas
            let mut out = vec![Stmt::inst(inst::SyncWarp)];
            out.extend((0..blocks as i64).map(|q| {
                Stmt::inst(inst::MbarrierArrive {
                    bar: empty,
                    idx: idx.clone(),
                    expect_tx: None,
                    cta: Some(Expr::int(q)),
                    pred: Some(lane0.clone()),
                })
            }));
            out
        };
        let release = |i: Expr| release_on(empty, i);
        // once-per-tile tile k freed by its last reader of iteration `l` (counted from 0):
        // the arrival is predicated on `l` being the tile's last iteration
        let once_release = |k: usize, l: &Expr| -> Option<Stmt> {
            let e = once_bars[k].1.filter(|_| once_last[k].is_some())?;
            let last = Expr::binary(BinOp::Sub, n.clone(), Expr::int(1));
            let pred = simplify(Expr::binary(BinOp::Eq, l.clone(), last));
            if pred.as_int() == Some(0) {
                return None; // never the last iteration (a prologue step of a longer loop)
            }
            Some(Stmt::inst(inst::MbarrierArrive {
                bar: e,
                idx: Expr::int(c as i64),
                expect_tx: None,
                cta: None,
                pred: (pred.as_int().is_none()).then_some(pred),
            }))
        };
        let mut work: Vec<Stmt> = crun.iter().map(|&(ring, base)| load_base(ring, base)).collect();
        work.extend(implicit_zero.iter().cloned());
        // the once-per-tile copies' waits, at their places among the statements before the loop
        let once_parity = match ctile {
            Some(t) => simplify(Expr::binary(BinOp::FloorMod, Expr::var(t, DType::I32), Expr::int(2))),
            None => Expr::int(0),
        };
        let once_wait = |k: usize| {
            Stmt::inst(inst::MbarrierWait {
                bar: once_bars[k].0,
                idx: Expr::int(c as i64),
                parity: once_parity.clone(),
            })
        };
        let pre_len = pre.len();
        for (i, x) in pre.into_iter().enumerate() {
            work.extend((0..once.len()).filter(|&k| once_wait_at[k] == i).map(once_wait));
            work.push(x);
        }
        work.extend((0..once.len()).filter(|&k| once_wait_at[k] == pre_len).map(once_wait));
        // ping-pong: the main loops run in turn — slot c waits until the other slot's loop
        // over the block's previous tile was issued (named barrier 3 + c over both slots),
        // and hands over after its own (bar.arrive), only to a tile that exists; so each
        // slot's ring waits are at most one phase ahead of the barrier they wait on
        let handoff =
            |id: u32, arrive: bool| Stmt::inst(inst::NamedBarrier { id, threads: 2 * threads, arrive });
        let main_loop = match &scheduled {
            None => {
                let mut cbody = if split { vec![] } else { vec![wait(full)] };
                for (g, x) in consumers.iter().enumerate() {
                    cbody.extend(waits_before[g].iter().map(|&b| wait(b)));
                    cbody.push(select_stage(x.clone(), &tiles, &cstage));
                    for k in (0..once.len()).filter(|&k| once_last[k] == Some(g)) {
                        cbody.extend(once_release(k, &local_i));
                    }
                }
                if drain.is_some() {
                    // the wgmmas of iteration i - 1 retired at this iteration's wait: release their stage
                    cbody.push(Stmt::If {
                        cond: simplify(Expr::binary(BinOp::Gt, local_i.clone(), Expr::int(0))),
                        then: release(simplify(Expr::binary(BinOp::Sub, ci.clone(), Expr::int(1)))),
                        otherwise: vec![],
                        loc,
                    });
                } else {
                    cbody.extend(release(cstage.clone()));
                }
                vec![Stmt::For {
                    var,
                    start: start.clone(),
                    extent: extent.clone(),
                    kind: ForKind::Serial,
                    body: cbody,
                    loc,
                }]
            }
            Some(plan) => {
                let vt = m.var(var).dtype;
                let mut group = |_: &mut Module, g: usize, l: Expr, steady: bool| -> Vec<Item> {
                    let stage = plan.places[g].stage;
                    let ci = global(&cbase, l.clone());
                    let st = stage_of(&ci);
                    let mut items = Vec::new();
                    let waits = if split {
                        waits_before[g].clone()
                    } else if readers.0 == Some(g) {
                        vec![full]
                    } else {
                        vec![]
                    };
                    for bar in waits {
                        items.push(Item::Stmt {
                            s: Stmt::inst(inst::MbarrierWait {
                                bar,
                                idx: st.clone(),
                                parity: parity_of(&ci, 0),
                            }),
                            stage,
                        });
                    }
                    let value =
                        simplify(Expr::cast(Expr::binary(BinOp::Add, start_i32.clone(), l.clone()), vt));
                    let mut s =
                        select_stage(schedule::at_iteration(consumers[g].clone(), var, &value), &tiles, &st);
                    if steady && is_wgmma(&s) {
                        if let Stmt::Gemm(GemmOp { inst: Some(i), .. }) = &mut s {
                            i.deferred = true;
                        }
                    }
                    items.push(Item::Stmt { s, stage });
                    if per_tile {
                        for (p, op) in producers.iter().enumerate() {
                            if last_readers[p] == Some(g) {
                                let body = release_on(empties[p], ci.clone());
                                items.push(Item::Release { stage, tiles: vec![op.dst.buf], body });
                            }
                        }
                    } else if readers.1 == Some(g) {
                        let all: Vec<BufferId> = tiles.iter().copied().collect();
                        items.push(Item::Release { stage, tiles: all, body: release(ci) });
                    }
                    for k in (0..once.len()).filter(|&k| once_last[k] == Some(g)) {
                        if let Some(body) = once_release(k, &l) {
                            items.push(Item::Release {
                                stage,
                                tiles: vec![once[k].dst.buf],
                                body: vec![body],
                            });
                        }
                    }
                    items
                };
                let mut ex = schedule::expand(m, plan, &n, loc, &tiles, &mut group);
                // the turns only where the tiles' trip counts differ (a causal mask, a
                // window): measured on an H100 (bench/results/attention-turns-2026-12-06-*),
                // +2-3% there, 1.5-7% slower where every tile runs the same loop (the
                // schedule's own overlap already hides the softmax)
                let reads_block = |e: &Expr| {
                    let mut found = false;
                    e.walk(&mut |x| {
                        found |= matches!(x, Expr::Var { id, .. } if matches!(m.var(*id).kind, VarKind::BlockIdx(_)))
                    });
                    found
                };
                let varying = reads_block(&start) || reads_block(&extent);
                if threads == 256 && !varying && c == 0 {
                    ctx.report.push(format!(
                        "{at}: the two consumer warpgroups issue their gemms without taking turns: every tile's loop runs the same steps, and the schedule's overlap hides the softmax"
                    ));
                }
                if threads == 256 && varying && warpgroup_turns(m, &mut ex, &tid_e, 5 + 2 * c, loc) && c == 0
                {
                    ctx.report.push(format!(
                        "{at}: the two consumer warpgroups take turns issuing each step's gemms (named barriers {} and {}): one's softmax runs beside the other's gemms",
                        5 + 2 * c,
                        6 + 2 * c
                    ));
                }
                ex.stmts(loc)
            }
        };
        match (local, &tiles_of_block) {
            (Some(u), Some(total)) => {
                let u = Expr::var(u, DType::I32);
                let when = |cond: Expr, then: Stmt| Stmt::If {
                    cond: simplify(cond),
                    then: vec![then],
                    otherwise: vec![],
                    loc,
                };
                work.push(when(Expr::binary(BinOp::Gt, u.clone(), Expr::int(0)), handoff(3 + c, false)));
                work.extend(main_loop);
                let next = Expr::binary(BinOp::Add, u, Expr::int(1));
                work.push(when(Expr::binary(BinOp::Lt, next, total.clone()), handoff(4 - c, true)));
            }
            _ => work.extend(main_loop),
        }
        if let Some(acc) = drain {
            work.push(Stmt::inst(inst::WgmmaWait { pending: 0, acc: vec![acc], boundary: false }));
            // the last k-tile's stage, retired by that wait (the next tile's producer needs it)
            let last = simplify(Expr::binary(BinOp::Sub, global(&cbase, n.clone()), Expr::int(1)));
            work.push(Stmt::If {
                cond: simplify(Expr::binary(BinOp::Gt, n.clone(), Expr::int(0))),
                then: release(last),
                otherwise: vec![],
                loc,
            });
        }
        // the consumers are done with the once-per-tile tiles: the producer may load the next
        // tile's (every gemm reading them retired within the loop or at the drain above);
        // those freed in the loop's last iteration only where the loop ran none
        for (k, &(_, empty_once)) in once_bars.iter().enumerate() {
            if let Some(e) = empty_once {
                let pred = once_last[k]
                    .is_some()
                    .then(|| simplify(Expr::binary(BinOp::Le, n.clone(), Expr::int(0))));
                if pred.as_ref().and_then(Expr::as_int) == Some(0) {
                    continue;
                }
                let pred = pred.filter(|p| p.as_int().is_none());
                work.push(Stmt::inst(inst::MbarrierArrive {
                    bar: e,
                    idx: Expr::int(c as i64),
                    expect_tx: None,
                    cta: None,
                    pred,
                }));
            }
        }
        if let Some((ring, _)) = crun {
            work.push(store_base(ring, global(&cbase, n.clone())));
        }
        work.extend(post);
        slot_work.push(match (&persistent, ctile) {
            (Some(plan), Some(t)) => {
                let mut walk: Vec<Stmt> =
                    crun.iter().map(|&(ring, _)| store_base(ring, Expr::int(0))).collect();
                walk.push(tile_loop(m, plan, t, local.map(|u| (c, u)), work, loc));
                walk
            }
            _ => work,
        });
    }
    let mut consumer = Vec::new();
    if roles.consumer_regs > 0 {
        consumer.push(Stmt::inst(inst::SetMaxNReg { inc: true, regs: roles.consumer_regs }));
    }
    if slots > 1 {
        let second = slot_work.pop().expect("two slots");
        let first = slot_work.pop().expect("two slots");
        consumer.push(Stmt::If { cond: m.slot_cond(tid), then: first, otherwise: second, loc });
    } else {
        consumer.extend(slot_work.pop().expect("one slot"));
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

    if blocks > 1 {
        ctx.report.push(format!(
            "{at}: clusters of {blocks} blocks: each stage's shared copies arrive from every block of the cluster (multicast); one lane of each consumer warp releases the stage to every block"
        ));
    }
    let mut init = Vec::new();
    // the empty barrier counts every consumer thread, or one lane per consumer warp of
    // every block of the cluster
    let releases = if blocks == 1 { threads } else { threads.div_ceil(32) * blocks };
    for k in 0..s {
        let mut own = Vec::new();
        for &f in &fulls {
            if !own.contains(&f) {
                own.push(f);
                init.push(Stmt::inst(inst::MbarrierInit { bar: f, idx: Expr::int(k), count: 1 }));
            }
        }
        let mut own = Vec::new();
        for &e in &empties {
            if !own.contains(&e) {
                own.push(e);
                init.push(Stmt::inst(inst::MbarrierInit { bar: e, idx: Expr::int(k), count: releases }));
            }
        }
    }
    for &(full_once, empty_once) in &once_bars {
        for c in 0..slots as i64 {
            init.push(Stmt::inst(inst::MbarrierInit { bar: full_once, idx: Expr::int(c), count: 1 }));
            if let Some(e) = empty_once {
                init.push(Stmt::inst(inst::MbarrierInit { bar: e, idx: Expr::int(c), count: threads }));
            }
        }
    }
    init.push(Stmt::inst(inst::FenceMbarrierInit));
    let first = Expr::binary(BinOp::Eq, tid_e.clone(), Expr::int(0));
    let roles = Stmt::If { cond: m.consumer_cond(tid), then: consumer, otherwise: producer, loc };
    Ok(if blocks > 1 {
        // the peers arrive on this block's barriers and multicast into its tiles: every
        // block's init is seen before any starts, and none exits while others may still
        vec![
            Stmt::If { cond: first, then: init, otherwise: vec![], loc },
            Stmt::inst(inst::ClusterSync),
            roles,
            Stmt::inst(inst::ClusterSync),
        ]
    } else {
        vec![Stmt::If { cond: first, then: init, otherwise: vec![], loc }, Stmt::inst(inst::Sync), roles]
    })
}
