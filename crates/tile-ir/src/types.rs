//! Element types and memory scopes.

use std::fmt;

/// Element type of a buffer or an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    U8,
    I16,
    I32,
    U32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "bool" => DType::Bool,
            "int8" => DType::I8,
            "uint8" => DType::U8,
            "int16" => DType::I16,
            "int32" => DType::I32,
            "uint32" => DType::U32,
            "int64" => DType::I64,
            "float16" => DType::F16,
            "bfloat16" => DType::BF16,
            "float32" => DType::F32,
            "float64" => DType::F64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn bytes(self) -> u32 {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I8 | DType::U8 | DType::I16 | DType::I32 | DType::U32 | DType::I64)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Device memory: a tensor parameter.
    Global,
    /// One copy per block, visible to all its threads.
    Shared,
    /// A tile distributed over the block's threads (registers); its layout says who holds what.
    Fragment,
    /// A per-thread array (registers or local memory).
    Local,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        Some(match s {
            "global" => Scope::Global,
            "shared" => Scope::Shared,
            "fragment" => Scope::Fragment,
            "local" => Scope::Local,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Shared => "shared",
            Scope::Fragment => "fragment",
            Scope::Local => "local",
        }
    }
}
