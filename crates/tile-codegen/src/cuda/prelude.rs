//! The self-contained prelude every kernel starts with: fp16/bf16 storage types and their
//! conversions in inline PTX, Python's floor division, saturating float → int conversions,
//! atomics, an overflow-free sigmoid. No toolkit header is included.

pub(super) const PRELUDE: &str = r#"// fp16 / bf16 storage types; arithmetic on them runs in float and rounds after every op.
struct __align__(2) tl_half { unsigned short bits; };
struct __align__(2) tl_bf16 { unsigned short bits; };
static __device__ __forceinline__ float tl_float(tl_half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits)); return f; }
static __device__ __forceinline__ float tl_float(tl_bf16 h) { return __uint_as_float(((unsigned int)h.bits) << 16); }
static __device__ __forceinline__ tl_half tl_to_half(float f) { tl_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h; }
static __device__ __forceinline__ tl_bf16 tl_to_bf16(float f) { tl_bf16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f)); return h; }
// two floats rounded to nearest into one 32-bit word, the first in the low half
static __device__ __forceinline__ unsigned int tl_pack_half2(float lo, float hi) { unsigned int r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
static __device__ __forceinline__ unsigned int tl_pack_bf162(float lo, float hi) { unsigned int r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
static __device__ __forceinline__ float tl_round_half(float f) { return tl_float(tl_to_half(f)); }
static __device__ __forceinline__ float tl_round_bf16(float f) { return tl_float(tl_to_bf16(f)); }
// Python's floor division and modulo (round toward negative infinity).
static __device__ __forceinline__ int tl_floordiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static __device__ __forceinline__ long long tl_floordiv(long long a, long long b) { long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static __device__ __forceinline__ int tl_floormod(int a, int b) { return a - tl_floordiv(a, b) * b; }
static __device__ __forceinline__ long long tl_floormod(long long a, long long b) { return a - tl_floordiv(a, b) * b; }
static __device__ __forceinline__ int tl_max(int a, int b) { return a > b ? a : b; }
static __device__ __forceinline__ int tl_min(int a, int b) { return a < b ? a : b; }
static __device__ __forceinline__ unsigned int tl_max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static __device__ __forceinline__ unsigned int tl_min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static __device__ __forceinline__ long long tl_max(long long a, long long b) { return a > b ? a : b; }
static __device__ __forceinline__ long long tl_min(long long a, long long b) { return a < b ? a : b; }
// float -> integer conversions saturate (NaN -> 0), as PTX cvt.rzi.sat does.
static __device__ __forceinline__ int tl_f2i(float f) { int r; asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r; }
static __device__ __forceinline__ long long tl_f2ll(float f) { long long r; asm("cvt.rzi.s64.f32 %0, %1;" : "=l"(r) : "f"(f)); return r; }
static __device__ __forceinline__ unsigned int tl_f2u(float f) { unsigned int r; asm("cvt.rzi.u32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r; }
static __device__ __forceinline__ int tl_f2i_sat(float f, int lo, int hi) { return tl_max(lo, tl_min(hi, tl_f2i(f))); }
static __device__ __forceinline__ int tl_d2i(double f) { int r; asm("cvt.rzi.s32.f64 %0, %1;" : "=r"(r) : "d"(f)); return r; }
static __device__ __forceinline__ long long tl_d2ll(double f) { long long r; asm("cvt.rzi.s64.f64 %0, %1;" : "=l"(r) : "d"(f)); return r; }
static __device__ __forceinline__ unsigned int tl_d2u(double f) { unsigned int r; asm("cvt.rzi.u32.f64 %0, %1;" : "=r"(r) : "d"(f)); return r; }
static __device__ __forceinline__ int tl_d2i_sat(double f, int lo, int hi) { return tl_max(lo, tl_min(hi, tl_d2i(f))); }
static __device__ __forceinline__ void tl_atomic_add(float* p, float v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(double* p, double v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(int* p, int v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(unsigned int* p, unsigned int v) { atomicAdd(p, v); }
static __device__ __forceinline__ void tl_atomic_add(long long* p, long long v) { atomicAdd((unsigned long long*)p, (unsigned long long)v); }
static __device__ __forceinline__ void tl_atomic_add(tl_half* p, float v) { tl_half h = tl_to_half(v); asm volatile("red.add.noftz.f16 [%0], %1;" :: "l"(p), "h"(h.bits) : "memory"); }
// sigmoid without overflow: exp of -|x| only, so large negative x gives e / (1 + e), not 1 / inf
static __device__ __forceinline__ float tl_sigmoidf(float x) { float e = expf(-fabsf(x)); float s = 1.0f / (1.0f + e); return x >= 0.0f ? s : e * s; }
static __device__ __forceinline__ double tl_sigmoid(double x) { double e = exp(-fabs(x)); double s = 1.0 / (1.0 + e); return x >= 0.0 ? s : e * s; }
// Swizzled shared tiles store the 16-byte chunk c of a row at c ^ (row % 8) (rows of 128 bytes or
// more; shorter rows count 128-byte lines instead of rows); their indices are written out that way.
"#;

/// The uint64 overloads of `tl_max`/`tl_min` and float → uint64 conversions, in the kernels
/// that call them only (the other kernels' source stays as it was).
pub(super) const UINT64: &str = r#"// uint64: min/max and saturating float -> uint64 conversions (NaN -> 0).
static __device__ __forceinline__ unsigned long long tl_max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static __device__ __forceinline__ unsigned long long tl_min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static __device__ __forceinline__ unsigned long long tl_f2ull(float f) { unsigned long long r; asm("cvt.rzi.u64.f32 %0, %1;" : "=l"(r) : "f"(f)); return f != f ? 0ull : r; }
static __device__ __forceinline__ unsigned long long tl_d2ull(double f) { unsigned long long r; asm("cvt.rzi.u64.f64 %0, %1;" : "=l"(r) : "d"(f)); return f != f ? 0ull : r; }
"#;

pub(super) const BF16_ATOMIC_SM90: &str = r#"static __device__ __forceinline__ void tl_atomic_add(tl_bf16* p, float v) { tl_bf16 h = tl_to_bf16(v); asm volatile("red.add.noftz.bf16 [%0], %1;" :: "l"(p), "h"(h.bits) : "memory"); }
"#;

pub(super) const BF16_ATOMIC_CAS: &str = r#"static __device__ __forceinline__ void tl_atomic_add(tl_bf16* p, float v) {
  unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ull);
  unsigned int shift = ((unsigned long long)p & 2) ? 16 : 0;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    tl_bf16 cur; cur.bits = (unsigned short)(assumed >> shift);
    unsigned int next = (unsigned int)tl_to_bf16(tl_float(cur) + v).bits;
    old = atomicCAS(word, assumed, (assumed & ~(0xffffu << shift)) | (next << shift));
  } while (old != assumed);
}
"#;

/// In kernels with `wgmma`: its shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
/// Format"): start address, leading and stride byte offsets in 16-byte units, swizzle mode.
pub(super) const WGMMA: &str = r#"// wgmma matrix descriptor: address and byte offsets in 16-byte units, swizzle mode in bits 62-63
static __device__ __forceinline__ unsigned long long tl_wgmma_desc(unsigned int addr, unsigned int lbo, unsigned int sbo, unsigned int mode) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)mode << 62);
}
// the same descriptor at `units` 16-byte units past the shared base `base` (both 16-byte
// aligned, the sum below 256 KB: the 14-bit address field cannot carry), built so that the
// loop-invariant part is computed once and each operand adds its units. The mask keeps the
// offset in the block's window: in a cluster, the block's own shared addresses carry its
// rank in the bits above.
static __device__ __forceinline__ unsigned long long tl_wgmma_desc16(unsigned int base, unsigned int units, unsigned int lbo, unsigned int sbo, unsigned int mode) {
  const unsigned int lo = (((base & 0x3FFFFu) >> 4) + ((lbo >> 4) << 16)) + units;
  const unsigned int hi = (sbo >> 4) | (mode << 30);
  return ((unsigned long long)hi << 32) | lo;
}
"#;

/// In kernels with mbarriers or bulk tensor copies: the 128-byte opaque tensor map (CUDA's
/// `CUtensorMap`, encoded by the launcher) and the wait loop on an mbarrier phase.
pub(super) const TMA: &str = r#"// a TMA descriptor (CUtensorMap: 128 opaque bytes, 64-byte aligned), passed as a __grid_constant__ parameter
struct __align__(64) tl_tensor_map { unsigned long long words[16]; };
// wait until the phase of the mbarrier at shared address `bar` with parity `parity` has completed
static __device__ __forceinline__ void tl_mbarrier_wait(unsigned int bar, unsigned int parity) {
  unsigned int done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
"#;

/// Distributed shared memory (`T.copy_cluster`).
pub(super) const CLUSTER: &str = r#"// the address of the same shared variable in block `rank` of the thread-block cluster (generic addresses reach it)
template <typename T> static __device__ __forceinline__ T* tl_cluster_ptr(T* p, unsigned int rank) {
  unsigned long long r;
  asm("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"((unsigned long long)p), "r"(rank));
  return (T*)r;
}
"#;
