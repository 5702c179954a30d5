// The C++ side of the export example: launch the GEMM (through its dispatcher), the split-K
// GEMM (two kernels in one call, with a workspace) and the softmax that export_kernels.py
// exported, check them against a CPU reference computed here,
// and show that bad arguments are error statuses with messages, never crashes.
//
//   ./tilers_example [--dump DIR]    (DIR: raw inputs and outputs for a check against torch)
//
// The exported launchers need only the CUDA driver; this program uses the CUDA runtime API
// for memory and streams, as a C++ code base would.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tilers_gemm.h"
#include "tilers_softmax.h"
#include "tilers_splitk_gemm.h"

namespace {

constexpr int64_t N = 1024, K = 1024;                      // the GEMM's fixed sizes
constexpr int64_t SOFTMAX_ROWS = 4096, SOFTMAX_COLS = 1000;  // the softmax's shape

int failures = 0;

void expect(bool ok, const std::string &what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    if (!ok) failures++;
}

#define CUDA_CHECK(call)                                                                  \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));       \
            std::exit(2);                                                                 \
        }                                                                                 \
    } while (0)

// float16 on the host, as bits: the inputs are k / 1024 with |k| <= 1024, exact in fp16
uint16_t exact_half(float f) {
    if (f == 0.0f) return 0;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint32_t sign = bits >> 31, exponent = (bits >> 23) & 0xff, mantissa = bits & 0x7fffff;
    return uint16_t((sign << 15) | ((exponent - 112) << 10) | (mantissa >> 13));
}

float half_value(uint16_t h) {
    uint32_t sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, bits;
    if (exponent == 0 && mantissa == 0) {
        bits = sign << 31;
    } else if (exponent == 0) {  // subnormal
        exponent = 113;
        while (!(mantissa & 0x400)) mantissa <<= 1, exponent--;
        bits = (sign << 31) | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    } else if (exponent == 31) {
        bits = (sign << 31) | 0x7f800000 | (mantissa << 13);
    } else {
        bits = (sign << 31) | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint32_t lcg_state = 12345;
int next_int(int range) {  // uniform in [-range, range]
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return int((lcg_state >> 8) % uint32_t(2 * range + 1)) - range;
}

void dump(const char *dir, const std::string &name, const void *data, size_t bytes) {
    if (!dir) return;
    std::string path = std::string(dir) + "/" + name;
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(data, 1, bytes, f) != bytes) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        std::exit(2);
    }
    std::fclose(f);
}

// the GEMM through the dispatcher (split = false) or the split-K export with its workspace
void check_gemm(int64_t M, cudaStream_t stream, const char *dump_dir, bool split = false) {
    const std::string what = std::string(split ? "splitk_gemm" : "gemm") + " M=" + std::to_string(M);
    std::vector<uint16_t> a(M * K), b(K * N), c(M * N);
    for (auto &x : a) x = exact_half(next_int(1024) / 1024.0f);
    for (auto &x : b) x = exact_half(next_int(1024) / 1024.0f);
    void *dA, *dB, *dC;
    CUDA_CHECK(cudaMalloc(&dA, a.size() * 2));
    CUDA_CHECK(cudaMalloc(&dB, b.size() * 2));
    CUDA_CHECK(cudaMalloc(&dC, c.size() * 2));
    CUDA_CHECK(cudaMemcpy(dA, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
    int64_t a_shape[] = {M, K}, b_shape[] = {K, N}, c_shape[] = {M, N};
    tilers_tensor A = {dA, 2, a_shape, nullptr}, B = {dB, 2, b_shape, nullptr},
                  C = {dC, 2, c_shape, nullptr};
    tilers_status status;
    void *workspace = nullptr;
    if (split) {
        size_t bytes = 0;
        status = tilers_splitk_gemm_workspace_size(A, B, C, &bytes);
        expect(status == TILERS_SUCCESS && bytes >= size_t(4 * M * N * 4),
               what + " needs " + std::to_string(bytes) + " bytes of workspace");
        CUDA_CHECK(cudaMalloc(&workspace, bytes));
        status = tilers_splitk_gemm_launch(A, B, C, workspace, bytes, stream);
        if (status != TILERS_SUCCESS) std::printf("  %s\n", tilers_splitk_gemm_last_error());
    } else {
        status = tilers_gemm_launch(A, B, C, stream);
        if (status != TILERS_SUCCESS) std::printf("  %s\n", tilers_gemm_last_error());
    }
    expect(status == TILERS_SUCCESS, what + " launches");
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(c.data(), dC, c.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> af(a.size()), bf(b.size());
    for (size_t i = 0; i < a.size(); i++) af[i] = half_value(a[i]);
    for (size_t i = 0; i < b.size(); i++) bf[i] = half_value(b[i]);
    double worst = 0;
    int64_t bad = 0;
    std::vector<double> row(N);
    for (int64_t i = 0; i < M; i++) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t k = 0; k < K; k++) {
            double aik = af[i * K + k];
            const float *bk = &bf[k * N];
            for (int64_t j = 0; j < N; j++) row[j] += aik * bk[j];
        }
        for (int64_t j = 0; j < N; j++) {
            double got = half_value(c[i * N + j]), error = std::fabs(got - row[j]);
            // fp32 accumulation, one fp16 rounding of the result
            if (!(error <= 2e-2 + 2e-3 * std::fabs(row[j]))) bad++;
            worst = std::fmax(worst, error);
        }
    }
    expect(bad == 0, what + " matches the CPU reference (max error " + std::to_string(worst) + ", " +
                         std::to_string(bad) + " elements off)");
    if (workspace) CUDA_CHECK(cudaFree(workspace));
    if (M == 100 && !split) {
        dump(dump_dir, "gemm_a.bin", a.data(), a.size() * 2);
        dump(dump_dir, "gemm_b.bin", b.data(), b.size() * 2);
        dump(dump_dir, "gemm_c.bin", c.data(), c.size() * 2);
    }
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
}

void check_softmax(cudaStream_t stream, const char *dump_dir) {
    std::vector<float> x(SOFTMAX_ROWS * SOFTMAX_COLS), y(x.size());
    for (auto &v : x) v = next_int(4096) / 1024.0f;
    void *dX, *dY;
    CUDA_CHECK(cudaMalloc(&dX, x.size() * 4));
    CUDA_CHECK(cudaMalloc(&dY, y.size() * 4));
    CUDA_CHECK(cudaMemcpy(dX, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    int64_t shape[] = {SOFTMAX_ROWS, SOFTMAX_COLS};
    tilers_tensor X = {dX, 2, shape, nullptr}, Y = {dY, 2, shape, nullptr};
    tilers_status status = tilers_softmax_launch(X, Y, stream);
    if (status != TILERS_SUCCESS) std::printf("  %s\n", tilers_softmax_last_error());
    expect(status == TILERS_SUCCESS, "softmax launches");
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(y.data(), dY, y.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int64_t i = 0; i < SOFTMAX_ROWS; i++) {
        const float *xi = &x[i * SOFTMAX_COLS];
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < SOFTMAX_COLS; j++) top = std::fmax(top, xi[j]);
        for (int64_t j = 0; j < SOFTMAX_COLS; j++) sum += std::exp(xi[j] - top);
        for (int64_t j = 0; j < SOFTMAX_COLS; j++) {
            double want = std::exp(xi[j] - top) / sum;
            worst = std::fmax(worst, std::fabs(y[i * SOFTMAX_COLS + j] - want));
        }
    }
    expect(worst <= 1e-6, "softmax matches the CPU reference (max error " +
                              std::to_string(worst) + ")");
    dump(dump_dir, "softmax_x.bin", x.data(), x.size() * 4);
    dump(dump_dir, "softmax_y.bin", y.data(), y.size() * 4);

    // what one launch costs on the host (queued asynchronously)
    const int calls = 2000;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; i++) tilers_softmax_launch(X, Y, stream);
    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::printf("softmax: %.2f us of host time per tilers_softmax_launch (%d calls)\n",
                seconds / calls * 1e6, calls);
    CUDA_CHECK(cudaFree(dX));
    CUDA_CHECK(cudaFree(dY));
}

// Missing, misaligned and misshapen arguments: an error status and a message, nothing launched.
void check_errors(cudaStream_t stream) {
    int64_t M = 128;
    void *dA, *dB, *dC;
    CUDA_CHECK(cudaMalloc(&dA, M * K * 2 + 16));
    CUDA_CHECK(cudaMalloc(&dB, K * N * 2));
    CUDA_CHECK(cudaMalloc(&dC, M * N * 2));
    CUDA_CHECK(cudaMemset(dC, 0x7b, M * N * 2));
    int64_t a_shape[] = {M, K}, b_shape[] = {K, N}, c_shape[] = {M, N}, wrong[] = {M, K - 1};
    tilers_tensor B = {dB, 2, b_shape, nullptr}, C = {dC, 2, c_shape, nullptr};
    tilers_tensor missing = {nullptr, 2, a_shape, nullptr};
    tilers_tensor misaligned = {static_cast<char *>(dA) + 2, 2, a_shape, nullptr};
    tilers_tensor misshapen = {dA, 2, wrong, nullptr};
    struct Case { const char *what; tilers_tensor a; } cases[] = {
        {"a missing A", missing}, {"a misaligned A", misaligned}, {"a misshapen A", misshapen}};
    for (const auto &c : cases) {
        tilers_status status = tilers_gemm_launch(c.a, B, C, stream);
        std::printf("  %s -> status %d: %s\n", c.what, status, tilers_gemm_last_error());
        expect(status == TILERS_ERROR_INVALID_VALUE, std::string(c.what) + " is an error status");
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> out(M * N * 2);
    CUDA_CHECK(cudaMemcpy(out.data(), dC, out.size(), cudaMemcpyDeviceToHost));
    bool untouched = true;
    for (uint8_t v : out) untouched = untouched && v == 0x7b;
    expect(untouched, "the calls refused wrote nothing");
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC));
}

}  // namespace

int main(int argc, char **argv) {
    const char *dump_dir = argc == 3 && std::string(argv[1]) == "--dump" ? argv[2] : nullptr;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(nullptr));  // the runtime's primary context is now current
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    for (int64_t M : {1, 100, 256, 1000}) check_gemm(M, stream, dump_dir);
    for (int64_t M : {1, 100}) check_gemm(M, stream, dump_dir, true);
    check_softmax(stream, dump_dir);
    check_errors(stream);
    CUDA_CHECK(cudaStreamDestroy(stream));
    if (failures)
        std::printf("%d check(s) FAILED\n", failures);
    else
        std::printf("all checks passed\n");
    return failures ? 1 : 0;
}
