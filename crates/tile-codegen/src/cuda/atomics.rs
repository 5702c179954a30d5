//! Atomics beyond the prelude's relaxed `tl_atomic_add`: the helper functions a kernel's
//! `T.atomic_add` / `T.atomic_max` / `T.atomic_min` call, written for the (operation,
//! dtype, memory order, form) it uses and only those, in inline PTX on generic addresses
//! (global or shared), scope `.gpu`.
//!
//! - **Hardware atomics** where PTX has them: `add` on f32, f64, f16, (sm_90) bf16, and the
//!   32/64-bit integers; `max`/`min` on the integers. An unused result is a `red`.
//! - **Compare-and-swap loops** elsewhere: `max`/`min` on floats (f32, f64, f16, bf16) and
//!   bf16 `add` before sm_90. Float max/min follow tilers' rule, which the interpreter
//!   shares (`tile-interp` `num::atomic_combine`): a NaN operand leaves the element as it
//!   is, a NaN element takes the operand, and -0.0 counts as less than +0.0; an element
//!   that would not change is not written. (PTX's `max.f32` leaves the sign of a zero
//!   result open, and the integer-punning trick makes the result depend on a NaN's sign
//!   bit; the loop costs retries only under contention on the same element.)
//! - **Vectors** (a tile atomic's 16-byte chunks, `Target::atomic_vector_width`): one
//!   `red.global.add.v2/.v4.f32` or `.noftz.v2/.v4/.v8.f16`/`.bf16` on sm_90, packed
//!   `red.add.noftz.f16x2` before it.
//! - **Memory orders**: `atom.relaxed/.acquire/.release/.acq_rel`; `seq_cst` is `fence.sc`
//!   then `atom.acquire` (the C++-to-PTX mapping); a `red` carries relaxed and release only,
//!   so a stronger unused result is an `atom`. CAS loops use relaxed CAS between fences:
//!   `fence.acq_rel` before (release, acq_rel; `fence.sc` for seq_cst) and after (acquire,
//!   acq_rel, seq_cst) — the fence-based release and acquire patterns of the PTX memory
//!   model.

use super::{storage_type, value_type};
use std::fmt::Write;
use tile_ir::{AtomicMode, AtomicOp, DType, MemoryOrder, Target};

/// What a call site needs from its helper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Form {
    /// `void f(T* p, V v)`.
    Update,
    /// `T f(T* p, V v)`: the element's old value (`return_prev=True`).
    Fetch,
    /// `void f(T* p, const T* v)`: `width` contiguous elements from registers.
    Vector(u32),
}

/// One helper function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Helper {
    pub mode: AtomicMode,
    pub dtype: DType,
    pub form: Form,
}

impl Helper {
    /// The function's name (overloaded on the element type).
    pub(super) fn name(&self) -> String {
        let base = format!("tl_atomic_{}_{}", self.mode.op.name(), self.mode.order.name());
        match self.form {
            Form::Update => base,
            Form::Fetch => format!("{base}_fetch"),
            Form::Vector(w) => format!("{base}_v{w}"),
        }
    }

    /// The function's definition for `target`.
    pub(super) fn definition(&self, target: &Target) -> String {
        let (t, v) = (storage_type(self.dtype), value_type(self.dtype));
        let name = self.name();
        let mut out = String::new();
        match self.form {
            Form::Vector(w) => {
                let _ = writeln!(
                    out,
                    "static __device__ __forceinline__ void {name}({t}* p, const {t}* v) {{\n  {}\n}}",
                    vector_red(self.mode, self.dtype, w, target)
                );
            }
            Form::Update | Form::Fetch => {
                let fetch = self.form == Form::Fetch;
                let ret = if fetch { t } else { "void" };
                let body = if hardware(self.mode.op, self.dtype, target) {
                    hardware_body(self.mode, self.dtype, fetch)
                } else {
                    cas_body(self.mode, self.dtype, fetch)
                };
                let _ = writeln!(
                    out,
                    "static __device__ __forceinline__ {ret} {name}({t}* p, {v} v) {{\n{body}}}"
                );
            }
        }
        out
    }
}

/// Whether PTX has `atom.<op>` for `dtype` on `target`.
fn hardware(op: AtomicOp, dtype: DType, target: &Target) -> bool {
    match op {
        AtomicOp::Add => match dtype {
            DType::BF16 => target.caps.bf16_atomic_add,
            _ => true,
        },
        AtomicOp::Max | AtomicOp::Min => dtype.is_int(),
    }
}

/// PTX's type suffix and inline-asm register constraint of an element.
fn ptx_type(op: AtomicOp, dtype: DType) -> (&'static str, &'static str) {
    match dtype {
        DType::F32 => ("f32", "f"),
        DType::F64 => ("f64", "d"),
        DType::F16 => ("noftz.f16", "h"),
        DType::BF16 => ("noftz.bf16", "h"),
        DType::I32 => ("s32", "r"),
        DType::U32 => ("u32", "r"),
        // two's complement: an int64 add is the uint64 add
        DType::I64 if op == AtomicOp::Add => ("u64", "l"),
        DType::I64 => ("s64", "l"),
        _ => ("u64", "l"),
    }
}

/// The `.sem.scope` qualifiers and the fence before, for a hardware atomic of `order`.
fn sem(order: MemoryOrder) -> (&'static str, &'static str) {
    match order {
        MemoryOrder::Relaxed => (".relaxed.gpu", ""),
        MemoryOrder::Acquire => (".acquire.gpu", ""),
        MemoryOrder::Release => (".release.gpu", ""),
        MemoryOrder::AcqRel => (".acq_rel.gpu", ""),
        MemoryOrder::SeqCst => (".acquire.gpu", "  asm volatile(\"fence.sc.gpu;\" ::: \"memory\");\n"),
    }
}

fn hardware_body(mode: AtomicMode, dtype: DType, fetch: bool) -> String {
    let (ty, c) = ptx_type(mode.op, dtype);
    let (sem, fence) = sem(mode.order);
    let op = mode.op.name();
    let half = matches!(dtype, DType::F16 | DType::BF16);
    // the operand as the instruction takes it
    let operand = match dtype {
        DType::F16 => "tl_to_half(v).bits".to_string(),
        DType::BF16 => "tl_to_bf16(v).bits".to_string(),
        _ => "v".to_string(),
    };
    let reg = if half { "unsigned short" } else { storage_type(dtype) };
    let mut out = String::from(fence);
    let red_ok = matches!(mode.order, MemoryOrder::Relaxed | MemoryOrder::Release);
    if !fetch && red_ok {
        let _ = writeln!(
            out,
            "  asm volatile(\"red{sem}.{op}.{ty} [%0], %1;\" :: \"l\"(p), \"{c}\"(({reg}){operand}) : \"memory\");"
        );
        return out;
    }
    let _ = writeln!(out, "  {reg} old;");
    let _ = writeln!(
        out,
        "  asm volatile(\"atom{sem}.{op}.{ty} %0, [%1], %2;\" : \"={c}\"(old) : \"l\"(p), \"{c}\"(({reg}){operand}) : \"memory\");"
    );
    if fetch {
        if half {
            let _ = writeln!(out, "  {} r; r.bits = old; return r;", storage_type(dtype));
        } else {
            out.push_str("  return old;\n");
        }
    }
    out
}

/// The C text of a conversion applied to the C expression it is given.
type Conversion = fn(&str) -> String;

/// A compare-and-swap loop: `take` decides from `cur` (the element) and `x` (the operand,
/// in the element's precision) whether the element becomes `next`.
fn cas_body(mode: AtomicMode, dtype: DType, fetch: bool) -> String {
    // bits type, CAS width, constraint, bits -> value, value -> bits
    let (bits, width, c) = match dtype.bytes() {
        2 => ("unsigned short", "b16", "h"),
        4 => ("unsigned int", "b32", "r"),
        _ => ("unsigned long long", "b64", "l"),
    };
    let (to_value, to_bits): (Conversion, Conversion) = match dtype {
        DType::F32 => (|b| format!("__uint_as_float({b})"), |x| format!("__float_as_uint({x})")),
        DType::F64 => (
            |b| format!("__longlong_as_double((long long){b})"),
            |x| format!("(unsigned long long)__double_as_longlong({x})"),
        ),
        DType::F16 => (|b| format!("tl_float(tl_half{{{b}}})"), |x| format!("tl_to_half({x}).bits")),
        DType::BF16 => (|b| format!("tl_float(tl_bf16{{{b}}})"), |x| format!("tl_to_bf16({x}).bits")),
        _ => unreachable!("integer atomics are hardware atomics"),
    };
    let vt = value_type(dtype);
    let sign = |x: &str| format!("({} >> {})", to_bits(x), dtype.bytes() * 8 - 1);
    let (take, next) = match mode.op {
        AtomicOp::Add => ("true".to_string(), "cur + x".to_string()),
        op => {
            // x replaces cur: a NaN x never, a NaN cur always, else the larger (max) or
            // smaller (min) with -0.0 < +0.0
            let (a, b) = if op == AtomicOp::Max { ("x", "cur") } else { ("cur", "x") };
            let greater = format!("{a} > {b} || ({a} == {b} && !{} && {})", sign(a), sign(b));
            (format!("x == x && (cur != cur || {greater})"), "x".to_string())
        }
    };
    let before = match mode.order {
        MemoryOrder::Release | MemoryOrder::AcqRel => {
            "  asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\");\n"
        }
        MemoryOrder::SeqCst => "  asm volatile(\"fence.sc.gpu;\" ::: \"memory\");\n",
        _ => "",
    };
    let after = match mode.order {
        MemoryOrder::Relaxed | MemoryOrder::Release => "",
        _ => "  asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\");\n",
    };
    let mut out = String::from(before);
    // the operand rounded to the element's precision, as the element will hold it
    let x = match dtype {
        DType::F16 | DType::BF16 => to_value(&to_bits("v")),
        _ => "v".to_string(),
    };
    let _ = writeln!(out, "  const {vt} x = {x};");
    let _ = writeln!(out, "  {bits} assumed, old = *(volatile {bits}*)p;");
    out.push_str("  do {\n");
    out.push_str("    assumed = old;\n");
    let _ = writeln!(out, "    const {vt} cur = {};", to_value("assumed"));
    let _ = writeln!(out, "    if (!({take})) break;");
    let _ = writeln!(out, "    const {bits} next = {};", to_bits(&next));
    let _ = writeln!(
        out,
        "    asm volatile(\"atom.relaxed.gpu.cas.{width} %0, [%1], %2, %3;\" : \"={c}\"(old) : \"l\"(p), \"{c}\"(assumed), \"{c}\"(next) : \"memory\");"
    );
    out.push_str("  } while (old != assumed);\n");
    out.push_str(after);
    if fetch {
        match dtype {
            DType::F16 | DType::BF16 => {
                let _ = writeln!(out, "  {} r; r.bits = assumed; return r;", storage_type(dtype));
            }
            _ => {
                let _ = writeln!(out, "  return {};", to_value("assumed"));
            }
        }
    }
    out
}

/// One vector `red` of `w` elements from the register array `v`.
fn vector_red(mode: AtomicMode, dtype: DType, w: u32, target: &Target) -> String {
    let sem = match mode.order {
        MemoryOrder::Release => ".release.gpu",
        _ => ".relaxed.gpu",
    };
    let op = mode.op.name();
    let lanes = |c: &str, f: &dyn Fn(u32) -> String| -> (String, String) {
        let regs: Vec<String> = (0..w).map(|k| format!("%{}", k + 1)).collect();
        let args: Vec<String> = (0..w).map(|k| format!("\"{c}\"({})", f(k))).collect();
        (regs.join(", "), args.join(", "))
    };
    match dtype {
        DType::F16 if !target.caps.vector_atomics => {
            // two halves packed in one 32-bit word (f16x2, sm_60+)
            format!(
                "asm volatile(\"red{sem}.global.{op}.noftz.f16x2 [%0], %1;\" :: \"l\"(p), \"r\"(*(const unsigned int*)v) : \"memory\");"
            )
        }
        DType::F16 | DType::BF16 => {
            let ty = if dtype == DType::F16 { "f16" } else { "bf16" };
            let (regs, args) = lanes("h", &|k| format!("v[{k}].bits"));
            format!(
                "asm volatile(\"red{sem}.global.{op}.noftz.v{w}.{ty} [%0], {{{regs}}};\" :: \"l\"(p), {args} : \"memory\");"
            )
        }
        _ => {
            let (regs, args) = lanes("f", &|k| format!("v[{k}]"));
            format!("asm volatile(\"red{sem}.global.{op}.v{w}.f32 [%0], {{{regs}}};\" :: \"l\"(p), {args} : \"memory\");")
        }
    }
}
