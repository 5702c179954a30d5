//! Ranges of integer index expressions: what `simplify` folds with and what
//! `widen_indices` widens by.

use std::collections::HashMap;
use tile_ir::simplify::{simplify as simplify_expr, to_affine};
use tile_ir::{BinOp, ConstValue, DType, Expr, Module, UnOp, VarId, VarKind};

/// Closed intervals `[lo, hi]` of variables known so far.
#[derive(Clone, Default)]
pub(crate) struct Ranges {
    pub(crate) vars: HashMap<VarId, (i64, i64)>,
}

pub(crate) fn dtype_bounds(dt: DType) -> Option<(i64, i64)> {
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

use tile_ir::arith::floor_div;

impl Ranges {
    /// Block indices over the grid (where it is constant) and the thread index over the block.
    pub(crate) fn of_kernel(m: &Module) -> Ranges {
        let mut ranges = Ranges::default();
        for (i, v) in m.vars.iter().enumerate() {
            let id = VarId(i as u32);
            match v.kind {
                VarKind::BlockIdx(axis) | VarKind::LaunchIdx(axis) => {
                    if let Some(n) = m.kernel.grid.get(axis as usize).and_then(|e| e.as_int()) {
                        ranges.set(id, 0, n - 1);
                    }
                }
                VarKind::ThreadIdx => ranges.set(id, 0, m.kernel.threads as i64 - 1),
                _ => {}
            }
        }
        ranges
    }

    pub(crate) fn set(&mut self, v: VarId, lo: i64, hi: i64) {
        let (lo, hi) = match self.vars.get(&v) {
            Some(&(l, h)) => (l.max(lo), h.min(hi)),
            None => (lo, hi),
        };
        self.vars.insert(v, (lo, hi));
    }

    /// The range of an integer expression, if every value it can take is known to lie in
    /// one that fits its type (so nothing wraps).
    pub(crate) fn range(&self, e: &Expr) -> Option<(i64, i64)> {
        let dt = e.dtype();
        let (tmin, tmax) = dtype_bounds(dt)?;
        let r = self.range_raw(e)?;
        (r.0 >= tmin && r.1 <= tmax && r.0 <= r.1).then_some(r)
    }

    pub(crate) fn range_raw(&self, e: &Expr) -> Option<(i64, i64)> {
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
    pub(crate) fn difference(&self, a: &Expr, b: &Expr) -> Option<(i64, i64)> {
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

    /// Narrow variable ranges by the conjuncts of a condition known to hold
    /// (`v + 2 < 64` bounds `v` above by 61).
    pub(crate) fn assume(&mut self, cond: &Expr) {
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
        // a variable widened to int64 (`widen_indices`) bounds the variable itself
        let atom = match atom {
            Expr::Cast { a, dtype } if dtype.is_int() && a.dtype().is_int() => a,
            other => other,
        };
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
}
