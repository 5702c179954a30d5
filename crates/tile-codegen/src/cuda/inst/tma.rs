//! Bulk tensor copies (TMA) and the mbarriers they complete on (sm_90): `mbarrier.init`,
//! `arrive` (with `expect_tx`), a `try_wait.parity` loop, `cp.async.bulk.tensor` loads from a
//! `__grid_constant__` tensor map parameter, and the warp-specialization pieces that come
//! with them: `setmaxnreg` and named barriers (`bar.sync id, threads`).

use super::super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    pub(super) fn barrier_address(&mut self, bar: BufferId, idx: &Expr) -> Result<String, Diagnostic> {
        self.shared_address(bar, std::slice::from_ref(idx))
    }

    pub(super) fn mbarrier_init(&mut self, i: &inst::MbarrierInit) -> Result<(), Diagnostic> {
        let b = self.barrier_address(i.bar, &i.idx)?;
        self.line(&format!(
            "asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\" :: \"r\"({b}), \"r\"({}) : \"memory\");",
            i.count
        ));
        Ok(())
    }

    pub(super) fn mbarrier_arrive(&mut self, i: &inst::MbarrierArrive) -> Result<(), Diagnostic> {
        let b = self.barrier_address(i.bar, &i.idx)?;
        // a predicate of the instruction (`@p`), not a branch
        let (pred_decl, at, pred_operand) = match &i.pred {
            Some(p) => {
                let p = self.expr(p)?;
                (
                    ".reg .pred p;\\n\\tsetp.ne.u32 p, %PRED, 0;\\n\\t",
                    "@p ",
                    format!(", \"r\"((unsigned int)({p}))"),
                )
            }
            None => ("", "", String::new()),
        };
        if let Some(cta) = &i.cta {
            if i.expect_tx.is_some() {
                return Err(Diagnostic::bug("a remote mbarrier arrive with expect_tx"));
            }
            // the same barrier in block `cta` of the cluster, at its shared::cluster address;
            // release at the default (CTA) scope, as the stage's reads were this block's own
            // (wgmma-retired or ordered by __syncwarp): `.release.cluster` measured 40% slower
            // on the H200 (bench/results/cluster-probe-*)
            let cta = self.expr(cta)?;
            let decl = pred_decl.replace("%PRED", "%2");
            self.line(&format!(
                "asm volatile(\"{{\\n\\t.reg .b32 remote;\\n\\t{decl}{at}mapa.shared::cluster.u32 remote, %0, %1;\\n\\t{at}mbarrier.arrive.shared::cluster.b64 _, [remote];\\n\\t}}\" :: \"r\"({b}), \"r\"((unsigned int)({cta})){pred_operand} : \"memory\");"
            ));
            return Ok(());
        }
        if i.pred.is_some() {
            if i.expect_tx.is_some() {
                return Err(Diagnostic::bug("a predicated mbarrier arrive with expect_tx"));
            }
            let decl = pred_decl.replace("%PRED", "%1");
            self.line(&format!(
                "asm volatile(\"{{\\n\\t{decl}{at}mbarrier.arrive.shared::cta.b64 _, [%0];\\n\\t}}\" :: \"r\"({b}){pred_operand} : \"memory\");"
            ));
            return Ok(());
        }
        match i.expect_tx {
            Some(bytes) => self.line(&format!(
                "asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"({b}), \"r\"({bytes}) : \"memory\");"
            )),
            None => self.line(&format!(
                "asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\" :: \"r\"({b}) : \"memory\");"
            )),
        }
        Ok(())
    }

    pub(super) fn mbarrier_expect_tx(&mut self, i: &inst::MbarrierExpectTx) -> Result<(), Diagnostic> {
        let b = self.barrier_address(i.bar, &i.idx)?;
        self.line(&format!(
            "asm volatile(\"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\" :: \"r\"({b}), \"r\"({}) : \"memory\");",
            i.bytes
        ));
        Ok(())
    }

    pub(super) fn mbarrier_wait(&mut self, i: &inst::MbarrierWait) -> Result<(), Diagnostic> {
        let b = self.barrier_address(i.bar, &i.idx)?;
        let parity = self.expr(&i.parity)?;
        self.line(&format!("tl_mbarrier_wait({b}, (unsigned int)({parity}));"));
        Ok(())
    }

    pub(super) fn tma_load(&mut self, i: &inst::TmaLoad) -> Result<(), Diagnostic> {
        let rank = i.coords.len();
        if !(1..=5).contains(&rank) {
            return Err(Diagnostic::bug(format!("a bulk tensor copy of rank {rank}")));
        }
        let dst = self.shared_address(i.dst, &i.dst_idx)?;
        let bar = self.barrier_address(i.bar, &i.bar_idx)?;
        // the hardware takes coordinates innermost first
        let mut coords = Vec::new();
        for c in i.coords.iter().rev() {
            coords.push(format!("\"r\"((int)({}))", self.expr(c)?));
        }
        let slots: Vec<String> = (0..rank).map(|k| format!("%{}", k + 2)).collect();
        match i.multicast {
            // every block of the mask gets the box at this offset, its bytes on its barrier
            Some(mask) => self.line(&format!(
                "asm volatile(\"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {{{}}}], [%{}], %{};\" :: \"r\"({dst}), \"l\"((unsigned long long)&tl_tmap{}), {}, \"r\"({bar}), \"h\"((unsigned short){mask}) : \"memory\");",
                slots.join(", "),
                rank + 2,
                rank + 3,
                i.map,
                coords.join(", ")
            )),
            None => self.line(&format!(
                "asm volatile(\"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {{{}}}], [%{}];\" :: \"r\"({dst}), \"l\"((unsigned long long)&tl_tmap{}), {}, \"r\"({bar}) : \"memory\");",
                slots.join(", "),
                rank + 2,
                i.map,
                coords.join(", ")
            )),
        }
        Ok(())
    }

    pub(super) fn tma_store(&mut self, i: &inst::TmaStore) -> Result<(), Diagnostic> {
        let rank = i.coords.len();
        if !(1..=5).contains(&rank) {
            return Err(Diagnostic::bug(format!("a bulk tensor store of rank {rank}")));
        }
        let src = self.shared_address(i.src, &i.src_idx)?;
        let mut coords = Vec::new();
        for c in i.coords.iter().rev() {
            coords.push(format!("\"r\"((int)({}))", self.expr(c)?));
        }
        let slots: Vec<String> = (0..rank).map(|k| format!("%{}", k + 1)).collect();
        self.line(&format!(
            "asm volatile(\"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [%0, {{{}}}], [%{}];\" :: \"l\"((unsigned long long)&tl_tmap{}), {}, \"r\"({src}) : \"memory\");",
            slots.join(", "),
            rank + 1,
            i.map,
            coords.join(", ")
        ));
        Ok(())
    }

    pub(super) fn setmaxnreg(&mut self, i: &inst::SetMaxNReg) -> Result<(), Diagnostic> {
        let dir = if i.inc { "inc" } else { "dec" };
        self.line(&format!(
            "asm volatile(\"setmaxnreg.{dir}.sync.aligned.u32 {};\" ::: \"memory\");",
            i.regs
        ));
        Ok(())
    }

    pub(super) fn named_barrier(&mut self, i: &inst::NamedBarrier) -> Result<(), Diagnostic> {
        let op = if i.arrive { "bar.arrive" } else { "bar.sync" };
        self.line(&format!("asm volatile(\"{op} {}, {};\" ::: \"memory\");", i.id, i.threads));
        Ok(())
    }
}
