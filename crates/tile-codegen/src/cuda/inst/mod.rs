//! Emitters of the thread-level instructions (tile_ir::inst), one file per family: memory
//! (vector copies, `cp.async` and its groups, barriers), the `mma.sync` family
//! (`ldmatrix`, `mma`), `stmatrix`, debugging (`printf`, `trap`). A new instruction adds its emitter
//! here; `wgmma.rs` holds wgmma and its fences and groups; `tma.rs` bulk tensor copies, the
//! mbarriers they complete on, `setmaxnreg` and named barriers.

mod debug;
mod extern_call;
mod memory;
mod mma_sync;
mod stmatrix;
mod tma;
mod wgmma;

use super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    /// One thread-level instruction.
    pub(super) fn inst(&mut self, i: &Inst) -> Result<(), Diagnostic> {
        match i {
            Inst::VecCopy(x) => self.vec_copy(x),
            Inst::VecAtomic(x) => self.vec_atomic(x),
            Inst::AsyncCopy(x) => self.async_copy(x),
            Inst::AsyncArrive(x) => {
                let b = self.barrier_address(x.bar, &x.idx)?;
                self.line(&format!(
                    "asm volatile(\"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\" :: \"r\"({b}) : \"memory\");"
                ));
                Ok(())
            }
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
            Inst::ClusterSync(_) => {
                self.line("asm volatile(\"barrier.cluster.arrive.release;\" ::: \"memory\");");
                self.line("asm volatile(\"barrier.cluster.wait.acquire;\" ::: \"memory\");");
                Ok(())
            }
            Inst::ClusterArrive(_) => {
                self.line("asm volatile(\"barrier.cluster.arrive.release;\" ::: \"memory\");");
                Ok(())
            }
            Inst::ClusterWait(_) => {
                self.line("asm volatile(\"barrier.cluster.wait.acquire;\" ::: \"memory\");");
                Ok(())
            }
            Inst::SyncWarp(_) => {
                self.line("__syncwarp();");
                Ok(())
            }
            Inst::Ldmatrix(x) => self.ldmatrix(x),
            Inst::Mma(x) => self.mma(x),
            Inst::Wgmma(x) => {
                self.registers_written.clear();
                self.wgmma(x)
            }
            Inst::WgmmaFence(_) => {
                self.registers_written.clear();
                self.wgmma_fence()
            }
            Inst::WgmmaCommit(_) => {
                self.registers_written.clear();
                self.line("asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");");
                Ok(())
            }
            Inst::WgmmaWait(x) => self.wgmma_wait(x),
            Inst::FenceProxyAsync(_) => {
                self.line("asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");");
                Ok(())
            }
            Inst::GridDepWait(_) => {
                self.line("asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
                Ok(())
            }
            Inst::GridDepLaunch(_) => {
                self.line("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
                Ok(())
            }
            Inst::FenceMbarrierInit(_) => {
                self.line("asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");");
                Ok(())
            }
            Inst::MbarrierInit(x) => self.mbarrier_init(x),
            Inst::MbarrierArrive(x) => self.mbarrier_arrive(x),
            Inst::MbarrierExpectTx(x) => self.mbarrier_expect_tx(x),
            Inst::MbarrierWait(x) => self.mbarrier_wait(x),
            Inst::TmaLoad(x) => self.tma_load(x),
            Inst::TmaStore(x) => self.tma_store(x),
            Inst::BulkCommit(_) => {
                self.line("asm volatile(\"cp.async.bulk.commit_group;\" ::: \"memory\");");
                Ok(())
            }
            Inst::BulkWait(x) => {
                let read = if x.read { ".read" } else { "" };
                self.line(&format!(
                    "asm volatile(\"cp.async.bulk.wait_group{read} {};\" ::: \"memory\");",
                    x.pending
                ));
                Ok(())
            }
            Inst::SetMaxNReg(x) => self.setmaxnreg(x),
            Inst::NamedBarrier(x) => self.named_barrier(x),
            Inst::Stmatrix(x) => self.stmatrix(x),
            Inst::Printf(x) => self.printf(x),
            Inst::CallExtern(x) => self.call_extern(x),
            Inst::BindPointer(x) => {
                let addr = self.expr(&x.addr)?;
                let ty = super::storage_type(self.m.buffer(x.buf).dtype);
                let name = self.names.buffer(x.buf);
                self.line(&format!("{name} = ({ty}*)({addr});"));
                Ok(())
            }
            Inst::Trap(_) => {
                self.line("__trap();");
                Ok(())
            }
            Inst::LoopBreak(_) => {
                self.line("break;");
                Ok(())
            }
        }
    }
}
