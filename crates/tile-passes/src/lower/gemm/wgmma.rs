//! `T.gemm` on `wgmma.mma_async` (sm_90a): per warpgroup, for each k-step of 16, each
//! 64-row atom of its tile and each piece of `n` columns, one wgmma reads B (and A, unless
//! A is a register fragment) from the shared tiles through descriptors and accumulates into
//! the accumulator's registers; `wgmma.fence` before, one commit group after, and a
//! `wait_group` of 0 — or of 1 when `inject_pipeline` keeps the group in flight across the
//! next k-tile (it drains the last after the loop).
//!
//! Requires: a gemm with a wgmma `GemmInst` (warpgroup grid, N per instruction); the
//! accumulator laid out as the wgmma accumulator and a register A as the wgmma A operand
//! (`infer_layouts`); shared operands in wgmma's canonical layouts (`select_instructions`).
//! Ensures: the accumulator's registers hold `c (+)= a @ b` once the wait retires the group,
//! registers ordered `[mi][column pairs]` as `FragmentLayout::wgmma_accumulator` says. A
//! `clear_accum` gemm starts with scale-d 0 (no register writes before the wgmmas).
//! Does not: pipeline, or fence shared-memory writes for the async proxy (`insert_syncs`
//! and `inject_pipeline` put `fence.proxy.async` before the barriers that precede it).

use super::super::{add, div, i32c, mul, rem, Lowerer};
use tile_ir::simplify::simplify;
use tile_ir::*;

impl Lowerer {
    pub(in crate::lower) fn gemm_wgmma(&mut self, op: &GemmOp, plan: &GemmInst) -> Vec<Stmt> {
        let (a, b, c, ta, tb) = (op.a, op.b, op.c, op.transpose_a, op.transpose_b);
        // each operand's matrix: its stage and leading indices, and its window's start
        let (oa, ob) = match crate::gemm::operands(&self.m, op) {
            Ok(o) => o,
            Err(why) => {
                self.diags.push(Diagnostic::bug(format!("gemm operands: {why}")));
                return vec![];
            }
        };
        let tile_a = oa.tile;
        let ce = self.m.buffer(c).extents();
        let (m, n) = (ce[0], ce[1]);
        let k = if ta { tile_a[0] } else { tile_a[1] };
        let ksteps = k / plan.atom.k;
        let (gm, gn) = (plan.warps_m, plan.warps_n);
        let (tile_m, tile_n) = (m / gm, n / gn);
        let (mi_count, chunks) = (tile_m / 64, tile_n / plan.n);
        let a_in_registers = plan.a == OperandSource::Registers;
        let mut out = Vec::new();
        // the warpgroup's place in the grid, uniform over its 128 threads
        let (s_gm, group_m) = self.temp("group_m", div(div(self.tid(), 128), gn));
        let (s_gn, group_n) = self.temp("group_n", rem(div(self.tid(), 128), gn));
        out.extend([s_gm, s_gn]);
        out.push(Stmt::inst(inst::WgmmaFence));
        for kk in 0..ksteps {
            for mi in 0..mi_count {
                let row0 = simplify(add(mul(group_m.clone(), i32c(tile_m)), i32c(mi * 64)));
                let k0 = i32c(kk * plan.atom.k);
                for j in 0..chunks {
                    let col0 = simplify(add(mul(group_n.clone(), i32c(tile_n)), i32c(j * plan.n)));
                    let a_from = if a_in_registers {
                        // the A fragment's registers: [mi][kk][8]
                        inst::WgmmaA::Registers { offset: i32c((mi * ksteps + kk) * 8) }
                    } else {
                        let idx = if ta {
                            oa.index(k0.clone(), row0.clone())
                        } else {
                            oa.index(row0.clone(), k0.clone())
                        };
                        inst::WgmmaA::Shared { idx: idx.into_iter().map(simplify).collect(), k_major: !ta }
                    };
                    let b_idx = if tb {
                        ob.index(col0.clone(), k0.clone())
                    } else {
                        ob.index(k0.clone(), col0.clone())
                    };
                    let b_idx: Vec<Expr> = b_idx.into_iter().map(simplify).collect();
                    let scale_d = if op.clear_accum && kk == 0 { 0 } else { 1 };
                    out.push(Stmt::inst(inst::Wgmma {
                        atom: plan.atom,
                        n: plan.n,
                        a,
                        a_from,
                        b,
                        b_idx,
                        b_k_major: tb,
                        c,
                        c_offset: i32c(mi * (tile_n / 2) + j * (plan.n / 2)),
                        scale_d: i32c(scale_d),
                    }));
                }
            }
        }
        out.push(Stmt::inst(inst::WgmmaCommit));
        // a deferred gemm's wait is the pipeline's (placed before the first use)
        if !plan.deferred {
            out.push(Stmt::inst(inst::WgmmaWait {
                pending: u32::from(plan.in_flight),
                acc: vec![c],
                boundary: false,
            }));
        }
        out
    }
}
