//! Pass `plan_warp_roles`: which warps produce and which consume, and their register budgets.
//!
//! Requires: tile-level IR with instructions chosen. Ensures: today, nothing — every warp
//! runs the user's code (`threads=` threads, no producer warps), so the module comes back
//! unchanged. This is where warp specialization is decided on Hopper (DESIGN.md, step 5):
//! a producer warp(group) issuing TMA with few registers (`setmaxnreg`), one or two
//! consumer warpgroups with more; the compiler's warps are numbered after the user's and
//! KernelInfo's `block` says what is launched.
//! Does not: change the user's thread numbering.

use crate::Ctx;
use tile_ir::{Diagnostic, Module};

pub fn plan_warp_roles(m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    Ok(m)
}
