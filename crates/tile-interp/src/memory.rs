//! Buffer contents in their element types, and columns of values (one per iteration).

use crate::num::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits, Val};
use tile_ir::DType;

/// The elements of one buffer, row-major, in its dtype's storage (fp16/bf16 as bits), so
/// elements that are never written come back bit for bit.
#[derive(Clone, Debug)]
pub(crate) enum Data {
    Bool(Vec<u8>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    F16(Vec<u16>),
    BF16(Vec<u16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Values of one expression, one per active iteration: integers and bool as `i64`, floats
/// as `f64` (already rounded to the expression's dtype).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Col {
    I(Vec<i64>),
    F(Vec<f64>),
}

impl Col {
    pub(crate) fn splat(v: Val, n: usize) -> Col {
        match v {
            Val::I(i) => Col::I(vec![i; n]),
            Val::F(x) => Col::F(vec![x; n]),
        }
    }
    pub(crate) fn len(&self) -> usize {
        match self {
            Col::I(v) => v.len(),
            Col::F(v) => v.len(),
        }
    }
    pub(crate) fn get(&self, k: usize) -> Val {
        match self {
            Col::I(v) => Val::I(v[k]),
            Col::F(v) => Val::F(v[k]),
        }
    }
    /// Integer view (floats truncate; only used on integer-typed expressions).
    pub(crate) fn ints(self) -> Vec<i64> {
        match self {
            Col::I(v) => v,
            Col::F(v) => v.into_iter().map(|x| x as i64).collect(),
        }
    }
    /// An empty column of the same kind, for filling with [`Col::push`].
    pub(crate) fn empty_like(dt: DType, n: usize) -> Col {
        if dt.is_float() {
            Col::F(Vec::with_capacity(n))
        } else {
            Col::I(Vec::with_capacity(n))
        }
    }
    pub(crate) fn push(&mut self, v: Val) {
        match self {
            Col::I(c) => c.push(v.as_i64()),
            Col::F(c) => c.push(v.as_f64()),
        }
    }
    /// Merge two columns: lane k comes from `a` where `take_a[k]`, else from `b`, each
    /// consumed in order.
    pub(crate) fn merge(take_a: &[bool], a: Col, b: Col) -> Col {
        fn merge_vec<T: Copy>(take_a: &[bool], a: Vec<T>, b: Vec<T>) -> Vec<T> {
            let (mut ia, mut ib) = (a.into_iter(), b.into_iter());
            take_a
                .iter()
                .map(|&t| if t { ia.next() } else { ib.next() }.expect("lane counts agree"))
                .collect()
        }
        match (a, b) {
            (Col::I(a), Col::I(b)) => Col::I(merge_vec(take_a, a, b)),
            (Col::F(a), Col::F(b)) => Col::F(merge_vec(take_a, a, b)),
            (a, b) => {
                let mut out =
                    Col::empty_like(if matches!(a, Col::F(_)) { DType::F64 } else { DType::I64 }, 0);
                let (mut ka, mut kb) = (0, 0);
                for &t in take_a {
                    if t {
                        out.push(a.get(ka));
                        ka += 1;
                    } else {
                        out.push(b.get(kb));
                        kb += 1;
                    }
                }
                out
            }
        }
    }
}

fn le_chunks<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    bytes.chunks_exact(N).map(|c| c.try_into().expect("chunk of N bytes"))
}

impl Data {
    pub(crate) fn zeros(dt: DType, n: usize) -> Data {
        match dt {
            DType::Bool => Data::Bool(vec![0; n]),
            DType::I8 => Data::I8(vec![0; n]),
            DType::U8 => Data::U8(vec![0; n]),
            DType::I16 => Data::I16(vec![0; n]),
            DType::U16 => Data::U16(vec![0; n]),
            DType::I32 => Data::I32(vec![0; n]),
            DType::U32 => Data::U32(vec![0; n]),
            DType::I64 => Data::I64(vec![0; n]),
            DType::U64 => Data::U64(vec![0; n]),
            DType::F16 => Data::F16(vec![0; n]),
            DType::BF16 => Data::BF16(vec![0; n]),
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::F64 => Data::F64(vec![0.0; n]),
        }
    }

    /// Little-endian bytes of `dt` elements (the length is checked by the caller).
    pub(crate) fn from_bytes(dt: DType, b: &[u8]) -> Data {
        match dt {
            DType::Bool => Data::Bool(b.to_vec()),
            DType::I8 => Data::I8(b.iter().map(|&x| x as i8).collect()),
            DType::U8 => Data::U8(b.to_vec()),
            DType::I16 => Data::I16(le_chunks(b).map(i16::from_le_bytes).collect()),
            DType::U16 => Data::U16(le_chunks(b).map(u16::from_le_bytes).collect()),
            DType::I32 => Data::I32(le_chunks(b).map(i32::from_le_bytes).collect()),
            DType::U32 => Data::U32(le_chunks(b).map(u32::from_le_bytes).collect()),
            DType::I64 => Data::I64(le_chunks(b).map(i64::from_le_bytes).collect()),
            DType::U64 => Data::U64(le_chunks(b).map(u64::from_le_bytes).collect()),
            DType::F16 => Data::F16(le_chunks(b).map(u16::from_le_bytes).collect()),
            DType::BF16 => Data::BF16(le_chunks(b).map(u16::from_le_bytes).collect()),
            DType::F32 => Data::F32(le_chunks(b).map(f32::from_le_bytes).collect()),
            DType::F64 => Data::F64(le_chunks(b).map(f64::from_le_bytes).collect()),
        }
    }

    /// Write the elements back as little-endian bytes into `out` (of the same length).
    pub(crate) fn write_bytes(&self, out: &mut [u8]) {
        fn put<const N: usize, T: Copy>(out: &mut [u8], v: &[T], f: impl Fn(T) -> [u8; N]) {
            for (o, x) in out.chunks_exact_mut(N).zip(v) {
                o.copy_from_slice(&f(*x));
            }
        }
        match self {
            Data::Bool(v) | Data::U8(v) => out.copy_from_slice(v),
            Data::I8(v) => put(out, v, i8::to_le_bytes),
            Data::I16(v) => put(out, v, i16::to_le_bytes),
            Data::I32(v) => put(out, v, i32::to_le_bytes),
            Data::U32(v) => put(out, v, u32::to_le_bytes),
            Data::I64(v) => put(out, v, i64::to_le_bytes),
            Data::U64(v) => put(out, v, u64::to_le_bytes),
            Data::U16(v) | Data::F16(v) | Data::BF16(v) => put(out, v, u16::to_le_bytes),
            Data::F32(v) => put(out, v, f32::to_le_bytes),
            Data::F64(v) => put(out, v, f64::to_le_bytes),
        }
    }

    /// Its number of elements.
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::Bool(v) | Data::U8(v) => v.len(),
            Data::I8(v) => v.len(),
            Data::I16(v) => v.len(),
            Data::U16(v) | Data::F16(v) | Data::BF16(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::U64(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
        }
    }

    pub(crate) fn get(&self, i: usize) -> Val {
        match self {
            Data::Bool(v) => Val::I((v[i] != 0) as i64),
            Data::I8(v) => Val::I(v[i] as i64),
            Data::U8(v) => Val::I(v[i] as i64),
            Data::I16(v) => Val::I(v[i] as i64),
            Data::U16(v) => Val::I(v[i] as i64),
            Data::I32(v) => Val::I(v[i] as i64),
            Data::U32(v) => Val::I(v[i] as i64),
            Data::I64(v) => Val::I(v[i]),
            Data::U64(v) => Val::I(v[i] as i64),
            Data::F16(v) => Val::F(f16_bits_to_f32(v[i]) as f64),
            Data::BF16(v) => Val::F(bf16_bits_to_f32(v[i]) as f64),
            Data::F32(v) => Val::F(v[i] as f64),
            Data::F64(v) => Val::F(v[i]),
        }
    }

    /// Store a value already of this buffer's dtype (wrapped or rounded).
    pub(crate) fn set(&mut self, i: usize, x: Val) {
        match self {
            Data::Bool(v) => v[i] = (x.as_i64() != 0) as u8,
            Data::I8(v) => v[i] = x.as_i64() as i8,
            Data::U8(v) => v[i] = x.as_i64() as u8,
            Data::I16(v) => v[i] = x.as_i64() as i16,
            Data::U16(v) => v[i] = x.as_i64() as u16,
            Data::I32(v) => v[i] = x.as_i64() as i32,
            Data::U32(v) => v[i] = x.as_i64() as u32,
            Data::I64(v) => v[i] = x.as_i64(),
            Data::U64(v) => v[i] = x.as_i64() as u64,
            Data::F16(v) => v[i] = f32_to_f16_bits(x.as_f64() as f32),
            Data::BF16(v) => v[i] = f32_to_bf16_bits(x.as_f64() as f32),
            Data::F32(v) => v[i] = x.as_f64() as f32,
            Data::F64(v) => v[i] = x.as_f64(),
        }
    }

    /// The elements at `offsets` (all in range).
    pub(crate) fn gather(&self, offsets: &[usize]) -> Col {
        fn ints<T: Copy + Into<i64>>(v: &[T], o: &[usize]) -> Col {
            Col::I(o.iter().map(|&k| v[k].into()).collect())
        }
        fn floats<T: Copy>(v: &[T], o: &[usize], f: impl Fn(T) -> f64) -> Col {
            Col::F(o.iter().map(|&k| f(v[k])).collect())
        }
        match self {
            Data::Bool(v) => Col::I(offsets.iter().map(|&k| (v[k] != 0) as i64).collect()),
            Data::I8(v) => ints(v, offsets),
            Data::U8(v) => ints(v, offsets),
            Data::I16(v) => ints(v, offsets),
            Data::U16(v) => ints(v, offsets),
            Data::I32(v) => ints(v, offsets),
            Data::U32(v) => ints(v, offsets),
            Data::I64(v) => ints(v, offsets),
            // the bit pattern (see `num`)
            Data::U64(v) => Col::I(offsets.iter().map(|&k| v[k] as i64).collect()),
            Data::F16(v) => floats(v, offsets, |h| f16_bits_to_f32(h) as f64),
            Data::BF16(v) => floats(v, offsets, |h| bf16_bits_to_f32(h) as f64),
            Data::F32(v) => floats(v, offsets, |x| x as f64),
            Data::F64(v) => floats(v, offsets, |x| x),
        }
    }

    /// Store `values` (of this buffer's dtype) at `offsets`, in order.
    pub(crate) fn scatter(&mut self, offsets: &[usize], values: &Col) {
        fn put<T, S: Copy>(v: &mut [T], o: &[usize], x: &[S], f: impl Fn(S) -> T) {
            for (&k, &x) in o.iter().zip(x) {
                v[k] = f(x);
            }
        }
        match (self, values) {
            (Data::Bool(v), Col::I(x)) => put(v, offsets, x, |x| (x != 0) as u8),
            (Data::I8(v), Col::I(x)) => put(v, offsets, x, |x| x as i8),
            (Data::U8(v), Col::I(x)) => put(v, offsets, x, |x| x as u8),
            (Data::I16(v), Col::I(x)) => put(v, offsets, x, |x| x as i16),
            (Data::U16(v), Col::I(x)) => put(v, offsets, x, |x| x as u16),
            (Data::I32(v), Col::I(x)) => put(v, offsets, x, |x| x as i32),
            (Data::U32(v), Col::I(x)) => put(v, offsets, x, |x| x as u32),
            (Data::I64(v), Col::I(x)) => put(v, offsets, x, |x| x),
            (Data::U64(v), Col::I(x)) => put(v, offsets, x, |x| x as u64),
            (Data::F16(v), Col::F(x)) => put(v, offsets, x, |x| f32_to_f16_bits(x as f32)),
            (Data::BF16(v), Col::F(x)) => put(v, offsets, x, |x| f32_to_bf16_bits(x as f32)),
            (Data::F32(v), Col::F(x)) => put(v, offsets, x, |x| x as f32),
            (Data::F64(v), Col::F(x)) => put(v, offsets, x, |x| x),
            (data, values) => {
                for (k, &o) in offsets.iter().enumerate() {
                    data.set(o, values.get(k));
                }
            }
        }
    }
}
