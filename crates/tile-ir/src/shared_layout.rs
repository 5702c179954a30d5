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
    /// In elements; row-major (of the panels, when `panel` is set).
    pub strides: Vec<i64>,
    pub dtype: DType,
    pub swizzle: Option<Swizzle>,
    /// The last dimension in panels of this many elements: a tile of R rows of C is stored
    /// `[C / P][R][P]`, each panel row one swizzle span (`Swizzle::span(P · bytes)`). These
    /// are the canonical layouts `wgmma` reads through a descriptor.
    pub panel: Option<i64>,
}

/// What a layout fixes of a `wgmma` shared-memory matrix descriptor (PTX ISA, "Matrix
/// Descriptor Format"): the swizzle mode (1 = 128-byte, 2 = 64-byte, 3 = 32-byte) and the
/// leading- and stride-dimension byte offsets. The start address is the operand's first
/// element (`offset` of an index whose row is a multiple of 8 is unswizzled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixDescriptor {
    pub mode: u32,
    pub lbo: i64,
    pub sbo: i64,
}

impl MatrixDescriptor {
    /// The 64-bit descriptor for a tile starting at shared byte address `address`.
    pub fn encode(&self, address: i64) -> u64 {
        let enc = |x: i64| ((x as u64) & 0x3FFFF) >> 4;
        enc(address) | (enc(self.lbo) << 16) | (enc(self.sbo) << 32) | ((self.mode as u64) << 62)
    }

    /// The swizzle functor of the descriptor's mode.
    pub fn swizzle(&self) -> Option<Swizzle> {
        match self.mode {
            1 => Swizzle::span(128),
            2 => Swizzle::span(64),
            3 => Swizzle::span(32),
            _ => None,
        }
    }
}

impl SharedLayout {
    /// The layout of a shared buffer: row-major or in panels, with its swizzle.
    pub fn of(b: &Buffer) -> SharedLayout {
        SharedLayout {
            shape: b.extents(),
            strides: b.strides(),
            dtype: b.dtype,
            swizzle: b.swizzle,
            panel: b.panel,
        }
    }

    /// The swizzle span (bytes of a panel row) that a tile whose last dimension holds
    /// `elems` elements of `dtype` gets for `wgmma`: the widest of 128, 64 and 32 bytes that
    /// divides the row, or None (rows of less than 32 bytes, or not a multiple of 32).
    pub fn wgmma_span(elems: i64, dtype: DType) -> Option<i64> {
        let row = elems * dtype.bytes() as i64;
        [128, 64, 32].into_iter().find(|s| row % s == 0)
    }

    /// The canonical `wgmma` layout of a tile (`shape`, rows along dimension n − 2): panels of
    /// the span [`SharedLayout::wgmma_span`] gives, swizzled in that span.
    pub fn wgmma(shape: &[i64], dtype: DType) -> Option<SharedLayout> {
        let n = shape.len();
        if n < 2 || shape[n - 2] % 8 != 0 {
            return None;
        }
        let span = Self::wgmma_span(shape[n - 1], dtype)?;
        Some(SharedLayout {
            shape: shape.to_vec(),
            strides: crate::ir::row_major_strides(shape),
            dtype,
            swizzle: Swizzle::span(span as u32),
            panel: Some(span / dtype.bytes() as i64),
        })
    }

    /// The descriptor fields for reading this tile with `wgmma`: `k_major` when the tile's
    /// last (contiguous) dimension is K (A stored M × K, B stored N × K), else MN-major (the
    /// rows are K). K-major: the stride byte offset steps 8 rows (8 spans), the leading one is
    /// unused (16). MN-major: the leading byte offset steps from one panel to the next along
    /// M or N, the stride byte offset 8 rows of K. Err: the layout is not one wgmma reads.
    pub fn wgmma_descriptor(&self, k_major: bool) -> Result<MatrixDescriptor, String> {
        let n = self.shape.len();
        let eb = self.dtype.bytes() as i64;
        let (Some(p), Some(sw)) = (self.panel, self.swizzle) else {
            return Err("the tile is not in a wgmma layout (panels of one swizzle span)".into());
        };
        let span = p * eb;
        if Swizzle::span(span as u32) != Some(sw) || n < 2 || self.shape[n - 2] % 8 != 0 {
            return Err(format!("panels of {span} bytes with {sw} are not a wgmma layout"));
        }
        let mode = match span {
            128 => 1,
            64 => 2,
            _ => 3,
        };
        let rows = self.shape[n - 2];
        Ok(if k_major {
            MatrixDescriptor { mode, lbo: 16, sbo: 8 * span }
        } else {
            MatrixDescriptor { mode, lbo: rows * span, sbo: 8 * span }
        })
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
        if let (Some(p), Some(sw), true) = (self.panel, self.swizzle, n >= 2) {
            return self.panel_offset(idx, p, sw, &flat_of(0..n - 2));
        }
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

impl SharedLayout {
    /// `offset` of a tile in panels: leading dimensions, then `(c / P) · R · P + r · P +
    /// ((c % P) ^ key)`, the key (in 16-byte chunks) the row's line bits, `(r · span / 128) %
    /// (span / 16)` — the span swizzle of the panel's byte offset, since a panel row is one
    /// span and a panel of R (a multiple of 8) rows a whole number of periods.
    fn panel_offset(&self, idx: &[Expr], p: i64, sw: Swizzle, lead: &Expr) -> Expr {
        let i32c = |v: i64| Expr::int_of(v, DType::I32);
        let as_i32 =
            |e: &Expr| if e.dtype() == DType::I32 { e.clone() } else { Expr::cast(e.clone(), DType::I32) };
        let n = idx.len();
        let eb = self.dtype.bytes() as i64;
        let log2 = |v: i64| 63 - (v as u64).leading_zeros() as i64;
        let rows = self.shape[n - 2];
        let (r, c) = (simplify(as_i32(&idx[n - 2])), simplify(as_i32(&idx[n - 1])));
        let span = p * eb;
        let mask = (1i64 << sw.bits) - 1;
        // the row's line bits: r · span / 128 (rows per 128-byte line: 128 / span)
        let line =
            if span >= 128 { r.clone() } else { Expr::binary(BinOp::Shr, r.clone(), i32c(log2(128 / span))) };
        let key = Expr::binary(BinOp::BitAnd, line, i32c(mask));
        let key = Expr::binary(BinOp::Shl, key, i32c(4 - log2(eb)));
        let panel = simplify(Expr::binary(
            BinOp::Mul,
            Expr::binary(BinOp::FloorDiv, c.clone(), i32c(p)),
            i32c(rows * p),
        ));
        let row = simplify(Expr::binary(BinOp::Mul, r, i32c(p)));
        let within = Expr::binary(BinOp::BitXor, simplify(Expr::binary(BinOp::FloorMod, c, i32c(p))), key);
        let tile = Expr::binary(BinOp::Add, Expr::binary(BinOp::Add, panel, row), within);
        if lead.as_int() == Some(0) {
            tile
        } else {
            Expr::binary(BinOp::Add, lead.clone(), tile)
        }
    }
}

impl fmt::Display for SharedLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.panel {
            let n = self.shape.len();
            write!(
                f,
                "{}{:?} in panels of {p} columns ([{} / {p}][{}][{p}])",
                self.dtype,
                self.shape,
                self.shape[n - 1],
                self.shape[n - 2]
            )?;
            if let Some(s) = self.swizzle {
                write!(f, ", {s}")?;
            }
            return Ok(());
        }
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
        SharedLayout { shape: shape.to_vec(), strides, dtype, swizzle, panel: None }
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

    /// A tile in panels: the offset equals the definition (the span swizzle of the panelled
    /// byte offset) for every element and stage, and permutes the tile.
    #[test]
    fn panel_offsets_match_the_definition() {
        let (v, w) = (VarId(0), VarId(1));
        let i32v = |id| Expr::var(id, DType::I32);
        for (shape, dtype) in [
            (vec![2i64, 64, 64], DType::F16),
            (vec![64, 256], DType::F16),
            (vec![3, 32, 128], DType::BF16),
            (vec![16, 32], DType::F16),
            (vec![2, 8, 16], DType::F16),
            (vec![64, 48], DType::F16),
        ] {
            let l = SharedLayout::wgmma(&shape, dtype).expect("a wgmma layout");
            let n = shape.len();
            let eb = dtype.bytes() as i64;
            let p = l.panel.unwrap();
            let sw = l.swizzle.unwrap();
            assert_eq!(Swizzle::span((p * eb) as u32), Some(sw));
            let (rows, cols) = (shape[n - 2], shape[n - 1]);
            let total: i64 = shape.iter().product();
            let mut seen = vec![false; total as usize];
            for flat in 0..total {
                let (c, r, lead) = (flat % cols, (flat / cols) % rows, flat / (cols * rows));
                let mut exprs: Vec<Expr> = Vec::new();
                if n == 3 {
                    exprs.push(Expr::int(lead));
                }
                let split = |var, size: i64, value: i64| {
                    Expr::binary(
                        BinOp::Add,
                        Expr::binary(BinOp::Mul, i32v(var), Expr::int(size)),
                        Expr::int(value % size),
                    )
                };
                exprs.push(split(v, 8, r));
                exprs.push(split(w, 8, c));
                let got = eval(&l.offset(&exprs), &[(v, r / 8), (w, c / 8)]);
                let linear = lead * rows * cols + (c / p) * rows * p + r * p + c % p;
                assert_eq!(got * eb, sw.apply(linear * eb), "{shape:?} ({r}, {c})");
                assert!(!seen[got as usize]);
                seen[got as usize] = true;
            }
        }
        assert!(SharedLayout::wgmma(&[64, 8], DType::F16).is_none()); // 16-byte rows
        assert!(SharedLayout::wgmma(&[12, 64], DType::F16).is_none()); // rows not a multiple of 8
    }

    #[test]
    fn wgmma_descriptors_of_layouts() {
        let a = SharedLayout::wgmma(&[3, 128, 64], DType::F16).unwrap();
        assert_eq!(a.wgmma_descriptor(true), Ok(MatrixDescriptor { mode: 1, lbo: 16, sbo: 1024 }));
        let b = SharedLayout::wgmma(&[64, 128], DType::BF16).unwrap(); // K x N, N contiguous
        assert_eq!(b.wgmma_descriptor(false), Ok(MatrixDescriptor { mode: 1, lbo: 64 * 128, sbo: 1024 }));
        let narrow = SharedLayout::wgmma(&[128, 32], DType::F16).unwrap();
        assert_eq!(narrow.wgmma_descriptor(true), Ok(MatrixDescriptor { mode: 2, lbo: 16, sbo: 512 }));
        let d = MatrixDescriptor { mode: 1, lbo: 16, sbo: 1024 };
        assert_eq!(d.encode(0x400 + 32), (((0x420u64) >> 4) | (1 << 16) | (64 << 32) | (1 << 62)));
        assert_eq!(d.swizzle(), Swizzle::span(128));
        let row_major = SharedLayout { panel: None, ..a.clone() };
        assert!(row_major.wgmma_descriptor(true).is_err());
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
