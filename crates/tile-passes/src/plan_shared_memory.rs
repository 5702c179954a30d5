//! Pass `plan_shared_memory`: place every shared buffer in the block's dynamic shared
//! memory, 16-byte aligned, and check the total against the target's limit.
//!
//! Requires: thread-level IR (lowering may add scratch buffers). Ensures: every shared
//! buffer has `shared_offset`; the total fits the target, else a diagnostic naming each
//! buffer and its bytes. Does not: reuse memory between buffers whose lifetimes do not
//! overlap (liveness-based reuse comes with pipelined GEMMs, where it matters).

use crate::Ctx;
use tile_ir::{Diagnostic, Module, Scope};

pub const ALIGN: u64 = 16;

pub fn plan_shared_memory(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let mut offset = 0u64;
    for b in m.buffers.iter_mut().filter(|b| b.scope == Scope::Shared) {
        offset = offset.div_ceil(ALIGN) * ALIGN;
        b.shared_offset = Some(offset);
        offset += b.bytes() as u64;
    }
    let total = offset.div_ceil(ALIGN) * ALIGN;
    if total > ctx.target.shared_limit {
        let list: Vec<String> = m
            .buffers
            .iter()
            .filter(|b| b.scope == Scope::Shared)
            .map(|b| format!("'{}' {:?} {}: {} bytes", b.name, b.shape, b.dtype, b.bytes()))
            .collect();
        let first =
            m.buffers.iter().find(|b| b.scope == Scope::Shared).map(|b| b.loc).unwrap_or(m.kernel.loc);
        return Err(vec![Diagnostic::error(
            format!(
                "the kernel needs {total} bytes of shared memory, above the {} bytes a block may use on {}: {}",
                ctx.target.shared_limit,
                ctx.target.arch,
                list.join("; ")
            ),
            first,
        )
        .with_help("use smaller tiles (block_M, block_N, block_K) or fewer pipeline stages")]);
    }
    ctx.report.push(format!("shared memory: {total} bytes"));
    Ok(m)
}
