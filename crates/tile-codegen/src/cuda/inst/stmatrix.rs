//! `stmatrix` (sm_90+): the warp stores `count` 8 × 8 b16 matrices from `count` 32-bit
//! registers per lane, each lane giving one row's shared address.

use super::super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    pub(super) fn stmatrix(&mut self, st: &inst::Stmatrix) -> Result<(), Diagnostic> {
        let count = st.count();
        let regs = self.names.buffer(st.src);
        let offset = self.expr(&st.src_offset)?;
        let address = self.shared_address(st.dst, &st.dst_idx)?;
        let operands: Vec<String> = (1..=count).map(|i| format!("%{i}")).collect();
        let inputs: Vec<String> = (0..count).map(|i| format!("\"r\"(tl_r[{i}])")).collect();
        self.line(&format!(
            "{{ const unsigned int* tl_r = (const unsigned int*)(&{regs}[{offset}]); asm volatile(\"{} [%0], {{{}}};\" :: \"r\"({address}), {} : \"memory\"); }}",
            st.atom.ptx,
            operands.join(","),
            inputs.join(", ")
        ));
        Ok(())
    }
}
