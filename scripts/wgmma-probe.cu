// wgmma-probe.cu -- settle, on sm_90a hardware, the conventions of the wgmma.mma_async
// shared-memory matrix descriptor (start address, LBO, SBO, swizzle mode, per-k-step start advance,
// trans-a/trans-b), so that a compiler can derive descriptors from layouts.
//
// Standalone: CUDA runtime only (no CUTLASS/CuTe).
//   build: nvcc -arch=sm_90a -O2 -o /tmp/probe scripts/wgmma-probe.cu
//   run:   /tmp/probe              all cases, one line each, then a summary
//          /tmp/probe c3           only the cases whose name contains "c3" (any substring)
//          /tmp/probe -v ...       also print each case's descriptor fields and k-step start offsets
//          /tmp/probe --list       print the cases and their descriptor fields; runs nothing
//          /tmp/probe --no-fork    run every case in this process (by default each case runs in
//                                  its own child process, so a faulting case cannot take the CUDA
//                                  context of the others down with it)
//   The exit code is always 0: it is a probe, read its output.
//   Note: CUDA 13.0's `nvcc -arch=sm_90a` also runs a compute_90 (not 90a) PTX pass, where wgmma
//   does not assemble; so the kernel body is under #if defined(__CUDA_ARCH_FEAT_SM90_ALL) and the
//   compute_90 version only traps. The H200 runs the sm_90a cubin.
//
// ---------------------------------------------------------------------------------------------
// What each case does
//   One kernel launch of 128 threads (one warpgroup). The host makes A (64 x K) and B (K x N) with
//   random values in {-2,-1,0,1,2} (exact in fp16/bf16, and every fp32 sum is exact) and D = A*B.
//   The kernel fills the whole dynamic shared memory with 0x7FFF (a NaN in fp16 and bf16), stores
//   every element of A and B at the swizzled byte address the case's layout gives it (computed on
//   the host with the XOR functions below and passed as a table), runs fence.proxy.async + a
//   barrier, then K/16 k-steps of
//       wgmma.fence; wgmma.mma_async (scale-d = 0 on the first step, 1 after); commit; wait 0
//   with descriptors built from the case's LBO/SBO/mode and the k-step's start address, and writes
//   the accumulators out through the accumulator layout
//       thread t, w = t/32, l = t%32, register i: row = 16w + l/4 + 8*((i>>1)&1),
//                                                 col = 8*(i>>2) + 2*(l%4) + (i&1).
//   The host compares exactly and prints
//       case <name>: OK
//       case <name>: WRONG (<n> mismatches, first at (r,c) got x want y)
//       case <name>: ERROR (<what>)        a CUDA error / the child process died
//   "got nan" means the hardware read bytes that the layout never wrote (the poison): the
//   descriptor's strides point outside the data, i.e. a wrong stride or a wrong field.
//
// Descriptor (64 bit): bits 13-0 = (smem_addr & 0x3FFFF) >> 4; bits 29-16 = LBO >> 4;
//   bits 45-32 = SBO >> 4; bits 51-49 base offset (always 0 here: every tile is 1024-B aligned);
//   bits 63-62 swizzle: 0 none, 1 = 128B, 2 = 64B, 3 = 32B.
// Swizzle as a function of the shared byte address (tile base 1024-B aligned):
//   128B: bits[6:4] ^= bits[9:7]; 64B: bits[5:4] ^= bits[8:7]; 32B: bit[4] ^= bit[7].
//
// Layouts (R = rows of the operand along M or N: 64 for A, N for B; S = swizzle width in bytes;
// P = S/2 halves per swizzle-atom row; all offsets before the swizzle XOR):
//   K-major, swizzled ("K.swS"):  offset(r,k)  = (k/P)*(R*S) + r*S + (k%P)*2
//        descriptor LBO = 16 (encoded 1, "unused"), SBO = 8*S (one 8-row atom);
//        k-step kk starts at offset(0,16kk)  (128B: kk*32 inside a panel, next panel every 4 steps)
//   MN-major, swizzled ("MN.swS.a" / "MN.swS.b"):  offset(mn,k) = (mn/P)*(K*S) + k*S + (mn%P)*2
//        convention a: LBO = K*S (stride between MN panels), SBO = 8*S (8 k-rows)
//        convention b: LBO = 8*S, SBO = K*S                              (the two swapped)
//        k-step kk starts at offset(0,16kk) = kk*16*S; trans = 1
//   No swizzle, K-major ("K.nosw.vV.std|swap"): core matrix = 8 rows x 16 B (8 halves along K),
//        128 B contiguous: core(r,k) = (r%8)*16 + (k%8)*2
//        v0: offset = (r/8)*((K/8)*128) + (k/8)*128 + core   (K-adjacent core matrices 128 B apart)
//        v1: offset = (k/8)*((R/8)*128) + (r/8)*128 + core   (MN-adjacent core matrices 128 B apart)
//        std: LBO = stride between K-adjacent core matrices, SBO = stride between MN-adjacent ones
//        swap: the two exchanged.  k-step kk starts at offset(0,16kk).
//   No swizzle, MN-major ("MN.nosw.vV.std|swap"): core matrix = 8 k-rows x 16 B (8 halves along MN):
//        core(mn,k) = (k%8)*16 + (mn%8)*2, v0/v1 and std/swap as for K-major; trans = 1.
//        (std is what the make_gmma_desc comment in CUTLASS cute/atom/mma_traits_sm90_gmma.hpp
//        gives for INTERLEAVE MN-major: LBO along K, SBO along MN.)
//   "regs" (A only): the RS form; A comes from registers, element a_i (i in 0..7) of k-step kk at
//        row = 16w + l/4 + 8*((i>>1)&1), k = 16kk + 8*(i>>2) + 2*(l%4) + (i&1); register j holds
//        a_{2j} in its low half and a_{2j+1} in its high half.
//   Suffixes: ".lboX" = the LBO field is forced to the encoded value X (to show it is unused);
//             ".modeX" = the swizzle field is forced to X (a negative control).
//
// Case names: <group>_A=<A layout>_B=<B layout>_N<N>[_K<K>][_bf16]; K = 64 unless named.
//   c1    A and B K-major ("TN"), 128B swizzle, N = 64/128/256, K = 64 and K = 128 (2 panels), and
//         with LBO = 0 or junk (LBO should be unused).
//   c2    K-major with 64B and 32B swizzle, and a mix (A 128B, B 32B).
//   c3    B MN-major ("NN" GEMM), trans-b = 1, 128B/64B/32B swizzle, conventions a and b.
//   c4    A MN-major, trans-a = 1, 128B (M = 64 is one panel, so LBO should be irrelevant: also run
//         with a junk LBO) and 64B (M = 64 is two panels: LBO matters), conventions a and b; and A
//         and B both MN-major.
//   c5    RS form: A from registers, B K-major 128B, or MN-major 128B in both conventions.
//   c6    bf16 (.f32.bf16.bf16) versions of c1 and c3, N = 128.
//   c7    no swizzle (mode 0): K-major v0/v1 std, v0 swap; B MN-major v0/v1 std, v0 swap.
//   ctrl  controls for the harness itself: accumulators preset to 1000 with scale-d = 0 on the
//         first step (must be OK: scale-d = 0 ignores D); the same with scale-d = 1 (must be WRONG,
//         got = want + 1000); 128B-swizzled data read with the descriptor's mode forced to 0 (must
//         be WRONG).
//
// Expected output if the conventions above (and CUTLASS's) are right -- the program prints the
// prediction of every case with --list, and at the end a summary of the cases whose result
// differs from the prediction:
//   OK:    all c1, c2; c3/c4/c5/c6 with convention a (and c4's 128B A with a junk LBO);
//          c7 ".std" cases; ctrl.scale-d=0-ignores-D.
//   WRONG: c3/c4/c5/c6 with convention b (SBO would be the panel stride); c7 ".swap" cases;
//          ctrl.scale-d=1-accumulates (got want+1000); ctrl.mode0-on-128B-data.
//   A last line "summary: all <n> cases as predicted" means every convention above is confirmed.
// ---------------------------------------------------------------------------------------------

#include <cuda_runtime.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#define MAX_KSTEPS 8  // K <= 128

enum { FORM_SS_F16 = 0, FORM_SS_BF16 = 1, FORM_RS_F16 = 2 };

// Everything the kernel needs, passed by value.
struct KParams {
  const unsigned short* A;      // 64 x K, row-major, fp16/bf16 bit patterns
  const unsigned short* B;      // K x N, row-major
  const unsigned* offA;         // offA[m*K + k]: byte offset of A[m][k] in the A region (swizzled)
  const unsigned* offB;         // offB[k*N + n]: byte offset of B[k][n] in the B region (swizzled)
  float* D;                     // 64 x N, row-major
  int K;
  unsigned b_region;            // byte offset of the B region from the 1024-aligned base
  unsigned poison_bytes;        // bytes from the aligned base to fill with 0x7FFF first
  unsigned long long descA_hi;  // A descriptor without its start-address field
  unsigned long long descB_hi;
  unsigned kstepA[MAX_KSTEPS];  // start byte offset of k-step kk's sub-tile, from the A region
  unsigned kstepB[MAX_KSTEPS];
  float d_init;                 // accumulators' value before the first k-step
  int first_scale_d;            // scale-d of the first k-step (0: D = A*B)
};

// ============================== DEVICE BEGIN ==============================
// wgmma wrappers: accumulators as "+f", descriptors as "l", scale-d via a predicate set from an
// "r" operand, the immediates (scale-a = scale-b = 1, trans-a, trans-b) as "n" operands.

// SS form: A and B from shared-memory descriptors. 32 f32 accumulators per thread.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_f16_n64(float (&d)[32], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, %35, %36, %37, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TA), "n"(TB)
      : "memory");
}

// SS form: A and B from shared-memory descriptors. 64 f32 accumulators per thread.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_f16_n128(float (&d)[64], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, %67, %68, %69, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TA), "n"(TB)
      : "memory");
}

// SS form: A and B from shared-memory descriptors. 128 f32 accumulators per thread.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_f16_n256(float (&d)[128], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, %131, %132, %133, %134;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TA), "n"(TB)
      : "memory");
}

// SS form: A and B from shared-memory descriptors. 32 f32 accumulators per thread.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_bf16_n64(float (&d)[32], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, %35, %36, %37, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TA), "n"(TB)
      : "memory");
}

// SS form: A and B from shared-memory descriptors. 64 f32 accumulators per thread.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_bf16_n128(float (&d)[64], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, %67, %68, %69, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TA), "n"(TB)
      : "memory");
}

// SS form: A and B from shared-memory descriptors. 128 f32 accumulators per thread.
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_bf16_n256(float (&d)[128], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, %131, %132, %133, %134;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TA), "n"(TB)
      : "memory");
}

// RS form: A from 4 .b32 registers per thread (8 halves), B from a descriptor.
// Immediates after scale-d: imm-scale-a, imm-scale-b, imm-trans-b (no trans-a in this form).
template <int TB>
__device__ __forceinline__ void wgmma_rs_f16_n64(float (&d)[32], const unsigned (&a)[4],
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, "
      "%36, p, %38, %39, %40;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TB)
      : "memory");
}

// RS form: A from 4 .b32 registers per thread (8 halves), B from a descriptor.
// Immediates after scale-d: imm-scale-a, imm-scale-b, imm-trans-b (no trans-a in this form).
template <int TB>
__device__ __forceinline__ void wgmma_rs_f16_n128(float (&d)[64], const unsigned (&a)[4],
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, "
      "%68, p, %70, %71, %72;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TB)
      : "memory");
}

// RS form: A from 4 .b32 registers per thread (8 halves), B from a descriptor.
// Immediates after scale-d: imm-scale-a, imm-scale-b, imm-trans-b (no trans-a in this form).
template <int TB>
__device__ __forceinline__ void wgmma_rs_f16_n256(float (&d)[128], const unsigned (&a)[4],
                                                  unsigned long long desc_b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, "
      "%132, p, %134, %135, %136;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(1), "n"(1), "n"(TB)
      : "memory");
}
template <int N, int FORM, int TA, int TB>
__device__ __forceinline__ void mma_step(float (&d)[N / 2], const unsigned (&a)[4],
                                         unsigned long long da, unsigned long long db, int sd) {
  if constexpr (FORM == FORM_SS_F16) {
    if constexpr (N == 64) wgmma_ss_f16_n64<TA, TB>(d, da, db, sd);
    else if constexpr (N == 128) wgmma_ss_f16_n128<TA, TB>(d, da, db, sd);
    else wgmma_ss_f16_n256<TA, TB>(d, da, db, sd);
  } else if constexpr (FORM == FORM_SS_BF16) {
    if constexpr (N == 64) wgmma_ss_bf16_n64<TA, TB>(d, da, db, sd);
    else if constexpr (N == 128) wgmma_ss_bf16_n128<TA, TB>(d, da, db, sd);
    else wgmma_ss_bf16_n256<TA, TB>(d, da, db, sd);
  } else {
    if constexpr (N == 64) wgmma_rs_f16_n64<TB>(d, a, db, sd);
    else if constexpr (N == 128) wgmma_rs_f16_n128<TB>(d, a, db, sd);
    else wgmma_rs_f16_n256<TB>(d, a, db, sd);
  }
}

template <int N, int FORM, int TA, int TB>
__global__ void __launch_bounds__(128, 1) probe_kernel(const KParams p) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // This pass compiles for a target without wgmma (e.g. a compute_90 PTX pass that some nvcc
  // setups add next to sm_90a): the kernel only traps there. On an H200 the sm_90a code runs.
  __trap();
#else
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Align the *shared-space* address up to 1024 B (the swizzle works on shared address bits).
  const unsigned raw_s = (unsigned)__cvta_generic_to_shared(smem_raw);
  const unsigned pad = (1024u - (raw_s & 1023u)) & 1023u;
  unsigned char* base = smem_raw + pad;
  const unsigned base_s = raw_s + pad;
  const int tid = threadIdx.x;
  const int K = p.K;

  for (unsigned i = tid; i < p.poison_bytes / 2; i += 128) ((unsigned short*)base)[i] = 0x7FFF;
  __syncthreads();
  if constexpr (FORM != FORM_RS_F16) {
    for (int i = tid; i < 64 * K; i += 128) *(unsigned short*)(base + p.offA[i]) = p.A[i];
  }
  for (int i = tid; i < K * N; i += 128) *(unsigned short*)(base + p.b_region + p.offB[i]) = p.B[i];
  // Make the generic-proxy stores visible to the async proxy (wgmma), then a barrier.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = p.d_init;

  const int w = tid / 32, l = tid % 32;
#pragma unroll 1
  for (int kk = 0; kk < K / 16; ++kk) {
    const unsigned long long da =
        p.descA_hi | (unsigned long long)(((base_s + p.kstepA[kk]) & 0x3FFFFu) >> 4);
    const unsigned long long db =
        p.descB_hi | (unsigned long long)(((base_s + p.b_region + p.kstepB[kk]) & 0x3FFFFu) >> 4);
    const int sd = (kk == 0) ? p.first_scale_d : 1;
    unsigned a[4] = {0u, 0u, 0u, 0u};
    if constexpr (FORM == FORM_RS_F16) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i0 = 2 * j;  // elements a_{2j} (low half) and a_{2j+1} (high half, col + 1)
        const int row = 16 * w + l / 4 + 8 * ((i0 >> 1) & 1);
        const int col = 16 * kk + 8 * (i0 >> 2) + 2 * (l % 4);
        a[j] = (unsigned)p.A[row * K + col] | ((unsigned)p.A[row * K + col + 1] << 16);
      }
    }
#pragma unroll
    for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[j])::"memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    mma_step<N, FORM, TA, TB>(d, a, da, db, sd);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
  }

#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int row = 16 * w + l / 4 + 8 * ((i >> 1) & 1);
    const int col = 8 * (i >> 2) + 2 * (l % 4) + (i & 1);
    p.D[row * N + col] = d[i];
  }
#endif
}
// =============================== DEVICE END ===============================

// ----------------------------------- host -----------------------------------

enum { SMEM = 0, REGS = 1 };
enum { KMAJ = 0, MNMAJ = 1 };
enum { F16 = 0, BF16 = 1 };

struct Op {
  int where = SMEM;  // SMEM or REGS (REGS: A only, RS form)
  int major = KMAJ;  // KMAJ or MNMAJ
  int swz = 128;     // 128, 64, 32 or 0 (no swizzle)
  int conv = 0;      // MN swizzled: 0 = a, 1 = b; no swizzle: 0 = std, 1 = swap
  int variant = 0;   // no swizzle only: v0 / v1 (see the header)
  int lbo_enc = -1;  // >= 0: force the encoded LBO field
  int mode = -1;     // >= 0: force the swizzle-mode field
};

struct Case {
  std::string group;
  Op A, B;
  int N = 64, K = 64, dtype = F16;
  float d_init = 0.f;
  int first_scale_d = 0;
  bool expect_ok = true;
  std::string name;
};

static Op opK(int swz) { Op o; o.swz = swz; return o; }
static Op opMN(int swz, int conv) { Op o; o.major = MNMAJ; o.swz = swz; o.conv = conv; return o; }
static Op opNoSw(int major, int variant, int conv) {
  Op o; o.major = major; o.swz = 0; o.variant = variant; o.conv = conv; return o;
}
static Op opRegs() { Op o; o.where = REGS; return o; }
static Op withLbo(Op o, int enc) { o.lbo_enc = enc; return o; }
static Op withMode(Op o, int m) { o.mode = m; return o; }

static std::string op_token(const Op& o) {
  if (o.where == REGS) return "regs";
  std::string s = o.major == KMAJ ? "K" : "MN";
  if (o.swz) {
    s += ".sw" + std::to_string(o.swz);
    if (o.major == MNMAJ) s += o.conv ? ".b" : ".a";
  } else {
    s += ".nosw.v" + std::to_string(o.variant) + (o.conv ? ".swap" : ".std");
  }
  if (o.lbo_enc >= 0) s += ".lbo" + std::to_string(o.lbo_enc);
  if (o.mode >= 0) s += ".mode" + std::to_string(o.mode);
  return s;
}

// Byte offset of element (mn, k) of an operand with R rows along M/N, before the swizzle XOR.
static unsigned elem_off(const Op& o, int R, int K, int mn, int k) {
  if (o.swz) {
    const int S = o.swz, P = S / 2;
    if (o.major == KMAJ) return (unsigned)((k / P) * (R * S) + mn * S + (k % P) * 2);
    return (unsigned)((mn / P) * (K * S) + k * S + (mn % P) * 2);
  }
  const unsigned core = o.major == KMAJ ? (mn % 8) * 16 + (k % 8) * 2 : (k % 8) * 16 + (mn % 8) * 2;
  if (o.variant == 0) return (unsigned)((mn / 8) * ((K / 8) * 128) + (k / 8) * 128) + core;
  return (unsigned)((k / 8) * ((R / 8) * 128) + (mn / 8) * 128) + core;
}

// The swizzle as an address function (offsets are from a 1024-B aligned base).
static unsigned swizzle(unsigned off, int swz) {
  switch (swz) {
    case 128: return off ^ (((off >> 7) & 7u) << 4);
    case 64: return off ^ (((off >> 7) & 3u) << 4);
    case 32: return off ^ (((off >> 7) & 1u) << 4);
    default: return off;
  }
}

static void op_strides(const Op& o, int R, int K, unsigned* lbo, unsigned* sbo) {
  if (o.swz) {
    const unsigned S = (unsigned)o.swz;
    if (o.major == KMAJ) {
      *lbo = 16; *sbo = 8 * S;
    } else {
      const unsigned panel = (unsigned)K * S, eight = 8 * S;
      if (o.conv == 0) { *lbo = panel; *sbo = eight; } else { *lbo = eight; *sbo = panel; }
    }
    return;
  }
  const unsigned kdir = o.variant == 0 ? 128u : (unsigned)(R / 8) * 128u;
  const unsigned mndir = o.variant == 0 ? (unsigned)(K / 8) * 128u : 128u;
  if (o.conv == 0) { *lbo = kdir; *sbo = mndir; } else { *lbo = mndir; *sbo = kdir; }
}

static unsigned long long desc_hi(const Op& o, int R, int K) {
  unsigned lbo, sbo;
  op_strides(o, R, K, &lbo, &sbo);
  unsigned long long lbo_enc = o.lbo_enc >= 0 ? (unsigned)o.lbo_enc : (lbo >> 4);
  unsigned long long mode = o.swz == 128 ? 1 : o.swz == 64 ? 2 : o.swz == 32 ? 3 : 0;
  if (o.mode >= 0) mode = (unsigned)o.mode;
  return ((lbo_enc & 0x3FFFull) << 16) | ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) |
         (mode << 62);
}

static std::string describe(const Op& o, int R, int K) {
  if (o.where == REGS) return "registers";
  const unsigned long long h = desc_hi(o, R, K);
  char buf[256];
  std::string ks;
  for (int kk = 0; kk < K / 16; ++kk)
    ks += (kk ? "," : "") + std::to_string(elem_off(o, R, K, 0, 16 * kk));
  snprintf(buf, sizeof buf, "LBO=%llu SBO=%llu mode=%llu trans=%d kstep_start=[%s]",
           ((h >> 16) & 0x3FFF) << 4, ((h >> 32) & 0x3FFF) << 4, h >> 62, o.major == MNMAJ,
           ks.c_str());
  return buf;
}

static std::vector<Case> make_cases() {
  std::vector<Case> cs;
  auto add = [&](const char* g, Op A, Op B, int N, int K = 64, int dt = F16, bool ok = true) {
    Case c;
    c.group = g; c.A = A; c.B = B; c.N = N; c.K = K; c.dtype = dt; c.expect_ok = ok;
    cs.push_back(c);
    return &cs.back();
  };
  // c1: K-major both, 128B.
  for (int N : {64, 128, 256}) add("c1", opK(128), opK(128), N);
  for (int N : {64, 128, 256}) add("c1", opK(128), opK(128), N, 128);
  add("c1", withLbo(opK(128), 0), withLbo(opK(128), 0), 128);
  add("c1", withLbo(opK(128), 0x1555), withLbo(opK(128), 0x1555), 128);
  // c2: K-major 64B / 32B.
  for (int sw : {64, 32})
    for (int N : {64, 128}) add("c2", opK(sw), opK(sw), N);
  add("c2", opK(64), opK(64), 128, 128);
  add("c2", opK(128), opK(32), 128);
  // c3: B MN-major, conventions a and b.
  for (int conv : {0, 1})
    for (int N : {64, 128, 256}) add("c3", opK(128), opMN(128, conv), N, 64, F16, conv == 0);
  add("c3", opK(128), opMN(128, 0), 128, 128);
  for (int conv : {0, 1})
    for (int N : {64, 128}) add("c3", opK(128), opMN(64, conv), N, 64, F16, conv == 0);
  for (int conv : {0, 1}) add("c3", opK(128), opMN(32, conv), 128, 64, F16, conv == 0);
  // c4: A MN-major.
  for (int conv : {0, 1}) add("c4", opMN(128, conv), opK(128), 64, 64, F16, conv == 0);
  add("c4", withLbo(opMN(128, 0), 0x1555), opK(128), 64);
  for (int conv : {0, 1}) add("c4", opMN(64, conv), opK(128), 64, 64, F16, conv == 0);
  add("c4", opMN(128, 0), opMN(128, 0), 128);
  add("c4", opMN(64, 0), opMN(64, 0), 128);
  // c5: RS form.
  for (int N : {64, 128, 256}) add("c5", opRegs(), opK(128), N);
  for (int conv : {0, 1})
    for (int N : {64, 128}) add("c5", opRegs(), opMN(128, conv), N, 64, F16, conv == 0);
  // c6: bf16.
  add("c6", opK(128), opK(128), 128, 64, BF16);
  for (int conv : {0, 1}) add("c6", opK(128), opMN(128, conv), 128, 64, BF16, conv == 0);
  // c7: no swizzle.
  for (int N : {64, 128}) add("c7", opNoSw(KMAJ, 0, 0), opNoSw(KMAJ, 0, 0), N);
  for (int N : {64, 128}) add("c7", opNoSw(KMAJ, 1, 0), opNoSw(KMAJ, 1, 0), N);
  add("c7", opNoSw(KMAJ, 0, 1), opNoSw(KMAJ, 0, 1), 64, 64, F16, false);
  for (int N : {64, 128}) add("c7", opNoSw(KMAJ, 0, 0), opNoSw(MNMAJ, 0, 0), N);
  add("c7", opNoSw(KMAJ, 0, 0), opNoSw(MNMAJ, 1, 0), 128);
  add("c7", opNoSw(KMAJ, 0, 0), opNoSw(MNMAJ, 0, 1), 128, 64, F16, false);
  add("c7", opNoSw(MNMAJ, 0, 0), opNoSw(KMAJ, 0, 0), 64);
  // Controls of the harness.
  Case* c = add("ctrl.scale-d=0-ignores-D", opK(128), opK(128), 64);
  c->d_init = 1000.f; c->first_scale_d = 0;
  c = add("ctrl.scale-d=1-accumulates", opK(128), opK(128), 64, 64, F16, false);
  c->d_init = 1000.f; c->first_scale_d = 1;
  add("ctrl.mode0-on-128B-data", withMode(opK(128), 0), withMode(opK(128), 0), 64, 64, F16, false);

  for (Case& x : cs) {
    x.name = x.group + "_A=" + op_token(x.A) + "_B=" + op_token(x.B) + "_N" + std::to_string(x.N);
    if (x.K != 64) x.name += "_K" + std::to_string(x.K);
    if (x.dtype == BF16) x.name += "_bf16";
  }
  return cs;
}

// ---- launching ----
template <int N, int FORM, int TA, int TB>
static cudaError_t launch_t(const KParams& p, size_t smem) {
  cudaError_t e = cudaFuncSetAttribute((const void*)&probe_kernel<N, FORM, TA, TB>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  probe_kernel<N, FORM, TA, TB><<<1, 128, smem>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return cudaDeviceSynchronize();
}

template <int N, int FORM>
static cudaError_t launch_n(int ta, int tb, const KParams& p, size_t smem) {
  if constexpr (FORM == FORM_RS_F16) {
    return tb ? launch_t<N, FORM, 0, 1>(p, smem) : launch_t<N, FORM, 0, 0>(p, smem);
  } else {
    switch (ta * 2 + tb) {
      case 0: return launch_t<N, FORM, 0, 0>(p, smem);
      case 1: return launch_t<N, FORM, 0, 1>(p, smem);
      case 2: return launch_t<N, FORM, 1, 0>(p, smem);
      default: return launch_t<N, FORM, 1, 1>(p, smem);
    }
  }
}

template <int FORM>
static cudaError_t launch_f(int N, int ta, int tb, const KParams& p, size_t smem) {
  switch (N) {
    case 64: return launch_n<64, FORM>(ta, tb, p, smem);
    case 128: return launch_n<128, FORM>(ta, tb, p, smem);
    default: return launch_n<256, FORM>(ta, tb, p, smem);
  }
}

static cudaError_t launch(int form, int N, int ta, int tb, const KParams& p, size_t smem) {
  switch (form) {
    case FORM_SS_F16: return launch_f<FORM_SS_F16>(N, ta, tb, p, smem);
    case FORM_SS_BF16: return launch_f<FORM_SS_BF16>(N, ta, tb, p, smem);
    default: return launch_f<FORM_RS_F16>(N, ta, tb, p, smem);
  }
}

// ---- one case ----
enum { RES_OK = 0, RES_WRONG = 1, RES_ERROR = 2 };

static unsigned lcg_state;
static int rnd5() {  // uniform in {-2..2}
  lcg_state = lcg_state * 1664525u + 1013904223u;
  return (int)((lcg_state >> 16) % 5u) - 2;
}

static int case_error(const Case& c, const char* what, cudaError_t e) {
  printf("case %s: ERROR (%s%s%s)\n", c.name.c_str(), what, e != cudaSuccess ? ": " : "",
         e != cudaSuccess ? cudaGetErrorString(e) : "");
  fflush(stdout);
  return RES_ERROR;
}

#define CK(call)                                    \
  do {                                              \
    cudaError_t e_ = (call);                        \
    if (e_ != cudaSuccess) return case_error(c, #call, e_); \
  } while (0)

static int run_case(const Case& c, int index, bool verbose) {
  const int N = c.N, K = c.K, M = 64;
  if (K % 16 || K / 16 > MAX_KSTEPS) return case_error(c, "bad K", cudaSuccess);
  // fp16 and bf16 bit patterns of -2..2
  static const unsigned short enc16[5] = {0xC000, 0xBC00, 0x0000, 0x3C00, 0x4000};
  static const unsigned short encbf[5] = {0xC000, 0xBF80, 0x0000, 0x3F80, 0x4000};
  const unsigned short* enc = c.dtype == BF16 ? encbf : enc16;

  lcg_state = 12345u + 7919u * (unsigned)index;
  std::vector<int> Av(M * K), Bv(K * N);
  for (int& v : Av) v = rnd5();
  for (int& v : Bv) v = rnd5();
  std::vector<unsigned short> Ab(M * K), Bb(K * N);
  for (int i = 0; i < M * K; ++i) Ab[i] = enc[Av[i] + 2];
  for (int i = 0; i < K * N; ++i) Bb[i] = enc[Bv[i] + 2];
  std::vector<long> ref(M * N, 0);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) ref[m * N + n] += (long)Av[m * K + k] * Bv[k * N + n];

  // Byte offsets, swizzled; check that each layout is a bijection onto its region.
  const unsigned a_bytes = (unsigned)(M * K * 2), b_bytes = (unsigned)(K * N * 2);
  std::vector<unsigned> offA(M * K, 0), offB(K * N);
  if (c.A.where == SMEM) {
    std::vector<char> seen(a_bytes / 2, 0);
    for (int m = 0; m < M; ++m)
      for (int k = 0; k < K; ++k) {
        unsigned o = swizzle(elem_off(c.A, M, K, m, k), c.A.swz);
        if (o >= a_bytes || (o & 1) || seen[o / 2]++) return case_error(c, "A layout is not a bijection", cudaSuccess);
        offA[m * K + k] = o;
      }
  }
  {
    std::vector<char> seen(b_bytes / 2, 0);
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) {
        unsigned o = swizzle(elem_off(c.B, N, K, n, k), c.B.swz);
        if (o >= b_bytes || (o & 1) || seen[o / 2]++) return case_error(c, "B layout is not a bijection", cudaSuccess);
        offB[k * N + n] = o;
      }
  }

  KParams p;
  memset(&p, 0, sizeof p);
  p.K = K;
  p.b_region = (a_bytes + 1023u) & ~1023u;
  p.descA_hi = c.A.where == SMEM ? desc_hi(c.A, M, K) : 0ull;
  p.descB_hi = desc_hi(c.B, N, K);
  for (int kk = 0; kk < K / 16; ++kk) {
    p.kstepA[kk] = c.A.where == SMEM ? elem_off(c.A, M, K, 0, 16 * kk) : 0u;
    p.kstepB[kk] = elem_off(c.B, N, K, 0, 16 * kk);
  }
  p.d_init = c.d_init;
  p.first_scale_d = c.first_scale_d;
  if (verbose) {
    printf("  %s: A %s | B %s | descA_hi=0x%016llx descB_hi=0x%016llx\n", c.name.c_str(),
           describe(c.A, M, K).c_str(), describe(c.B, N, K).c_str(), p.descA_hi, p.descB_hi);
    fflush(stdout);
  }

  CK(cudaSetDevice(0));
  int optin = 0;
  CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  // Ask for all of it: a wrong stride then (mostly) reads poison instead of faulting.
  const size_t smem = (size_t)optin;
  if (p.b_region + b_bytes + 1024 > smem) return case_error(c, "not enough shared memory", cudaSuccess);
  p.poison_bytes = (unsigned)(smem - 1024) & ~1u;

  unsigned short *dA, *dB;
  unsigned *dOffA, *dOffB;
  float* dD;
  CK(cudaMalloc(&dA, Ab.size() * 2));
  CK(cudaMalloc(&dB, Bb.size() * 2));
  CK(cudaMalloc(&dOffA, offA.size() * 4));
  CK(cudaMalloc(&dOffB, offB.size() * 4));
  CK(cudaMalloc(&dD, (size_t)M * N * 4));
  CK(cudaMemcpy(dA, Ab.data(), Ab.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, Bb.data(), Bb.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dOffA, offA.data(), offA.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dOffB, offB.data(), offB.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dD, 0xFF, (size_t)M * N * 4));  // NaN: an unwritten output shows up
  p.A = dA; p.B = dB; p.offA = dOffA; p.offB = dOffB; p.D = dD;

  const int form = c.A.where == REGS ? FORM_RS_F16 : c.dtype == BF16 ? FORM_SS_BF16 : FORM_SS_F16;
  const int ta = c.A.where == SMEM && c.A.major == MNMAJ, tb = c.B.major == MNMAJ;
  cudaError_t e = launch(form, N, ta, tb, p, smem);
  if (e != cudaSuccess) return case_error(c, "kernel (an illegal-instruction/trap error here can mean the binary has no sm_90a code: build with -arch=sm_90a)", e);

  std::vector<float> D((size_t)M * N);
  CK(cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(dA); cudaFree(dB); cudaFree(dOffA); cudaFree(dOffB); cudaFree(dD);

  int bad = 0, fr = -1, fc = -1;
  for (int r = 0; r < M; ++r)
    for (int col = 0; col < N; ++col) {
      const float got = D[r * N + col], want = (float)ref[r * N + col];
      if (!(got == want)) {
        if (!bad) { fr = r; fc = col; }
        ++bad;
      }
    }
  if (!bad) {
    printf("case %s: OK\n", c.name.c_str());
    fflush(stdout);
    return RES_OK;
  }
  printf("case %s: WRONG (%d mismatches, first at (%d,%d) got %g want %g)\n", c.name.c_str(), bad,
         fr, fc, D[fr * N + fc], (float)ref[fr * N + fc]);
  fflush(stdout);
  return RES_WRONG;
}

static int device_info() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("device: none (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    return 2;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  printf("device: %s, sm_%d%d, max dynamic shared memory per block %d B\n", prop.name, prop.major,
         prop.minor, optin);
  return prop.major == 9 ? 0 : 1;
}

// Runs fn in a child process (so a fault there leaves the others alone); returns its exit code,
// or -1 when it died.
template <class F>
static int in_child(bool fork_it, F fn, int* sig) {
  *sig = 0;
  if (!fork_it) return fn();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return fn();
  if (pid == 0) {
    int r = fn();
    fflush(stdout);
    _exit(r);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  *sig = WIFSIGNALED(st) ? WTERMSIG(st) : -1;
  return -1;
}

int main(int argc, char** argv) {
  bool verbose = false, list = false, fork_it = true;
  std::vector<std::string> filters;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-v")) verbose = true;
    else if (!strcmp(argv[i], "--list")) list = true;
    else if (!strcmp(argv[i], "--no-fork")) fork_it = false;
    else filters.push_back(argv[i]);
  }
  std::vector<Case> cases = make_cases();
  auto selected = [&](const Case& c) {
    if (filters.empty()) return true;
    for (auto& f : filters)
      if (c.name.find(f) != std::string::npos) return true;
    return false;
  };
  if (list) {
    for (const Case& c : cases) {
      if (!selected(c)) continue;
      printf("%s  [predicted %s]\n    A: %s\n    B: %s\n", c.name.c_str(),
             c.expect_ok ? "OK" : "WRONG", describe(c.A, 64, c.K).c_str(),
             describe(c.B, c.N, c.K).c_str());
    }
    return 0;
  }

  int sig = 0;
  int dev = in_child(fork_it, device_info, &sig);
  if (dev == 2) {
    printf("summary: no CUDA device, no case run\n");
    return 0;
  }
  if (dev != 0) printf("note: not an sm_90 device; the cases will likely fail\n");

  int n = 0, as_pred = 0;
  std::vector<std::string> differ;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (!selected(c)) continue;
    ++n;
    int r = in_child(fork_it, [&]() { return run_case(c, (int)i, verbose); }, &sig);
    if (r < 0 || r > RES_ERROR) {
      printf("case %s: ERROR (child process died, signal %d)\n", c.name.c_str(), sig);
      r = RES_ERROR;
    }
    if ((r == RES_OK) == c.expect_ok && r != RES_ERROR) {
      ++as_pred;
    } else {
      differ.push_back(c.name + " (predicted " + (c.expect_ok ? "OK" : "WRONG") + ", got " +
                       (r == RES_OK ? "OK" : r == RES_WRONG ? "WRONG" : "ERROR") + ")");
    }
  }
  if (differ.empty()) {
    printf("summary: all %d cases as predicted\n", n);
  } else {
    printf("summary: %d of %d cases as predicted; these differ from the prediction:\n", as_pred, n);
    for (auto& s : differ) printf("  %s\n", s.c_str());
  }
  fflush(stdout);
  return 0;
}
