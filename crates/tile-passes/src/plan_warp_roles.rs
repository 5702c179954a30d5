//! Pass `plan_warp_roles`: the producer warps of a TMA pipeline and the register budgets.
//!
//! Requires: `plan_pipeline` (producers marked `CopyInst::Tma`). Ensures: a kernel with
//! such a pipeline gets `Kernel::roles`: one producer warpgroup launched after the user's
//! `threads` (which keep their numbers and run the user's code: the consumers), and
//! `setmaxnreg` budgets that move registers from the producer (which only issues copies)
//! to the consumers (which hold the accumulators): of the block's registers (the launch's
//! even share of the SM's 64K, in units of 8, times its threads: `setmaxnreg.inc` takes only
//! what other warps released), the producer keeps 24 per thread (FlashAttention-3's budget
//! for a TMA-only producer: ptxas fits its address arithmetic there without spilling) and
//! the consumers share the rest, at most 240 each — when that is
//! more than the launch's even share (`__launch_bounds__(threads, 1)`), else no budgets are
//! set. With `Options::pingpong` (and a persistent walk) the consumers are two slots of the
//! user's threads. With `Options::cluster` or the kernel's own `Kernel::cluster` (a grid the
//! cluster divides along one axis, and a producer copy the cluster's blocks share) the tiles
//! are walked in thread-block clusters (`WarpRoles::cluster`), or, in a kernel launched a
//! tile per block, its blocks run in clusters along `bx`; else the report says why not.
//! A persistent walk needs the pipelined loop's trip count to be the same for every tile,
//! or to depend only on `bx` (a causal mask, a window): then it is evaluated for every `bx`
//! at compile time and, where it differs, the tiles are walked in pairs of about equal work
//! (`WarpRoles::fold`; not with ping-pong, clusters or a raster).
//! Kernels without a TMA pipeline are unchanged. Does not: rewrite statements
//! (`inject_pipeline` does).

use crate::Ctx;
use tile_ir::simplify::simplify;
use tile_ir::*;

/// Registers of one SM's register file.
const REGISTER_FILE: u32 = 65536;

pub fn plan_warp_roles(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    if m.cluster_ops() {
        if let Some(why) = own_cluster_problem(&m, ctx) {
            return Err(vec![Diagnostic::error(why, m.kernel.loc)]);
        }
    }
    let tma_loop = m.kernel.body.iter().find_map(|s| match s {
        Stmt::For { start, extent, body, .. }
            if body.iter().any(|b| matches!(b, Stmt::Copy(CopyOp { inst: Some(CopyInst::Tma), .. }))) =>
        {
            let producers: Vec<CopyOp> = body
                .iter()
                .filter_map(|b| match b {
                    Stmt::Copy(op) if op.inst == Some(CopyInst::Tma) => Some(op.clone()),
                    _ => None,
                })
                .collect();
            Some((start.clone(), extent.clone(), producers))
        }
        _ => None,
    });
    let want_cluster = cluster_wanted(&m, ctx);
    let Some((start, extent, tma_copies)) = tma_loop else {
        if m.cluster_ops() {
            let n = m.cluster_blocks();
            ctx.report.push(if n > 1 {
                format!("launched in thread-block clusters of {n} blocks along bx (T.ClusterKernel), for the kernel's own cluster operations")
            } else {
                "cluster barriers (T.cluster_sync, T.cluster_arrive / T.cluster_wait) in a kernel of no cluster (T.Kernel): barriers of the block".to_string()
            });
        } else if let Some([x, y]) = want_cluster {
            ctx.report.push(format!(
                "no cluster {x}x{y}: the kernel has no TMA pipeline (a cluster's blocks share its producer copies)"
            ));
        }
        return Ok(m);
    };
    let producers = 128;
    // ping-pong (asked for) needs the persistent walk: decided below, counted here
    let reads_block = |e: &Expr| {
        let mut found = false;
        e.walk(&mut |x| {
            found |= matches!(x, Expr::Var { id, .. } if matches!(m.var(*id).kind, VarKind::BlockIdx(_)))
        });
        found
    };
    let tiles = m.kernel.grid.iter().try_fold(1i64, |acc, g| g.as_int().and_then(|v| acc.checked_mul(v)));
    // the fewest and most k-tiles of a tile, when they differ along bx (a causal mask)
    let mut varying = None;
    let why_not_persistent = if ctx.options.no_persistent {
        Some("persistent=False")
    } else if !m.sizes().is_empty() {
        Some("the kernel has symbolic sizes")
    } else if !tiles.is_some_and(|t| (1..i32::MAX as i64).contains(&t)) {
        Some("its grid is not a fixed number of blocks")
    } else if reads_block(&start) || reads_block(&extent) {
        match trips_along_x(&m, &extent) {
            Err(why) => Some(why),
            Ok(Some(_)) if ctx.options.pingpong => Some(
                "the pipelined loop's trip count differs from tile to tile, and ping-pong slots take alternate tiles of equal work",
            ),
            Ok(Some(_)) if m.kernel.raster.is_some() => {
                Some("the pipelined loop's trip count differs from tile to tile, and the kernel asks for a raster order")
            }
            Ok(range) => {
                varying = range;
                None
            }
        }
    } else {
        None
    };
    let persistent = why_not_persistent.is_none();
    let fold = persistent && varying.is_some();
    let pingpong = ctx.options.pingpong && persistent;
    let (cluster, cluster_note) = match want_cluster {
        Some(want) if fold => (
            [1, 1],
            format!(
                "; no cluster {}x{}: the tiles' trip counts differ, and a cluster's blocks walk tiles of equal work",
                want[0], want[1]
            ),
        ),
        Some(want) => match plan_cluster(&m, ctx, want, (&start, &extent), &tma_copies, why_not_persistent, pingpong) {
            Ok((cluster, note)) => (cluster, note),
            Err(why) => ([1, 1], format!("; no cluster {}x{}: {why}", want[0], want[1])),
        },
        None => ([1, 1], String::new()),
    };
    let slots = 1 + pingpong as u32;
    let consumer_groups = slots * m.kernel.threads / 128;
    let launched = slots * m.kernel.threads + producers;
    // the even share the launch bounds give every thread (a multiple of 8, at most 255); the
    // block's registers are that times its threads, and setmaxnreg only moves them between
    // warps (inc takes what dec released: 640 threads start at 96, 61440 in all, and budgets
    // summing to more hung on the H200)
    let share = (REGISTER_FILE / launched).min(255) / 8 * 8;
    let pool = share * launched;
    let producer_regs = 24;
    let consumer_regs = ((pool / 128 - producer_regs) / consumer_groups / 8 * 8).min(240);
    let (producer_regs, consumer_regs) = if ctx.target.caps.setmaxnreg && consumer_regs > share {
        (producer_regs, consumer_regs)
    } else {
        (0, 0)
    };
    // the kernel's own say (T.annotate_producer_reg_dealloc / _consumer_reg_alloc /
    // T.no_set_max_nreg): checked to fit the register file
    let (producer_regs, consumer_regs) = match m.kernel.reg_budget {
        Some(b) if b.none => (0, 0),
        Some(b) if ctx.target.caps.setmaxnreg && (b.producer > 0 || b.consumer > 0) => {
            let p = if b.producer > 0 {
                b.producer
            } else if producer_regs > 0 {
                producer_regs
            } else {
                share
            };
            let c = if b.consumer > 0 {
                b.consumer
            } else if consumer_regs > 0 {
                consumer_regs
            } else {
                share
            };
            if p * 128 + c * 128 * consumer_groups > pool {
                return Err(vec![Diagnostic::error(
                    format!(
                        "register budgets of {p} (producer warpgroup) and {c} (each of {consumer_groups} consumer warpgroup(s)) per thread exceed the {pool} registers the block is launched with ({launched} threads at {share})"
                    ),
                    m.kernel.loc,
                )
                .with_help("lower T.annotate_consumer_reg_alloc, or raise the producer's dealloc")]);
            }
            (p, c)
        }
        _ => (producer_regs, consumer_regs),
    };
    // persistent (decided above): a fixed grid, no sizes (version_edges wraps the body, not
    // each tile), and a k-loop whose trip count is the same for every tile (the ring's phase
    // is computed)
    m.kernel.roles =
        Some(WarpRoles { producers, producer_regs, consumer_regs, persistent, pingpong, cluster, fold });
    let budget = if consumer_regs > 0 {
        format!("setmaxnreg: producer {producer_regs}, consumers {consumer_regs} registers per thread")
    } else {
        format!("no setmaxnreg ({share} registers per thread for every warp)")
    };
    let schedule = match (why_not_persistent, tiles) {
        (None, Some(t)) if pingpong => format!(
            "; persistent, ping-pong: min({t} tiles, SMs) blocks walk the tiles, the two consumer slots taking alternate tiles, their main loops in turn (one's epilogue overlapping the other's tensor-core work)"
        ),
        (None, Some(t)) => match varying {
            Some((lo, hi)) => {
                let gx = m.kernel.grid[0].as_int().unwrap_or(1);
                format!(
                    "; persistent: the tiles' trip counts differ along bx ({lo} to {hi} k-tiles), so min({t} tiles, SMs) blocks walk {} pairs of tiles of about equal work (bx = x with bx = {} - x), carrying the ring's position from tile to tile, the next tile's copies overlapping this one's epilogue",
                    (t + 1) / 2,
                    gx - 1
                )
            }
            None => format!(
                "; persistent: min({t} tiles, SMs) blocks walk the tiles, the next tile's copies overlapping this one's epilogue"
            ),
        },
        (Some(why), _) if ctx.options.pingpong => {
            format!("; one tile per block, not persistent (so not ping-pong either): {why}")
        }
        (Some(why), _) => format!("; one tile per block, not persistent: {why}"),
        (None, None) => String::new(),
    };
    let t = m.kernel.threads;
    let consumers = if pingpong {
        format!("threads 0..{t} and {t}..{} run the kernel (two consumer slots, each numbered 0..{t})", 2 * t)
    } else {
        format!("threads 0..{t} run the kernel (consumers)")
    };
    ctx.report.push(format!(
        "warp-specialized: {consumers}, one producer warpgroup (threads {}..{launched}) issues the TMA copies; {budget}{schedule}{cluster_note}",
        slots * t
    ));
    Ok(m)
}

/// The pipelined loop's trip count (`extent`) for every `bx` of the grid: `Ok(None)` when
/// it is the same for all, `Ok(Some((fewest, most)))` when it differs, `Err` when it reads
/// more than `bx` and constants (another block index, a parameter, memory), so that the
/// tiles' work is not known when the kernel is compiled.
fn trips_along_x(m: &Module, extent: &Expr) -> Result<Option<(i64, i64)>, &'static str> {
    const WHY: &str =
        "the pipelined loop's trip count depends on the block and on values known only at run time";
    let bx = m.vars.iter().position(|v| v.kind == VarKind::BlockIdx(0)).map(|i| VarId(i as u32));
    let mut other = false;
    extent.walk(&mut |e| match e {
        Expr::Var { id, .. } => other |= Some(*id) != bx,
        Expr::Load { .. } => other = true,
        _ => {}
    });
    let (Some(bx), false) = (bx, other) else { return Err(WHY) };
    let gx = m.kernel.grid.first().and_then(|g| g.as_int()).ok_or(WHY)?;
    if !(1..=1 << 20).contains(&gx) {
        return Err(WHY);
    }
    let mut range: Option<(i64, i64)> = None;
    for x in 0..gx {
        let n = simplify(extent.clone().substitute(bx, &Expr::int(x))).as_int().ok_or(WHY)?.max(0);
        range = Some(range.map_or((n, n), |(lo, hi)| (lo.min(n), hi.max(n))));
    }
    Ok(range.filter(|(lo, hi)| lo != hi))
}

/// Why a kernel that works across its cluster itself (`T.cluster_sync`, `T.copy_cluster`)
/// cannot be launched in `T.ClusterKernel`'s clusters, if it cannot: they need sm_90, run
/// along bx (up to 16 blocks: past 8, the portable size, the launcher opts the function in
/// to non-portable cluster sizes, which Hopper's GPCs hold), in a grid along bx they divide,
/// numbered as launched (no raster: a block's rank is `bx % blocks`).
fn own_cluster_problem(m: &Module, ctx: &Ctx) -> Option<String> {
    let [x, y] = m.kernel.cluster.unwrap_or([1, 1]);
    if x * y == 1 {
        // T.cluster_sync in a kernel of no cluster: a cluster of one block
        return None;
    }
    let what = "the kernel works across its thread-block cluster (T.cluster_sync, T.copy_cluster)";
    if !ctx.target.caps.tma {
        return Some(format!(
            "{what}, and {} has no thread-block clusters (sm_90 and newer)",
            ctx.target.arch
        ));
    }
    if y > 1 || x > 16 {
        return Some(format!(
            "{what} of {x}x{y} blocks: such clusters run along bx, 2 to 16 blocks (cluster_dims=(n, 1, 1))"
        ));
    }
    if m.kernel.raster.is_some() {
        return Some(format!("{what}, and T.use_swizzle would number a cluster's blocks apart"));
    }
    match m.kernel.grid.first().and_then(|g| g.as_int()) {
        Some(g) if g % x as i64 != 0 => Some(format!(
            "{what} of {x} blocks along bx, and the grid has {g} blocks along bx, not a multiple of {x}"
        )),
        _ => None,
    }
}

/// The thread-block cluster asked for: the kernel's own (`T.ClusterKernel(cluster_dims=)`),
/// else the compile option `cluster=`; none for `[1, 1]`.
pub(crate) fn cluster_wanted(m: &Module, ctx: &Ctx) -> Option<[u32; 2]> {
    m.kernel.cluster.or(ctx.options.cluster).filter(|&c| c != [1, 1])
}

/// Whether the kernel can run in clusters of `want` (`[x, y]` tiles along `bx`, `by`), and
/// what the report says of it: clusters along one axis whose size divides the grid, at least
/// one producer copy the cluster's blocks share (its position does not depend on the block
/// index along that axis) and can split. A persistent kernel walks its tiles in groups of
/// the cluster; one that is not (a tile per block: symbolic sizes, `persistent=False`) is
/// launched in clusters of consecutive blocks along `bx`, whose pipelined loop (`range`:
/// its start and trip count) must then run alike in every block of a cluster (each waits
/// for its peers' parts of every stage): it may read sizes, parameters and the other block
/// indices, not `bx` nor memory.
fn plan_cluster(
    m: &Module,
    ctx: &Ctx,
    want: [u32; 2],
    range: (&Expr, &Expr),
    copies: &[CopyOp],
    why_not_persistent: Option<&str>,
    pingpong: bool,
) -> Result<([u32; 2], String), String> {
    if pingpong {
        return Err("not with ping-pong consumers (yet)".into());
    }
    if !ctx.target.caps.tma {
        return Err(format!("{} has no thread-block clusters", ctx.target.arch));
    }
    let (axis, n) = match want {
        [x, 1] if x > 1 => (0u8, x),
        [1, y] if y > 1 => (1u8, y),
        _ => return Err("clusters run along one grid axis (bx or by) here".into()),
    };
    if !matches!(n, 2 | 4) {
        return Err(format!("{n} blocks per cluster (2 or 4)"));
    }
    // a grid known only at run time must be a multiple of the cluster whatever its sizes
    // (`T.ceildiv(M, block * n) * n`: a padding block's tile lies past M)
    let grid = m.kernel.grid.get(axis as usize);
    match grid.and_then(|e| e.as_int()) {
        Some(g) if g % n as i64 != 0 => {
            return Err(format!(
                "the grid has {g} blocks along {}, not a multiple of {n}",
                ["bx", "by"][axis as usize]
            ));
        }
        Some(_) => {}
        None if grid.is_some_and(|e| tile_ir::simplify::known_multiple(e, n as i64)) => {}
        None => {
            return Err(format!(
                "the grid's size along {} is known only at run time and not always a multiple of {n} (a grid of `T.ceildiv(size, block * {n}) * {n}` is)",
                ["bx", "by"][axis as usize]
            ));
        }
    }
    if let Some(why) = why_not_persistent {
        // a tile per block: clusters of consecutive blocks along the launch's x
        if axis != 0 {
            return Err(format!(
                "the kernel is not persistent ({why}), and the clusters of a kernel that is not run along bx"
            ));
        }
        if m.kernel.raster.is_some() {
            return Err(format!(
                "the kernel is not persistent ({why}) and asks for a raster order, which would number a cluster's blocks apart"
            ));
        }
        let mut uneven = None;
        for e in [range.0, range.1] {
            e.walk(&mut |x| match x {
                Expr::Var { id, .. } => match m.var(*id).kind {
                    VarKind::BlockIdx(a) if a != axis => {}
                    VarKind::Param | VarKind::Size { .. } => {}
                    _ => uneven = Some(m.var(*id).name.clone()),
                },
                Expr::Load { .. } => uneven = Some("memory".into()),
                _ => {}
            });
        }
        if let Some(what) = uneven {
            return Err(format!(
                "the kernel is not persistent ({why}), and its pipelined loop's range reads {what}: a cluster's blocks must run the same iterations"
            ));
        }
    }
    let mut shared = Vec::new();
    let mut own = Vec::new();
    for op in copies {
        let mut reads = false;
        tile_ir::stmt_exprs(&Stmt::Copy(op.clone()), &mut |e| {
            e.walk(&mut |x| {
                reads |= matches!(x, Expr::Var { id, .. } if m.var(*id).kind == VarKind::BlockIdx(axis))
            })
        });
        let name = m.buffer(op.src.buf).name.clone();
        if reads {
            own.push(name);
            continue;
        }
        let plan = crate::lower::tma::fit(m, op, &ctx.target)?;
        match crate::lower::tma::share(m, op, &plan, n) {
            Ok(_) => shared.push(name),
            Err(why) => return Err(why),
        }
    }
    if shared.is_empty() {
        return Err(format!(
            "every copy ({}) depends on {}: nothing to share",
            own.join(", "),
            ["bx", "by"][axis as usize]
        ));
    }
    let own = if own.is_empty() { String::new() } else { format!(", each loads its own {}", own.join(", ")) };
    Ok((
        want,
        format!(
            "; clusters of {n} blocks along {} multicast {} (each loads 1/{n}){own}",
            ["bx", "by"][axis as usize],
            shared.join(", ")
        ),
    ))
}
