//! Scalar arithmetic of the language: 16-bit float formats, rounding, casts, operators.
//!
//! Every value is held as an `i64` (integers and bool, already wrapped to their width; the
//! narrower unsigned types as their non-negative value, uint64 as its bit pattern, as
//! `tile_ir::types` says) or an `f64` (floats, already rounded to their dtype, so an fp16
//! value is an `f64` that fp16 represents exactly). Operators on uint64 reinterpret the
//! bits as `u64` where the sign matters: order, division, right shift, conversion to float.

use tile_ir::simplify::wrap_int;
use tile_ir::{AtomicOp, BinOp, ConstValue, DType, ReduceKind, UnOp};

/// One scalar value of some dtype (the dtype is known from context).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Val {
    I(i64),
    F(f64),
}

impl Val {
    pub(crate) fn as_i64(self) -> i64 {
        match self {
            Val::I(v) => v,
            Val::F(x) => x as i64,
        }
    }
    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Val::I(v) => v as f64,
            Val::F(x) => x,
        }
    }
}

pub use tile_ir::arith::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};

/// Round `x` to the precision of the float type `dt` (fp16/bf16 through float32, as the
/// GPU converts).
pub(crate) fn round(dt: DType, x: f64) -> f64 {
    match dt {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16_bits_to_f32(f32_to_f16_bits(x as f32)) as f64,
        DType::BF16 => bf16_bits_to_f32(f32_to_bf16_bits(x as f32)) as f64,
        _ => x,
    }
}

/// The rounding function of a float dtype, chosen once for a whole column.
pub(crate) fn rounder(dt: DType) -> fn(f64) -> f64 {
    match dt {
        DType::F32 => |x| x as f32 as f64,
        DType::F16 => |x| f16_bits_to_f32(f32_to_f16_bits(x as f32)) as f64,
        DType::BF16 => |x| bf16_bits_to_f32(f32_to_bf16_bits(x as f32)) as f64,
        _ => |x| x,
    }
}

/// A constant of the IR as a value of its dtype.
pub(crate) fn constant(value: ConstValue, dt: DType) -> Val {
    match value {
        ConstValue::Int(v) => cast(Val::I(v), DType::I64, dt),
        ConstValue::Float(x) => cast(Val::F(x), DType::F64, dt),
    }
}

/// Convert a value of `from` to `to`: float → int truncates toward zero and saturates
/// (NaN → 0); int → int wraps; anything → bool is `!= 0`; to a float rounds to nearest.
pub(crate) fn cast(v: Val, from: DType, to: DType) -> Val {
    if to == DType::Bool {
        return Val::I(match v {
            Val::I(i) => (i != 0) as i64,
            Val::F(x) => (x != 0.0) as i64,
        });
    }
    match (v, to.is_float()) {
        // Rust's float → int `as` truncates, saturates and maps NaN to 0
        (Val::F(x), false) => Val::I(match to {
            DType::I8 => x as i8 as i64,
            DType::U8 => x as u8 as i64,
            DType::I16 => x as i16 as i64,
            DType::U16 => x as u16 as i64,
            DType::I32 => x as i32 as i64,
            DType::U32 => x as u32 as i64,
            DType::U64 => x as u64 as i64,
            _ => x as i64,
        }),
        (Val::I(i), false) => Val::I(wrap_int(i, to)),
        // ints round straight to float32 (not through f64, which would round twice)
        (Val::I(i), true) if from == DType::U64 && to == DType::F64 => Val::F(i as u64 as f64),
        (Val::I(i), true) if from == DType::U64 => Val::F(round(to, i as u64 as f32 as f64)),
        (Val::I(i), true) if to == DType::F64 => Val::F(i as f64),
        (Val::I(i), true) => Val::F(round(to, i as f32 as f64)),
        (Val::F(x), true) if from == to => Val::F(x),
        (Val::F(x), true) => Val::F(round(to, x)),
    }
}

pub(crate) use tile_ir::arith::{floor_div as floordiv, floor_mod as floormod};

/// Why an operation has no value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum OpError {
    DivisionByZero,
    Unsupported,
}

/// The width a C shift of `dt` works in: 32 for types up to 32 bits (C promotes them to
/// int), 64 for int64 and uint64.
fn shift_width(dt: DType) -> i64 {
    if dt.bytes() == 8 {
        64
    } else {
        32
    }
}

/// `a << b` as the GPU runs it: PTX `shl` clamps a count at or past the width (or negative,
/// read unsigned) to the width, so every bit is shifted out — as the simplifier folds it.
fn shl(a: i64, b: i64, dt: DType) -> i64 {
    if (0..shift_width(dt)).contains(&b) {
        a.wrapping_shl(b as u32)
    } else {
        0
    }
}

/// `a >> b` likewise (`shr.s` fills with the sign; operands are held sign- or zero-extended,
/// so this is arithmetic for signed types and logical for unsigned ones).
fn shr(a: i64, b: i64, dt: DType) -> i64 {
    if (0..shift_width(dt)).contains(&b) {
        a >> b
    } else if a < 0 {
        -1
    } else {
        0
    }
}

/// An integer (or bool) binary operator; `dt` is the operands' dtype, `out` the result's.
pub(crate) fn int_binary(op: BinOp, a: i64, b: i64, dt: DType, out: DType) -> Result<i64, OpError> {
    if dt == DType::U64 {
        return u64_binary(op, a as u64, b as u64).map(|r| wrap_int(r as i64, out));
    }
    let r = match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::FloorDiv | BinOp::FloorMod | BinOp::Div if b == 0 => return Err(OpError::DivisionByZero),
        BinOp::FloorDiv => floordiv(a, b),
        BinOp::FloorMod => floormod(a, b),
        BinOp::Div => return Err(OpError::Unsupported),
        BinOp::Max => a.max(b),
        BinOp::Min => a.min(b),
        BinOp::Eq => (a == b) as i64,
        BinOp::Ne => (a != b) as i64,
        BinOp::Lt => (a < b) as i64,
        BinOp::Le => (a <= b) as i64,
        BinOp::Gt => (a > b) as i64,
        BinOp::Ge => (a >= b) as i64,
        BinOp::And => (a != 0 && b != 0) as i64,
        BinOp::Or => (a != 0 || b != 0) as i64,
        BinOp::BitAnd => a & b,
        BinOp::BitOr => a | b,
        BinOp::BitXor => a ^ b,
        BinOp::Shl => shl(a, b, dt),
        BinOp::Shr => shr(a, b, dt),
    };
    Ok(wrap_int(r, out))
}

/// [`int_binary`] on uint64 operands (C's `unsigned long long`: wraps modulo 2^64).
fn u64_binary(op: BinOp, a: u64, b: u64) -> Result<u64, OpError> {
    Ok(match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::FloorDiv | BinOp::FloorMod | BinOp::Div if b == 0 => return Err(OpError::DivisionByZero),
        // unsigned: C's / and % are already Python's
        BinOp::FloorDiv => a / b,
        BinOp::FloorMod => a % b,
        BinOp::Div => return Err(OpError::Unsupported),
        BinOp::Max => a.max(b),
        BinOp::Min => a.min(b),
        BinOp::Eq => (a == b) as u64,
        BinOp::Ne => (a != b) as u64,
        BinOp::Lt => (a < b) as u64,
        BinOp::Le => (a <= b) as u64,
        BinOp::Gt => (a > b) as u64,
        BinOp::Ge => (a >= b) as u64,
        BinOp::And => (a != 0 && b != 0) as u64,
        BinOp::Or => (a != 0 || b != 0) as u64,
        BinOp::BitAnd => a & b,
        BinOp::BitOr => a | b,
        BinOp::BitXor => a ^ b,
        BinOp::Shl if b < 64 => a << b,
        BinOp::Shr if b < 64 => a >> b,
        BinOp::Shl | BinOp::Shr => 0,
    })
}

/// A float binary operator on values of `dt`, rounded to `dt` (comparisons give 0/1 as f64).
pub(crate) fn float_binary(op: BinOp, a: f64, b: f64, dt: DType) -> Result<f64, OpError> {
    // floor division and modulo are computed in the C type (float for fp16/bf16/f32)
    let inner = if dt == DType::F64 { DType::F64 } else { DType::F32 };
    let r = match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::FloorDiv => round(inner, a / b).floor(),
        BinOp::FloorMod => {
            let q = round(inner, a / b).floor();
            a - round(inner, q * b)
        }
        // fmax/fmin: a NaN operand yields the other operand
        BinOp::Max => a.max(b),
        BinOp::Min => a.min(b),
        BinOp::Eq => return Ok((a == b) as i64 as f64),
        BinOp::Ne => return Ok((a != b) as i64 as f64),
        BinOp::Lt => return Ok((a < b) as i64 as f64),
        BinOp::Le => return Ok((a <= b) as i64 as f64),
        BinOp::Gt => return Ok((a > b) as i64 as f64),
        BinOp::Ge => return Ok((a >= b) as i64 as f64),
        BinOp::And | BinOp::Or | BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
            return Err(OpError::Unsupported)
        }
    };
    Ok(round(dt, r))
}

/// `value` of type `from` read as the bits of type `to` (the same width): `T.reinterpret`.
pub(crate) fn reinterpret(value: Val, from: DType, to: DType) -> Val {
    let bits: u64 = match from {
        DType::F64 => value.as_f64().to_bits(),
        DType::F32 => (value.as_f64() as f32).to_bits() as u64,
        DType::F16 => f32_to_f16_bits(value.as_f64() as f32) as u64,
        DType::BF16 => f32_to_bf16_bits(value.as_f64() as f32) as u64,
        _ => value.as_i64() as u64,
    };
    let width = 8 * to.bytes();
    let bits = if width >= 64 { bits } else { bits & ((1u64 << width) - 1) };
    match to {
        DType::F64 => Val::F(f64::from_bits(bits)),
        DType::F32 => Val::F(f32::from_bits(bits as u32) as f64),
        DType::F16 => Val::F(f16_bits_to_f32(bits as u16) as f64),
        DType::BF16 => Val::F(bf16_bits_to_f32(bits as u16) as f64),
        _ => Val::I(wrap_int(bits as i64, to)),
    }
}

/// A float math function, computed in f64 and rounded to `dt`.
pub(crate) fn float_unary(op: UnOp, x: f64, dt: DType) -> f64 {
    let r = match op {
        UnOp::Neg => -x,
        UnOp::Not => (x == 0.0) as i64 as f64,
        UnOp::Abs => x.abs(),
        UnOp::Exp => x.exp(),
        UnOp::Exp2 => x.exp2(),
        UnOp::Log => x.ln(),
        UnOp::Log2 => x.log2(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Rsqrt => 1.0 / x.sqrt(),
        UnOp::Tanh => x.tanh(),
        UnOp::Sigmoid => {
            // exp of -|x| only: no overflow for large negative x
            let e = (-x.abs()).exp();
            if x >= 0.0 {
                1.0 / (1.0 + e)
            } else {
                e / (1.0 + e)
            }
        }
        UnOp::Erf => libm::erf(x),
        UnOp::Sin => x.sin(),
        UnOp::Cos => x.cos(),
        UnOp::Floor => x.floor(),
        UnOp::Ceil => x.ceil(),
        // made by reinterpret(), which knows the operand's type
        UnOp::Reinterpret => x,
    };
    round(dt, r)
}

/// An integer unary operator (`neg`, `not`, `abs`); math functions are float-only.
pub(crate) fn int_unary(op: UnOp, a: i64, dt: DType) -> Result<i64, OpError> {
    let r = match op {
        UnOp::Neg => a.wrapping_neg(),
        UnOp::Not => (a == 0) as i64,
        // an unsigned value is its own absolute value (a uint64's bits may look negative)
        UnOp::Abs if !dt.is_signed() => a,
        UnOp::Abs => a.wrapping_abs(),
        _ => return Err(OpError::Unsupported),
    };
    Ok(wrap_int(r, dt))
}

/// A binary operator on scalar values of `dt` (result of `out`).
pub(crate) fn binary(op: BinOp, a: Val, b: Val, dt: DType, out: DType) -> Result<Val, OpError> {
    if dt.is_float() {
        let r = float_binary(op, a.as_f64(), b.as_f64(), dt)?;
        Ok(if out.is_float() { Val::F(r) } else { Val::I(r as i64) })
    } else {
        int_binary(op, a.as_i64(), b.as_i64(), dt, out).map(Val::I)
    }
}

/// The new value of an element `old` of `dt` after an atomic `op` with `v`. On floats,
/// max and min are tilers' own (the generated code's compare-and-swap loops,
/// tile-codegen `cuda/atomics.rs`): a NaN `v` leaves the element as it is, a NaN element
/// takes `v`, and otherwise -0.0 counts as less than +0.0.
pub(crate) fn atomic_combine(op: AtomicOp, old: Val, v: Val, dt: DType) -> Result<Val, OpError> {
    if !dt.is_float() || op == AtomicOp::Add {
        let bin = match op {
            AtomicOp::Add => BinOp::Add,
            AtomicOp::Max => BinOp::Max,
            AtomicOp::Min => BinOp::Min,
        };
        return binary(bin, old, v, dt, dt);
    }
    let (a, b) = (old.as_f64(), v.as_f64());
    let greater = |x: f64, y: f64| x > y || (x == y && !x.is_sign_negative() && y.is_sign_negative());
    let take_v = !b.is_nan()
        && (a.is_nan()
            || match op {
                AtomicOp::Max => greater(b, a),
                _ => greater(a, b),
            });
    Ok(if take_v { v } else { old })
}

/// The starting value of a reduction in the accumulator dtype.
pub(crate) fn reduce_identity(kind: ReduceKind, dt: DType) -> Val {
    // the type's least and greatest values, held as values of it are (uint64's greatest: -1)
    let (lo, hi) = match dt.int_range() {
        Some((lo, hi)) => (lo as i64, hi as i64),
        None => (i64::MIN, i64::MAX),
    };
    match (kind, dt.is_float()) {
        (ReduceKind::Sum | ReduceKind::AbsMax, true) => Val::F(0.0),
        (ReduceKind::Sum | ReduceKind::AbsMax, false) => Val::I(0),
        (ReduceKind::Max, true) => Val::F(f64::NEG_INFINITY),
        (ReduceKind::Min, true) => Val::F(f64::INFINITY),
        (ReduceKind::Max, false) => Val::I(lo),
        (ReduceKind::Min, false) => Val::I(hi),
    }
}

/// Fold one more element into a reduction accumulator of `dt` (`x` already abs'ed for absmax).
pub(crate) fn reduce_combine(kind: ReduceKind, acc: Val, x: Val, dt: DType) -> Val {
    let op = match kind {
        ReduceKind::Sum => BinOp::Add,
        ReduceKind::Max | ReduceKind::AbsMax => BinOp::Max,
        ReduceKind::Min => BinOp::Min,
    };
    // add/max/min never fail
    binary(op, acc, x, dt, dt).unwrap_or(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16(x: f32) -> u16 {
        f32_to_f16_bits(x)
    }

    #[test]
    fn f16_exact_values_round_trip() {
        for h in 0..=u16::MAX {
            let x = f16_bits_to_f32(h);
            if x.is_nan() {
                assert!(f16_bits_to_f32(f16(x)).is_nan());
            } else {
                assert_eq!(f16(x), h, "bits {h:#06x} = {x}");
            }
        }
    }

    #[test]
    fn bf16_exact_values_round_trip() {
        for h in 0..=u16::MAX {
            let x = bf16_bits_to_f32(h);
            if x.is_nan() {
                assert!(bf16_bits_to_f32(f32_to_bf16_bits(x)).is_nan());
            } else {
                assert_eq!(f32_to_bf16_bits(x), h, "bits {h:#06x} = {x}");
            }
        }
    }

    #[test]
    fn f16_ties_to_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1)
        assert_eq!(f16(1.0 + 2f32.powi(-11)), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: up
        assert_eq!(f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        // just above the tie rounds up
        assert_eq!(f16(1.0 + 2f32.powi(-11) + 2f32.powi(-20)), 0x3c01);
        assert_eq!(f16(-1.0 - 2f32.powi(-11)), 0xbc00);
        assert_eq!(f16(0.1), 0x2e66);
        assert_eq!(f16(-0.0), 0x8000);
    }

    #[test]
    fn f16_subnormals_and_overflow() {
        let tiny = 2f32.powi(-24); // smallest subnormal
        assert_eq!(f16(tiny), 0x0001);
        assert_eq!(f16(tiny * 0.5), 0x0000); // tie with 0: even
        assert_eq!(f16(tiny * 0.75), 0x0001);
        assert_eq!(f16(tiny * 1.5), 0x0002); // tie between 1 and 2 subnormal quanta: even
        assert_eq!(f16(tiny * 2.5), 0x0002);
        assert_eq!(f16(-tiny * 0.25), 0x8000);
        assert_eq!(f16(2f32.powi(-14) - tiny * 0.5), 0x0400); // rounds up to the smallest normal
        assert_eq!(f16(1e-30), 0);
        assert_eq!(f16(f32::from_bits(1)), 0); // an f32 subnormal
        assert_eq!(f16(65504.0), 0x7bff);
        assert_eq!(f16(65519.0), 0x7bff);
        assert_eq!(f16(65520.0), 0x7c00); // the tie above the largest finite goes to infinity
        assert_eq!(f16(1e10), 0x7c00);
        assert_eq!(f16(-1e10), 0xfc00);
        assert_eq!(f16(f32::INFINITY), 0x7c00);
        assert_eq!(f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f16(f32::NAN) & 0x7e00, 0x7e00);
        assert_eq!(f16_bits_to_f32(0x0001), tiny);
        assert_eq!(f16_bits_to_f32(0x8001), -tiny);
        assert_eq!(f16_bits_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_bits_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn bf16_rounding() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80); // rounds past the largest finite
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f7f_0000)), 0x7f7f);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x0000_8000)), 0x0000); // subnormal tie: even
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x0001_8000)), 0x0002);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x0000_8001)), 0x0001);
        assert!(bf16_bits_to_f32(f32_to_bf16_bits(f32::NAN)).is_nan());
        assert_eq!(bf16_bits_to_f32(0x4049), 3.140625);
    }

    #[test]
    fn casts() {
        let c = |x: f64, to: DType| cast(Val::F(x), DType::F32, to);
        assert_eq!(c(2.9, DType::I32), Val::I(2));
        assert_eq!(c(-2.9, DType::I32), Val::I(-2));
        assert_eq!(c(300.0, DType::I8), Val::I(127));
        assert_eq!(c(-300.0, DType::I8), Val::I(-128));
        assert_eq!(c(-5.0, DType::U8), Val::I(0));
        assert_eq!(c(f64::NAN, DType::I8), Val::I(0));
        assert_eq!(c(f64::INFINITY, DType::I32), Val::I(i32::MAX as i64));
        assert_eq!(c(f64::NEG_INFINITY, DType::I64), Val::I(i64::MIN));
        assert_eq!(c(1e20, DType::U32), Val::I(u32::MAX as i64));
        assert_eq!(c(f64::NAN, DType::Bool), Val::I(1));
        assert_eq!(c(0.0, DType::Bool), Val::I(0));
        assert_eq!(cast(Val::I(300), DType::I32, DType::I8), Val::I(44));
        assert_eq!(cast(Val::I(-1), DType::I32, DType::U32), Val::I(u32::MAX as i64));
        assert_eq!(cast(Val::I(-1), DType::I8, DType::U8), Val::I(255));
        assert_eq!(cast(Val::I(7), DType::I32, DType::Bool), Val::I(1));
        // int → fp16 rounds to nearest even: 2049 is a tie between 2048 and 2050
        assert_eq!(cast(Val::I(2049), DType::I32, DType::F16), Val::F(2048.0));
        assert_eq!(cast(Val::I(2051), DType::I32, DType::F16), Val::F(2052.0));
        assert_eq!(cast(Val::I(70000), DType::I32, DType::F16), Val::F(f64::INFINITY));
        // int64 → float32 rounds once (2^53 + 1 would round twice through f64)
        let v = (1i64 << 60) + (1 << 36) + 1;
        assert_eq!(cast(Val::I(v), DType::I64, DType::F32), Val::F(v as f32 as f64));
        assert_eq!(cast(Val::F(0.1), DType::F64, DType::F32), Val::F(0.1f32 as f64));
        assert_eq!(cast(Val::F(1e6), DType::F32, DType::F16), Val::F(f64::INFINITY));
    }

    #[test]
    fn floor_division() {
        assert_eq!(floordiv(7, 2), 3);
        assert_eq!(floordiv(-7, 2), -4);
        assert_eq!(floordiv(7, -2), -4);
        assert_eq!(floordiv(-7, -2), 3);
        assert_eq!(floordiv(-8, 2), -4);
        assert_eq!(floormod(-7, 2), 1);
        assert_eq!(floormod(7, -2), -1);
        assert_eq!(floormod(-7, -2), -1);
        assert_eq!(floormod(6, -3), 0);
        assert_eq!(floordiv(i64::MIN, -1), i64::MIN); // wraps
        assert_eq!(int_binary(BinOp::FloorDiv, 1, 0, DType::I32, DType::I32), Err(OpError::DivisionByZero));
        assert_eq!(int_binary(BinOp::FloorMod, 1, 0, DType::I32, DType::I32), Err(OpError::DivisionByZero));
        assert_eq!(
            int_binary(BinOp::FloorDiv, i32::MIN as i64, -1, DType::I32, DType::I32),
            Ok(i32::MIN as i64)
        );
        assert_eq!(float_binary(BinOp::FloorDiv, -7.0, 2.0, DType::F32), Ok(-4.0));
        assert_eq!(float_binary(BinOp::FloorMod, -7.0, 2.0, DType::F32), Ok(1.0));
        assert_eq!(float_binary(BinOp::FloorMod, 7.5, -2.0, DType::F64), Ok(-0.5));
    }

    #[test]
    fn integer_wrapping_and_shifts() {
        assert_eq!(int_binary(BinOp::Add, 100, 100, DType::I8, DType::I8), Ok(-56));
        assert_eq!(int_binary(BinOp::Mul, 200, 2, DType::U8, DType::U8), Ok(144));
        assert_eq!(int_binary(BinOp::Sub, 0, 1, DType::U32, DType::U32), Ok(u32::MAX as i64));
        assert_eq!(int_binary(BinOp::Add, i32::MAX as i64, 1, DType::I32, DType::I32), Ok(i32::MIN as i64));
        // a count at or past the width shifts every bit out (PTX shl/shr clamp the count)
        assert_eq!(int_binary(BinOp::Shl, 1, 33, DType::I32, DType::I32), Ok(0));
        assert_eq!(int_binary(BinOp::Shl, 1, 32, DType::I32, DType::I32), Ok(0));
        assert_eq!(int_binary(BinOp::Shr, -8, 40, DType::I32, DType::I32), Ok(-1));
        assert_eq!(int_binary(BinOp::Shr, 8, 32, DType::I32, DType::I32), Ok(0));
        assert_eq!(int_binary(BinOp::Shl, 3, -1, DType::I32, DType::I32), Ok(0));
        assert_eq!(int_binary(BinOp::Shl, 1, 64, DType::U64, DType::U64), Ok(0));
        assert_eq!(int_binary(BinOp::Shl, 0x40, 9, DType::I8, DType::I8), Ok(0)); // promoted, then wrapped
        assert_eq!(int_binary(BinOp::Shl, 1, 40, DType::I64, DType::I64), Ok(1 << 40));
        assert_eq!(int_binary(BinOp::Shr, -8, 1, DType::I32, DType::I32), Ok(-4));
        assert_eq!(int_binary(BinOp::Shr, u32::MAX as i64, 4, DType::U32, DType::U32), Ok(0x0fff_ffff));
        assert_eq!(int_binary(BinOp::Shl, 0x40, 1, DType::I8, DType::I8), Ok(-128));
        assert_eq!(int_unary(UnOp::Abs, -128, DType::I8), Ok(-128));
        assert_eq!(int_unary(UnOp::Neg, -128, DType::I8), Ok(-128));
        assert_eq!(int_unary(UnOp::Not, 1, DType::Bool), Ok(0));
    }

    #[test]
    fn uint16_wraps_like_cuda() {
        let u16_op = |op, a, b| int_binary(op, a, b, DType::U16, DType::U16);
        assert_eq!(u16_op(BinOp::Add, 65535, 1), Ok(0));
        assert_eq!(u16_op(BinOp::Sub, 0, 1), Ok(65535));
        assert_eq!(u16_op(BinOp::Mul, 65535, 65535), Ok(1));
        assert_eq!(u16_op(BinOp::Shr, 0x8000, 15), Ok(1));
        assert_eq!(int_unary(UnOp::Neg, 1, DType::U16), Ok(65535));
        assert_eq!(int_unary(UnOp::Abs, 65535, DType::U16), Ok(65535));
        assert_eq!(cast(Val::I(-1), DType::I32, DType::U16), Val::I(65535));
        assert_eq!(cast(Val::I(65535), DType::U16, DType::I16), Val::I(-1));
        assert_eq!(cast(Val::F(70000.0), DType::F32, DType::U16), Val::I(65535));
        assert_eq!(cast(Val::F(-3.5), DType::F32, DType::U16), Val::I(0));
        assert_eq!(cast(Val::I(65535), DType::U16, DType::F32), Val::F(65535.0));
        assert_eq!(reduce_identity(ReduceKind::Min, DType::U16), Val::I(65535));
        assert_eq!(reduce_identity(ReduceKind::Max, DType::U16), Val::I(0));
    }

    #[test]
    fn uint64_is_held_as_its_bits() {
        let max = u64::MAX as i64; // -1
        let top = (1u64 << 63) as i64; // 2^63, held as i64::MIN
        let u64_op = |op, a, b| int_binary(op, a, b, DType::U64, DType::U64);
        let cmp = |op, a, b| int_binary(op, a, b, DType::U64, DType::Bool);
        assert_eq!(u64_op(BinOp::Add, max, 1), Ok(0));
        assert_eq!(u64_op(BinOp::Sub, 0, 1), Ok(max));
        assert_eq!(u64_op(BinOp::Mul, top, 2), Ok(0));
        assert_eq!(u64_op(BinOp::Max, top, 1), Ok(top));
        assert_eq!(u64_op(BinOp::Min, max, 7), Ok(7));
        assert_eq!(cmp(BinOp::Lt, 1, max), Ok(1));
        assert_eq!(cmp(BinOp::Ge, top, 5), Ok(1));
        assert_eq!(u64_op(BinOp::FloorDiv, max, 2), Ok(i64::MAX));
        assert_eq!(u64_op(BinOp::FloorMod, max, 10), Ok(5)); // 18446744073709551615 % 10
        assert_eq!(u64_op(BinOp::FloorDiv, 1, 0), Err(OpError::DivisionByZero));
        assert_eq!(u64_op(BinOp::Shr, top, 63), Ok(1)); // logical, not arithmetic
        assert_eq!(u64_op(BinOp::Shl, 1, 63), Ok(top));
        assert_eq!(u64_op(BinOp::Shl, 1, 64), Ok(0)); // every bit shifted out (PTX clamps the count)
        assert_eq!(int_unary(UnOp::Abs, max, DType::U64), Ok(max));
        assert_eq!(int_unary(UnOp::Neg, 1, DType::U64), Ok(max));
        // conversions
        assert_eq!(cast(Val::I(max), DType::U64, DType::F64), Val::F(u64::MAX as f64));
        assert_eq!(cast(Val::I(max), DType::U64, DType::F32), Val::F(u64::MAX as f32 as f64));
        assert_eq!(cast(Val::I(top), DType::U64, DType::I64), Val::I(i64::MIN));
        assert_eq!(cast(Val::I(max), DType::U64, DType::U32), Val::I(u32::MAX as i64));
        assert_eq!(cast(Val::I(-1), DType::I32, DType::U64), Val::I(max));
        assert_eq!(cast(Val::F(1e30), DType::F32, DType::U64), Val::I(max)); // saturates
        assert_eq!(cast(Val::F(1e19), DType::F64, DType::U64), Val::I(10_000_000_000_000_000_000u64 as i64));
        assert_eq!(cast(Val::F(-1.0), DType::F32, DType::U64), Val::I(0));
        assert_eq!(cast(Val::F(f64::NAN), DType::F32, DType::U64), Val::I(0));
        assert_eq!(constant(ConstValue::Int(max), DType::U64), Val::I(max));
        assert_eq!(reduce_identity(ReduceKind::Min, DType::U64), Val::I(max));
        assert_eq!(reduce_identity(ReduceKind::Max, DType::U64), Val::I(0));
        assert_eq!(reduce_combine(ReduceKind::Max, Val::I(5), Val::I(top), DType::U64), Val::I(top));
    }

    #[test]
    fn float_ops_round_every_step() {
        // fp16: 2048 + 1 is a tie, rounds to even 2048
        assert_eq!(float_binary(BinOp::Add, 2048.0, 1.0, DType::F16), Ok(2048.0));
        assert_eq!(float_binary(BinOp::Add, 60000.0, 10000.0, DType::F16), Ok(f64::INFINITY));
        assert_eq!(float_binary(BinOp::Div, 1.0, 3.0, DType::F32), Ok((1.0f32 / 3.0) as f64));
        assert_eq!(float_binary(BinOp::Max, f64::NAN, 2.0, DType::F32), Ok(2.0));
        assert_eq!(float_binary(BinOp::Min, 2.0, f64::NAN, DType::F32), Ok(2.0));
        assert_eq!(float_unary(UnOp::Sigmoid, 0.0, DType::F32), 0.5);
        assert_eq!(float_unary(UnOp::Exp, 0.0, DType::BF16), 1.0);
    }

    #[test]
    fn erf_is_accurate() {
        // reference values (Abramowitz & Stegun table / mpmath)
        let cases = [
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (-1.5, -0.9661051464753108),
            (3.5, 0.9999992569016276),
        ];
        for (x, want) in cases {
            let got = float_unary(UnOp::Erf, x, DType::F64);
            assert!(((got - want) / want).abs() < 1e-15, "erf({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn reductions_identities() {
        assert_eq!(reduce_identity(ReduceKind::Max, DType::I8), Val::I(-128));
        assert_eq!(reduce_identity(ReduceKind::Min, DType::U32), Val::I(u32::MAX as i64));
        assert_eq!(reduce_identity(ReduceKind::Max, DType::F32), Val::F(f64::NEG_INFINITY));
        let acc = reduce_combine(ReduceKind::Sum, Val::F(1.0), Val::F(2f64.powi(-30)), DType::F32);
        assert_eq!(acc, Val::F(1.0));
    }
}
