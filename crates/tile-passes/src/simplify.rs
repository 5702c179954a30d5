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

use crate::Ctx;
use std::collections::HashMap;
use tile_ir::simplify::{simplify as simplify_expr, to_affine};
use tile_ir::{
    BinOp, ConstValue, DType, Diagnostic, Expr, Module, Printed, Region, RegionDim, Stmt, UnOp, VarId,
    VarKind,
};

pub fn simplify(mut m: Module, _ctx: &mut Ctx) -> Result<Module, Vec<Diagnostic>> {
    m.kernel.grid = m.kernel.grid.into_iter().map(simplify_expr).collect();
    let mut ranges = Ranges::default();
    for (i, v) in m.vars.iter().enumerate() {
        let id = VarId(i as u32);
        match v.kind {
            VarKind::BlockIdx(axis) => {
                if let Some(n) = m.kernel.grid.get(axis as usize).and_then(|e| e.as_int()) {
                    ranges.set(id, 0, n - 1);
                }
            }
            VarKind::ThreadIdx => ranges.set(id, 0, m.kernel.threads as i64 - 1),
            _ => {}
        }
    }
    m.kernel.body = ranges.stmts(std::mem::take(&mut m.kernel.body));
    Ok(m)
}

/// Closed intervals `[lo, hi]` of variables known so far.
#[derive(Clone, Default)]
struct Ranges {
    vars: HashMap<VarId, (i64, i64)>,
}

fn dtype_bounds(dt: DType) -> Option<(i64, i64)> {
    Some(match dt {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::U8 => (0, u8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        DType::I64 => (i64::MIN / 4, i64::MAX / 4),
        _ => return None,
    })
}

/// Floor of `a / b` for a positive `b`.
fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

impl Ranges {
    fn set(&mut self, v: VarId, lo: i64, hi: i64) {
        let (lo, hi) = match self.vars.get(&v) {
            Some(&(l, h)) => (l.max(lo), h.min(hi)),
            None => (lo, hi),
        };
        self.vars.insert(v, (lo, hi));
    }

    /// The range of an integer expression, if every value it can take is known to lie in
    /// one that fits its type (so nothing wraps).
    fn range(&self, e: &Expr) -> Option<(i64, i64)> {
        let dt = e.dtype();
        let (tmin, tmax) = dtype_bounds(dt)?;
        let r = self.range_raw(e)?;
        (r.0 >= tmin && r.1 <= tmax && r.0 <= r.1).then_some(r)
    }

    fn range_raw(&self, e: &Expr) -> Option<(i64, i64)> {
        match e {
            Expr::Const { value: ConstValue::Int(v), .. } => Some((*v, *v)),
            Expr::Var { id, .. } => self.vars.get(id).copied(),
            Expr::Binary { op: BinOp::Add | BinOp::Sub | BinOp::Mul, .. }
            | Expr::Unary { op: UnOp::Neg, .. } => {
                let affine = to_affine(e);
                let (mut lo, mut hi) = (affine.constant as i128, affine.constant as i128);
                for (c, atom) in affine.terms.values() {
                    let (a, b) = match atom {
                        Expr::Binary { op: BinOp::Mul, a, b, .. } => {
                            // a product of two non-constant factors
                            let (x, y) = (self.range(a)?, self.range(b)?);
                            let corners = [
                                x.0 as i128 * y.0 as i128,
                                x.0 as i128 * y.1 as i128,
                                x.1 as i128 * y.0 as i128,
                                x.1 as i128 * y.1 as i128,
                            ];
                            (*corners.iter().min()?, *corners.iter().max()?)
                        }
                        _ => {
                            let r = self.range(atom)?;
                            (r.0 as i128, r.1 as i128)
                        }
                    };
                    let c = *c as i128;
                    let (p, q) = (c * a, c * b);
                    lo += p.min(q);
                    hi += p.max(q);
                }
                let fits = |v: i128| v >= i64::MIN as i128 && v <= i64::MAX as i128;
                (fits(lo) && fits(hi)).then_some((lo as i64, hi as i64))
            }
            Expr::Binary { op: BinOp::FloorDiv, a, b, .. } => {
                let c = b.as_int().filter(|c| *c > 0)?;
                let (lo, hi) = self.range(a)?;
                Some((floor_div(lo, c), floor_div(hi, c)))
            }
            Expr::Binary { op: BinOp::FloorMod, a, b, .. } => {
                let c = b.as_int().filter(|c| *c > 0)?;
                match self.range(a) {
                    Some((lo, hi)) if floor_div(lo, c) == floor_div(hi, c) => {
                        let base = floor_div(lo, c) * c;
                        Some((lo - base, hi - base))
                    }
                    _ => Some((0, c - 1)),
                }
            }
            Expr::Binary { op: op @ (BinOp::Min | BinOp::Max), a, b, .. } => {
                let (x, y) = (self.range(a)?, self.range(b)?);
                Some(if *op == BinOp::Min {
                    (x.0.min(y.0), x.1.min(y.1))
                } else {
                    (x.0.max(y.0), x.1.max(y.1))
                })
            }
            Expr::Binary { op: BinOp::BitAnd, a, b, .. } => {
                let c = b.as_int().filter(|c| *c >= 0)?;
                let hi = match self.range(a) {
                    Some((lo, hi)) if lo >= 0 => hi.min(c),
                    _ => c,
                };
                Some((0, hi))
            }
            Expr::Binary { op: BinOp::Shr, a, b, .. } => {
                let c = b.as_int().filter(|c| (0..63).contains(c))?;
                let (lo, hi) = self.range(a)?;
                Some((lo >> c, hi >> c))
            }
            Expr::Cast { a, dtype } if dtype.is_int() && a.dtype().is_int() => self.range(a),
            Expr::Select { a, b, .. } => {
                let (x, y) = (self.range(a)?, self.range(b)?);
                Some((x.0.min(y.0), x.1.max(y.1)))
            }
            _ => None,
        }
    }

    /// The range of `a - b` for two integer expressions of one type.
    fn difference(&self, a: &Expr, b: &Expr) -> Option<(i64, i64)> {
        let (x, y) = (self.range(a)?, self.range(b)?);
        // a - b is computed exactly here; its bounds come from the two ranges, or, when a
        // and b share variables, from their affine difference (tighter)
        let loose = (x.0 - y.1, x.1 - y.0);
        let diff = simplify_expr(Expr::binary(BinOp::Sub, a.clone(), b.clone()));
        let tight = self.range_raw(&diff);
        Some(match tight {
            Some(t) => (t.0.max(loose.0), t.1.min(loose.1)),
            None => loose,
        })
    }

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

    /// Narrow variable ranges by the conjuncts of a condition known to hold
    /// (`v + 2 < 64` bounds `v` above by 61).
    fn assume(&mut self, cond: &Expr) {
        let Expr::Binary { op, a, b, .. } = cond else { return };
        if *op == BinOp::And {
            self.assume(a);
            self.assume(b);
            return;
        }
        if !matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) || !a.dtype().is_int() {
            return;
        }
        // c * v + k (op) 0
        let diff = to_affine(&Expr::binary(BinOp::Sub, (**a).clone(), (**b).clone()));
        if diff.terms.len() != 1 {
            return;
        }
        let (c, atom) = diff.terms.values().next().unwrap();
        let (Expr::Var { id, .. }, c, k) = (atom, *c, diff.constant) else { return };
        // as c * v + k <= bound: Lt 0 is <= -1, Le 0; Gt/Ge flip the sign
        let (c, k, bound) = match op {
            BinOp::Lt => (c, k, -1),
            BinOp::Le => (c, k, 0),
            BinOp::Gt => (-c, -k, -1),
            _ => (-c, -k, 0),
        };
        // c * v <= bound - k
        let rhs = bound - k;
        if c > 0 {
            self.set(*id, i64::MIN / 4, floor_div(rhs, c));
        } else if c < 0 {
            // v >= ceil(rhs / c) for negative c
            self.set(*id, -floor_div(rhs, -c), i64::MAX / 4);
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
            Stmt::AtomicAdd { buf, idx, value, loc } => {
                Stmt::AtomicAdd { buf, idx: self.exprs(idx), value: self.expr(value), loc }
            }
            Stmt::Copy { src, dst, pad, loc } => Stmt::Copy {
                src: self.region(src),
                dst: self.region(dst),
                pad: pad.map(|p| self.expr(p)),
                loc,
            },
            Stmt::Fill { dst, value, loc } => {
                Stmt::Fill { dst: self.region(dst), value: self.expr(value), loc }
            }
            Stmt::Gemm { a, b, c, transpose_a, transpose_b, policy, clear_accum, loc, a_stage, b_stage } => {
                Stmt::Gemm {
                    a,
                    b,
                    c,
                    transpose_a,
                    transpose_b,
                    policy,
                    clear_accum,
                    loc,
                    a_stage: a_stage.map(|e| self.expr(e)),
                    b_stage: b_stage.map(|e| self.expr(e)),
                }
            }
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
            Stmt::Printf { format, args } => Stmt::Printf { format, args: self.exprs(args) },
            Stmt::Let { var, value } => {
                let value = self.expr(value);
                if let Some((lo, hi)) = self.range(&value) {
                    self.set(var, lo, hi);
                }
                Stmt::Let { var, value }
            }
            Stmt::VecCopy { dst, dst_idx, src, src_idx, width } => {
                Stmt::VecCopy { dst, dst_idx: self.exprs(dst_idx), src, src_idx: self.exprs(src_idx), width }
            }
            Stmt::Ldmatrix { dst, dst_offset, count, trans, src, src_idx } => Stmt::Ldmatrix {
                dst,
                dst_offset: self.expr(dst_offset),
                count,
                trans,
                src,
                src_idx: self.exprs(src_idx),
            },
            Stmt::Mma { shape, a, a_offset, b, b_offset, c, c_offset } => Stmt::Mma {
                shape,
                a,
                a_offset: self.expr(a_offset),
                b,
                b_offset: self.expr(b_offset),
                c,
                c_offset: self.expr(c_offset),
            },
            Stmt::Async { body } => Stmt::Async { body: self.stmts(body) },
            Stmt::AsyncCopy { dst, dst_idx, src, src_idx, src_bytes } => Stmt::AsyncCopy {
                dst,
                dst_idx: self.exprs(dst_idx),
                src,
                src_idx: self.exprs(src_idx),
                src_bytes: self.expr(src_bytes),
            },
            other => other,
        }
    }
}
