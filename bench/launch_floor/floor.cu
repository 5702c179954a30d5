// The per-launch CPU cost of the CUDA driver and runtime on this machine, without Python:
// the floor under any launcher (bench/launch.py compares tilers with torch.add).
// Build and run on the GPU machine: bash bench/launch_floor/run.sh
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>

extern "C" __global__ void add3(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

#define CHECK(x) do { auto r = (x); if (r) { printf("%s failed: %d\n", #x, (int)r); return 1; } } while (0)

template <class F> double per_call_us(F launch, cudaStream_t s) {
  std::vector<double> samples;
  for (int rep = 0; rep < 15; ++rep) {
    cudaStreamSynchronize(s);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) launch();
    auto t1 = std::chrono::steady_clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 200);
  }
  cudaStreamSynchronize(s);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

int main(int argc, char** argv) {
  const int n = 1 << 10;
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, n * 4)); CHECK(cudaMalloc(&b, n * 4)); CHECK(cudaMalloc(&c, n * 4));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // the same kernel through the driver API, from its own module (as tilers loads a cubin)
  CUmodule mod; CUfunction fn;
  CHECK(cuModuleLoad(&mod, argv[1]));
  CHECK(cuModuleGetFunction(&fn, mod, "add3"));
  int nn = n;
  void* params[4] = {&a, &b, &c, &nn};
  CUcontext ctx; CHECK(cuCtxGetCurrent(&ctx));
  double runtime = per_call_us([&] { add3<<<n / 256, 256, 0, s>>>(a, b, c, n); }, s);
  double driver = per_call_us([&] { cuLaunchKernel(fn, n / 256, 1, 1, 256, 1, 1, 0, (CUstream)s, params, nullptr); }, s);
  double driver_ctx = per_call_us([&] {
    CUcontext cur; cuCtxGetCurrent(&cur);
    cuLaunchKernel(fn, n / 256, 1, 1, 256, 1, 1, 0, (CUstream)s, params, nullptr);
  }, s);
  double legacy = per_call_us([&] { cuLaunchKernel(fn, n / 256, 1, 1, 256, 1, 1, 0, 0, params, nullptr); }, 0);
  printf("{\"runtime <<<>>> us\": %.3f, \"cuLaunchKernel us\": %.3f, "
         "\"cuCtxGetCurrent + cuLaunchKernel us\": %.3f, \"cuLaunchKernel legacy stream us\": %.3f}\n",
         runtime, driver, driver_ctx, legacy);
  return 0;
}
