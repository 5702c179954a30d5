//! Memory instructions: vector copies (one reinterpreted load and store of up to 16 bytes),
//! vector atomics (a helper of `atomics.rs`) and `cp.async` (16 bytes, zero-filled past `src_bytes`; plain when proven in bounds).

use super::super::Emitter;
use tile_ir::*;

impl Emitter<'_> {
    pub(super) fn vec_copy(&mut self, i: &inst::VecCopy) -> Result<(), Diagnostic> {
        let bytes = i.width * self.m.buffer(i.src).dtype.bytes();
        let ty = match bytes {
            16 => "uint4",
            8 => "uint2",
            4 => "unsigned int",
            2 => "unsigned short",
            _ => return Err(Diagnostic::bug(format!("vector access of {bytes} bytes"))),
        };
        let d = self.access(i.dst, &i.dst_idx)?;
        let s = self.access(i.src, &i.src_idx)?;
        self.line(&format!("*({ty}*)(&{d}) = *(const {ty}*)(&{s});"));
        Ok(())
    }

    pub(super) fn vec_atomic(&mut self, i: &inst::VecAtomic) -> Result<(), Diagnostic> {
        let h = super::super::atomics::Helper {
            mode: i.mode,
            dtype: self.m.buffer(i.dst).dtype,
            form: super::super::atomics::Form::Vector(i.width),
        };
        self.atomics.insert(h);
        let d = self.access(i.dst, &i.dst_idx)?;
        let s = self.access(i.src, &i.src_idx)?;
        self.line(&format!("{}(&{d}, &{s});", h.name()));
        Ok(())
    }

    pub(super) fn async_copy(&mut self, i: &inst::AsyncCopy) -> Result<(), Diagnostic> {
        let d = self.shared_address(i.dst, &i.dst_idx)?;
        let s = self.access(i.src, &i.src_idx)?;
        // `.cg` (L2 only) takes 16 bytes alone; smaller copies go through L1 (`.ca`)
        let (cache, size) = match i.bytes {
            16 => ("cg", 16),
            8 => ("ca", 8),
            4 => ("ca", 4),
            n => return Err(Diagnostic::bug(format!("cp.async of {n} bytes"))),
        };
        if i.src_bytes.as_int() == Some(size) {
            // proven inside the tensor: no source size, no zero-fill
            self.line(&format!(
                "asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {size};\" :: \"r\"({d}), \"l\"(&{s}) : \"memory\");"
            ));
        } else {
            let n = self.expr(&i.src_bytes)?;
            self.line(&format!(
                "asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {size}, %2;\" :: \"r\"({d}), \"l\"(&{s}), \"r\"({n}) : \"memory\");"
            ));
        }
        Ok(())
    }
}
