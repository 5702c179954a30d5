//! The `wgmma` family (sm_90a): `wgmma.mma_async` with shared operands through matrix
//! descriptors (their fields from the tiles' layouts, `SharedLayout::wgmma_descriptor`) or A
//! from registers, and its fence and groups. The accumulator registers are tied operands
//! (`"+f"`) of the instruction; after a `wait_group`, and before a `wgmma.fence`, every
//! accumulator register passes through an empty `asm volatile` that names it, so the C
//! compiler neither reads it before the wait nor writes it between the fence and the wgmma.

use super::super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    /// The matrix descriptor of the shared operand `buf[idx]`: `tl_wgmma_desc16(base, units,
    /// lbo, sbo, mode)` when the operand's byte offset is an affine multiple of 16 (its
    /// 16-byte units added to a loop-invariant base: one integer add per wgmma), else
    /// `tl_wgmma_desc(address, lbo, sbo, mode)`.
    fn descriptor(&mut self, buf: BufferId, idx: &[Expr], k_major: bool) -> Result<String, Diagnostic> {
        let b = self.m.buffer(buf);
        let d = SharedLayout::of(b)
            .wgmma_descriptor(k_major)
            .map_err(|e| Diagnostic::bug(format!("wgmma operand '{}': {e}", b.name)))?;
        if let Some(bytes) = self.shared_bytes(buf, idx) {
            let mut affine = tile_ir::simplify::to_affine(&bytes);
            if affine.constant % 16 == 0 && affine.terms.values().all(|(c, _)| c % 16 == 0) {
                affine.constant /= 16;
                for (c, _) in affine.terms.values_mut() {
                    *c /= 16;
                }
                let units = self.expr(&tile_ir::simplify::from_affine(&affine, DType::I32))?;
                return Ok(format!(
                    "tl_wgmma_desc16(tl_smem_u32, (unsigned int)({units}), {}u, {}u, {}u)",
                    d.lbo, d.sbo, d.mode
                ));
            }
        }
        let address = self.shared_address(buf, idx)?;
        Ok(format!("tl_wgmma_desc({address}, {}u, {}u, {}u)", d.lbo, d.sbo, d.mode))
    }

    pub(super) fn wgmma(&mut self, w: &inst::Wgmma) -> Result<(), Diagnostic> {
        let regs = (w.n / 2) as usize;
        let c = self.names.buffer(w.c);
        let c_offset = self.expr(&w.c_offset)?;
        let db = self.descriptor(w.b, &w.b_idx, w.b_k_major)?;
        let scale = self.expr(&w.scale_d)?;
        let d_list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
        let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(tl_c[{i}])")).collect();
        let trans_b = if w.b_k_major { 0 } else { 1 };
        let ptx = w.atom.ptx_for(w.n);
        let (a_decl, a_text, a_ins, trans) = match &w.a_from {
            inst::WgmmaA::Shared { idx, k_major } => {
                let da = self.descriptor(w.a, idx, *k_major)?;
                (
                    format!("const unsigned long long tl_da = {da}; "),
                    format!("%{regs}"),
                    "\"l\"(tl_da)".to_string(),
                    format!("{}, {trans_b}", if *k_major { 0 } else { 1 }),
                )
            }
            inst::WgmmaA::Registers { offset } => {
                let a = self.names.buffer(w.a);
                let off = self.expr(offset)?;
                (
                    format!("const unsigned int* tl_ra = (const unsigned int*)(&{a}[{off}]); "),
                    format!("{{%{}, %{}, %{}, %{}}}", regs, regs + 1, regs + 2, regs + 3),
                    "\"r\"(tl_ra[0]), \"r\"(tl_ra[1]), \"r\"(tl_ra[2]), \"r\"(tl_ra[3])".to_string(),
                    format!("{trans_b}"),
                )
            }
        };
        let a_count = if matches!(w.a_from, inst::WgmmaA::Shared { .. }) { 1 } else { 4 };
        let (b_at, s_at) = (regs + a_count, regs + a_count + 1);
        self.line(&format!(
            "{{ {a_decl}const unsigned long long tl_db = {db}; float* tl_c = &{c}[{c_offset}];"
        ));
        self.line(&format!(
            "  asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, %{s_at}, 0; {ptx} {{{}}}, {a_text}, %{b_at}, p, 1, 1, {trans}; }}\" : {} : {a_ins}, \"l\"(tl_db), \"r\"((int)({scale})) : \"memory\"); }}",
            d_list.join(", "),
            outs.join(", ")
        ));
        Ok(())
    }

    /// The registers every wgmma of the kernel reads or writes: accumulators and register
    /// A operands (they are fenced before `wgmma.fence`).
    fn wgmma_registers(&self) -> Vec<BufferId> {
        let mut out = Vec::new();
        walk_stmts(&self.m.kernel.body, &mut |s| {
            if let Stmt::Inst(Inst::Wgmma(w)) = s {
                let a = matches!(w.a_from, inst::WgmmaA::Registers { .. }).then_some(w.a);
                for b in std::iter::once(w.c).chain(a) {
                    if !out.contains(&b) {
                        out.push(b);
                    }
                }
            }
        });
        out
    }

    /// `asm volatile("" : "+f"(r))` over every register of `bufs`: the C compiler keeps its
    /// reads and writes of them on their side of the asm statement before or after.
    fn fence_registers(&mut self, bufs: &[BufferId]) {
        for &b in bufs {
            let n = self.names.buffer(b);
            let count = self.m.buffer(b).num_elements();
            let dtype = self.m.buffer(b).dtype;
            // 16-bit registers are tl_half / tl_bf16: their bits
            let (constraint, field) = match (dtype.bytes(), dtype.is_float()) {
                (2, _) => ("+h", ".bits"),
                (_, true) => ("+f", ""),
                _ => ("+r", ""),
            };
            self.line("#pragma unroll");
            self.line(&format!(
                "for (int tl_r = 0; tl_r < {count}; ++tl_r) asm volatile(\"\" : \"{constraint}\"({n}[tl_r]{field}) :: \"memory\");"
            ));
        }
    }

    pub(super) fn wgmma_fence(&mut self) -> Result<(), Diagnostic> {
        let regs = self.wgmma_registers();
        self.fence_registers(&regs);
        self.line("asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");");
        Ok(())
    }

    pub(super) fn wgmma_wait(&mut self, w: &inst::WgmmaWait) -> Result<(), Diagnostic> {
        // `boundary`: register work issued since the last wgmma (a softmax beside an in-flight
        // P V) ends a basic block before the wait: ptxas schedules within blocks, and in one
        // block with the work it hoisted the wait above it (reusing the retired operand's
        // registers), which ran the work after the tensor cores instead of beside them (SASS
        // of the attention steady state, 2026-12-06). The branch tests a NaN payload no
        // arithmetic makes and only sleeps 0 ns if taken: it changes no result.
        let written = std::mem::take(&mut self.registers_written);
        let last = written.iter().rev().find(|b| !w.acc.contains(b));
        if let (true, Some(&b)) = (w.boundary, last) {
            let n = self.names.buffer(b);
            let test = match self.m.buffer(b).dtype {
                DType::F32 => format!("__float_as_uint({n}[0]) == 0x7fc00001u"),
                DType::F16 | DType::BF16 => format!("{n}[0].bits == 0x7e01"),
                _ => format!("(unsigned int){n}[0] == 0x7fc00001u"),
            };
            self.line(&format!(
                "if ({test}) asm volatile(\"nanosleep.u32 0;\");  // a block boundary before the wait"
            ));
        }
        self.line(&format!("asm volatile(\"wgmma.wait_group.sync.aligned {};\" ::: \"memory\");", w.pending));
        self.fence_registers(&w.acc);
        Ok(())
    }
}
