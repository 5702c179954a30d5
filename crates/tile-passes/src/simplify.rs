//! Pass `simplify`: fold constants and normalize integer index arithmetic everywhere.
//!
//! Requires: a well-typed module (either level). Ensures: every expression is simplified
//! (`tile_ir::simplify::simplify`). Does not: move or remove statements.

use crate::Ctx;
use tile_ir::simplify::simplify as simplify_expr;
use tile_ir::{Diagnostic, Expr, Module, Printed, Region, RegionDim, Stmt};

pub fn simplify(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    m.kernel.grid = m.kernel.grid.into_iter().map(simplify_expr).collect();
    m.kernel.body = stmts(std::mem::take(&mut m.kernel.body));
    Ok(m)
}

fn exprs(v: Vec<Expr>) -> Vec<Expr> {
    v.into_iter().map(simplify_expr).collect()
}

fn region(r: Region) -> Region {
    Region {
        dims: r
            .dims
            .into_iter()
            .map(|d| match d {
                RegionDim::Index(e) => RegionDim::Index(simplify_expr(e)),
                RegionDim::Origin(e) => RegionDim::Origin(simplify_expr(e)),
                RegionDim::Slice { start, stop } => {
                    RegionDim::Slice { start: simplify_expr(start), stop: simplify_expr(stop) }
                }
            })
            .collect(),
        ..r
    }
}

pub fn stmts(v: Vec<Stmt>) -> Vec<Stmt> {
    v.into_iter().map(stmt).collect()
}

fn stmt(s: Stmt) -> Stmt {
    match s {
        Stmt::Store { buf, idx, value, loc } => {
            Stmt::Store { buf, idx: exprs(idx), value: simplify_expr(value), loc }
        }
        Stmt::AtomicAdd { buf, idx, value, loc } => {
            Stmt::AtomicAdd { buf, idx: exprs(idx), value: simplify_expr(value), loc }
        }
        Stmt::Copy { src, dst, pad, loc } => {
            Stmt::Copy { src: region(src), dst: region(dst), pad: pad.map(simplify_expr), loc }
        }
        Stmt::Fill { dst, value, loc } => Stmt::Fill { dst: region(dst), value: simplify_expr(value), loc },
        Stmt::Parallel { vars, extents, body, loc, layout } => {
            Stmt::Parallel { vars, extents, body: stmts(body), loc, layout }
        }
        Stmt::For { var, start, extent, kind, body, loc } => Stmt::For {
            var,
            start: simplify_expr(start),
            extent: simplify_expr(extent),
            kind,
            body: stmts(body),
            loc,
        },
        Stmt::If { cond, then, otherwise, loc } => {
            Stmt::If { cond: simplify_expr(cond), then: stmts(then), otherwise: stmts(otherwise), loc }
        }
        Stmt::Print { what, msg, block, loc } => {
            let what = match what {
                Printed::Value(e) => Printed::Value(simplify_expr(e)),
                Printed::Tile(r) => Printed::Tile(region(r)),
            };
            Stmt::Print { what, msg, block, loc }
        }
        Stmt::DeviceAssert { cond, msg, loc } => Stmt::DeviceAssert { cond: simplify_expr(cond), msg, loc },
        Stmt::Printf { format, args } => Stmt::Printf { format, args: exprs(args) },
        Stmt::Let { var, value } => Stmt::Let { var, value: simplify_expr(value) },
        Stmt::VecCopy { dst, dst_idx, src, src_idx, width } => {
            Stmt::VecCopy { dst, dst_idx: exprs(dst_idx), src, src_idx: exprs(src_idx), width }
        }
        Stmt::Ldmatrix { dst, dst_offset, count, trans, src, src_idx } => Stmt::Ldmatrix {
            dst,
            dst_offset: simplify_expr(dst_offset),
            count,
            trans,
            src,
            src_idx: exprs(src_idx),
        },
        Stmt::Mma { shape, a, a_offset, b, b_offset, c, c_offset } => Stmt::Mma {
            shape,
            a,
            a_offset: simplify_expr(a_offset),
            b,
            b_offset: simplify_expr(b_offset),
            c,
            c_offset: simplify_expr(c_offset),
        },
        other => other,
    }
}
