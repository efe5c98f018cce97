// SPDX-License-Identifier: MIT
//
// Day 71: half precision in a matrix multiply, storage versus accumulation.
//
// The tiled kernel from day 16 is run three ways: in float from end to end,
// with __half inputs and a float running sum, and with __half inputs and a
// __half running sum. All three are compared with one double-precision
// product on the CPU, computed from the float inputs before any rounding to
// half. That choice is deliberate: the half kernels are charged for rounding
// their inputs as well as for their arithmetic, because a user of the result
// pays for both.
//
// Each kernel passes or fails a tolerance that grows with K, the rule from
// day 66: rtol = max(table value, 4 * eps * sqrt(K)) with eps = 2^-p for a
// format with p mantissa bits, and atol = rtol * max|reference|. The numbers
// behind every gate are printed above its table.
//
// The __half-accumulator kernel is here to be measured, not imitated. That
// its error comes out above the float-accumulator kernel's is a prediction,
// printed as an observed ratio and never treated as pass or fail: on one
// particular input, cancellation can flip which of two correct summations
// has the larger worst-case error.
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o matmul_fp16 matmul_fp16.cu
// Run:   ./matmul_fp16
// Verified 2026-12-02 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, CUDA 13.0, nvcc 13.0.88. Transcript: evidence/day71-matmul-fp16/nvidia-h200/transcript.txt

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Course error macro. Each lesson file stands alone, so each carries its own
// copy. Any runtime call that does not return cudaSuccess ends the program
// with the file, the line and the call's own text; the trailing underscore on
// the local keeps it from shadowing a name at the call site, and do/while(0)
// lets the macro sit anywhere a single statement can.
#define CUDA_CHECK(call)                                                 \
    do {                                                                 \
        const cudaError_t err_ = (call);                                 \
        if (err_ != cudaSuccess) {                                       \
            std::fprintf(stderr, "CUDA error %s:%d: %s: %s\n", __FILE__, \
                         __LINE__, #call, cudaGetErrorString(err_));     \
            std::exit(EXIT_FAILURE);                                     \
        }                                                                \
    } while (0)

// The day 16 tile: 16 x 16 outputs per block, which is the course's default
// 256-thread block. Two float tiles take 2 KiB of shared memory and two half
// tiles 1 KiB, far below the 48 KiB any block gets without opting in.
constexpr int kTile = 16;
constexpr int kWarmupLaunches = 3;
constexpr int kTimedLaunches = 10;

// Three square problems, each a whole number of tiles. K rises eightfold
// from first to last, enough for the growth of the error with K to show in a
// single run. The footprints also span cache sizes: the smallest case's
// three matrices total 768 KiB and stay resident in any L2, while the
// largest needs 48 MiB, far more than the 4 MiB L2 of a T4, and there
// halving the bytes per element has a chance to show up in the timings.
constexpr int kCaseCount = 3;
constexpr size_t kCaseDims[kCaseCount] = {256, 1024, 2048};
constexpr size_t kLargestDim = 2048;

// The three kernels, in the order of the table's rows.
constexpr int kPathCount = 3;

// Table tolerances per format, and the mantissa widths that set eps = 2^-p:
// 23 bits for float, 10 for __half.
constexpr double kF32TableRtol = 1e-5;
constexpr double kF16TableRtol = 1e-2;
constexpr int kF32MantissaBits = 23;
constexpr int kF16MantissaBits = 10;

// Input pattern: A cycles through (0..96 - 48) * 0.013, B through
// (0..88 - 44) * 0.017. Neither step is a binary fraction, so nearly every
// input changes when it is rounded to __half and the storage error is real.
// The periods are primes, so they line up with none of the power-of-two
// dimensions.
constexpr int kAPeriod = 97;
constexpr int kAOffset = 48;
constexpr float kAStep = 0.013f;
constexpr int kBPeriod = 89;
constexpr int kBOffset = 44;
constexpr float kBStep = 0.017f;

// Upper bound on threads for the CPU reference; more than this buys little
// because the loop is limited by memory traffic, not arithmetic.
constexpr unsigned int kMaxReferenceThreads = 16;

static_assert(kTile * kTile == 256,
              "one 16 x 16 tile per block keeps the course's 256-thread "
              "default block");
static_assert((kTile * kTile) % 32 == 0,
              "the block has to be a whole number of warps");
static_assert(kCaseDims[0] % kTile == 0 && kCaseDims[1] % kTile == 0 &&
                  kCaseDims[2] % kTile == 0,
              "every dimension is a multiple of the tile, so the kernels are "
              "compared on identical, guard-free geometry");
static_assert(kCaseDims[0] < kCaseDims[1] && kCaseDims[1] < kCaseDims[2] &&
                  kCaseDims[2] == kLargestDim,
              "cases grow so K grows down the transcript, and the largest "
              "sizes the buffers");
static_assert(kCaseDims[0] % kAPeriod != 0 && kCaseDims[1] % kAPeriod != 0 &&
                  kCaseDims[2] % kAPeriod != 0 &&
                  kCaseDims[0] % kBPeriod != 0 &&
                  kCaseDims[1] % kBPeriod != 0 &&
                  kCaseDims[2] % kBPeriod != 0,
              "the input periods must not divide a dimension, or every row "
              "would repeat the same pattern");
static_assert(kAOffset * kAStep < 1.0f && kBOffset * kBStep < 1.0f,
              "inputs stay inside (-1, 1)");
static_assert(static_cast<float>(kLargestDim) * (kAOffset * kAStep) *
                      (kBOffset * kBStep) <
                  65504.0f,
              "even a sum of K worst-case products stays below the largest "
              "finite __half, so a half accumulator cannot overflow");
static_assert(2 * kTile * kTile * sizeof(float) <= 48 * 1024,
              "both float tiles fit the default 48 KiB of shared memory per "
              "block, so no opt-in attribute is needed");

// Used on both sides: by the host to size the grid and by the kernels to
// count their K steps.
__host__ __device__ constexpr size_t ceilDiv(size_t num, size_t den) {
    return (num + den - 1) / den;
}

// Day 16's shared-memory tiled product in float, untouched. Each block
// produces one kTile x kTile tile of C, staging a tile of A and a tile of B
// per step. Its row in each table is the baseline the others are timed
// against.
//
// Memory: threadIdx.x runs along a row, so sixteen neighbouring threads load
// sixteen consecutive floats (64 bytes) of A or B; the accesses are as
// regular as this kernel can make them. The two half kernels below keep
// these addresses and change only the element width.
//
// Launch assumption: blockDim is exactly (kTile, kTile) and the grid is
// rounded up in x and y. The bounds checks wrap the loads and the final
// store, never a __syncthreads().
__global__ void matmulTiledF32(const float* __restrict__ a,
                               const float* __restrict__ b,
                               float* __restrict__ c, size_t m, size_t n,
                               size_t k) {
    __shared__ float shA[kTile][kTile];
    __shared__ float shB[kTile][kTile];

    const size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t row = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    const size_t steps = ceilDiv(k, kTile);

    float sum = 0.0f;
    for (size_t step = 0; step < steps; ++step) {
        const size_t aCol = step * kTile + threadIdx.x;
        const size_t bRow = step * kTile + threadIdx.y;
        shA[threadIdx.y][threadIdx.x] =
            (row < m && aCol < k) ? a[row * k + aCol] : 0.0f;
        shB[threadIdx.y][threadIdx.x] =
            (bRow < k && col < n) ? b[bRow * n + col] : 0.0f;
        __syncthreads();

        for (int p = 0; p < kTile; ++p) {
            sum += shA[threadIdx.y][p] * shB[p][threadIdx.x];
        }
        __syncthreads();
    }

    if (row < m && col < n) {
        c[row * n + col] = sum;
    }
}

// The same tiling with __half in global and shared memory and a float
// running sum. Each operand is widened to float in a register just before
// it is used, so the arithmetic is matmulTiledF32's; the extra error comes
// only from the inputs having been rounded to half.
//
// Memory: sixteen neighbouring threads now load sixteen consecutive __half
// values, 32 bytes instead of 64, from the same positions. Half the bytes
// through the same pattern is all this kernel can gain: it does not touch
// the tensor cores, which arrive on day 72.
//
// Launch assumption: as for matmulTiledF32.
__global__ void matmulF16StoreF32Acc(const __half* __restrict__ a,
                                     const __half* __restrict__ b,
                                     float* __restrict__ c, size_t m, size_t n,
                                     size_t k) {
    __shared__ __half shA[kTile][kTile];
    __shared__ __half shB[kTile][kTile];

    const size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t row = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    const size_t steps = ceilDiv(k, kTile);
    const __half zero = __float2half(0.0f);

    float wideSum = 0.0f;
    for (size_t step = 0; step < steps; ++step) {
        const size_t aCol = step * kTile + threadIdx.x;
        const size_t bRow = step * kTile + threadIdx.y;
        shA[threadIdx.y][threadIdx.x] =
            (row < m && aCol < k) ? a[row * k + aCol] : zero;
        shB[threadIdx.y][threadIdx.x] =
            (bRow < k && col < n) ? b[bRow * n + col] : zero;
        __syncthreads();

        // snippet: f32-accumulate
        for (int p = 0; p < kTile; ++p) {
            wideSum += __half2float(shA[threadIdx.y][p]) *
                       __half2float(shB[p][threadIdx.x]);
        }
        // end snippet
        __syncthreads();
    }

    if (row < m && col < n) {
        c[row * n + col] = wideSum;
    }
}

// What not to do: __half inputs and a __half running sum. Each __hfma
// rounds the sum back to an 11-bit significand, so once the sum has grown,
// the small products being added fall between neighbouring half values and
// part of each is lost; the loss builds up with K. The sum becomes a float
// only when it is stored, too late to recover anything.
//
// Memory: the same loads and tiles as matmulF16StoreF32Acc, so a difference
// in the error column between the two half kernels belongs to the
// accumulator and nothing else.
//
// Launch assumption: as for matmulTiledF32.
__global__ void matmulF16StoreF16Acc(const __half* __restrict__ a,
                                     const __half* __restrict__ b,
                                     float* __restrict__ c, size_t m, size_t n,
                                     size_t k) {
    __shared__ __half shA[kTile][kTile];
    __shared__ __half shB[kTile][kTile];

    const size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t row = static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    const size_t steps = ceilDiv(k, kTile);
    const __half zero = __float2half(0.0f);

    __half narrowSum = zero;
    for (size_t step = 0; step < steps; ++step) {
        const size_t aCol = step * kTile + threadIdx.x;
        const size_t bRow = step * kTile + threadIdx.y;
        shA[threadIdx.y][threadIdx.x] =
            (row < m && aCol < k) ? a[row * k + aCol] : zero;
        shB[threadIdx.y][threadIdx.x] =
            (bRow < k && col < n) ? b[bRow * n + col] : zero;
        __syncthreads();

        // snippet: f16-accumulate
        for (int p = 0; p < kTile; ++p) {
            narrowSum =
                __hfma(shA[threadIdx.y][p], shB[p][threadIdx.x], narrowSum);
        }
        // end snippet: f16-accumulate
        __syncthreads();
    }

    if (row < m && col < n) {
        c[row * n + col] = __half2float(narrowSum);
    }
}

// One slice of rows of the reference product C = A * B, in double, from the
// float inputs (never their half copies: a reference built from rounded
// inputs would excuse the very storage error this lesson measures).
//
// The loops run row, then p, then column. Each output row serves as a row
// of double accumulators, and for every p one row of B is streamed through
// it in order, so the memory access is sequential. Each C[row][col] still
// receives its K products one at a time in increasing p, the same sums in
// the same order as the textbook row-column-p loop.
static void referenceRows(const float* a, const float* b, double* c,
                          size_t rowBegin, size_t rowEnd, size_t n, size_t k) {
    for (size_t row = rowBegin; row < rowEnd; ++row) {
        double* acc = c + row * n;
        std::fill(acc, acc + n, 0.0);
        for (size_t p = 0; p < k; ++p) {
            const double lhs = static_cast<double>(a[row * k + p]);
            const float* bRow = b + p * n;
            for (size_t col = 0; col < n; ++col) {
                acc[col] += lhs * static_cast<double>(bRow[col]);
            }
        }
    }
}

// The full reference, with the rows dealt out in contiguous slices to a few
// threads. The slices do not overlap and each output element is written by
// exactly one thread, so the result does not depend on the thread count.
static void referenceMatmul(const float* a, const float* b, double* c,
                            size_t m, size_t n, size_t k) {
    size_t workers = std::thread::hardware_concurrency();
    workers = std::max<size_t>(workers, 1);
    workers = std::min<size_t>(workers, kMaxReferenceThreads);
    workers = std::min<size_t>(workers, m);

    std::vector<std::thread> helpers;
    for (size_t w = 1; w < workers; ++w) {
        helpers.emplace_back(referenceRows, a, b, c, m * w / workers,
                             m * (w + 1) / workers, n, k);
    }
    referenceRows(a, b, c, 0, m / workers, n, k);
    for (std::thread& helper : helpers) {
        helper.join();
    }
}

// Fills the first `count` elements of both inputs with the pattern
// described at kAPeriod.
static void fillInputs(std::vector<float>* a, std::vector<float>* b,
                       size_t count) {
    for (size_t e = 0; e < count; ++e) {
        (*a)[e] = static_cast<float>(static_cast<int>(e % kAPeriod) - kAOffset) *
                  kAStep;
        (*b)[e] = static_cast<float>(static_cast<int>(e % kBPeriod) - kBOffset) *
                  kBStep;
    }
}

// The tolerance a kernel is held to, |got - ref| <= atol + rtol * |ref|.
// Rounding errors in a K-term sum mostly cancel and grow like sqrt(K)
// rather than K; the factor 4 leaves room for a legitimately different
// summation order. This is the day 66 rule, and the first lesson where the
// sqrt(K) term rather than the table value decides the gate.
// snippet: k-scaled-gate
struct Gate {
    double rtol;
    double atol;
};

static Gate kScaledGate(double tableRtol, int mantissaBits, size_t kDim,
                        double refMax) {
    const double eps = std::ldexp(1.0, -mantissaBits);
    const double grown = 4.0 * eps * std::sqrt(static_cast<double>(kDim));
    Gate gate;
    gate.rtol = std::max(tableRtol, grown);
    gate.atol = gate.rtol * refMax;
    return gate;
}
// end snippet: k-scaled-gate

// What one kernel's output amounts to against the reference: its largest
// absolute error, and the element using the largest share of its own bound
// (a share above 1 fails the gate). A NaN or infinite output counts as
// infinitely far off, since it can only come from a bug.
struct Verdict {
    double maxAbsErr;
    double worstFrac;
    size_t worstIndex;
};

static Verdict judge(const std::vector<float>& got,
                     const std::vector<double>& ref, size_t count,
                     const Gate& gate) {
    Verdict v{0.0, 0.0, 0};
    for (size_t i = 0; i < count; ++i) {
        const double value = static_cast<double>(got[i]);
        const double err = std::fabs(value - ref[i]);
        double frac = HUGE_VAL;
        if (std::isfinite(value)) {
            frac = err / (gate.atol + gate.rtol * std::fabs(ref[i]));
        }
        if (frac > v.worstFrac) {
            v.worstFrac = frac;
            v.worstIndex = i;
        }
        if (err > v.maxAbsErr) {
            v.maxAbsErr = err;
        }
    }
    return v;
}

static double largestMagnitude(const std::vector<double>& x, size_t count) {
    double largest = 0.0;
    for (size_t i = 0; i < count; ++i) {
        largest = std::max(largest, std::fabs(x[i]));
    }
    return largest;
}

// Device-side operands of one case. The two float inputs feed the float
// kernel; their half copies feed the other two.
struct DeviceOperands {
    const float* a32;
    const float* b32;
    const __half* a16;
    const __half* b16;
    float* c;
};

struct PathInfo {
    const char* name;
    bool halfGate;  // judged by the f16 gate rather than the f32 one
};

constexpr PathInfo kPaths[kPathCount] = {
    {"matmulTiledF32", false},
    {"matmulF16StoreF32Acc", true},
    {"matmulF16StoreF16Acc", true},
};

// Launches the kernel of row `path` of the table on a dim x dim x dim case.
static void launchPath(int path, const DeviceOperands& ops, size_t dim) {
    const unsigned int tilesPerSide =
        static_cast<unsigned int>(ceilDiv(dim, static_cast<size_t>(kTile)));
    const dim3 grid(tilesPerSide, tilesPerSide);
    const dim3 block(kTile, kTile);
    if (path == 0) {
        matmulTiledF32<<<grid, block>>>(ops.a32, ops.b32, ops.c, dim, dim, dim);
    } else if (path == 1) {
        matmulF16StoreF32Acc<<<grid, block>>>(ops.a16, ops.b16, ops.c, dim,
                                              dim, dim);
    } else {
        matmulF16StoreF16Acc<<<grid, block>>>(ops.a16, ops.b16, ops.c, dim,
                                              dim, dim);
    }
    CUDA_CHECK(cudaGetLastError());
}

// Mean milliseconds per launch over `timed` back-to-back launches, bracketed
// by CUDA events, after `warmups` untimed ones. Each kernel gets its own
// warm-up: with lazy module loading, the default on Linux since CUDA 12.2, a
// kernel's first launch also pays for loading it.
static float meanLaunchMs(int path, const DeviceOperands& ops, size_t dim,
                          int warmups, int timed) {
    cudaEvent_t begin;
    cudaEvent_t end;
    CUDA_CHECK(cudaEventCreate(&begin));
    CUDA_CHECK(cudaEventCreate(&end));

    for (int i = 0; i < warmups; ++i) {
        launchPath(path, ops, dim);
    }
    CUDA_CHECK(cudaDeviceSynchronize());

    CUDA_CHECK(cudaEventRecord(begin));
    for (int i = 0; i < timed; ++i) {
        launchPath(path, ops, dim);
    }
    CUDA_CHECK(cudaEventRecord(end));
    CUDA_CHECK(cudaEventSynchronize(end));

    float totalMs = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&totalMs, begin, end));
    CUDA_CHECK(cudaEventDestroy(begin));
    CUDA_CHECK(cudaEventDestroy(end));
    return totalMs / static_cast<float>(timed);
}

// Which low-precision tensor-core formats a device of this compute
// capability can run, by the minimum architecture each mma form requires
// in the PTX ISA: FP16 mma.sync.m16n8k8 from sm_75, BF16 and TF32 from
// sm_80, FP8 (E4M3 and E5M2) from sm_89, and FP4 (E2M1) through mma only on
// the sm_120a target. Datacenter Blackwell reaches FP4 by other
// instructions that a capability number cannot vouch for, so the FP4 line
// names its target instead of promising anything. None of this program's
// kernels use tensor cores; the list only records what the card offers.
static void printFormatSupport(int major, int minor) {
    struct Floor {
        const char* label;
        int minCapability;
    };
    const Floor floors[] = {
        {"FP16 (mma.sync.m16n8k8)", 75},
        {"BF16 (mma, sm_80)", 80},
        {"TF32 (mma, sm_80)", 80},
        {"FP8 E4M3/E5M2 (mma, sm_89)", 89},
        {"FP4 E2M1 (mma, sm_120a)", 120},
    };
    const int capability = major * 10 + minor;
    std::printf("tensor-core format support at compute capability %d.%d:\n",
                major, minor);
    for (const Floor& f : floors) {
        std::printf("  %-28s %s\n", f.label,
                    capability >= f.minCapability ? "yes" : "no on this card");
    }
}

// A few conversions the lesson's page discusses, printed so the transcript
// carries the actual values: the largest finite __half, a float just past
// it that rounds to infinity, a large value stored in both 16-bit formats
// (half overflows, bfloat16 keeps the range), and a value just above 1 in
// both (half keeps more of its digits).
static void printFormatDemos() {
    const float pastHalfMax = __half2float(__float2half(65520.0f));
    const float bigInHalf = __half2float(__float2half(300000.0f));
    std::printf("largest finite __half:            %.1f\n",
                __half2float(__float2half(65504.0f)));
    std::printf("__float2half(65520.0f) isinf:     %d\n",
                std::isinf(pastHalfMax) ? 1 : 0);
    std::printf("300000.0f in __half:              %g (isinf %d)\n",
                static_cast<double>(bigInHalf), std::isinf(bigInHalf) ? 1 : 0);
    std::printf("300000.0f in __nv_bfloat16:       %.1f\n",
                __bfloat162float(__float2bfloat16(300000.0f)));
    std::printf("1.0007f in __half:                %.10f\n",
                __half2float(__float2half(1.0007f)));
    std::printf("1.0007f in __nv_bfloat16:         %.10f\n\n",
                __bfloat162float(__float2bfloat16(1.0007f)));
}

// A failed gate, held back until every table has printed.
struct GateFailure {
    const char* kernel;
    size_t dim;
    size_t row;
    size_t col;
    double err;
    double bound;
};

int main(int argc, char** argv) {
    // --check-only launches each kernel once instead of 3 + 10 times. It is
    // for compute-sanitizer, which checks every access of every launch: the
    // repeats would only multiply its run time, and times measured under it
    // mean nothing anyway.
    const bool checkOnly = argc > 1 && std::string(argv[1]) == "--check-only";
    const int warmups = checkOnly ? 0 : kWarmupLaunches;
    const int timed = checkOnly ? 1 : kTimedLaunches;

    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s (compute capability %d.%d)\n\n", prop.name, prop.major,
                prop.minor);

    printFormatSupport(prop.major, prop.minor);
    std::printf("\n");
    printFormatDemos();

    const size_t capacity = kLargestDim * kLargestDim;
    std::vector<float> h_a(capacity);
    std::vector<float> h_b(capacity);
    std::vector<__half> h_a16(capacity);
    std::vector<__half> h_b16(capacity);
    std::vector<float> h_c(capacity);
    std::vector<double> h_ref(capacity);

    float* d_a32 = nullptr;
    float* d_b32 = nullptr;
    __half* d_a16 = nullptr;
    __half* d_b16 = nullptr;
    float* d_c = nullptr;
    CUDA_CHECK(cudaMalloc(&d_a32, capacity * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_b32, capacity * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_a16, capacity * sizeof(__half)));
    CUDA_CHECK(cudaMalloc(&d_b16, capacity * sizeof(__half)));
    CUDA_CHECK(cudaMalloc(&d_c, capacity * sizeof(float)));
    const DeviceOperands ops{d_a32, d_b32, d_a16, d_b16, d_c};

    // Failed gates are collected, not acted on: every case still runs, every
    // table still prints, and all paths leave through the one cleanup block.
    GateFailure failures[kCaseCount * kPathCount];
    int failureCount = 0;

    for (int caseIdx = 0; caseIdx < kCaseCount; ++caseIdx) {
        const size_t dim = kCaseDims[caseIdx];
        const size_t count = dim * dim;
        const size_t floatBytes = count * sizeof(float);
        const size_t halfBytes = count * sizeof(__half);

        fillInputs(&h_a, &h_b, count);
        // Rounded to half on the host with the library's conversion, which
        // rounds to nearest even, so every machine produces the same copies.
        for (size_t e = 0; e < count; ++e) {
            h_a16[e] = __float2half(h_a[e]);
            h_b16[e] = __float2half(h_b[e]);
        }
        CUDA_CHECK(cudaMemcpy(d_a32, h_a.data(), floatBytes,
                              cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_b32, h_b.data(), floatBytes,
                              cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_a16, h_a16.data(), halfBytes,
                              cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_b16, h_b16.data(), halfBytes,
                              cudaMemcpyHostToDevice));

        referenceMatmul(h_a.data(), h_b.data(), h_ref.data(), dim, dim, dim);
        const double refMax = largestMagnitude(h_ref, count);
        const Gate f32Gate =
            kScaledGate(kF32TableRtol, kF32MantissaBits, dim, refMax);
        const Gate f16Gate =
            kScaledGate(kF16TableRtol, kF16MantissaBits, dim, refMax);

        std::printf("case %zux%zux%zu, max |reference| = %.4f\n", dim, dim,
                    dim, refMax);
        std::printf(
            "  f32 gate: |got-ref| <= %.3e + %.3e*|ref|"
            "  (rtol = max(1e-5, 4*2^-23*sqrt(K)))\n",
            f32Gate.atol, f32Gate.rtol);
        std::printf(
            "  f16 gate: |got-ref| <= %.3e + %.3e*|ref|"
            "  (rtol = max(1e-2, 4*2^-10*sqrt(K)))\n",
            f16Gate.atol, f16Gate.rtol);
        std::printf("  %-22s %13s %10s %10s %8s\n", "kernel", "max abs err",
                    "gate frac", "time (ms)", "vs f32");

        double maxAbsErr[kPathCount] = {0.0, 0.0, 0.0};
        float meanMs[kPathCount] = {0.0f, 0.0f, 0.0f};
        for (int path = 0; path < kPathCount; ++path) {
            // Zero the output first, so a kernel that skips elements cannot
            // pass on what an earlier kernel left behind.
            CUDA_CHECK(cudaMemset(d_c, 0, floatBytes));
            launchPath(path, ops, dim);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(
                cudaMemcpy(h_c.data(), d_c, floatBytes, cudaMemcpyDeviceToHost));

            const Gate& gate = kPaths[path].halfGate ? f16Gate : f32Gate;
            const Verdict v = judge(h_c, h_ref, count, gate);
            maxAbsErr[path] = v.maxAbsErr;
            meanMs[path] = meanLaunchMs(path, ops, dim, warmups, timed);

            std::printf("  %-22s %13.3e %10.4f %10.4f %8.2f\n",
                        kPaths[path].name, v.maxAbsErr, v.worstFrac,
                        static_cast<double>(meanMs[path]),
                        static_cast<double>(meanMs[0]) / meanMs[path]);

            if (v.worstFrac > 1.0) {
                const size_t w = v.worstIndex;
                failures[failureCount++] = {
                    kPaths[path].name,
                    dim,
                    w / dim,
                    w % dim,
                    std::fabs(static_cast<double>(h_c[w]) - h_ref[w]),
                    gate.atol + gate.rtol * std::fabs(h_ref[w])};
            }
        }

        // The prediction: accumulating in half loses more than accumulating
        // in float. Shown as a ratio for the reader to check, not gated,
        // because cancellation on a given input can reverse the order.
        std::printf(
            "  observed f16-acc/f32-acc max-error ratio at K=%zu: %.3g\n\n",
            dim, maxAbsErr[2] / maxAbsErr[1]);
    }

    if (failureCount == 0) {
        std::printf("all %d cases passed their gates\n", kCaseCount);
    } else {
        for (int f = 0; f < failureCount; ++f) {
            const GateFailure& bad = failures[f];
            std::printf(
                "FAILED %s case %zux%zux%zu: element row %zu, column %zu: "
                "|got-ref| = %.3e exceeds %.3e\n",
                bad.kernel, bad.dim, bad.dim, bad.dim, bad.row, bad.col,
                bad.err, bad.bound);
        }
        std::fprintf(stderr, "%d gate(s) failed\n", failureCount);
    }

    CUDA_CHECK(cudaFree(d_a32));
    CUDA_CHECK(cudaFree(d_b32));
    CUDA_CHECK(cudaFree(d_a16));
    CUDA_CHECK(cudaFree(d_b16));
    CUDA_CHECK(cudaFree(d_c));
    return failureCount == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
