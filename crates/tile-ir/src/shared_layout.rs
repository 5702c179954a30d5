//! Shared-memory layouts as values: a tile's shape and strides (row-major) plus a swizzle
//! functor on byte offsets, with the one `offset` that the lowering, the CUDA writer and the
//! thread-level interpreter all use.
//!
//! A [`Swizzle`] `<bits, base, shift>` XORs the `bits` bits of a byte offset from bit `base`
//! with the `bits` bits `shift` places above them (CuTe's `Swizzle<B, M, S>`): with `base = 4`
//! it permutes 16-byte chunks. Hopper's TMA and wgmma modes are `<3,4,3>` (128-byte),
//! `<2,4,3>` (64-byte) and `<1,4,3>` (32-byte); tilers' own swizzle for `ldmatrix` tiles is
//! `<3,4,s>` with `2^(4+s)` the row size in bytes (at least 128): chunk `c` of row `r` at
//! `c ^ (r % 8)`, rows shorter than 128 bytes counting 128-byte lines instead.

use crate::ir::{BinOp, Buffer, Expr};
use crate::simplify::{from_affine, simplify, to_affine};
use crate::types::DType;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Swizzle {
    pub bits: u32,
    pub base: u32,
    pub shift: u32,
}

impl Swizzle {
    pub const fn new(bits: u32, base: u32, shift: u32) -> Swizzle {
        Swizzle { bits, base, shift }
    }

    /// Hopper's swizzle modes (TMA's `CU_TENSOR_MAP_SWIZZLE_*B`, wgmma's descriptor field):
    /// 16-byte chunks XOR the line index inside a 32, 64 or 128-byte span.
    pub fn span(bytes: u32) -> Option<Swizzle> {
        match bytes {
            32 => Some(Swizzle::new(1, 4, 3)),
            64 => Some(Swizzle::new(2, 4, 3)),
            128 => Some(Swizzle::new(3, 4, 3)),
            _ => None,
        }
    }

    /// tilers' swizzle of a tile with rows of `row_bytes` (a power of two of at least 16):
    /// the 16-byte chunk `c` of row `r` at `c ^ (r % 8)`; rows shorter than 128 bytes count
    /// 128-byte lines instead of rows. Eight rows read at one column (ldmatrix) or written
    /// along a row (vector stores) then fall in distinct banks.
    pub fn chunks_of_rows(row_bytes: i64) -> Swizzle {
        let line = (row_bytes.max(128) as u64).trailing_zeros();
        Swizzle::new(3, 4, line - 4)
    }

    /// The swizzled byte offset (the definition the decomposed forms are tested against).
    pub fn apply(&self, byte: i64) -> i64 {
        let mask = (1i64 << self.bits) - 1;
        byte ^ (((byte >> (self.base + self.shift)) & mask) << self.base)
    }

    /// Bytes after which the pattern repeats: the tile base must be aligned to it.
    pub fn period(&self) -> i64 {
        1 << (self.base + self.shift + self.bits)
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "swizzle<{},{},{}>", self.bits, self.base, self.shift)
    }
}

/// Where each element of a shared tile lives: `offset(idx)` in elements from the tile's
/// start (its `shared_offset`).
#[derive(Clone, Debug, PartialEq)]
pub struct SharedLayout {
    pub shape: Vec<i64>,
    /// In elements; row-major for every tile tilers makes today.
    pub strides: Vec<i64>,
    pub dtype: DType,
    pub swizzle: Option<Swizzle>,
}

impl SharedLayout {
    /// The layout of a shared buffer: row-major, with its swizzle.
    pub fn of(b: &Buffer) -> SharedLayout {
        SharedLayout { shape: b.extents(), strides: b.strides(), dtype: b.dtype, swizzle: b.swizzle }
    }

    /// The element offset of `idx`, swizzle applied, written so that the C compiler can take
    /// it apart: leading (stage) dimensions and the row add, and the XOR touches only the
    /// column (or, for rows shorter than 128 bytes, the offset inside a 128-byte line) with a
    /// key from the row's low bits alone. Row terms that are multiples of the swizzle period
    /// drop out of the key, so the key of an ldmatrix or cp.async address depends on the lane
    /// only and is computed once per thread. Tiles whose size is not a multiple of the period,
    /// and swizzles other than `<3,4,s>`, take the flat form `apply(offset · bytes) / bytes`.
    pub fn offset(&self, idx: &[Expr]) -> Expr {
        let i32c = |v: i64| Expr::int_of(v, DType::I32);
        let as_i32 =
            |e: &Expr| if e.dtype() == DType::I32 { e.clone() } else { Expr::cast(e.clone(), DType::I32) };
        let flat_of = |dims: std::ops::Range<usize>| {
            dims.fold(i32c(0), |acc, d| {
                Expr::binary(
                    BinOp::Add,
                    acc,
                    Expr::binary(BinOp::Mul, as_i32(&idx[d]), i32c(self.strides[d])),
                )
            })
        };
        let n = idx.len();
        let Some(sw) = self.swizzle else {
            return simplify(flat_of(0..n));
        };
        let eb = self.dtype.bytes() as i64;
        let log2 = |v: i64| 63 - (v as u64).leading_zeros() as i64;
        let line_shift = (sw.base + sw.shift) as i64;
        let row_elems = self.shape[n - 1];
        let row_bytes = row_elems * eb;
        let tile_bytes = if n >= 2 { self.shape[n - 2] * row_bytes } else { 0 };
        let tilers_form = sw.bits == 3 && sw.base == 4 && Swizzle::chunks_of_rows(row_bytes) == sw;
        if !tilers_form || n < 2 || eb > 16 || tile_bytes % (8 << line_shift) != 0 {
            // the flat form: XOR the chunk bits of the byte offset with the line's bits
            let bytes = simplify(Expr::binary(BinOp::Mul, flat_of(0..n), i32c(eb)));
            let mask = (1i64 << sw.bits) - 1;
            let key = Expr::binary(
                BinOp::BitAnd,
                Expr::binary(BinOp::Shr, bytes.clone(), i32c(line_shift)),
                i32c(mask),
            );
            let swizzled =
                Expr::binary(BinOp::BitXor, bytes, Expr::binary(BinOp::Shl, key, i32c(sw.base as i64)));
            return Expr::binary(BinOp::Shr, swizzled, i32c(log2(eb)));
        }
        // the key: bits [k, k + 3) of the row, k = 0 for rows of 128 bytes or more, else the
        // number of rows per 128-byte line; terms that are multiples of 8 << k do not reach them
        let k = if row_bytes >= 128 { 0 } else { 7 - log2(row_bytes) };
        let mut row = to_affine(&simplify(as_i32(&idx[n - 2])));
        row.terms.retain(|_, (c, _)| c.rem_euclid(8 << k) != 0);
        row.constant = row.constant.rem_euclid(8 << k);
        let row_low = from_affine(&row, DType::I32);
        let key = if k == 0 { row_low } else { Expr::binary(BinOp::Shr, row_low, i32c(k)) };
        let key = Expr::binary(BinOp::BitAnd, key, i32c(7));
        // the chunk is 16 bytes: the key moves element offsets by multiples of 16 / eb
        let key = Expr::binary(BinOp::Shl, key, i32c(4 - log2(eb)));
        let lead = simplify(flat_of(0..n - 2));
        let row_offset = simplify(Expr::binary(BinOp::Mul, as_i32(&idx[n - 2]), i32c(row_elems)));
        let col = simplify(as_i32(&idx[n - 1]));
        let tile = if row_bytes >= 128 {
            Expr::binary(BinOp::Add, row_offset, Expr::binary(BinOp::BitXor, col, key))
        } else {
            Expr::binary(BinOp::BitXor, simplify(Expr::binary(BinOp::Add, row_offset, col)), key)
        };
        if lead.as_int() == Some(0) {
            tile
        } else {
            Expr::binary(BinOp::Add, lead, tile)
        }
    }
}

impl fmt::Display for SharedLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?} row-major", self.dtype, self.shape)?;
        if let Some(s) = self.swizzle {
            write!(
                f,
                ", {s}: {}-byte chunk c of {}-byte line r at c ^ (r % {})",
                1 << s.base,
                1 << (s.base + s.shift),
                1 << s.bits
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::VarId;

    /// The value of `e` with `vars[i] = values[i]`.
    fn eval(e: &Expr, vars: &[(VarId, i64)]) -> i64 {
        let mut e = e.clone();
        for (v, x) in vars {
            e = e.substitute(*v, &Expr::int(*x));
        }
        simplify(e).as_int().expect("constant")
    }

    fn layout(shape: &[i64], dtype: DType, swizzle: Option<Swizzle>) -> SharedLayout {
        let mut strides = vec![1; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        SharedLayout { shape: shape.to_vec(), strides, dtype, swizzle }
    }

    const CASES: &[(&[i64], DType)] = &[
        (&[3, 128, 64], DType::F16),
        (&[64, 256], DType::F16),
        (&[2, 128, 32], DType::F16),
        (&[32, 16], DType::F16),
        (&[2, 64, 64], DType::I8),
        (&[32, 128], DType::I8),
        (&[16, 32], DType::F32),
        (&[4, 16], DType::F16), // 128 bytes: not a whole swizzle period, the flat form
        (&[2, 4, 64], DType::F16),
    ];

    /// The decomposed offset equals the definition (`Swizzle::apply` of the row-major byte
    /// offset) for every element, with indices written the way the lowering writes them (a
    /// variable part that is a multiple of 16 rows plus the rest), and is a bijection of the
    /// tile onto itself.
    #[test]
    fn offsets_match_the_definition_and_permute_the_tile() {
        let (v, w) = (VarId(0), VarId(1));
        let i32v = |id| Expr::var(id, DType::I32);
        for (shape, dtype) in CASES {
            let n = shape.len();
            let eb = dtype.bytes() as i64;
            let sw = Swizzle::chunks_of_rows(shape[n - 1] * eb);
            let l = layout(shape, *dtype, Some(sw));
            let total: i64 = shape.iter().product();
            let mut seen = vec![false; total as usize];
            for flat in 0..total {
                let mut idx = vec![0; n];
                let mut rest = flat;
                for d in (0..n).rev() {
                    idx[d] = rest % shape[d];
                    rest /= shape[d];
                }
                // row = 16 * v + (row % 16), column = 8 * w + (column % 8)
                let (row, col) = (idx[n - 2], idx[n - 1]);
                let split = |var, size: i64, value: i64| {
                    Expr::binary(
                        BinOp::Add,
                        Expr::binary(BinOp::Mul, i32v(var), Expr::int(size)),
                        Expr::int(value % size),
                    )
                };
                let exprs: Vec<Expr> = (0..n)
                    .map(|d| {
                        if d == n - 2 {
                            split(v, 16, row)
                        } else if d == n - 1 {
                            split(w, 8, col)
                        } else {
                            Expr::int(idx[d])
                        }
                    })
                    .collect();
                let got = eval(&l.offset(&exprs), &[(v, row / 16), (w, col / 8)]);
                assert_eq!(got * eb, sw.apply(flat * eb), "{shape:?} {dtype} element {flat}");
                assert!(!seen[got as usize], "{shape:?}: offset {got} twice");
                seen[got as usize] = true;
            }
        }
    }

    /// Eight rows read at one 16-byte column (ldmatrix), and eight 16-byte chunks of one row
    /// (vector stores), fall in eight distinct bank groups under each Hopper mode and
    /// tilers' own swizzle.
    #[test]
    fn eight_rows_and_eight_chunks_are_conflict_free() {
        let bank_group = |byte: i64| (byte % 128) / 16;
        for row_bytes in [128i64, 256] {
            let sw = Swizzle::chunks_of_rows(row_bytes);
            for col in (0..row_bytes).step_by(16) {
                let groups: std::collections::BTreeSet<i64> =
                    (0..8).map(|r| bank_group(sw.apply(r * row_bytes + col))).collect();
                assert_eq!(groups.len(), 8, "rows of {row_bytes} bytes at column byte {col}");
            }
        }
        for (span, rows) in [(128i64, 8i64), (64, 4), (32, 2)] {
            let sw = Swizzle::span(span as u32).unwrap();
            // a span-byte line per row: `rows` lines fill 128 bytes' bank groups with no repeat
            for col in (0..span).step_by(16) {
                let groups: std::collections::BTreeSet<i64> =
                    (0..rows).map(|r| bank_group(sw.apply(r * 128 + col) % 128)).collect();
                assert_eq!(groups.len() as i64, rows, "{sw} column {col}");
            }
            assert_eq!(sw.period(), 1024 >> (3 - sw.bits), "{sw}");
        }
        assert_eq!(Swizzle::span(128), Some(Swizzle::chunks_of_rows(128)));
    }

    #[test]
    fn unswizzled_layouts_are_row_major() {
        let l = layout(&[2, 8, 16], DType::F32, None);
        let idx = [Expr::int(1), Expr::int(3), Expr::int(5)];
        assert_eq!(simplify(l.offset(&idx)).as_int(), Some(128 + 48 + 5));
        assert_eq!(l.to_string(), "float32[2, 8, 16] row-major");
        let s = layout(&[64, 64], DType::F16, Some(Swizzle::chunks_of_rows(128)));
        assert!(s.to_string().contains("swizzle<3,4,3>"));
    }
}
