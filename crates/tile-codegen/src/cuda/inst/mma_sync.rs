//! The `mma.sync` family: `ldmatrix` (shared → registers, the atom's PTX) and `mma` (the
//! atom's PTX on four accumulator, four A and two B 32-bit registers per lane).

use super::super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    pub(super) fn ldmatrix(&mut self, ld: &inst::Ldmatrix) -> Result<(), Diagnostic> {
        let (count, _) = ld.form();
        let d = self.names.buffer(ld.dst);
        let dst_offset = self.expr(&ld.dst_offset)?;
        let a = self.shared_address(ld.src, &ld.src_idx)?;
        let regs: Vec<String> = (0..count).map(|i| format!("%{i}")).collect();
        let outs: Vec<String> = (0..count).map(|i| format!("\"=r\"(tl_r[{i}])")).collect();
        self.line(&format!(
            "{{ unsigned int* tl_r = (unsigned int*)(&{d}[{dst_offset}]); asm volatile(\"{} {{{}}}, [%{count}];\" : {} : \"r\"({a})); }}",
            ld.atom.ptx,
            regs.join(","),
            outs.join(", ")
        ));
        Ok(())
    }

    pub(super) fn mma(&mut self, mma: &inst::Mma) -> Result<(), Diagnostic> {
        let (an, bn, cn) = (self.names.buffer(mma.a), self.names.buffer(mma.b), self.names.buffer(mma.c));
        let (a_offset, b_offset, c_offset) =
            (self.expr(&mma.a_offset)?, self.expr(&mma.b_offset)?, self.expr(&mma.c_offset)?);
        let kind = mma.atom.ptx;
        let acc = if mma.atom.acc.is_float() { "f" } else { "r" };
        self.line(&format!(
            "{{ const unsigned int* tl_a = (const unsigned int*)(&{an}[{a_offset}]); const unsigned int* tl_b = (const unsigned int*)(&{bn}[{b_offset}]); {} (&{cn}[{c_offset}]);",
            if acc == "f" { "float* tl_c =" } else { "int* tl_c =" }
        ));
        self.line(&format!(
            "  asm volatile(\"{kind} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\" : \"+{acc}\"(tl_c[0]), \"+{acc}\"(tl_c[1]), \"+{acc}\"(tl_c[2]), \"+{acc}\"(tl_c[3]) : \"r\"(tl_a[0]), \"r\"(tl_a[1]), \"r\"(tl_a[2]), \"r\"(tl_a[3]), \"r\"(tl_b[0]), \"r\"(tl_b[1])); }}"
        ));
        Ok(())
    }
}
