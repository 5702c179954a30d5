//! Integer and narrow-float arithmetic of the language, written once: Python's floor
//! division and modulo, and rounding to IEEE binary16 and bfloat16 (round to nearest, ties
//! to even). The simplifier, the range analysis, the interpreter and the CUDA writer's
//! constants all use these.

/// Python's floor division for integers (`b != 0`), wrapping on overflow.
pub fn floor_div(a: i64, b: i64) -> i64 {
    let q = a.wrapping_div(b);
    if q.wrapping_mul(b) != a && ((a < 0) != (b < 0)) {
        q.wrapping_sub(1)
    } else {
        q
    }
}

/// Python's floor modulo for integers (`b != 0`), wrapping on overflow.
pub fn floor_mod(a: i64, b: i64) -> i64 {
    a.wrapping_sub(floor_div(a, b).wrapping_mul(b))
}

/// Python's `a // b` where Python would compute it in i64: None for `b == 0` or a result
/// outside i64 (`i64::MIN // -1`).
pub fn checked_floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q.checked_sub(1)
    } else {
        Some(q)
    }
}

/// Round an `f32` to a 16-bit float format with `man_bits` stored mantissa bits and
/// `exp_bits` exponent bits: round to nearest, ties to even; subnormals kept; overflow to
/// infinity; NaN stays NaN (its top payload bits kept, quiet bit set).
fn f32_to_narrow(x: f32, exp_bits: u32, man_bits: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 31) as u16) << 15;
    let exp_field = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    let exp_all_ones = (1u16 << exp_bits) - 1;
    if exp_field == 0xff {
        if man == 0 {
            return sign | (exp_all_ones << man_bits);
        }
        let payload = (man >> (23 - man_bits)) as u16;
        return sign | (exp_all_ones << man_bits) | (1 << (man_bits - 1)) | payload;
    }
    // x = significand * 2^(exp - 23); f32 subnormals have exp = -126 and no implicit bit
    let (significand, exp) = if exp_field == 0 { (man, -126) } else { (man | 0x80_0000, exp_field - 127) };
    if significand == 0 {
        return sign;
    }
    let bias = (1i32 << (exp_bits - 1)) - 1;
    let emin = 1 - bias;
    // the target's quantum at this magnitude is 2^(max(exp, emin) - man_bits)
    let target_exp = exp.max(emin);
    let shift = (target_exp - man_bits as i32 - (exp - 23)) as u32;
    if shift >= 25 {
        return sign; // below half the smallest subnormal
    }
    let mut q = significand >> shift;
    let rem = significand & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q += 1;
    }
    // exponent field and mantissa in one: a carry out of the mantissa bumps the exponent
    let magnitude = (((target_exp - emin) as u32) << man_bits) + q;
    let inf = (exp_all_ones as u32) << man_bits;
    sign | magnitude.min(inf) as u16
}

/// `f32` → IEEE binary16 bits, round to nearest even.
pub fn f32_to_f16_bits(x: f32) -> u16 {
    f32_to_narrow(x, 5, 10)
}

/// `f32` → bfloat16 bits, round to nearest even.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    f32_to_narrow(x, 8, 7)
}

/// IEEE binary16 bits → `f32` (exact).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) >> 15) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let magnitude = match exp {
        0 => {
            // a subnormal (or zero): man * 2^-24, exact in f32
            let magnitude = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -magnitude } else { magnitude };
        }
        0x1f => 0x7f80_0000 | (man << 13),
        _ => ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// bfloat16 bits → `f32` (exact).
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `x` rounded to binary16 (as an f32, which holds every binary16 value exactly).
pub fn round_f16(x: f32) -> f32 {
    f16_bits_to_f32(f32_to_f16_bits(x))
}

/// `x` rounded to bfloat16.
pub fn round_bf16(x: f32) -> f32 {
    bf16_bits_to_f32(f32_to_bf16_bits(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_division_rounds_toward_negative_infinity() {
        assert_eq!((floor_div(7, 2), floor_mod(7, 2)), (3, 1));
        assert_eq!((floor_div(-7, 2), floor_mod(-7, 2)), (-4, 1));
        assert_eq!((floor_div(7, -2), floor_mod(7, -2)), (-4, -1));
        assert_eq!(floor_div(i64::MIN, -1), i64::MIN); // wraps
        assert_eq!(checked_floor_div(i64::MIN, -1), None);
        assert_eq!(checked_floor_div(-7, 2), Some(-4));
        assert_eq!(checked_floor_div(1, 0), None);
    }

    #[test]
    fn narrow_rounding_is_ieee() {
        assert_eq!(round_f16(0.1), 0.099975586);
        assert_eq!(round_f16(1.0), 1.0);
        assert_eq!(round_f16(65504.0), 65504.0);
        assert_eq!(round_f16(70000.0), f32::INFINITY);
        assert_eq!(round_f16(65519.0), 65504.0); // below the midpoint to infinity
        assert_eq!(round_f16(65520.0), f32::INFINITY); // the midpoint rounds to even: infinity
        assert_eq!(round_f16(2049.0), 2048.0); // tie to even
        assert_eq!(round_f16(2051.0), 2052.0);
        assert_eq!(round_f16(2.0f32.powi(-25)), 0.0); // half the smallest subnormal: tie to even
        assert_eq!(round_f16(3.0 * 2.0f32.powi(-26)), 2.0f32.powi(-24));
        assert_eq!(round_bf16(1.003_906_3), 1.0); // tie to even
        assert!(round_f16(f32::NAN).is_nan());
    }
}
