//! What the passes agree on about `T.gemm`: the warp grid over the output tile, and the
//! instruction plan (`plan`) that `select_instructions` records and the lowering follows.

use tile_ir::{FragmentLayout, GemmInst, GemmOp, Module, OperandSource, Scope, Target, WarpPolicy};

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

/// The instruction of a gemm on `target`: the mma atom of its operand dtype, the warp grid,
/// and where each operand's fragments come from. Err: why there is none (a user error).
pub fn plan(m: &Module, op: &GemmOp, target: &Target) -> Result<GemmInst, String> {
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
