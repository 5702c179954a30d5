//! Pass `plan_warp_roles`: the producer warps of a TMA pipeline and the register budgets.
//!
//! Requires: `plan_pipeline` (producers marked `CopyInst::Tma`). Ensures: a kernel with
//! such a pipeline gets `Kernel::roles`: one producer warpgroup launched after the user's
//! `threads` (which keep their numbers and run the user's code: the consumers), and
//! `setmaxnreg` budgets that move registers from the producer (which only issues copies)
//! to the consumers (which hold the accumulators): of the 64K registers of the SM, the
//! producer keeps 40 per thread (24 with three or more consumer warpgroups) and the
//! consumers share the rest, at most 240 each — when that is more than the launch's even
//! share (`__launch_bounds__(threads, 1)`), else no budgets are set. Kernels without a TMA
//! pipeline are unchanged. Does not: rewrite statements (`inject_pipeline` does).

use crate::Ctx;
use tile_ir::*;

/// Registers of one SM's register file.
const REGISTER_FILE: u32 = 65536;

pub fn plan_warp_roles(mut m: Module, ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let mut tma = false;
    walk_stmts(&m.kernel.body, &mut |s| {
        tma |= matches!(s, Stmt::Copy(CopyOp { inst: Some(CopyInst::Tma), .. }));
    });
    if !tma {
        return Ok(m);
    }
    let producers = 128;
    let consumer_groups = m.kernel.threads / 128;
    let launched = m.kernel.threads + producers;
    // the even share the launch bounds give every thread (a multiple of 8, at most 255)
    let share = (REGISTER_FILE / launched).min(255) / 8 * 8;
    let producer_regs = if consumer_groups >= 3 { 24 } else { 40 };
    let consumer_regs = ((REGISTER_FILE / 128 - producer_regs) / consumer_groups / 8 * 8).min(240);
    let (producer_regs, consumer_regs) = if ctx.target.caps.setmaxnreg && consumer_regs > share {
        (producer_regs, consumer_regs)
    } else {
        (0, 0)
    };
    m.kernel.roles = Some(WarpRoles { producers, producer_regs, consumer_regs });
    let budget = if consumer_regs > 0 {
        format!("setmaxnreg: producer {producer_regs}, consumers {consumer_regs} registers per thread")
    } else {
        format!("no setmaxnreg ({share} registers per thread for every warp)")
    };
    ctx.report.push(format!(
        "warp-specialized: threads 0..{} run the kernel (consumers), one producer warpgroup (threads {}..{}) issues the TMA copies; {budget}",
        m.kernel.threads, m.kernel.threads, launched
    ));
    Ok(m)
}
