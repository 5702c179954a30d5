//! What the passes agree on about `T.gemm`: the warp grid over the output tile, and the
//! instruction plan (`plan`) that `select_instructions` records and the lowering follows.

use tile_ir::{
    DType, FragmentLayout, GemmInst, GemmOp, GemmOperand, Module, OperandSource, Scope, SharedLayout, Target,
    WarpPolicy,
};

/// Split `warps` into a `warps_m × warps_n` grid over an `m × n` tile so each warp's tile is
/// a whole number of 16×8 mma pieces: `FullRow` stacks warps along M, `FullCol` along N,
/// `Square` picks the grid whose warp tile is closest to square.
pub fn warp_grid(policy: WarpPolicy, m: i64, n: i64, warps: i64) -> Result<(i64, i64), String> {
    let fits = |wm: i64, wn: i64| wm * wn == warps && m % (wm * 16) == 0 && n % (wn * 8) == 0;
    let candidates: Vec<(i64, i64)> =
        (1..=warps).filter(|wm| warps % wm == 0).map(|wm| (wm, warps / wm)).collect();
    let pick = match policy {
        WarpPolicy::FullRow => {
            candidates.iter().copied().filter(|&(wm, wn)| fits(wm, wn)).max_by_key(|&(wm, _)| wm)
        }
        WarpPolicy::FullCol => {
            candidates.iter().copied().filter(|&(wm, wn)| fits(wm, wn)).max_by_key(|&(_, wn)| wn)
        }
        WarpPolicy::Square => candidates
            .iter()
            .copied()
            .filter(|&(wm, wn)| fits(wm, wn))
            .min_by_key(|&(wm, wn)| ((m / wm) - (n / wn)).abs() * 1000 + wm),
    };
    pick.ok_or_else(|| {
        format!(
            "{warps} warps cannot tile a {m}x{n} output in whole 16x8 tensor-core pieces{}",
            if m % 16 != 0 || n % 8 != 0 { " (M must be a multiple of 16 and N of 8)" } else { "" }
        )
    })
}

/// The instruction of a gemm on `target`: `wgmma` where it can (and `wgmma` is allowed),
/// else the mma atom of its operand dtype; the grid of warps or warpgroups, and where each
/// operand comes from. The second value says why a gemm that could have been `wgmma` on
/// this target is not (for the report). Err: why there is no instruction (a user error).
pub fn plan(
    m: &Module,
    op: &GemmOp,
    target: &Target,
    allow_wgmma: bool,
) -> Result<(GemmInst, Option<String>), String> {
    if !target.caps.wgmma {
        // Hopper without the `a` features: say so; older targets have nothing to miss
        let why = (target.sm >= 90).then(|| format!("{target} has no wgmma (it needs sm_90a)"));
        return plan_mma_sync(m, op, target).map(|p| (p, why));
    }
    if !allow_wgmma {
        return plan_mma_sync(m, op, target)
            .map(|p| (p, Some("wgmma is off (the wgmma=False option)".into())));
    }
    match plan_wgmma(m, op, target) {
        Ok(p) => Ok((p, None)),
        Err(why) => plan_mma_sync(m, op, target).map(|p| (p, Some(why))),
    }
}

/// Split `groups` warpgroups into a `groups_m × groups_n` grid over an `m × n` tile so each
/// warpgroup's tile is a whole number of 64-row wgmma atoms and of 8 columns, by the policy
/// as `warp_grid` does for warps.
pub fn warpgroup_grid(policy: WarpPolicy, m: i64, n: i64, groups: i64) -> Option<(i64, i64)> {
    let fits = |gm: i64, gn: i64| gm * gn == groups && m % (gm * 64) == 0 && n % (gn * 8) == 0;
    let candidates = (1..=groups)
        .filter(|gm| groups % gm == 0)
        .map(|gm| (gm, groups / gm))
        .filter(|&(gm, gn)| fits(gm, gn));
    match policy {
        WarpPolicy::FullRow => candidates.max_by_key(|&(gm, _)| gm),
        WarpPolicy::FullCol => candidates.max_by_key(|&(_, gn)| gn),
        WarpPolicy::Square => candidates.min_by_key(|&(gm, gn)| ((m / gm) - (n / gn)).abs() * 1000 + gm),
    }
}

/// The widest wgmma N (a multiple of 8, at most 256) that divides a warpgroup's `n` columns.
pub fn wgmma_n(n: i64) -> i64 {
    (1..=tile_ir::target::WGMMA_MAX_N / 8).rev().map(|j| j * 8).find(|w| n % w == 0).unwrap_or(8)
}

/// The `wgmma` plan of a gemm, or why it cannot be one.
fn plan_wgmma(m: &Module, op: &GemmOp, target: &Target) -> Result<GemmInst, String> {
    let (ab, bb, cb) = (m.buffer(op.a), m.buffer(op.b), m.buffer(op.c));
    let atom = target
        .wgmma_atom(ab.dtype)
        .ok_or_else(|| format!("wgmma takes float16 and bfloat16 operands, these are {}", ab.dtype))?;
    if bb.dtype != ab.dtype {
        return Err(format!("A is {} and B {}", ab.dtype, bb.dtype));
    }
    if cb.dtype != DType::F32 {
        return Err(format!("the accumulator is {}; wgmma accumulates in float32 here", cb.dtype));
    }
    let threads = m.kernel.threads as i64;
    if threads % 128 != 0 {
        return Err(format!("{threads} threads are not whole warpgroups of 128"));
    }
    if bb.scope != Scope::Shared {
        return Err("B is not a shared tile (wgmma reads B from shared memory)".into());
    }
    let a_in_registers = ab.scope == Scope::Fragment;
    if a_in_registers && op.transpose_a {
        return Err("A is a transposed fragment".into());
    }
    let (oa, ob) = operands(m, op)?;
    let tile_a = &oa.tile[..];
    let ce = cb.extents();
    let (mm, n) = (ce[0], ce[1]);
    let k = if op.transpose_a { tile_a[0] } else { tile_a[1] };
    if k % atom.k != 0 {
        return Err(format!("K={k} is not a multiple of {}", atom.k));
    }
    let groups = threads / 128;
    let (gm, gn) = warpgroup_grid(op.policy, mm, n, groups).ok_or_else(|| {
        format!("the {mm}x{n} tile does not split into 64-row, 8-column pieces over {groups} warpgroup(s)")
    })?;
    let group_n = n / gn;
    let inst_n = wgmma_n(group_n);
    // the shared operands in wgmma's canonical layouts (of the whole buffer: a view reads
    // part of it); an MN-major operand's instructions must start on a panel
    let layout_of = |o: &GemmOperand, what: &str, k_major: bool| {
        let b = m.buffer(o.buf);
        let e = b.extents();
        let tile = &e[e.len() - 2..];
        let l = SharedLayout::wgmma(tile, b.dtype).ok_or_else(|| {
            format!(
                "the {what} tile {tile:?} has rows of less than 32 bytes or a row count not a multiple of 8"
            )
        })?;
        if !o.is_whole(m) {
            // a window: whole 8-row groups, K in whole 16-column steps, MN-major columns in
            // whole panels (where the swizzle's pattern and the descriptor's strides hold)
            let p = l.panel.unwrap_or(1);
            let cols_ok =
                if k_major { o.start[1] % 16 == 0 } else { o.start[1] % p == 0 && o.tile[1] % p == 0 };
            if o.start[0] % 8 != 0 || o.tile[0] % 8 != 0 || !cols_ok {
                return Err(format!(
                    "the {what} operand (rows {}.., columns {}.. of '{}') does not start on wgmma's {}",
                    o.start[0],
                    o.start[1],
                    b.name,
                    if k_major { "8-row, 16-column steps" } else { "8-row steps and whole panels" }
                ));
            }
        }
        Ok::<SharedLayout, String>(l)
    };
    if !a_in_registers {
        let l = layout_of(&oa, "A", !op.transpose_a)?;
        if op.transpose_a && 64 % l.panel.unwrap_or(64) != 0 {
            return Err("A (stored K x M) is not in whole panels per 64 rows".into());
        }
    }
    let lb = layout_of(&ob, "B", op.transpose_b)?;
    if !op.transpose_b {
        // B stored (K, N): N-major, panels along N
        let p = lb.panel.unwrap_or(1);
        let chunks = group_n / inst_n;
        if (gn > 1 && group_n % p != 0) || (chunks > 1 && inst_n % p != 0) {
            return Err(format!(
                "B (stored K x N) is read in {inst_n}-column pieces that do not start on its {p}-column panels"
            ));
        }
    }
    Ok(GemmInst {
        atom,
        warps_m: gm,
        warps_n: gn,
        a: if a_in_registers { OperandSource::Registers } else { OperandSource::Descriptor },
        b: OperandSource::Descriptor,
        n: inst_n,
        in_flight: false,
        deferred: false,
    })
}

/// Operands A and B as the gemm reads them (`verify` checked their views).
pub fn operands(m: &Module, op: &GemmOp) -> Result<(GemmOperand, GemmOperand), String> {
    Ok((op.operand(m, 0)?, op.operand(m, 1)?))
}

/// The `mma.sync` plan of a gemm.
fn plan_mma_sync(m: &Module, op: &GemmOp, target: &Target) -> Result<GemmInst, String> {
    let (ab, bb, cb) = (m.buffer(op.a), m.buffer(op.b), m.buffer(op.c));
    let atom = target
        .mma_atom(ab.dtype)
        .ok_or_else(|| format!("no tensor-core instruction for {} operands on {target}", ab.dtype))?;
    let (warps_m, warps_n) = warp_grid(
        op.policy,
        cb.extents()[0],
        cb.extents()[1],
        m.kernel.threads as i64 / target.limits.warp_size as i64,
    )?;
    let sixteen_bit = ab.dtype.bytes() == 2;
    // ldmatrix reads 16-byte rows: a window's columns start on one
    let (oa, ob) = operands(m, op)?;
    for (o, what) in [(&oa, "A"), (&ob, "B")] {
        let eb = m.buffer(o.buf).dtype.bytes() as i64;
        if o.start[1] * eb % 16 != 0 {
            return Err(format!(
                "the {what} operand starts at column {} of '{}', not on a 16-byte boundary",
                o.start[1],
                m.buffer(o.buf).name
            ));
        }
    }
    let source = |scope: Scope, transposed: bool| match scope {
        Scope::Fragment => OperandSource::Registers,
        // ldmatrix transposes 16-bit tiles only; 8-bit tiles stored the other way are gathered
        _ if sixteen_bit || !transposed => OperandSource::Ldmatrix,
        _ => OperandSource::Gather,
    };
    Ok(GemmInst {
        atom,
        warps_m,
        warps_n,
        a: source(ab.scope, op.transpose_a),
        // B is "col" in mma: stored (N, K) it reads straight, stored (K, N) it is transposed
        b: source(bb.scope, !op.transpose_b),
        n: atom.n,
        in_flight: false,
        deferred: false,
    })
}

/// The warp grid `(warps_m, warps_n)` of a fragment laid out as an mma accumulator over
/// `warps` warps, if it is one (epilogues that store it by warp: `stmatrix`).
pub fn accumulator_warp_grid(layout: &FragmentLayout, shape: &[i64], warps: i64) -> Option<(i64, i64)> {
    let &[m, n] = shape else { return None };
    (1..=warps).filter(|wm| warps % wm == 0).map(|wm| (wm, warps / wm)).find(|&(wm, wn)| {
        m % (wm * 16) == 0 && n % (wn * 8) == 0 && *layout == FragmentLayout::mma_accumulator(m, n, wm, wn)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warp_grids() {
        assert_eq!(warp_grid(WarpPolicy::Square, 128, 128, 4), Ok((2, 2)));
        assert_eq!(warp_grid(WarpPolicy::FullRow, 128, 128, 4), Ok((4, 1)));
        assert_eq!(warp_grid(WarpPolicy::FullCol, 128, 128, 4), Ok((1, 4)));
        assert_eq!(warp_grid(WarpPolicy::Square, 64, 256, 8), Ok((1, 8))); // 64x32 and 32x64 tie: fewer warp rows
        assert_eq!(warp_grid(WarpPolicy::FullRow, 32, 128, 4), Ok((2, 2)));
        assert!(warp_grid(WarpPolicy::Square, 16, 8, 4).is_err());
    }
}
