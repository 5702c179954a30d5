//! Emitters of the thread-level instructions (tile_ir::inst), one file per family: memory
//! (vector copies, `cp.async` and its groups, barriers), the `mma.sync` family
//! (`ldmatrix`, `mma`), `stmatrix`, debugging (`printf`, `trap`). A new instruction adds its emitter
//! here; `wgmma.rs` holds wgmma and its fences and groups; `tma.rs` and `mbarrier.rs` go
//! beside these.

mod debug;
mod memory;
mod mma_sync;
mod stmatrix;
mod wgmma;

use super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    /// One thread-level instruction.
    pub(super) fn inst(&mut self, i: &Inst) -> Result<(), Diagnostic> {
        match i {
            Inst::VecCopy(x) => self.vec_copy(x),
            Inst::AsyncCopy(x) => self.async_copy(x),
            Inst::AsyncCommit(_) => {
                self.line("asm volatile(\"cp.async.commit_group;\" ::: \"memory\");");
                Ok(())
            }
            Inst::AsyncWait(x) => {
                self.line(&format!("asm volatile(\"cp.async.wait_group {};\" ::: \"memory\");", x.pending));
                Ok(())
            }
            Inst::Sync(_) => {
                self.line("__syncthreads();");
                Ok(())
            }
            Inst::Ldmatrix(x) => self.ldmatrix(x),
            Inst::Mma(x) => self.mma(x),
            Inst::Wgmma(x) => self.wgmma(x),
            Inst::WgmmaFence(_) => self.wgmma_fence(),
            Inst::WgmmaCommit(_) => {
                self.line("asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");");
                Ok(())
            }
            Inst::WgmmaWait(x) => self.wgmma_wait(x),
            Inst::FenceProxyAsync(_) => {
                self.line("asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");");
                Ok(())
            }
            Inst::Stmatrix(x) => self.stmatrix(x),
            Inst::Printf(x) => self.printf(x),
            Inst::Trap(_) => {
                self.line("__trap();");
                Ok(())
            }
        }
    }
}
