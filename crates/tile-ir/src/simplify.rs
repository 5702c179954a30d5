//! Expression simplification: constant folding and affine normalization of integer
//! index arithmetic (so `(i + 1) * 64 - i * 64` is known to be `64`).

use crate::arith::{floor_div as floordiv, floor_mod};
use crate::ir::*;
use crate::types::DType;
use std::collections::BTreeMap;

/// An integer expression as `constant + Σ coefficient × atom`.
#[derive(Clone, Debug, Default)]
pub struct Affine {
    pub constant: i64,
    /// Keyed by the atom's debug form, so the order (and output) is deterministic.
    pub terms: BTreeMap<String, (i64, Expr)>,
}

impl Affine {
    fn add(mut self, other: Affine, sign: i64) -> Affine {
        self.constant = self.constant.wrapping_add(sign.wrapping_mul(other.constant));
        for (k, (c, e)) in other.terms {
            let entry = self.terms.entry(k).or_insert((0, e));
            entry.0 += sign * c;
        }
        self.terms.retain(|_, (c, _)| *c != 0);
        self
    }
    fn scale(mut self, s: i64) -> Affine {
        self.constant = self.constant.wrapping_mul(s);
        for (c, _) in self.terms.values_mut() {
            *c *= s;
        }
        self.terms.retain(|_, (c, _)| *c != 0);
        self
    }
    pub fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.constant)
    }
}

/// Affine form of an integer expression (atoms are maximal non-affine sub-expressions).
pub fn to_affine(e: &Expr) -> Affine {
    let atom = |e: &Expr| {
        let mut a = Affine::default();
        a.terms.insert(format!("{e:?}"), (1, e.clone()));
        a
    };
    match e {
        Expr::Const { value: ConstValue::Int(v), .. } => Affine { constant: *v, terms: BTreeMap::new() },
        Expr::Binary { op: BinOp::Add, a, b, .. } => to_affine(a).add(to_affine(b), 1),
        Expr::Binary { op: BinOp::Sub, a, b, .. } => to_affine(a).add(to_affine(b), -1),
        Expr::Binary { op: BinOp::Mul, a, b, .. } => {
            let (fa, fb) = (to_affine(a), to_affine(b));
            match (fa.as_const(), fb.as_const()) {
                (Some(c), _) => fb.scale(c),
                (_, Some(c)) => fa.scale(c),
                _ => atom(e),
            }
        }
        Expr::Unary { op: UnOp::Neg, a, .. } => to_affine(a).scale(-1),
        _ => atom(e),
    }
}

/// Rebuild an expression of `dtype` from an affine form.
pub fn from_affine(a: &Affine, dtype: DType) -> Expr {
    let mut out: Option<Expr> = None;
    for (c, e) in a.terms.values() {
        let e = Expr::cast(e.clone(), dtype);
        let term = if *c == 1 { e } else { Expr::binary(BinOp::Mul, e, Expr::int_of(*c, dtype)) };
        out = Some(match out {
            None => term,
            Some(prev) => Expr::binary(BinOp::Add, prev, term),
        });
    }
    match out {
        None => Expr::int_of(a.constant, dtype),
        Some(e) if a.constant == 0 => e,
        Some(e) => Expr::binary(BinOp::Add, e, Expr::int_of(a.constant, dtype)),
    }
}

/// `a op b` for integer (or bool) operands of `dt`, unwrapped (the caller wraps to the
/// result's type); None where it has no value or is left to run time.
fn fold_int(op: BinOp, a: i64, b: i64, dt: DType) -> Option<i64> {
    if dt == DType::U64 {
        return fold_u64(op, a as u64, b as u64).map(|v| v as i64);
    }
    Some(match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::FloorDiv if b != 0 => floordiv(a, b),
        BinOp::FloorMod if b != 0 => floor_mod(a, b),
        BinOp::Max => a.max(b),
        BinOp::Min => a.min(b),
        BinOp::Eq => (a == b) as i64,
        BinOp::Ne => (a != b) as i64,
        BinOp::Lt => (a < b) as i64,
        BinOp::Le => (a <= b) as i64,
        BinOp::Gt => (a > b) as i64,
        BinOp::Ge => (a >= b) as i64,
        BinOp::And => ((a != 0) && (b != 0)) as i64,
        BinOp::Or => ((a != 0) || (b != 0)) as i64,
        BinOp::BitAnd => a & b,
        BinOp::BitOr => a | b,
        BinOp::BitXor => a ^ b,
        BinOp::Shl if (0..63).contains(&b) => a.wrapping_shl(b as u32),
        BinOp::Shr if (0..63).contains(&b) => a >> b,
        _ => return None,
    })
}

/// [`fold_int`] for uint64 operands: unsigned order, division and logical shifts.
fn fold_u64(op: BinOp, a: u64, b: u64) -> Option<u64> {
    Some(match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::FloorDiv if b != 0 => a / b,
        BinOp::FloorMod if b != 0 => a % b,
        BinOp::Max => a.max(b),
        BinOp::Min => a.min(b),
        BinOp::Eq => (a == b) as u64,
        BinOp::Ne => (a != b) as u64,
        BinOp::Lt => (a < b) as u64,
        BinOp::Le => (a <= b) as u64,
        BinOp::Gt => (a > b) as u64,
        BinOp::Ge => (a >= b) as u64,
        BinOp::And => ((a != 0) && (b != 0)) as u64,
        BinOp::Or => ((a != 0) || (b != 0)) as u64,
        BinOp::BitAnd => a & b,
        BinOp::BitOr => a | b,
        BinOp::BitXor => a ^ b,
        BinOp::Shl if b < 64 => a << b,
        BinOp::Shr if b < 64 => a >> b,
        _ => return None,
    })
}

/// Wrap an integer to the width of `dtype` (two's complement).
pub fn wrap_int(v: i64, dtype: DType) -> i64 {
    match dtype {
        DType::Bool => (v != 0) as i64,
        DType::I8 => v as i8 as i64,
        DType::U8 => v as u8 as i64,
        DType::I16 => v as i16 as i64,
        DType::U16 => v as u16 as i64,
        DType::I32 => v as i32 as i64,
        DType::U32 => v as u32 as i64,
        // int64 and uint64 (its bit pattern) use every bit
        _ => v,
    }
}

/// Fold constants and simplify integer arithmetic, bottom-up.
pub fn simplify(e: Expr) -> Expr {
    e.map(&mut |e| match e {
        Expr::Binary { op, a, b, dtype } => {
            let (ca, cb) = (a.as_int(), b.as_int());
            let int_operands = a.dtype().is_int() || a.dtype() == DType::Bool;
            if let (Some(x), Some(y), true) = (ca, cb, int_operands) {
                if let Some(v) = fold_int(op, x, y, a.dtype()) {
                    return Expr::int_of(wrap_int(v, dtype), dtype);
                }
            }
            if dtype.is_int() && matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) {
                let affine = to_affine(&Expr::Binary { op, a: a.clone(), b: b.clone(), dtype });
                return from_affine(&affine, dtype);
            }
            match (op, ca, cb) {
                (BinOp::FloorDiv, _, Some(1)) => *a,
                (BinOp::FloorMod, _, Some(1)) => Expr::int_of(0, dtype),
                // a multiple of m has no remainder, a multiple of 2^k no bits below k (a
                // swizzle's row key of a row that is a multiple of its period)
                (BinOp::FloorMod, _, Some(m)) if m > 0 && dtype.is_int() && known_multiple(&a, m) => {
                    Expr::int_of(0, dtype)
                }
                (BinOp::BitAnd, _, Some(m))
                    if m > 0 && (m & (m + 1)) == 0 && dtype.is_int() && known_multiple(&a, m + 1) =>
                {
                    Expr::int_of(0, dtype)
                }
                // (x >> s) & (2^k - 1) of a multiple of 2^(k + s)
                (BinOp::BitAnd, _, Some(m))
                    if m > 0 && (m & (m + 1)) == 0 && dtype.is_int() && {
                        matches!(&*a, Expr::Binary { op: BinOp::Shr, a: x, b: s, .. }
                        if s.as_int().is_some_and(|s| (0..32).contains(&s))
                            && known_multiple(x, (m + 1) << s.as_int().unwrap_or(0)))
                    } =>
                {
                    Expr::int_of(0, dtype)
                }
                (BinOp::BitXor | BinOp::BitOr | BinOp::Shl | BinOp::Shr, _, Some(0)) if dtype.is_int() => *a,
                (BinOp::BitXor | BinOp::BitOr, Some(0), _) if dtype.is_int() => *b,
                _ => Expr::Binary { op, a, b, dtype },
            }
        }
        Expr::Cast { a, dtype } => match a.as_int() {
            Some(v) if dtype.is_int() || dtype == DType::Bool => Expr::int_of(wrap_int(v, dtype), dtype),
            _ if a.dtype() == dtype => *a,
            _ => Expr::Cast { a, dtype },
        },
        Expr::Select { cond, a, b, dtype } => match cond.as_int() {
            Some(0) => *b,
            Some(_) => *a,
            None => Expr::Select { cond, a, b, dtype },
        },
        other => other,
    })
}

/// Is `e` known to be a multiple of `k` for every value of its variables?
pub fn known_multiple(e: &Expr, k: i64) -> bool {
    if k <= 1 {
        return true;
    }
    let a = to_affine(e);
    a.constant % k == 0 && a.terms.values().all(|(c, atom)| c % k == 0 || atom_multiple(atom, k))
}

fn atom_multiple(e: &Expr, k: i64) -> bool {
    match e {
        Expr::Binary { op: BinOp::Mul, a, b, .. } => known_multiple(a, k) || known_multiple(b, k),
        Expr::Cast { a, .. } => known_multiple(a, k),
        _ => false,
    }
}

/// Is `e` non-negative for every value its variables can take, given which variables are
/// (`var`)? Sums, products, minima and masks of non-negative values are, and maxima with a
/// non-negative side; so are floor division and modulo of a non-negative value by a
/// positive constant or a non-negative value, and integer casts that widen (or keep the
/// width of a signed value): a narrowing cast may wrap.
pub fn non_negative(e: &Expr, var: &dyn Fn(VarId) -> bool) -> bool {
    let rec = |x: &Expr| non_negative(x, var);
    match e {
        Expr::Const { value: ConstValue::Int(v), .. } => *v >= 0,
        Expr::Var { id, .. } => var(*id),
        Expr::Binary { op: BinOp::Add | BinOp::Mul | BinOp::Min | BinOp::BitAnd, a, b, .. } => {
            rec(a) && rec(b)
        }
        Expr::Binary { op: BinOp::Max, a, b, .. } => rec(a) || rec(b),
        // by zero, both are undefined: a non-negative divisor is taken as positive
        Expr::Binary { op: BinOp::FloorDiv | BinOp::FloorMod, a, b, .. } => {
            rec(a) && (b.as_int().is_some_and(|v| v > 0) || rec(b))
        }
        Expr::Cast { a, dtype } => {
            let widening = a.dtype().bytes() < dtype.bytes()
                || (a.dtype().is_signed() && a.dtype().bytes() == dtype.bytes());
            dtype.is_int() && a.dtype().is_int() && widening && rec(a)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remainders_of_known_multiples_fold() {
        let i = Expr::var(VarId(0), DType::I32);
        let c = |v| Expr::int_of(v, DType::I32);
        let x64 = Expr::binary(BinOp::Mul, i.clone(), c(64));
        // (i * 64) & 7, (i * 64) % 16, ((i * 64) >> 1) & 3: no bits left
        for e in [
            Expr::binary(BinOp::BitAnd, x64.clone(), c(7)),
            Expr::binary(BinOp::FloorMod, x64.clone(), c(16)),
            Expr::binary(BinOp::BitAnd, Expr::binary(BinOp::Shr, x64.clone(), c(1)), c(3)),
        ] {
            assert_eq!(simplify(e).as_int(), Some(0));
        }
        // 16 ^ 0 and y ^ 0 keep their other side
        let xor = Expr::binary(BinOp::BitXor, i.clone(), Expr::binary(BinOp::BitAnd, x64.clone(), c(7)));
        assert_eq!(format!("{:?}", simplify(xor)), format!("{:?}", i));
        // not a multiple: kept
        let x6 = Expr::binary(BinOp::Mul, i.clone(), c(6));
        for e in [
            Expr::binary(BinOp::BitAnd, x6.clone(), c(3)),
            Expr::binary(BinOp::FloorMod, x6.clone(), c(4)),
            Expr::binary(BinOp::BitAnd, Expr::binary(BinOp::Shr, x6, c(1)), c(1)),
            Expr::binary(BinOp::BitAnd, x64, c(6)),
        ] {
            assert!(simplify(e).as_int().is_none());
        }
    }

    #[test]
    fn slice_extent_folds() {
        let i = Expr::var(VarId(0), DType::I32);
        let start = Expr::binary(BinOp::Mul, i.clone(), Expr::int(64));
        let stop = Expr::binary(BinOp::Mul, Expr::binary(BinOp::Add, i, Expr::int(1)), Expr::int(64));
        let ext = simplify(Expr::binary(BinOp::Sub, stop, start));
        assert_eq!(ext.as_int(), Some(64));
    }

    #[test]
    fn multiples() {
        let i = Expr::var(VarId(0), DType::I32);
        let e = Expr::binary(BinOp::Add, Expr::binary(BinOp::Mul, i.clone(), Expr::int(128)), Expr::int(8));
        assert!(known_multiple(&e, 8));
        assert!(!known_multiple(&e, 16));
        assert!(!known_multiple(&i, 2));
    }
}
