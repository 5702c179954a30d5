//! An mma accumulator to its staging tile by `stmatrix` (sm_90+): per warp and 16-row
//! piece, the accumulator's pairs, converted to the tile's 16-bit type, are the registers of
//! 8 × 8 matrices (lane l holds row l / 4, columns 2 (l % 4) + {0, 1} of each), so one
//! `stmatrix.x4` stores two 16 × 8 pieces — 16 bytes per lane and row — where the thread
//! path made a 4-byte store per pair.
//!
//! Requires: a whole fragment in the mma accumulator layout (`select_instructions` checked
//! it: `gemm::accumulator_warp_grid`) and a shared tile of its shape, swizzled so that the
//! eight rows of a matrix fall in distinct banks.
//! Ensures: every element of the tile written once, by every warp (the instruction is
//! warp-collective), with the same rounding as a converting copy.
//! Does not: order the tile's reads (the staged copy's barriers do).

use super::{add, div, i32c, mul, rem, unrolled, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::*;

impl Lowerer {
    pub(super) fn stmatrix_store(
        &mut self,
        acc: BufferId,
        stage: BufferId,
        atom: &'static CopyAtom,
    ) -> Vec<Stmt> {
        let (ab, sb) = (self.m.buffer(acc).clone(), self.m.buffer(stage).clone());
        let warps = self.m.kernel.threads as i64 / 32;
        let grid =
            ab.layout.as_ref().and_then(|l| crate::gemm::accumulator_warp_grid(l, &ab.extents(), warps));
        let (Some((wm, wn)), target::CopyKind::Stmatrix { count, .. }) = (grid, atom.kind) else {
            self.diags
                .push(Diagnostic::bug(format!("stmatrix store of '{}', not an mma accumulator", ab.name)));
            return vec![];
        };
        let (tile_m, tile_n) = (ab.extents()[0] / wm, ab.extents()[1] / wn);
        let (mi_count, ni_count) = (tile_m / 16, tile_n / 8);
        // pieces (16 x 8) per instruction: two matrices each, top and bottom rows
        let per = count as i64 / 2;
        let regs = self.local_buffer(&format!("{}_pack", ab.name), sb.dtype, 2 * count as i64);
        let mut out = Vec::new();
        let (s_lane, lane) = self.temp("lane", rem(self.tid(), 32));
        let (s_wm, warp_m) = self.temp("warp_m", div(div(self.tid(), 32), wn));
        let (s_wn, warp_n) = self.temp("warp_n", rem(div(self.tid(), 32), wn));
        out.extend([s_lane, s_wm, s_wn]);
        let mi_var = self.m.add_var("mi", VarKind::Loop, DType::I32);
        let nj_var = self.m.add_var("nj", VarKind::Loop, DType::I32);
        let (mi, nj) = (Expr::var(mi_var, DType::I32), Expr::var(nj_var, DType::I32));
        let mut step = Vec::new();
        for p in 0..per {
            let piece = add(mul(mi.clone(), i32c(ni_count)), add(mul(nj.clone(), i32c(per)), i32c(p)));
            for e in 0..4 {
                let slot = simplify(add(mul(piece.clone(), i32c(4)), i32c(e)));
                let value = Expr::cast(Expr::load(acc, vec![slot], ab.dtype), sb.dtype);
                step.push(Stmt::Store { buf: regs, idx: vec![i32c(p * 4 + e)], value, loc: ab.loc });
            }
        }
        // lane l addresses row l % 8 of matrix (l / 8) % count: piece i / 2, rows + 8 for odd i
        let matrix = rem(div(lane.clone(), 8), count as i64);
        let row = add(
            add(mul(warp_m, i32c(tile_m)), mul(mi, i32c(16))),
            add(rem(lane, 8), mul(rem(matrix.clone(), 2), i32c(8))),
        );
        let col = mul(add(add(mul(warp_n, i32c(tile_n / 8)), mul(nj, i32c(per))), div(matrix, 2)), i32c(8));
        step.push(Stmt::inst(inst::Stmatrix {
            atom,
            dst: stage,
            dst_idx: vec![simplify(row), simplify(col)],
            src: regs,
            src_offset: i32c(0),
        }));
        out.push(unrolled(mi_var, mi_count, vec![unrolled(nj_var, ni_count / per, step)]));
        out
    }
}
