//! Element types and memory scopes.
//!
//! Integer values (constants, the interpreter's values, value ranges) are held in an `i64`,
//! wrapped to their type's width: sign-extended for signed types, zero-extended for
//! unsigned ones, and a uint64 as its bit pattern (values from 2^63 up are negative `i64`s;
//! [`DType::int_value`] gives the number).

use std::fmt;

/// Element type of a buffer or an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
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
            "uint16" => DType::U16,
            "int32" => DType::I32,
            "uint32" => DType::U32,
            "int64" => DType::I64,
            "uint64" => DType::U64,
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
            DType::U16 => "uint16",
            DType::I32 => "int32",
            DType::U32 => "uint32",
            DType::I64 => "int64",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn bytes(self) -> u32 {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    pub fn is_signed(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// The smallest and the largest value of an integer type (bool: 0 and 1).
    pub fn int_range(self) -> Option<(i128, i128)> {
        if self == DType::Bool {
            return Some((0, 1));
        }
        if !self.is_int() {
            return None;
        }
        let bits = 8 * self.bytes();
        Some(if self.is_signed() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        })
    }

    /// The number an integer of this type held as `held` stands for (see the module doc):
    /// `held` itself, but for a uint64, whose bit pattern it is.
    pub fn int_value(self, held: i64) -> i128 {
        if self == DType::U64 {
            held as u64 as i128
        } else {
            held as i128
        }
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
    /// Distributed shared memory: a shared tile (`Buffer::alias_of`) in every block of the
    /// thread-block cluster, `[blocks, *shape]`, index 0 the block's rank in the cluster
    /// (`T.copy_cluster`). Only element stores and loads reach it; `T.cluster_sync` orders
    /// them.
    Cluster,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        Some(match s {
            "global" => Scope::Global,
            "shared" => Scope::Shared,
            "fragment" => Scope::Fragment,
            "local" => Scope::Local,
            "cluster" => Scope::Cluster,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Shared => "shared",
            Scope::Fragment => "fragment",
            Scope::Local => "local",
            Scope::Cluster => "cluster",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_16_and_64_bit_types() {
        for (name, dt, bytes) in [("uint16", DType::U16, 2), ("uint64", DType::U64, 8)] {
            assert_eq!(DType::parse(name), Some(dt));
            assert_eq!(dt.name(), name);
            assert_eq!(dt.bytes(), bytes);
            assert!(dt.is_int() && !dt.is_signed() && !dt.is_float());
        }
        assert_eq!(DType::U16.int_range(), Some((0, 65535)));
        assert_eq!(DType::U64.int_range(), Some((0, u64::MAX as i128)));
        assert_eq!(DType::I64.int_range(), Some((i64::MIN as i128, i64::MAX as i128)));
        assert_eq!(DType::Bool.int_range(), Some((0, 1)));
        assert_eq!(DType::F32.int_range(), None);
        assert_eq!(DType::U64.int_value(-1), u64::MAX as i128);
        assert_eq!(DType::I64.int_value(-1), -1);
    }
}
