//! `T.gemm` by its chosen tensor-core family: `mma_sync.rs` (`mma.sync` with `ldmatrix`,
//! sm_80+) and `wgmma.rs` (`wgmma.mma_async` through descriptors, sm_90a).
//!
//! Requires: a gemm with its `GemmInst` (`select_instructions`). Ensures: the family's
//! lowering ran. Does not: check the operands (`select_instructions` did).

mod mma_sync;
mod wgmma;

use super::Lowerer;
use tile_ir::*;

impl Lowerer {
    pub(super) fn gemm(&mut self, op: &GemmOp) -> Vec<Stmt> {
        let Some(plan) = op.inst else {
            self.diags.push(Diagnostic::bug("T.gemm reached the lowering without an instruction"));
            return vec![];
        };
        match plan.atom.scope {
            target::ThreadScope::Warp => self.gemm_mma_sync(op, &plan),
            target::ThreadScope::Warpgroup => self.gemm_wgmma(op, &plan),
            other => {
                self.diags.push(Diagnostic::bug(format!("no lowering for {} ({other:?} scope)", plan.atom)));
                vec![]
            }
        }
    }
}
