//! TMA tensor maps: what `cuTensorMapEncodeTiled` is given for one tensor of one call, and
//! the encoded maps kept between calls.
//!
//! A KernelInfo `TensorMap` names a tensor parameter, the box one copy moves (elements
//! per dimension, outermost first, in the order of the tensor's shape) and the
//! shared-memory swizzle in bytes. [`encode_args`] turns it, with the call's shape,
//! strides and data pointer, into the driver's arguments, which run innermost first:
//! `globalDim` and `boxDim` are the shape and the box reversed, `globalStrides` the byte
//! strides of dimensions 1..rank-1 counted from the innermost (dimension 0's is the
//! element size), element strides all 1, no interleave, the 256-byte L2 promotion, and
//! elements past the edge read as zeros. Every requirement of the driver's documentation
//! that the launcher can see is checked here first, so that a call it cannot encode is an
//! error naming the parameter rather than the driver's `CUDA_ERROR_INVALID_VALUE`.
//!
//! The enum values are CUDA's (`cuda.h`, `CUtensorMapDataType`, `CUtensorMapSwizzle`,
//! `CUtensorMapL2promotion`, ...; the driver API's "Tensor Map Object Management").

use std::sync::Mutex;
use tile_codegen::kernel_info::TensorMap;

// The driver's enums for KernelInfo's dtypes and swizzles, shared with the C export.
pub(crate) use tile_codegen::kernel_info::tma::{swizzle_mode, tma_data_type};

/// `CU_TENSOR_MAP_INTERLEAVE_NONE`.
pub(crate) const INTERLEAVE_NONE: u32 = 0;
/// `CU_TENSOR_MAP_L2_PROMOTION_L2_256B` (`NONE` 0, `L2_64B` 1, `L2_128B` 2).
pub(crate) const L2_PROMOTION_256B: u32 = 3;
/// `CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE`: elements past the edge read as zeros.
pub(crate) const OOB_FILL_NONE: u32 = 0;

/// The most dimensions a tiled tensor map has.
pub(crate) const MAX_RANK: usize = 5;
/// The most elements a box has along one dimension.
const MAX_BOX: u32 = 256;
/// The data pointer and every stride must be multiples of this many bytes.
const GLOBAL_ALIGN: u64 = 16;
/// Strides must stay below 2^40 bytes; dimensions at or below 2^32 elements.
const MAX_STRIDE_BYTES: u64 = 1 << 40;
const MAX_DIM: u64 = 1 << 32;

/// A `CUtensorMap` as the kernel receives it: 128 opaque bytes, 64-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct EncodedMap(pub [u64; 16]);

impl EncodedMap {
    pub const ZERO: EncodedMap = EncodedMap([0; 16]);
}

/// What a map needs of a call, fixed by the KernelInfo: checked once, when the launcher is
/// made ([`map_layout`]), and again for each encoding.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MapLayout {
    pub data_type: u32,
    pub element_bytes: u64,
    pub rank: usize,
    /// Innermost first; `rank` entries used, the rest 1.
    pub box_dim: [u32; MAX_RANK],
    pub swizzle: u32,
}

/// The arguments of one `cuTensorMapEncodeTiled` call (the map written aside).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EncodeArgs {
    pub data_type: u32,
    pub rank: u32,
    pub global_address: u64,
    /// Innermost first; `rank` entries used, the rest 1.
    pub global_dim: [u64; MAX_RANK],
    /// In bytes, of dimensions 1..rank-1 counted from the innermost; `rank - 1` used.
    pub global_strides: [u64; MAX_RANK - 1],
    /// Innermost first; `rank` entries used, the rest 1.
    pub box_dim: [u32; MAX_RANK],
    pub element_strides: [u32; MAX_RANK],
    pub interleave: u32,
    pub swizzle: u32,
    pub l2_promotion: u32,
    pub oob_fill: u32,
}

fn problem(param: &str, what: impl std::fmt::Display) -> String {
    format!("the tensor map of parameter '{param}': {what}")
}

/// The checks of a map that do not depend on a call: the dtype has a TMA data type, the
/// rank is 1 to 5 and the box has one extent per dimension, each 1 to 256, whose innermost
/// row is a multiple of 16 bytes and, when swizzled, within the swizzle span. `rank` is the
/// tensor's; `param` names it in the error.
pub(crate) fn map_layout(
    map: &TensorMap,
    param: &str,
    dtype: &str,
    rank: usize,
) -> Result<MapLayout, String> {
    let (data_type, element_bytes) =
        tma_data_type(dtype).ok_or_else(|| problem(param, format!("TMA cannot copy {dtype}")))?;
    if !(1..=MAX_RANK).contains(&rank) {
        return Err(problem(param, format!("the tensor has {rank} dimensions; TMA copies 1 to {MAX_RANK}")));
    }
    if map.box_shape.len() != rank {
        return Err(problem(
            param,
            format!("the box {:?} has {} dimensions, the tensor {rank}", map.box_shape, map.box_shape.len()),
        ));
    }
    if let Some(&extent) = map.box_shape.iter().find(|&&b| !(1..=MAX_BOX).contains(&b)) {
        return Err(problem(
            param,
            format!("the box {:?} has an extent of {extent}; each must be 1 to {MAX_BOX}", map.box_shape),
        ));
    }
    let swizzle = swizzle_mode(map.swizzle).ok_or_else(|| {
        problem(param, format!("a swizzle of {} bytes; TMA swizzles 0, 32, 64 or 128", map.swizzle))
    })?;
    let inner = map.box_shape[rank - 1] as u64 * element_bytes;
    if !inner.is_multiple_of(GLOBAL_ALIGN) {
        return Err(problem(
            param,
            format!(
                "the box {:?} moves rows of {inner} bytes ({} x {dtype}); TMA needs a multiple of 16",
                map.box_shape,
                map.box_shape[rank - 1]
            ),
        ));
    }
    if map.swizzle != 0 && inner > map.swizzle as u64 {
        return Err(problem(
            param,
            format!(
                "the box {:?} moves rows of {inner} bytes, wider than its {}-byte swizzle",
                map.box_shape, map.swizzle
            ),
        ));
    }
    let mut box_dim = [1; MAX_RANK];
    for (d, &extent) in map.box_shape.iter().rev().enumerate() {
        box_dim[d] = extent;
    }
    Ok(MapLayout { data_type, element_bytes, rank, box_dim, swizzle })
}

/// The encode arguments of `map` for a call whose tensor (parameter `param`, of `dtype`)
/// has `shape` and `strides` (in elements, outermost first) and its data at `data`; or
/// the error naming the parameter: a data pointer off 16 bytes, a dimension of 0 or over
/// 2^32, an innermost stride other than 1, a stride whose bytes are not a positive
/// multiple of 16 below 2^40 (along a dimension of extent 1, where it is never used, such a
/// stride is replaced by 16 bytes), and every check of [`map_layout`].
pub(crate) fn encode_args(
    map: &TensorMap,
    param: &str,
    dtype: &str,
    shape: &[i64],
    strides: &[i64],
    data: u64,
) -> Result<EncodeArgs, String> {
    let layout = map_layout(map, param, dtype, shape.len())?;
    encode_with(&layout, param, shape, strides, data)
}

/// [`encode_args`] with the map's layout already checked.
fn encode_with(
    layout: &MapLayout,
    param: &str,
    shape: &[i64],
    strides: &[i64],
    data: u64,
) -> Result<EncodeArgs, String> {
    let rank = layout.rank;
    if shape.len() != rank || strides.len() != rank {
        return Err(problem(
            param,
            format!(
                "a call with {} dimensions and {} strides for a map of {rank}",
                shape.len(),
                strides.len()
            ),
        ));
    }
    if !data.is_multiple_of(GLOBAL_ALIGN) {
        return Err(problem(
            param,
            format!("the data pointer {data:#x} is {} bytes past a multiple of 16", data % GLOBAL_ALIGN),
        ));
    }
    let mut global_dim = [1u64; MAX_RANK];
    if shape.contains(&0) {
        // an empty tensor (a GEMM's K of 0: its loop runs no iteration, so no copy reads
        // it): a map of one element, which TMA accepts; every stride the same valid value
        return Ok(EncodeArgs {
            data_type: layout.data_type,
            rank: rank as u32,
            global_address: data,
            global_dim,
            global_strides: [GLOBAL_ALIGN; MAX_RANK - 1],
            box_dim: layout.box_dim,
            element_strides: [1; MAX_RANK],
            interleave: INTERLEAVE_NONE,
            swizzle: layout.swizzle,
            l2_promotion: L2_PROMOTION_256B,
            oob_fill: OOB_FILL_NONE,
        });
    }
    for (d, &extent) in shape.iter().enumerate() {
        match u64::try_from(extent) {
            Ok(n) if (1..=MAX_DIM).contains(&n) => global_dim[rank - 1 - d] = n,
            _ => {
                return Err(problem(
                    param,
                    format!("dimension {d} is {extent}; TMA needs 1 to 2^32 elements (shape {shape:?})"),
                ))
            }
        }
    }
    // the innermost dimension's stride is the element size: its elements are adjacent
    if strides[rank - 1] != 1 && shape[rank - 1] != 1 {
        return Err(problem(
            param,
            format!(
                "the innermost stride is {}; TMA needs adjacent elements (strides {strides:?})",
                strides[rank - 1]
            ),
        ));
    }
    let mut global_strides = [0u64; MAX_RANK - 1];
    for d in 0..rank - 1 {
        let bytes = u64::try_from(strides[d]).ok().and_then(|s| s.checked_mul(layout.element_bytes));
        match bytes {
            Some(b) if b > 0 && b.is_multiple_of(GLOBAL_ALIGN) && b < MAX_STRIDE_BYTES => {
                global_strides[rank - 2 - d] = b;
            }
            // a dimension of extent 1 is never stepped along: any valid stride will do
            _ if shape[d] == 1 => global_strides[rank - 2 - d] = GLOBAL_ALIGN,
            _ => {
                let what = match bytes {
                    Some(b) if b >= MAX_STRIDE_BYTES => format!("{b} bytes, not below 2^40"),
                    Some(b) => format!("{b} bytes, not a positive multiple of 16"),
                    None => "out of range".to_string(),
                };
                return Err(problem(
                    param,
                    format!(
                        "the stride of dimension {d} is {} elements: {what} (strides {strides:?})",
                        strides[d]
                    ),
                ));
            }
        }
    }
    Ok(EncodeArgs {
        data_type: layout.data_type,
        rank: rank as u32,
        global_address: data,
        global_dim,
        global_strides,
        box_dim: layout.box_dim,
        element_strides: [1; MAX_RANK],
        interleave: INTERLEAVE_NONE,
        swizzle: layout.swizzle,
        l2_promotion: L2_PROMOTION_256B,
        oob_fill: OOB_FILL_NONE,
    })
}

/// What a map was encoded for: the device and the tensor's data pointer, shape and
/// strides (the box and swizzle are the map's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MapKey {
    pub device: i32,
    pub data: u64,
    pub rank: usize,
    // MAX_RANK entries, `rank` used (spelt 5: rustc 1.95 breaks on closures that capture
    // fields whose array length is a named constant)
    pub shape: [i64; 5],
    pub strides: [i64; 5],
}

/// The last encoding of each map of a launcher: a call whose key is the same reuses it
/// without the driver. Shared by the threads that call the launcher.
pub(crate) struct MapCache {
    entries: Mutex<Vec<Option<(MapKey, EncodedMap)>>>,
}

impl MapCache {
    pub fn new(maps: usize) -> MapCache {
        MapCache { entries: Mutex::new(vec![None; maps]) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<(MapKey, EncodedMap)>>> {
        // an entry is written whole under the lock, so a panic elsewhere leaves them valid
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Map `index`'s encoding for `key`, if the last one was for it.
    pub fn get(&self, index: usize, key: &MapKey) -> Option<EncodedMap> {
        match self.lock().get(index) {
            Some(Some((cached, map))) if cached == key => Some(*map),
            _ => None,
        }
    }

    pub fn put(&self, index: usize, key: MapKey, map: EncodedMap) {
        if let Some(entry) = self.lock().get_mut(index) {
            *entry = Some((key, map));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_codegen::kernel_info::tma::data_type;

    fn map(box_shape: &[u32], swizzle: u32) -> TensorMap {
        TensorMap { param: 0, box_shape: box_shape.to_vec(), swizzle }
    }

    fn contiguous(shape: &[i64]) -> Vec<i64> {
        let mut strides = vec![1; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        strides
    }

    fn args(m: &TensorMap, dtype: &str, shape: &[i64]) -> Result<EncodeArgs, String> {
        encode_args(m, "A", dtype, shape, &contiguous(shape), 0x7f00_0000_0000)
    }

    fn error(m: &TensorMap, dtype: &str, shape: &[i64], strides: &[i64], data: u64) -> String {
        encode_args(m, "A", dtype, shape, strides, data).unwrap_err()
    }

    #[test]
    fn a_matrix_runs_innermost_first() {
        // A[M=1024, K=512] fp16, a 128 x 64 box with the 128-byte swizzle
        let a = args(&map(&[128, 64], 128), "float16", &[1024, 512]).unwrap();
        assert_eq!(a.data_type, data_type::FLOAT16);
        assert_eq!(a.rank, 2);
        assert_eq!(a.global_address, 0x7f00_0000_0000);
        assert_eq!(&a.global_dim[..2], &[512, 1024]);
        assert_eq!(&a.global_strides[..1], &[512 * 2]);
        assert_eq!(&a.box_dim[..2], &[64, 128]);
        assert_eq!(&a.element_strides[..2], &[1, 1]);
        assert_eq!((a.interleave, a.swizzle, a.l2_promotion, a.oob_fill), (0, 3, 3, 0));
        // the entries past the rank are neutral
        assert_eq!(&a.global_dim[2..], &[1, 1, 1]);
        assert_eq!(&a.box_dim[2..], &[1, 1, 1]);
    }

    #[test]
    fn a_batched_tensor_has_two_strides() {
        // X[B=3, M=200, K=96] bf16, one batch's 64 x 32 tile, 64-byte swizzle
        let a = args(&map(&[1, 64, 32], 64), "bfloat16", &[3, 200, 96]).unwrap();
        assert_eq!(a.data_type, data_type::BFLOAT16);
        assert_eq!(a.rank, 3);
        assert_eq!(&a.global_dim[..3], &[96, 200, 3]);
        // dimension 1 (M) then dimension 2 (B), in bytes
        assert_eq!(&a.global_strides[..2], &[96 * 2, 200 * 96 * 2]);
        assert_eq!(&a.box_dim[..3], &[32, 64, 1]);
        assert_eq!(a.swizzle, 2);
        // a strided batch (a padded row pitch) keeps the strides it is given
        let padded =
            encode_args(&map(&[1, 64, 32], 64), "A", "bfloat16", &[3, 200, 96], &[200 * 128, 128, 1], 0)
                .unwrap();
        assert_eq!(&padded.global_strides[..2], &[256, 200 * 256]);
    }

    #[test]
    fn data_types_and_swizzle_modes() {
        let types = [
            ("float16", data_type::FLOAT16, 2),
            ("bfloat16", data_type::BFLOAT16, 2),
            ("float32", data_type::FLOAT32, 4),
            ("float64", data_type::FLOAT64, 8),
            ("int8", data_type::UINT8, 1),
            ("uint8", data_type::UINT8, 1),
            ("bool", data_type::UINT8, 1),
            ("int16", data_type::UINT16, 2),
            ("uint16", data_type::UINT16, 2),
            ("int32", data_type::INT32, 4),
            ("uint32", data_type::UINT32, 4),
            ("int64", data_type::INT64, 8),
            ("uint64", data_type::UINT64, 8),
        ];
        for (dtype, code, bytes) in types {
            assert_eq!(tma_data_type(dtype), Some((code, bytes)), "{dtype}");
        }
        assert_eq!(tma_data_type("float8"), None);
        assert_eq!([0, 32, 64, 128].map(swizzle_mode), [Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(swizzle_mode(16), None);
        // the numbers: CUtensorMapDataType of cuda.h
        assert_eq!((data_type::INT64, data_type::FLOAT32, data_type::FLOAT64), (5, 7, 8));
        let a = args(&map(&[16], 0), "float32", &[100]).unwrap();
        assert_eq!((a.rank, a.global_dim[0], a.box_dim[0], a.swizzle), (1, 100, 16, 0));
    }

    #[test]
    fn call_errors_name_the_parameter() {
        let m = map(&[64, 64], 128);
        let shape = [256, 64];
        let strides = contiguous(&shape);
        assert_eq!(
            error(&m, "float16", &shape, &strides, 0x1008),
            "the tensor map of parameter 'A': the data pointer 0x1008 is 8 bytes past a multiple of 16"
        );
        // rows of 4 fp16 are 8 bytes apart: not a multiple of 16 (the box reads past them)
        let e = error(&map(&[64, 8], 0), "float16", &[256, 4], &[4, 1], 0);
        assert_eq!(
            e,
            "the tensor map of parameter 'A': the stride of dimension 0 is 4 elements: 8 bytes, not a positive multiple of 16 (strides [4, 1])"
        );
        let e = error(&m, "float16", &[3, 1 << 33, 64], &[(1i64 << 33) * 64, 64, 1], 0);
        assert!(e.contains("the box [64, 64] has 2 dimensions, the tensor 3"), "{e}");
        let big = map(&[1, 1, 64], 128);
        let e = error(&big, "float16", &[2, 1 << 33, 64], &[(1i64 << 33) * 64, 64, 1], 0);
        assert!(e.contains("dimension 1 is 8589934592; TMA needs 1 to 2^32 elements"), "{e}");
        // 2^32 elements is allowed, and a stride of 2^39 bytes; one of 2^40 bytes is not
        assert!(encode_args(&big, "A", "float16", &[2, 1 << 32, 64], &[1 << 38, 64, 1], 0).is_ok());
        let wide = map(&[1, 1, 32], 128);
        let e = error(&wide, "float32", &[2, 1 << 32, 64], &[1 << 38, 64, 1], 0);
        assert!(
            e.contains(
                "the stride of dimension 0 is 274877906944 elements: 1099511627776 bytes, not below 2^40"
            ),
            "{e}"
        );
        let e = error(&big, "float16", &[2, 1 << 32, 64], &[(1 << 38) - 4, 64, 1], 0);
        assert!(e.contains("549755813880 bytes, not a positive multiple of 16"), "{e}");
        let e = error(&m, "float16", &[-1, 64], &[64, 1], 0);
        assert!(e.contains("dimension 0 is -1; TMA needs 1 to 2^32 elements (shape [-1, 64])"), "{e}");
        let e = error(&m, "float16", &[8, 64], &[1, 8], 0);
        assert!(e.contains("the innermost stride is 8; TMA needs adjacent elements"), "{e}");
        let e = error(&m, "float16", &[8, 64], &[-64, 1], 0);
        assert!(e.contains("the stride of dimension 0 is -64 elements: out of range"), "{e}");
        let e = error(&m, "float16", &[8, 64], &[0, 1], 0);
        assert!(e.contains("0 bytes, not a positive multiple of 16"), "{e}");
        // along an extent of 1 the stride is never used, as in the launcher's checks
        let a = encode_args(&map(&[1, 8], 0), "A", "float16", &[1, 4], &[4, 1], 0).unwrap();
        assert_eq!((&a.global_dim[..2], a.global_strides[0]), (&[4, 1][..], 16));
        let a = encode_args(&map(&[1, 8], 0), "A", "float16", &[1, 4], &[0, 1], 0).unwrap();
        assert_eq!(a.global_strides[0], 16);
    }

    #[test]
    fn layout_errors_name_the_parameter() {
        let layout = |m: &TensorMap, dtype: &str, rank: usize| map_layout(m, "B", dtype, rank).unwrap_err();
        assert_eq!(
            layout(&map(&[64, 64], 128), "float8", 2),
            "the tensor map of parameter 'B': TMA cannot copy float8"
        );
        assert!(
            layout(&map(&[1; 6], 0), "float16", 6).contains("the tensor has 6 dimensions; TMA copies 1 to 5")
        );
        assert!(layout(&map(&[], 0), "float16", 0).contains("the tensor has 0 dimensions"));
        assert!(
            layout(&map(&[64, 257], 0), "uint8", 2).contains("has an extent of 257; each must be 1 to 256")
        );
        assert!(layout(&map(&[0, 64], 0), "float16", 2).contains("has an extent of 0"));
        assert!(layout(&map(&[64, 64], 16), "float16", 2).contains("a swizzle of 16 bytes"));
        // 4 x fp32 = 16 bytes is fine; 4 x fp16 = 8 is not
        assert!(map_layout(&map(&[8, 4], 0), "B", "float32", 2).is_ok());
        assert_eq!(
            layout(&map(&[8, 4], 0), "float16", 2),
            "the tensor map of parameter 'B': the box [8, 4] moves rows of 8 bytes (4 x float16); TMA needs a multiple of 16"
        );
        // swizzled: the row must fit the span; 64 fp16 = 128 bytes fits 128, not 64
        assert!(map_layout(&map(&[8, 64], 128), "B", "float16", 2).is_ok());
        assert_eq!(
            layout(&map(&[8, 64], 64), "bfloat16", 2),
            "the tensor map of parameter 'B': the box [8, 64] moves rows of 128 bytes, wider than its 64-byte swizzle"
        );
        // unswizzled, a row may be as wide as the box allows: 256 x fp32
        assert!(map_layout(&map(&[2, 256], 0), "B", "float32", 2).is_ok());
        // and encode_args reports them too
        assert!(error(&map(&[8, 64], 32), "float16", &[8, 64], &[64, 1], 0).contains("32-byte swizzle"));
    }

    #[test]
    fn the_cache_keeps_the_last_encoding_per_map() {
        let cache = MapCache::new(2);
        let key =
            MapKey { device: 0, data: 0x1000, rank: 2, shape: [8, 64, 0, 0, 0], strides: [64, 1, 0, 0, 0] };
        let mut bytes = EncodedMap::ZERO;
        bytes.0[0] = 42;
        assert_eq!(cache.get(0, &key), None);
        cache.put(0, key, bytes);
        assert_eq!(cache.get(0, &key), Some(bytes));
        assert_eq!(cache.get(1, &key), None);
        for other in [
            MapKey { device: 1, ..key },
            MapKey { data: 0x2000, ..key },
            MapKey { shape: [16, 64, 0, 0, 0], ..key },
            MapKey { strides: [128, 1, 0, 0, 0], ..key },
        ] {
            assert_eq!(cache.get(0, &other), None);
        }
        assert_eq!(cache.get(5, &key), None);
        cache.put(5, key, bytes); // out of range: ignored
        assert_eq!(std::mem::align_of::<EncodedMap>(), 64);
        assert_eq!(std::mem::size_of::<EncodedMap>(), 128);
        // shared between threads
        let keys: Vec<(u64, MapKey)> =
            (0..4).map(|t| (t, MapKey { data: 0x1000 * (t + 2), ..key })).collect();
        std::thread::scope(|s| {
            for (t, mine) in keys {
                let cache = &cache;
                s.spawn(move || {
                    for _ in 0..100 {
                        cache.put(1, mine, EncodedMap([t; 16]));
                        if let Some(found) = cache.get(1, &mine) {
                            assert_eq!(found, EncodedMap([t; 16]));
                        }
                    }
                });
            }
        });
    }
}
