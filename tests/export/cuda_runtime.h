/* The few CUDA runtime declarations examples/cpp/main.cpp uses, so that CI (no CUDA toolkit)
 * can compile it (tests/test_export.py); not a runtime. Signatures as cuda_runtime_api.h. */
#pragma once
#include <stddef.h>
typedef int cudaError_t;
#define cudaSuccess 0
typedef struct CUstream_st *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
extern "C" {
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void **pointer, size_t bytes);
cudaError_t cudaFree(void *pointer);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemset(void *pointer, int value, size_t bytes);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
}
