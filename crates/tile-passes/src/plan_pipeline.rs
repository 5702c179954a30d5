//! Pass `plan_pipeline`: the stages and order of pipelined loops.
//!
//! Requires: tile-level IR with instructions chosen. Ensures: today, nothing — the user's
//! `num_stages` stands and `inject_pipeline` rearranges the loop with cp.async groups, so
//! the module comes back unchanged. This is where an mbarrier pipeline (TMA producers
//! completing on a full barrier per stage, consumers releasing an empty one) is planned on
//! Hopper, from the warp roles: its expansion then runs at thread level
//! (`inject_pipeline/mbarrier.rs` beside the cp.async form; see docs/architecture.md).
//! Does not: rewrite loops (`inject_pipeline` does).

use crate::Ctx;
use tile_ir::{Diagnostic, Module};

pub fn plan_pipeline(m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    Ok(m)
}
