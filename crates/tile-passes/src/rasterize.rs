//! Pass `rasterize`: `T.use_swizzle(panel, order)` as code — the blocks of the grid are
//! numbered panel by panel, so that blocks running at the same time share operand panels in
//! L2.
//!
//! Requires: thread-level IR (it runs last: the final `simplify` has used the block indices'
//! ranges, which the renumbering keeps — it is a bijection of the grid onto itself).
//! Ensures: with a raster, new launch-index variables (`VarKind::LaunchIdx`, the hardware's
//! `blockIdx`) and `let`s at the top of the body bind the user's block indices: launch block
//! `l = launch_y * grid_x + launch_x` is in panel `l / (panel * grid_across)`; inside it,
//! consecutive blocks walk down the panel's (up to `panel`) lines, then across — every
//! `(bx, by)` exactly once, also when `panel` does not divide the grid. `Kernel::raster` is
//! cleared. Without a raster, nothing changes. (A persistent kernel numbers its tiles with
//! the same function, [`raster_lets`], in its tile loop, and has no raster left here.)
//! Does not: change the grid, or the meaning of `bx`, `by` in the user's code.

use crate::Ctx;
use tile_ir::simplify::simplify;
use tile_ir::{BinOp, DType, Diagnostic, Expr, Module, Raster, Stmt, VarId, VarKind};

pub fn rasterize(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    let Some(r) = m.kernel.raster.take() else { return Ok(m) };
    let block_var = |m: &Module, axis: u8| {
        m.vars.iter().position(|v| v.kind == VarKind::BlockIdx(axis)).map(|i| VarId(i as u32))
    };
    let grid = |axis: usize| Expr::cast(m.kernel.grid.get(axis).cloned().unwrap_or(Expr::int(1)), DType::I32);
    let (gx, gy) = (grid(0), grid(1));
    let i32v = |v: VarId| Expr::var(v, DType::I32);
    let launch_x = m.add_var("launch_x", VarKind::LaunchIdx(0), DType::I32);
    let launch_y = m.add_var("launch_y", VarKind::LaunchIdx(1), DType::I32);
    let block =
        Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, i32v(launch_y), gx.clone()), i32v(launch_x));
    let (mut lets, x_value, y_value) = raster_lets_of(&mut m, block, gx, gy, r);
    // the user's block indices become the renumbered ones (an index the kernel never reads
    // needs no let)
    for (axis, value) in [(0u8, x_value), (1, y_value)] {
        if let Some(v) = block_var(&m, axis) {
            lets.push(Stmt::Let { var: v, value: simplify(value) });
        }
    }
    lets.append(&mut m.kernel.body);
    m.kernel.body = lets;
    Ok(m)
}

/// The raster's numbering of block `block` (linear, in `by * grid_x + bx` order) of a grid
/// of `gx` by `gy` blocks: the `let`s it needs and the (x, y) it gives.
pub fn raster_lets(m: &mut Module, block: Expr, gx: i64, gy: i64, r: Raster) -> (Vec<Stmt>, Expr, Expr) {
    raster_lets_of(m, block, Expr::int(gx), Expr::int(gy), r)
}

fn raster_lets_of(m: &mut Module, block: Expr, gx: Expr, gy: Expr, r: Raster) -> (Vec<Stmt>, Expr, Expr) {
    let i32v = |v: VarId| Expr::var(v, DType::I32);
    let c = Expr::int;
    let bin = Expr::binary;
    let (across, along) = if r.by_rows { (gx, gy) } else { (gy, gx) };
    let panel = r.panel as i64;
    let order = if r.by_rows { "row" } else { "col" };
    let mut lets = vec![Stmt::Comment(format!(
        "T.use_swizzle({panel}, order=\"{order}\"): blocks run panel by panel for L2 reuse"
    ))];
    let mut bind = |m: &mut Module, name: &str, value: Expr| {
        let v = m.add_var(name, VarKind::Temp, DType::I32);
        lets.push(Stmt::Let { var: v, value: simplify(value) });
        i32v(v)
    };
    let block = bind(m, "raster_block", block);
    let per_panel = bind(m, "raster_per_panel", bin(BinOp::Mul, c(panel), across));
    let panel_index = bind(m, "raster_panel", bin(BinOp::FloorDiv, block.clone(), per_panel.clone()));
    let in_panel = bind(m, "raster_in_panel", bin(BinOp::FloorMod, block, per_panel));
    // the last panel may have fewer lines; at least one, which lets the division be plain
    let rest = bin(BinOp::Sub, along, bin(BinOp::Mul, panel_index.clone(), c(panel)));
    let lines = bind(m, "raster_lines", bin(BinOp::Max, bin(BinOp::Min, c(panel), rest), c(1)));
    let across_value = bin(BinOp::FloorDiv, in_panel.clone(), lines.clone());
    let along_value =
        bin(BinOp::Add, bin(BinOp::Mul, panel_index, c(panel)), bin(BinOp::FloorMod, in_panel, lines));
    let (x_value, y_value) =
        if r.by_rows { (across_value, along_value) } else { (along_value, across_value) };
    (lets, simplify(x_value), simplify(y_value))
}
