//! What the passes agree on about `T.gemm`: the warp grid over the output tile and the
//! instruction shape.

use tile_ir::{DType, MmaShape, WarpPolicy};

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

/// The `mma.sync` shape for an operand dtype.
pub fn mma_shape(dtype: DType) -> Option<MmaShape> {
    match dtype {
        DType::F16 | DType::BF16 => Some(MmaShape::M16N8K16),
        DType::I8 => Some(MmaShape::M16N8K32),
        _ => None,
    }
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
