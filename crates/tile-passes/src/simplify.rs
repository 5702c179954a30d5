//! Pass `simplify`: fold constants, normalize integer index arithmetic, and fold what the
//! variables' ranges decide.
//!
//! Requires: a well-typed module (either level). Ensures: every expression is simplified
//! (`tile_ir::simplify::simplify`), and integer comparisons, `min`/`max`, `%` and `/` whose
//! outcome follows from the ranges of the variables involved are folded: block indices range
//! over the grid, the thread index over the block, loop variables over their loop (narrowed
//! inside an `if` that bounds them), `let` temporaries over their value's range. This is what
//! removes the bounds guards of tiles that divide their tensor (`by * 128 + r < 4096` with
//! `by < 32`, `r < 128`) and the zero-fill of their `cp.async`. Ranges are computed in the
//! expression's own integer type and give up on anything that could wrap. Does not: move or
//! remove statements (an `if` whose condition folds keeps its shape; codegen drops it).

use crate::ranges::Ranges;
use crate::Ctx;
use tile_ir::simplify::simplify as simplify_expr;
use tile_ir::{
    BinOp, CopyOp, Diagnostic, Expr, GemmOp, Instruction, Module, Printed, Region, RegionDim, Stmt,
};

pub fn simplify(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    m.kernel.grid = m.kernel.grid.into_iter().map(simplify_expr).collect();
    let mut ranges = Ranges::of_kernel(&m);
    m.kernel.body = ranges.stmts(std::mem::take(&mut m.kernel.body));
    Ok(m)
}

impl Ranges {
    /// Fold what the ranges decide, bottom-up, after the plain simplification.
    fn expr(&self, e: Expr) -> Expr {
        let e = simplify_expr(e);
        if self.vars.is_empty() {
            return e;
        }
        // what folds exposes more to fold (`min(8, n) * 2` with `n >= 8` is 16)
        simplify_expr(e.map(&mut |x| self.fold(x)))
    }

    fn fold(&self, x: Expr) -> Expr {
        let int_args = |a: &Expr| a.dtype().is_int();
        match x {
            Expr::Binary { op: op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), a, b, dtype }
                if int_args(&a) && a.dtype() == b.dtype() =>
            {
                if let Some((lo, hi)) = self.difference(&a, &b) {
                    let known = match op {
                        BinOp::Lt => (hi < 0).then_some(true).or((lo >= 0).then_some(false)),
                        BinOp::Le => (hi <= 0).then_some(true).or((lo > 0).then_some(false)),
                        BinOp::Gt => (lo > 0).then_some(true).or((hi <= 0).then_some(false)),
                        _ => (lo >= 0).then_some(true).or((hi < 0).then_some(false)),
                    };
                    if let Some(v) = known {
                        return Expr::int_of(v as i64, dtype);
                    }
                }
                Expr::Binary { op, a, b, dtype }
            }
            Expr::Binary { op: op @ (BinOp::Min | BinOp::Max), a, b, dtype } if int_args(&a) => {
                if let Some((lo, hi)) = self.difference(&a, &b) {
                    // a <= b everywhere: min is a, max is b (and the other way round)
                    if hi <= 0 {
                        return if op == BinOp::Min { *a } else { *b };
                    }
                    if lo >= 0 {
                        return if op == BinOp::Min { *b } else { *a };
                    }
                }
                Expr::Binary { op, a, b, dtype }
            }
            Expr::Binary { op: op @ (BinOp::FloorMod | BinOp::FloorDiv), a, b, dtype } if int_args(&a) => {
                if let (Some(c), Some((lo, hi))) = (b.as_int(), self.range(&a)) {
                    if c > 0 && lo >= 0 && hi < c {
                        return if op == BinOp::FloorMod { *a } else { Expr::int_of(0, dtype) };
                    }
                }
                Expr::Binary { op, a, b, dtype }
            }
            Expr::Binary { op: op @ (BinOp::And | BinOp::Or), a, b, dtype } => {
                let truth = |e: &Expr| e.as_int().map(|v| v != 0);
                match (op, truth(&a), truth(&b)) {
                    (BinOp::And, Some(true), _) => *b,
                    (BinOp::And, _, Some(true)) => *a,
                    (BinOp::And, Some(false), _) | (BinOp::And, _, Some(false)) => Expr::int_of(0, dtype),
                    (BinOp::Or, Some(false), _) => *b,
                    (BinOp::Or, _, Some(false)) => *a,
                    (BinOp::Or, Some(true), _) | (BinOp::Or, _, Some(true)) => Expr::int_of(1, dtype),
                    _ => Expr::Binary { op, a, b, dtype },
                }
            }
            Expr::Select { cond, a, b, dtype } => match cond.as_int() {
                Some(0) => *b,
                Some(_) => *a,
                None => Expr::Select { cond, a, b, dtype },
            },
            other => other,
        }
    }

    fn exprs(&self, v: Vec<Expr>) -> Vec<Expr> {
        v.into_iter().map(|e| self.expr(e)).collect()
    }

    fn region(&self, r: Region) -> Region {
        Region {
            dims: r
                .dims
                .into_iter()
                .map(|d| match d {
                    RegionDim::Index(e) => RegionDim::Index(self.expr(e)),
                    RegionDim::Origin(e) => RegionDim::Origin(self.expr(e)),
                    RegionDim::Slice { start, stop } => {
                        RegionDim::Slice { start: self.expr(start), stop: self.expr(stop) }
                    }
                })
                .collect(),
            ..r
        }
    }

    fn stmts(&mut self, v: Vec<Stmt>) -> Vec<Stmt> {
        v.into_iter().map(|s| self.stmt(s)).collect()
    }

    fn stmt(&mut self, s: Stmt) -> Stmt {
        match s {
            Stmt::Store { buf, idx, value, loc } => {
                Stmt::Store { buf, idx: self.exprs(idx), value: self.expr(value), loc }
            }
            Stmt::Atomic { mode, buf, idx, value, prev, loc } => {
                Stmt::Atomic { mode, buf, idx: self.exprs(idx), value: self.expr(value), prev, loc }
            }
            Stmt::Copy(op) => Stmt::Copy(CopyOp {
                src: self.region(op.src),
                dst: self.region(op.dst),
                pad: op.pad.map(|p| self.expr(p)),
                ..op
            }),
            Stmt::Fill { dst, value, loc } => {
                Stmt::Fill { dst: self.region(dst), value: self.expr(value), loc }
            }
            Stmt::Gemm(op) => Stmt::Gemm(GemmOp {
                a_stage: op.a_stage.map(|e| self.expr(e)),
                b_stage: op.b_stage.map(|e| self.expr(e)),
                ..op
            }),
            Stmt::Parallel { vars, extents, body, loc, layout } => {
                let mut inner = self.clone();
                Stmt::Parallel { vars, extents, body: inner.stmts(body), loc, layout }
            }
            Stmt::For { var, start, extent, kind, body, loc } => {
                let (start, extent) = (self.expr(start), self.expr(extent));
                let mut inner = self.clone();
                if let (Some(s), Some(n)) = (start.as_int(), extent.as_int()) {
                    if n > 0 {
                        inner.set(var, s, s + n - 1);
                    }
                } else if let (Some(s), true) = (start.as_int(), extent.dtype() == tile_ir::DType::I32) {
                    // a trip count of the sizes (T.dynamic): from start to start + extent - 1
                    inner.set(var, s, i32::MAX as i64);
                    let last = Expr::binary(BinOp::Add, Expr::int(s - 1), extent.clone());
                    inner.upper.insert(var, last);
                }
                Stmt::For { var, start, extent, kind, body: inner.stmts(body), loc }
            }
            Stmt::If { cond, then, otherwise, loc } => {
                let cond = self.expr(cond);
                let mut inner = self.clone();
                inner.assume(&cond);
                let then = inner.stmts(then);
                let otherwise = self.clone().stmts(otherwise);
                Stmt::If { cond, then, otherwise, loc }
            }
            Stmt::Print { what, msg, block, loc } => {
                let what = match what {
                    Printed::Value(e) => Printed::Value(self.expr(e)),
                    Printed::Tile(r) => Printed::Tile(self.region(r)),
                };
                Stmt::Print { what, msg, block, loc }
            }
            Stmt::DeviceAssert { cond, msg, loc } => Stmt::DeviceAssert { cond: self.expr(cond), msg, loc },
            Stmt::Let { var, value } => {
                let value = self.expr(value);
                if let Some((lo, hi)) = self.range(&value) {
                    self.set(var, lo, hi);
                }
                Stmt::Let { var, value }
            }
            Stmt::Inst(i) => Stmt::Inst(i.map_exprs(&mut |e| self.expr(e))),
            Stmt::Async { body } => Stmt::Async { body: self.stmts(body) },
            other => other,
        }
    }
}
