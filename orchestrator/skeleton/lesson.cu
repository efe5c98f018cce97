${spdx}// ${heading}
//
// A starting point written by `coursectl new`: a SAXPY kernel, y = a * x + y,
// checked element by element against a CPU reference and timed with CUDA
// events. Replace it with the lesson's own kernels, keep the output in the
// shape lessons.yaml describes (or change both together), and say here what
// the program shows.
//
${build}
${run}
${verified}

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

// Error macro used for every runtime call. The program stands alone, so the
// macro lives here rather than in a shared header. The do/while(0) wrapper
// makes it a single statement, safe after an unbraced if.
#define CUDA_CHECK(call)                                                    \
    do {                                                                    \
        const cudaError_t status_ = (call);                                 \
        if (status_ != cudaSuccess) {                                       \
            std::fprintf(stderr, "CUDA error at %s:%d in %s: %s\n",        \
                         __FILE__, __LINE__, #call,                         \
                         cudaGetErrorString(status_));                      \
            std::exit(EXIT_FAILURE);                                        \
        }                                                                   \
    } while (0)

constexpr int kN = 1 << 20;
constexpr int kThreadsPerBlock = 256;
constexpr float kA = 2.0f;

constexpr int kWarmupRuns = 3;
constexpr int kTimedRuns = 10;

// y[i] = a * x[i] + y[i], one element per thread.
//
// Memory: neighbouring threads read and write neighbouring floats, so each
// warp's loads and stores coalesce into whole cache lines.
//
// Launch assumption: a grid that covers all n elements, rounded up; the
// bounds check idles the threads of the last block that lie past n.
// snippet: saxpy
__global__ void saxpy(int n, float a, const float* __restrict__ x,
                      float* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
// end snippet: saxpy

// Host reference, written to be clearly right, not fast.
static void saxpyOnHost(int n, float a, const float* x, float* y) {
    for (int i = 0; i < n; ++i) {
        y[i] = a * x[i] + y[i];
    }
}

// Index of the first element that differs from the reference, or n when all
// agree. The inputs are small whole numbers, so every result is exact and any
// difference at all is a bug. Written as !(got == want) so a NaN counts.
static int firstMismatch(const float* got, const float* want, int n) {
    for (int i = 0; i < n; ++i) {
        if (!(got[i] == want[i])) {
            return i;
        }
    }
    return n;
}

int main() {
    const int device = 0;
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf(${gpu_format}, prop.name, prop.major, prop.minor);
    std::printf(${size_format}, kN, kThreadsPerBlock);

    std::vector<float> x(kN);
    std::vector<float> y(kN);
    for (int i = 0; i < kN; ++i) {
        x[i] = static_cast<float>(i % 7 - 3);
        y[i] = static_cast<float>(i % 5 - 2);
    }
    std::vector<float> want(y);
    saxpyOnHost(kN, kA, x.data(), want.data());

    const size_t bytes = sizeof(float) * kN;
    float* dX = nullptr;
    float* dY = nullptr;
    CUDA_CHECK(cudaMalloc(&dX, bytes));
    CUDA_CHECK(cudaMalloc(&dY, bytes));
    CUDA_CHECK(cudaMemcpy(dX, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dY, y.data(), bytes, cudaMemcpyHostToDevice));

    const int blocks = (kN + kThreadsPerBlock - 1) / kThreadsPerBlock;

    // The checked launch, on fresh inputs.
    saxpy<<<blocks, kThreadsPerBlock>>>(kN, kA, dX, dY);
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> got(kN);
    CUDA_CHECK(cudaMemcpy(got.data(), dY, bytes, cudaMemcpyDeviceToHost));
    const int bad = firstMismatch(got.data(), want.data(), kN);

    // The timed launches: warm-up first (modules load lazily), then the mean
    // of several launches measured with CUDA events on the GPU's own clock.
    cudaEvent_t begin;
    cudaEvent_t end;
    CUDA_CHECK(cudaEventCreate(&begin));
    CUDA_CHECK(cudaEventCreate(&end));
    for (int i = 0; i < kWarmupRuns; ++i) {
        saxpy<<<blocks, kThreadsPerBlock>>>(kN, kA, dX, dY);
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(begin));
    for (int i = 0; i < kTimedRuns; ++i) {
        saxpy<<<blocks, kThreadsPerBlock>>>(kN, kA, dX, dY);
    }
    CUDA_CHECK(cudaEventRecord(end));
    CUDA_CHECK(cudaEventSynchronize(end));
    CUDA_CHECK(cudaGetLastError());
    float totalMs = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&totalMs, begin, end));
    const double ms = static_cast<double>(totalMs) / kTimedRuns;
    // SAXPY reads x and y and writes y: three floats per element.
    const double gbps = 3.0 * static_cast<double>(bytes) / (ms * 1.0e-3) / 1.0e9;

    std::printf(${header_format}, "kernel", "time (ms)", "GB/s");
    std::printf(${row_format}, "saxpy", ms, gbps);

    CUDA_CHECK(cudaEventDestroy(begin));
    CUDA_CHECK(cudaEventDestroy(end));
    CUDA_CHECK(cudaFree(dX));
    CUDA_CHECK(cudaFree(dY));

    if (bad != kN) {
        std::printf(${failed_format}, "saxpy", bad,
                    static_cast<double>(got[bad]),
                    static_cast<double>(want[bad]));
        return EXIT_FAILURE;
    }
    std::printf(${matched_format}, kN);
    return EXIT_SUCCESS;
}
