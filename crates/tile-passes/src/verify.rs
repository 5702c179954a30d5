//! Pass `verify`: check the user's tile program (see `tile_ir::verify` for the invariants).
//!
//! Requires: a parsed tile-level module. Ensures: the invariants of `tile_ir::verify` hold.
//! Does not: change the module.

use crate::Ctx;
use tile_ir::{Diagnostic, Module};

pub fn verify(m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    tile_ir::verify::verify(&m)?;
    if m.kernel.threads > ctx.target.limits.max_threads {
        return Err(vec![Diagnostic::error(
            format!(
                "threads={} is above the {} threads a block may have on {}",
                m.kernel.threads, ctx.target.limits.max_threads, ctx.target.arch
            ),
            m.kernel.loc,
        )]);
    }
    Ok(m)
}
