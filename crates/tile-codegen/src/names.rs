//! Turning user names into unique, safe C identifiers, deterministically (by id order).

use std::collections::BTreeSet;
use tile_ir::{BufferId, Module, VarId};

/// Identifiers a user name must not become: C++ keywords and alternative tokens, macros
/// and declarations that NVRTC or a C++ reader expects, and every name the generated code
/// itself refers to (CUDA built-ins, the math functions of `tl_` helpers and expressions).
/// `reserved` adds the families (`tl_`, `__`, `_X`, vector types).
const RESERVED: &[&str] = &[
    // C++20 keywords
    "alignas",
    "alignof",
    "asm",
    "auto",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "concept",
    "const",
    "consteval",
    "constexpr",
    "constinit",
    "const_cast",
    "continue",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "nullptr",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    // identifiers with a special meaning, C keywords a reader would trip on
    "final",
    "override",
    "import",
    "module",
    "restrict",
    "inline",
    // alternative tokens
    "and",
    "and_eq",
    "bitand",
    "bitor",
    "compl",
    "not",
    "not_eq",
    "or",
    "or_eq",
    "xor",
    "xor_eq",
    // common macros and library names
    "NULL",
    "EOF",
    "assert",
    "offsetof",
    "errno",
    "INFINITY",
    "NAN",
    "HUGE_VAL",
    "HUGE_VALF",
    "CHAR_BIT",
    "INT_MAX",
    "INT_MIN",
    "UINT_MAX",
    "LLONG_MAX",
    "LLONG_MIN",
    "FLT_MAX",
    "FLT_MIN",
    "DBL_MAX",
    "DBL_MIN",
    "stdin",
    "stdout",
    "stderr",
    "size_t",
    "ptrdiff_t",
    "std",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    // CUDA built-ins and device functions
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "dim3",
    "printf",
    "malloc",
    "free",
    "memcpy",
    "memset",
    "clock",
    "clock64",
    "atomicAdd",
    "atomicSub",
    "atomicExch",
    "atomicMin",
    "atomicMax",
    "atomicInc",
    "atomicDec",
    "atomicCAS",
    "atomicAnd",
    "atomicOr",
    "atomicXor",
    "half",
    "half2",
    "nv_bfloat16",
    "nv_bfloat162",
    // math functions (float and double spellings)
    "abs",
    "labs",
    "llabs",
    "min",
    "max",
    "umin",
    "umax",
    "llmin",
    "llmax",
    "exp",
    "expf",
    "exp2",
    "exp2f",
    "exp10",
    "exp10f",
    "expm1",
    "expm1f",
    "log",
    "logf",
    "log2",
    "log2f",
    "log10",
    "log10f",
    "log1p",
    "log1pf",
    "sqrt",
    "sqrtf",
    "rsqrt",
    "rsqrtf",
    "cbrt",
    "cbrtf",
    "pow",
    "powf",
    "tanh",
    "tanhf",
    "sinh",
    "sinhf",
    "cosh",
    "coshf",
    "erf",
    "erff",
    "erfc",
    "erfcf",
    "sin",
    "sinf",
    "cos",
    "cosf",
    "tan",
    "tanf",
    "asin",
    "asinf",
    "acos",
    "acosf",
    "atan",
    "atanf",
    "atan2",
    "atan2f",
    "floor",
    "floorf",
    "ceil",
    "ceilf",
    "round",
    "roundf",
    "trunc",
    "truncf",
    "rint",
    "rintf",
    "fabs",
    "fabsf",
    "fmax",
    "fmaxf",
    "fmin",
    "fminf",
    "fma",
    "fmaf",
    "fmod",
    "fmodf",
    "isnan",
    "isinf",
    "isfinite",
    "signbit",
    "nan",
    "nanf",
    "copysign",
    "copysignf",
];

/// Whether `s` may not be used as it is (see [`RESERVED`]).
fn reserved(s: &str) -> bool {
    let underscore_capital =
        s.len() > 1 && s.starts_with('_') && s[1..].starts_with(|c: char| c.is_ascii_uppercase());
    RESERVED.contains(&s)
        || s.starts_with("tl_")
        || s.starts_with("__")
        || s.starts_with("make_")
        || underscore_capital
        || is_vector_type(s)
}

/// CUDA's built-in vector types (`uint4`, `float2`, `longlong3`, …), declared without a header.
fn is_vector_type(s: &str) -> bool {
    let Some(base) = s.strip_suffix(['1', '2', '3', '4']) else { return false };
    let base = base.strip_prefix('u').unwrap_or(base);
    matches!(base, "char" | "short" | "int" | "long" | "longlong" | "float" | "double")
}

pub struct Namer {
    vars: Vec<String>,
    buffers: Vec<String>,
}

fn sanitize(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'v');
    }
    if reserved(&s) {
        s.insert_str(0, "u_");
    }
    s
}

impl Namer {
    pub fn new(m: &Module) -> Namer {
        let mut taken = BTreeSet::new();
        let mut unique = |name: &str| {
            let base = sanitize(name);
            let mut candidate = base.clone();
            let mut k = 1;
            while !taken.insert(candidate.clone()) {
                candidate = format!("{base}_{k}");
                k += 1;
            }
            candidate
        };
        let buffers = m.buffers.iter().map(|b| unique(&b.name)).collect();
        let vars = m.vars.iter().map(|v| unique(&v.name)).collect();
        Namer { vars, buffers }
    }
    pub fn var(&self, v: VarId) -> String {
        self.vars[v.0 as usize].clone()
    }
    pub fn buffer(&self, b: BufferId) -> String {
        self.buffers[b.0 as usize].clone()
    }
    pub fn kernel_name(&self, name: &str) -> String {
        sanitize(name)
    }
}
