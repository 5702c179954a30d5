//! Ranges of integer index expressions: what `simplify` folds with and what
//! `widen_indices` widens by.

use std::collections::{BTreeMap, HashMap};
use tile_ir::simplify::{simplify as simplify_expr, to_affine};
use tile_ir::{size_max, BinOp, ConstValue, DType, Expr, Module, UnOp, VarId, VarKind};

/// Closed intervals `[lo, hi]` of variables known so far, and the symbolic bounds that
/// prove the guards of kernels with symbolic sizes (see [`Ranges::symbolic_max`]).
#[derive(Clone, Default)]
pub(crate) struct Ranges {
    pub(crate) vars: HashMap<VarId, (i64, i64)>,
    /// Inclusive upper bounds that are expressions of the sizes: a block index under a
    /// grid of `ceildiv(M, 64)` blocks is at most `ceildiv(M, 64) - 1`.
    pub(crate) upper: HashMap<VarId, Expr>,
    /// Sizes with a declared multiple: `M = multiple * q`, `q` a variable of its own that
    /// exists only here (its id is past the module's).
    pub(crate) multiples: HashMap<VarId, (i64, VarId)>,
    /// The symbolic sizes.
    pub(crate) sizes: std::collections::HashSet<VarId>,
}

/// The first id of the quotient variables of [`Ranges::multiples`].
const QUOTIENT_IDS: u32 = u32::MAX / 2;

/// An affine form with exact (i128) coefficients, its atoms keyed by their debug text.
#[derive(Clone, Default)]
struct Lin {
    constant: i128,
    terms: BTreeMap<String, (i128, Expr)>,
}

impl Lin {
    fn of(e: &Expr) -> Lin {
        let a = to_affine(e);
        Lin {
            constant: a.constant as i128,
            terms: a.terms.into_iter().map(|(k, (c, x))| (k, (c as i128, x))).collect(),
        }
    }
    fn add(&mut self, other: Lin, scale: i128) {
        self.constant += scale * other.constant;
        for (k, (c, x)) in other.terms {
            self.terms.entry(k).or_insert((0, x)).0 += scale * c;
        }
        self.terms.retain(|_, (c, _)| *c != 0);
    }
}

/// The values of `dt` the ranges work with: the whole type up to 32 bits; for the 64-bit
/// types a part that leaves the exact (i128) sums of `Lin` room, and where a uint64's bit
/// pattern (see `tile_ir::types`) is its value.
pub(crate) fn dtype_bounds(dt: DType) -> Option<(i64, i64)> {
    Some(match dt {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::U8 => (0, u8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::U16 => (0, u16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        DType::I64 => (i64::MIN / 4, i64::MAX / 4),
        DType::U64 => (0, i64::MAX / 4),
        _ => return None,
    })
}

use tile_ir::arith::floor_div;

impl Ranges {
    /// Block indices over the grid (where it is constant) and the thread index over the block.
    pub(crate) fn of_kernel(m: &Module) -> Ranges {
        let mut ranges = Ranges::default();
        let tiles = m.tiles();
        for (i, v) in m.vars.iter().enumerate() {
            let id = VarId(i as u32);
            match v.kind {
                // a persistent kernel launches at most one block per tile, along x
                VarKind::LaunchIdx(0) if tiles.is_some() => ranges.set(id, 0, tiles.unwrap_or(1) - 1),
                VarKind::LaunchDim(0) if tiles.is_some() => ranges.set(id, 1, tiles.unwrap_or(1)),
                VarKind::BlockIdx(axis) | VarKind::LaunchIdx(axis) => {
                    match m.kernel.grid.get(axis as usize) {
                        Some(g) if g.as_int().is_some() => ranges.set(id, 0, g.as_int().unwrap_or(1) - 1),
                        // a grid of the sizes: CUDA's limit, and the grid itself symbolically
                        Some(g) => {
                            ranges.set(id, 0, tile_ir::size_max(DType::I32) - 1);
                            let last = Expr::binary(BinOp::Sub, g.clone(), Expr::int_of(1, g.dtype()));
                            ranges.upper.insert(id, Expr::cast(last, v.dtype));
                        }
                        None => {}
                    }
                }
                VarKind::ThreadIdx => ranges.set(id, 0, m.launched_threads() as i64 - 1),
                VarKind::Size { multiple_of } => {
                    let max = size_max(v.dtype);
                    ranges.set(id, 0, max);
                    ranges.sizes.insert(id);
                    if multiple_of > 1 {
                        let q = VarId(QUOTIENT_IDS + ranges.multiples.len() as u32);
                        ranges.multiples.insert(id, (multiple_of, q));
                        ranges.set(q, 0, max / multiple_of);
                    }
                }
                _ => {}
            }
        }
        ranges
    }

    /// Does any bound here depend on the sizes?
    fn symbolic(&self) -> bool {
        !self.upper.is_empty() || !self.multiples.is_empty()
    }

    /// `e` with every size that has a declared multiple written `multiple * q`, and without
    /// the casts that widen an integer (they keep its value; `widen_indices` adds them).
    fn with_quotients(&self, e: &Expr) -> Expr {
        let widens = |from: DType, to: DType| {
            matches!(
                (from, to),
                (DType::I32 | DType::I16 | DType::U16 | DType::I8 | DType::U8 | DType::U32, DType::I64)
            ) || from == to
        };
        e.clone().map(&mut |x| match x {
            Expr::Cast { a, dtype } if a.dtype().is_int() && widens(a.dtype(), dtype) => *a,
            Expr::Var { id, dtype } => match self.multiples.get(&id) {
                Some(&(k, q)) => Expr::binary(BinOp::Mul, Expr::Var { id: q, dtype }, Expr::int_of(k, dtype)),
                None => Expr::Var { id, dtype },
            },
            other => other,
        })
    }

    /// An upper bound of the exact value of `e`, found by replacing variables that carry a
    /// symbolic upper bound by it (where their coefficient is positive) and floor divisions
    /// by what bounds them, until the sizes cancel: `64 * by + r - M` with `by <=
    /// ceildiv(M, 64) - 1` and `M = 64 q` is `r - 64`, below 0 for `r < 64`. This is what
    /// proves a guard redundant when T.dynamic promised a multiple.
    pub(crate) fn symbolic_max(&self, e: &Expr) -> Option<i128> {
        let mut lin = Lin::of(&self.with_quotients(e));
        for _ in 0..8 {
            let mut changed = false;
            for (key, (c, atom)) in lin.terms.clone() {
                let atom = match &atom {
                    Expr::Cast { a, dtype } if dtype.is_int() && a.dtype().is_int() => (**a).clone(),
                    _ => atom,
                };
                let replacement: Option<(Lin, i128, i128)> = match &atom {
                    Expr::Var { id, .. } if c > 0 => {
                        self.upper.get(id).map(|u| (Lin::of(&self.with_quotients(u)), c, 0))
                    }
                    Expr::Binary { op: BinOp::FloorDiv, a, b, .. } => match b.as_int() {
                        Some(k) if k > 0 => {
                            let (x, k) = (Lin::of(a), k as i128);
                            if x.terms.values().all(|(t, _)| t % k == 0) {
                                // exact: floordiv(k * y + c0, k) = y + floordiv(c0, k)
                                let mut y =
                                    Lin { constant: x.constant.div_euclid(k), terms: BTreeMap::new() };
                                for (kk, (t, v)) in x.terms {
                                    y.terms.insert(kk, (t / k, v));
                                }
                                Some((y, c, 0))
                            } else if c % k == 0 && c > 0 {
                                // c * floordiv(x, k) <= (c / k) * x
                                Some((x, c / k, 0))
                            } else if c % k == 0 {
                                // c < 0: floordiv(x, k) >= (x - k + 1) / k
                                Some((x, c / k, (c / k) * (1 - k)))
                            } else {
                                None
                            }
                        }
                        _ => None,
                    },
                    _ => None,
                };
                if let Some((with, scale, constant)) = replacement {
                    lin.terms.remove(&key);
                    lin.add(with, scale);
                    lin.constant += constant;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut hi = lin.constant;
        for (c, atom) in lin.terms.values() {
            let (lo, up) = self.range(atom)?;
            hi += if *c > 0 { c * up as i128 } else { c * lo as i128 };
        }
        Some(hi)
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
        let (x, y) = (self.range(a), self.range(b));
        if (x.is_none() || y.is_none()) && !self.symbolic() {
            return None;
        }
        // a - b is computed exactly here; its bounds come from the two ranges, or, when a
        // and b share variables, from their affine difference (tighter)
        let loose = x.zip(y).map(|(x, y)| (x.0 - y.1, x.1 - y.0));
        let diff = simplify_expr(Expr::binary(BinOp::Sub, a.clone(), b.clone()));
        let tight = x.zip(y).and_then(|_| self.range_raw(&diff));
        let (mut lo, mut hi) = match (tight, loose) {
            (Some(t), Some(l)) => (t.0.max(l.0), t.1.min(l.1)),
            (_, Some(l)) => l,
            _ => (i64::MIN, i64::MAX),
        };
        // where the intervals leave the sign open, the sizes may decide it — for operands
        // the sizes also keep inside their type (nothing wraps)
        if self.symbolic() && lo < 0 && hi >= 0 && self.fits_symbolically(a) && self.fits_symbolically(b) {
            let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
            if let Some(h) = self.symbolic_max(&diff) {
                hi = hi.min(clamp(h));
            }
            let neg = simplify_expr(Expr::binary(BinOp::Sub, b.clone(), a.clone()));
            if let Some(h) = self.symbolic_max(&neg) {
                lo = lo.max(clamp(-h));
            }
        }
        (lo != i64::MIN || hi != i64::MAX).then_some((lo, hi))
    }

    /// Does every value of `e` fit its integer type, by its interval or its symbolic bounds?
    fn fits_symbolically(&self, e: &Expr) -> bool {
        if self.range(e).is_some() {
            return true;
        }
        let Some((tmin, tmax)) = dtype_bounds(e.dtype()) else { return false };
        let neg = Expr::unary(UnOp::Neg, e.clone());
        match (self.symbolic_max(e), self.symbolic_max(&neg)) {
            (Some(hi), Some(neg_lo)) => hi <= tmax as i128 && -neg_lo >= tmin as i128,
            _ => false,
        }
    }

    /// A condition `c * v + rest (op) 0` whose `rest` holds sizes (`128 * by + 127 - M < 0`,
    /// the test of `version_edges`): a symbolic upper bound of a variable `v` with `c > 0`
    /// (`by <= floordiv(M - 128, 128)`), for [`Ranges::symbolic_max`].
    fn assume_symbolic(&mut self, op: BinOp, diff: &tile_ir::simplify::Affine) {
        let mentions_size = diff.terms.values().any(|(_, e)| self.sizes.iter().any(|v| e.uses_var(*v)));
        if !mentions_size {
            return;
        }
        // as c * v + rest <= 0
        let (sign, slack) = match op {
            BinOp::Lt => (1, 1),
            BinOp::Le => (1, 0),
            BinOp::Gt => (-1, 1),
            _ => (-1, 0),
        };
        for (key, (c, atom)) in &diff.terms {
            let c = sign * c;
            // a variable, or one widen_indices widened
            let atom = match atom {
                Expr::Cast { a, dtype: DType::I64 } if matches!(a.dtype(), DType::I32 | DType::I64) => a,
                other => other,
            };
            let Expr::Var { id, dtype } = atom else { continue };
            if c <= 0 || !matches!(dtype, DType::I32 | DType::I64) {
                continue;
            }
            // v <= floordiv(-(rest) - slack, c)
            let mut rest = tile_ir::simplify::Affine {
                constant: sign * diff.constant + slack,
                terms: Default::default(),
            };
            for (k, (t, e)) in &diff.terms {
                if k != key {
                    rest.terms.insert(k.clone(), (sign * t, e.clone()));
                }
            }
            // in int64: the bound is exact arithmetic for symbolic_max, never code
            let neg_rest = Expr::unary(UnOp::Neg, tile_ir::simplify::from_affine(&rest, DType::I64));
            let bound = Expr::binary(BinOp::FloorDiv, neg_rest, Expr::int_of(c, DType::I64));
            self.upper.insert(*id, bound);
        }
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
        // a uint64 comparison orders bit patterns above 2^63 after the rest, which the
        // (signed) bounds below would leave out: `v > 10` holds for them too
        if !matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
            || !a.dtype().is_int()
            || a.dtype() == DType::U64
        {
            return;
        }
        // c * v + k (op) 0
        let diff = to_affine(&Expr::binary(BinOp::Sub, (**a).clone(), (**b).clone()));
        if diff.terms.len() != 1 {
            self.assume_symbolic(*op, &diff);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uint64_comparison_bounds_nothing() {
        // `v > 10` holds for v = 2^64 - 1, held as -1: a lower bound of 11 would be wrong
        let v = VarId(0);
        let mut r = Ranges::default();
        r.assume(&Expr::binary(BinOp::Gt, Expr::var(v, DType::U64), Expr::int_of(10, DType::U64)));
        assert_eq!(r.vars.get(&v), None);
        let mut r = Ranges::default();
        r.assume(&Expr::binary(BinOp::Gt, Expr::var(v, DType::U32), Expr::int_of(10, DType::U32)));
        assert_eq!(r.vars.get(&v).map(|b| b.0), Some(11));
    }

    #[test]
    fn unsigned_bounds() {
        assert_eq!(dtype_bounds(DType::U16), Some((0, 65535)));
        // a uint64 constant from 2^63 up (held negative) has no range of its type
        let big = Expr::int_of(-1, DType::U64);
        assert_eq!(Ranges::default().range(&big), None);
        assert_eq!(Ranges::default().range(&Expr::int_of(7, DType::U64)), Some((7, 7)));
    }
}
