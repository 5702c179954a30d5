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
        let outs: Vec<String> = (0..count).map(|i| format!("\"=r\"(r[{i}])")).collect();
        self.line(&format!(
            "{{ unsigned int* r = (unsigned int*)(&{d}[{dst_offset}]); asm volatile(\"{} {{{}}}, [%{count}];\" : {} : \"r\"({a})); }}",
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
            "{{ const unsigned int* a = (const unsigned int*)(&{an}[{a_offset}]); const unsigned int* b = (const unsigned int*)(&{bn}[{b_offset}]); {} (&{cn}[{c_offset}]);",
            if acc == "f" { "float* c =" } else { "int* c =" }
        ));
        self.line(&format!(
            "  asm volatile(\"{kind} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\" : \"+{acc}\"(c[0]), \"+{acc}\"(c[1]), \"+{acc}\"(c[2]), \"+{acc}\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1])); }}"
        ));
        Ok(())
    }
}
