//! Expressions as C: literals (fp16/bf16 constants rounded as the GPU would), operators
//! (Python's floor division where the signs are not known), casts (saturating float → int),
//! rounding after every fp16/bf16 operation, C string literals.

use super::{non_negative, storage_type, value_type, Emitter};
use tile_ir::*;

/// Round a value to the precision of `dt` (f16/bf16 constants are emitted already rounded).
pub(super) fn round_to(v: f64, dt: DType) -> f64 {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => {
            let f = v as f32;
            match dt {
                DType::BF16 => tile_ir::arith::round_bf16(f) as f64,
                DType::F16 => tile_ir::arith::round_f16(f) as f64,
                _ => f as f64,
            }
        }
        _ => v,
    }
}

pub(super) fn float_literal(v: f64, dt: DType) -> String {
    let v = round_to(v, dt);
    let is_double = dt == DType::F64;
    if v.is_nan() {
        return if is_double {
            "__longlong_as_double(0x7ff8000000000000ll)".into()
        } else {
            "__int_as_float(0x7fc00000)".into()
        };
    }
    if v.is_infinite() {
        return match (is_double, v > 0.0) {
            (true, true) => "__longlong_as_double(0x7ff0000000000000ll)".into(),
            (true, false) => "__longlong_as_double(0xfff0000000000000ll)".into(),
            (false, true) => "__int_as_float(0x7f800000)".into(),
            (false, false) => "__int_as_float(0xff800000)".into(),
        };
    }
    if is_double {
        format!("{v:?}")
    } else {
        format!("{:?}f", v as f32)
    }
}

/// `text` as a C string literal: quotes, backslashes and non-printable or non-ASCII bytes
/// escaped (octal, so a following digit cannot extend the escape).
pub(super) fn c_string(text: &str) -> String {
    let mut out = String::from("\"");
    for b in text.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b' '..=b'~' => out.push(b as char),
            other => out.push_str(&format!("\\{other:03o}")),
        }
    }
    out.push('"');
    out
}

/// Is `s` one parenthesized group, `(...)`, with nothing after its closing parenthesis?
pub(super) fn encloses(s: &str) -> bool {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i == s.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

impl Emitter<'_> {
    /// The value to store into an element of `dt`: converted to the storage type.
    pub(super) fn store_value(&mut self, dt: DType, value: &Expr) -> Result<String, Diagnostic> {
        if let Expr::Load { buf, idx, dtype, .. } = value {
            if *dtype == dt && matches!(dt, DType::F16 | DType::BF16) {
                return self.access(*buf, idx); // the same storage type: copy the bits
            }
        }
        if let Expr::Unary { op: UnOp::Reinterpret, a, dtype } = value {
            if *dtype == dt && matches!(dt, DType::F16 | DType::BF16) {
                // the bits themselves: through a float and back, a NaN's payload would be lost
                // (cvt.rn.bf16.f32 writes the canonical NaN)
                let x = self.expr(a)?;
                let bits = reinterpret_bits(&x, a.dtype());
                let ty = if dt == DType::F16 { "tl_half" } else { "tl_bf16" };
                return Ok(format!("{ty}{{(unsigned short)({bits})}}"));
            }
        }
        let mut v = self.expr(value)?;
        // converting to the storage type rounds already: drop an outer rounding to the same type
        let outer = match dt {
            DType::F16 => "tl_round_half(",
            DType::BF16 => "tl_round_bf16(",
            _ => "",
        };
        if !outer.is_empty() && value.dtype() == dt && v.starts_with(outer) && encloses(&v[outer.len() - 1..])
        {
            v = v[outer.len()..v.len() - 1].to_string();
        }
        Ok(match dt {
            DType::F16 => format!("tl_to_half({v})"),
            DType::BF16 => format!("tl_to_bf16({v})"),
            _ => v,
        })
    }

    /// The storage bits of a 16-bit float value, as an unsigned int, where they can be had
    /// without converting through a float: a load, a constant, a select of such.
    fn half_bits(&mut self, e: &Expr) -> Result<Option<String>, Diagnostic> {
        Ok(match e {
            Expr::Load { buf, idx, .. } => Some(format!("(unsigned int)({}).bits", self.access(*buf, idx)?)),
            Expr::Const { value, dtype } => {
                let x = match value {
                    ConstValue::Int(v) => *v as f32,
                    ConstValue::Float(v) => *v as f32,
                };
                let bits =
                    if *dtype == DType::F16 { arith::f32_to_f16_bits(x) } else { arith::f32_to_bf16_bits(x) };
                Some(format!("{bits}u"))
            }
            Expr::Select { cond, a, b, .. } => match (self.half_bits(a)?, self.half_bits(b)?) {
                (Some(x), Some(y)) => Some(format!("({} ? {x} : {y})", self.expr(cond)?)),
                _ => None,
            },
            _ => None,
        })
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Result<String, Diagnostic> {
        let m = self.m;
        Ok(match e {
            Expr::Const { value, dtype } => match (value, dtype) {
                (ConstValue::Int(v), DType::Bool) => {
                    if *v != 0 {
                        "true".into()
                    } else {
                        "false".into()
                    }
                }
                (ConstValue::Int(v), DType::I64) => format!("{v}ll"),
                (ConstValue::Int(v), DType::U32) => format!("{v}u"),
                // held as its bit pattern: the literal is the number
                (ConstValue::Int(v), DType::U64) => format!("{}ull", *v as u64),
                (ConstValue::Int(v), DType::I32) if *v == i32::MIN as i64 => "(-2147483647 - 1)".into(),
                (ConstValue::Int(v), d) if d.is_int() => {
                    if *v < 0 {
                        format!("({v})")
                    } else {
                        format!("{v}")
                    }
                }
                (ConstValue::Int(v), d) => float_literal(*v as f64, *d),
                (ConstValue::Float(f), d) if d.is_float() => {
                    let s = float_literal(*f, *d);
                    if s.starts_with('-') {
                        format!("({s})")
                    } else {
                        s
                    }
                }
                (ConstValue::Float(f), _) => format!("{}", *f as i64),
            },
            // a 16-bit float parameter arrives as its storage type; values are floats
            Expr::Var { id, dtype: DType::F16 | DType::BF16 }
                if matches!(self.m.var(*id).kind, VarKind::Param) =>
            {
                format!("tl_float({})", self.names.var(*id))
            }
            Expr::Var { id, .. } => self.names.var(*id),
            Expr::Load { buf, idx, dtype, .. } => {
                let a = self.access(*buf, idx)?;
                match dtype {
                    DType::F16 | DType::BF16 => format!("tl_float({a})"),
                    _ => a,
                }
            }
            Expr::Binary { op, a, b, dtype } => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                let operand = a.dtype();
                let infix = |o: &str| format!("({x} {o} {y})");
                let raw = match op {
                    BinOp::Add => infix("+"),
                    BinOp::Sub => infix("-"),
                    // uint16 operands promote to int, whose product can overflow: multiply
                    // them as unsigned int (the result is wrapped to 16 bits below)
                    BinOp::Mul if operand == DType::U16 => format!("((unsigned int){x} * {y})"),
                    BinOp::Mul => infix("*"),
                    BinOp::Div => infix("/"),
                    BinOp::FloorDiv | BinOp::FloorMod if operand.is_int() => {
                        // C's / and % are Python's on non-negative operands
                        let plain = non_negative(m, &self.non_negative, a)
                            && (b.as_int().is_some_and(|c| c > 0) || non_negative(m, &self.non_negative, b))
                            || !operand.is_signed();
                        match (op, plain) {
                            (BinOp::FloorDiv, true) => infix("/"),
                            (_, true) => infix("%"),
                            (BinOp::FloorDiv, false) => format!("tl_floordiv({x}, {y})"),
                            (_, false) => format!("tl_floormod({x}, {y})"),
                        }
                    }
                    BinOp::FloorDiv => {
                        let f = if operand == DType::F64 { "floor" } else { "floorf" };
                        format!("{f}({x} / {y})")
                    }
                    BinOp::FloorMod => {
                        let f = if operand == DType::F64 { "floor" } else { "floorf" };
                        format!("({x} - {f}({x} / {y}) * {y})")
                    }
                    BinOp::Max | BinOp::Min => {
                        let name = if *op == BinOp::Max { "max" } else { "min" };
                        if operand.is_float() {
                            let f =
                                if operand == DType::F64 { format!("f{name}") } else { format!("f{name}f") };
                            format!("{f}({x}, {y})")
                        } else {
                            let cty = value_type(operand);
                            let cast = |s: &str| {
                                if matches!(operand, DType::I32 | DType::U32 | DType::I64 | DType::U64) {
                                    s.to_string()
                                } else {
                                    format!("(int)({s})")
                                }
                            };
                            let _ = cty;
                            self.uses_uint64_helpers |= operand == DType::U64;
                            format!("tl_{name}({}, {})", cast(&x), cast(&y))
                        }
                    }
                    BinOp::Eq => infix("=="),
                    BinOp::Ne => infix("!="),
                    BinOp::Lt => infix("<"),
                    BinOp::Le => infix("<="),
                    BinOp::Gt => infix(">"),
                    BinOp::Ge => infix(">="),
                    BinOp::And => infix("&&"),
                    BinOp::Or => infix("||"),
                    BinOp::BitAnd => infix("&"),
                    BinOp::BitOr => infix("|"),
                    BinOp::BitXor => infix("^"),
                    BinOp::Shl => infix("<<"),
                    BinOp::Shr => infix(">>"),
                };
                self.round(raw, *dtype)
            }
            Expr::Unary { op: UnOp::Reinterpret, a, dtype } => {
                if matches!(a.dtype(), DType::F16 | DType::BF16) {
                    // the stored bits, not a float converted back (which loses a NaN's payload)
                    if let Some(bits) = self.half_bits(a)? {
                        return Ok(reinterpret_from_bits(&bits, *dtype));
                    }
                }
                let x = self.expr(a)?;
                reinterpret(&x, a.dtype(), *dtype)?
            }
            Expr::Unary { op, a, dtype } => {
                let x = self.expr(a)?;
                let dbl = *dtype == DType::F64;
                let f = |name: &str| {
                    if dbl {
                        format!("{name}({x})")
                    } else {
                        format!("{name}f({x})")
                    }
                };
                let raw = match op {
                    UnOp::Neg => format!("(-{x})"),
                    UnOp::Not => format!("(!{x})"),
                    UnOp::Abs if dtype.is_float() => f("fabs"),
                    UnOp::Abs => format!("({x} < 0 ? -{x} : {x})"),
                    UnOp::Exp => f("exp"),
                    UnOp::Exp2 => f("exp2"),
                    UnOp::Log => f("log"),
                    UnOp::Log2 => f("log2"),
                    UnOp::Sqrt => f("sqrt"),
                    UnOp::Rsqrt => f("rsqrt"),
                    UnOp::Tanh => f("tanh"),
                    UnOp::Erf => f("erf"),
                    UnOp::Sin => f("sin"),
                    UnOp::Cos => f("cos"),
                    UnOp::Floor => f("floor"),
                    UnOp::Ceil => f("ceil"),
                    UnOp::Reinterpret => unreachable!("matched above"),
                    UnOp::Sigmoid => {
                        if dbl {
                            format!("tl_sigmoid({x})")
                        } else {
                            format!("tl_sigmoidf({x})")
                        }
                    }
                };
                self.round(raw, *dtype)
            }
            Expr::Cast { a, dtype } => {
                let x = self.expr(a)?;
                self.cast(x, a.dtype(), *dtype)
            }
            Expr::Select { cond, a, b, .. } => {
                let (c, x, y) = (self.expr(cond)?, self.expr(a)?, self.expr(b)?);
                format!("({c} ? {x} : {y})")
            }
            Expr::ShflXor { a, mask, .. } => {
                let x = self.expr(a)?;
                format!("__shfl_xor_sync(0xffffffffu, {x}, {mask})")
            }
        })
    }

    /// Narrow types: round floats to f16/bf16, wrap small integers.
    pub(super) fn round(&self, raw: String, dt: DType) -> String {
        match dt {
            DType::F16 => format!("tl_round_half({raw})"),
            DType::BF16 => format!("tl_round_bf16({raw})"),
            DType::I8 | DType::U8 | DType::I16 | DType::U16 => format!("(({}){raw})", storage_type(dt)),
            _ => raw,
        }
    }

    pub(super) fn cast(&mut self, x: String, from: DType, to: DType) -> String {
        if from == to {
            return x;
        }
        if to == DType::Bool {
            return format!("({x} != 0)");
        }
        if from.is_float() && to.is_int() {
            // truncating, saturating, NaN -> 0 (PTX cvt.rzi), in the source's precision
            let p = if from == DType::F64 { "tl_d" } else { "tl_f" };
            return match to {
                DType::I64 => format!("{p}2ll({x})"),
                DType::U64 => {
                    self.uses_uint64_helpers = true;
                    format!("{p}2ull({x})")
                }
                DType::U32 => format!("{p}2u({x})"),
                DType::I32 => format!("{p}2i({x})"),
                DType::I8 => format!("((signed char){p}2i_sat({x}, -128, 127))"),
                DType::U8 => format!("((unsigned char){p}2i_sat({x}, 0, 255))"),
                DType::I16 => format!("((short){p}2i_sat({x}, -32768, 32767))"),
                DType::U16 => format!("((unsigned short){p}2i_sat({x}, 0, 65535))"),
                _ => unreachable!(),
            };
        }
        match to {
            DType::F16 => format!("tl_round_half((float)({x}))"),
            DType::BF16 => format!("tl_round_bf16((float)({x}))"),
            _ => format!("(({}){x})", storage_type(to)),
        }
    }
}

/// The C expression reading `x` (of type `from`, as the emitter holds it: fp16/bf16 values as
/// floats) as the bits of `to`, a type of the same width.
/// The bits of `x` (a value of `from`) as an unsigned integer of its width.
fn reinterpret_bits(x: &str, from: DType) -> String {
    match from {
        DType::F64 => format!("(unsigned long long)__double_as_longlong({x})"),
        DType::F32 => format!("__float_as_uint({x})"),
        DType::F16 => format!("(unsigned int)tl_to_half({x}).bits"),
        DType::BF16 => format!("(unsigned int)tl_to_bf16({x}).bits"),
        _ => format!("({x})"),
    }
}

fn reinterpret(x: &str, from: DType, to: DType) -> Result<String, Diagnostic> {
    if from.bytes() != to.bytes() {
        return Err(Diagnostic::bug(format!("reinterpret of {from} as {to}: the widths differ")));
    }
    Ok(reinterpret_from_bits(&reinterpret_bits(x, from), to))
}

/// The value of `to` whose bits are `bits` (an unsigned integer of its width).
fn reinterpret_from_bits(bits: &str, to: DType) -> String {
    match to {
        DType::F64 => format!("__longlong_as_double((long long)({bits}))"),
        DType::F32 => format!("__uint_as_float((unsigned int)({bits}))"),
        DType::F16 => format!("tl_float(tl_half{{(unsigned short)({bits})}})"),
        DType::BF16 => format!("tl_float(tl_bf16{{(unsigned short)({bits})}})"),
        other => format!("(({}) ({bits}))", super::storage_type(other)),
    }
}
