// SPDX-License-Identifier: MIT
//
// Day 16: tiled matrix multiplication, and the bounds checks it needs when
// the tile does not divide the matrix.
//
// Both kernels compute C = A * B with A of size M x K and B of size K x N.
// matmulNaive assigns one element of C to one thread, which fetches a full
// row of A and a full column of B from global memory: 2K loads per thread.
// matmulTiled assigns one 16 x 16 block of C to one thread block and walks K
// in 16-wide steps, and on each step every thread fetches just one element of
// A and one of B into shared memory for the whole block to reuse:
// 2 * ceil(K / 16) loads per thread. The table shows that ratio beside the
// time it buys.
//
// There are three sizes. 256^3 and 512^3 are whole multiples of the tile. The
// third, 611 x 613 x 617, is a multiple on no axis, and its remainders differ
// (611 = 38 * 16 + 3, 613 = 38 * 16 + 5, 617 = 38 * 16 + 9). A kernel whose
// bounds check is right along one axis and wrong along another fails there,
// where a square size would have hidden it.
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o tiled_matmul tiled_matmul.cu
// Run:   ./tiled_matmul
// Verified 2026-12-02 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, CUDA 13.0, nvcc 13.0.88. Transcript: evidence/day16-tiled-matmul/nvidia-h200/transcript.txt

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

// Error macro used for every runtime call. The program stands alone (it is
// meant to be pasted into an online compiler as a single file), so the macro
// lives here rather than in a shared header. The do/while(0) wrapper makes it
// a single statement, safe after an unbraced if, and the trailing underscore
// on status_ keeps it clear of any name at the call site.
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

// A 16 x 16 tile means a 256-thread block, the course's default, and the two
// tiles of floats take 2 KiB of shared memory. That is far below the 48 KiB a
// block may use without opting in, so shared memory does not limit anything
// in this lesson; day 45 is where it starts to.
constexpr int kTileDim = 16;
constexpr int kThreadsPerBlock = kTileDim * kTileDim;
constexpr size_t kSharedBytesPerBlock = 2 * sizeof(float) * kTileDim * kTileDim;

constexpr int kWarmupRuns = 3;
constexpr int kTimedRuns = 10;

// Allowed relative error per element. The inputs make every sum exact (see
// makeInputs), so any difference at all is a bug; the tolerance is kept
// nonzero only because that is how the course compares floats.
constexpr float kRelTolerance = 1e-5f;

// One problem size: C is m x n, and the shared dimension is k.
struct MatmulCase {
    size_t m;
    size_t n;
    size_t k;
};

// The first two cases are multiples of the tile on every axis. The third is a
// multiple on none, with a different remainder on each, so one launch tests
// the row bound, the column bound and the k bound together.
constexpr int kNumCases = 3;
constexpr MatmulCase kCases[kNumCases] = {
    {256, 256, 256},
    {512, 512, 512},
    {611, 613, 617},
};

// Each device buffer is allocated once, kMaxDim x kMaxDim floats (about
// 1.5 MiB), before anything is timed, and every case fits inside it.
constexpr size_t kMaxDim = 617;

// True when every dimension of every case fits the single allocation.
static constexpr bool allCasesFit() {
    for (int i = 0; i < kNumCases; ++i) {
        if (kCases[i].m > kMaxDim || kCases[i].n > kMaxDim ||
            kCases[i].k > kMaxDim) {
            return false;
        }
    }
    return true;
}

// Rounds a / b up. constexpr so the same function sizes the grid at run time
// and appears in the static_asserts below.
static constexpr size_t ceilDiv(size_t a, size_t b) {
    return (a + b - 1) / b;
}

// All of this is settled by the constants, so the compiler checks it. An
// assert() would not do: release builds define NDEBUG, and NDEBUG strips
// assert() out of exactly the binary that gets run.
static_assert(kThreadsPerBlock == 256,
              "a 16 x 16 tile should be one 256-thread block, the course "
              "default");
static_assert(kThreadsPerBlock % 32 == 0,
              "a block should hold whole warps only");
static_assert(kSharedBytesPerBlock <= 48 * 1024,
              "both tiles have to fit the 48 KiB a block gets without "
              "cudaFuncSetAttribute");
static_assert(kCases[0].m % kTileDim == 0 && kCases[0].n % kTileDim == 0 &&
                  kCases[0].k % kTileDim == 0,
              "the first case must be a tile multiple on every axis, so the "
              "table has a clean size to set against the ragged one");
static_assert(kCases[2].m % kTileDim != 0 && kCases[2].n % kTileDim != 0 &&
                  kCases[2].k % kTileDim != 0,
              "the last case must be a tile multiple on no axis: it is the "
              "one a kernel written only for multiples gets wrong");
static_assert(allCasesFit(),
              "every dimension must fit the kMaxDim x kMaxDim allocation");
static_assert(6 * kMaxDim < (size_t{1} << 24),
              "the largest possible dot product (|a| <= 3, |b| <= 2, at most "
              "kMaxDim terms) must stay below 2^24 so that float sums are "
              "exact");
static_assert(ceilDiv(kMaxDim, static_cast<size_t>(kTileDim)) <= 65535,
              "gridDim.y is capped at 65535");

// c[row][col] = sum over p of a[row][p] * b[p][col], one thread per element
// of C, reading everything straight from global memory.
//
// Memory: threadIdx.x varies fastest, so a warp of this 16 x 16 block is two
// rows of 16 neighbouring columns. At each p both half-warps ask for the same
// 16 consecutive floats of B, and each half-warp asks for a single float of A
// that all its lanes share. That is a perfectly good access pattern. The
// problem is repetition: every value of A is fetched again by each of the n
// threads that need it, and every value of B by each of the m threads, for 2K
// loads per thread in total.
//
// Launch assumption: a grid that covers all of C, rounded up on both axes, so
// the bounds check is live along rows and along columns in the ragged case.
// This kernel has no barrier, which is what makes the early return for
// threads outside C legal here.
// snippet: naive-kernel
__global__ void matmulNaive(const float* __restrict__ a,
                            const float* __restrict__ b, float* __restrict__ c,
                            size_t m, size_t n, size_t k) {
    const size_t col =
        static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t row =
        static_cast<size_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    if (row >= m || col >= n) {
        return;
    }
    float sum = 0.0f;
    for (size_t p = 0; p < k; ++p) {
        sum += a[row * k + p] * b[p * n + col];
    }
    c[row * n + col] = sum;
}
// end snippet: naive-kernel

// The same product with one 16 x 16 block of C per thread block, fed through
// shared memory. The block takes ceil(K / 16) steps along K. On each step
// every thread copies one element of A and one of B into the tiles, the block
// waits at a barrier, and then each thread does 16 multiply-adds entirely from
// shared memory before a second barrier lets the tiles be overwritten. Global
// loads per thread drop from 2K to 2 * ceil(K / 16).
//
// Memory: the global loads follow the same geometry as in matmulNaive, so
// the two kernels differ in how many loads they issue and in nothing else. In
// shared memory a warp reads aTile[threadIdx.y][p], one word per half-warp in
// two different banks, and bTile[p][threadIdx.x], 16 consecutive words that
// both half-warps read together. Those are broadcasts and distinct banks, so
// nothing conflicts; day 15 covers the case where that stops being true.
//
// Ragged edges: a thread whose source element lies outside A or outside B
// stores 0.0f in the tile instead of skipping the store. Zero adds nothing to
// the sum. A skipped store would leave the previous step's value in the tile,
// and it would be multiplied into the result.
//
// Launch assumption: blocks of exactly kTileDim x kTileDim threads and a grid
// rounded up on both axes. Every thread, inside C or not, reaches both
// barriers: the bounds checks guard the loads and the final store, never a
// __syncthreads(), because a barrier that only part of the block reaches is
// undefined behaviour (day 14).
// snippet: tiled-kernel
__global__ void matmulTiled(const float* __restrict__ a,
                            const float* __restrict__ b, float* __restrict__ c,
                            size_t m, size_t n, size_t k) {
    __shared__ float aTile[kTileDim][kTileDim];
    __shared__ float bTile[kTileDim][kTileDim];

    const unsigned int tx = threadIdx.x;
    const unsigned int ty = threadIdx.y;
    const size_t col = static_cast<size_t>(blockIdx.x) * kTileDim + tx;
    const size_t row = static_cast<size_t>(blockIdx.y) * kTileDim + ty;

    // ceilDiv is host-only, so the rounding is spelled out here.
    const size_t steps = (k + kTileDim - 1) / kTileDim;

    float sum = 0.0f;
    for (size_t step = 0; step < steps; ++step) {
        // This thread's element of each tile: column aCol of A's row `row`,
        // and row bRow of B's column `col`.
        const size_t aCol = step * kTileDim + tx;
        const size_t bRow = step * kTileDim + ty;
        aTile[ty][tx] = (row < m && aCol < k) ? a[row * k + aCol] : 0.0f;
        bTile[ty][tx] = (bRow < k && col < n) ? b[bRow * n + col] : 0.0f;
        __syncthreads();

#pragma unroll
        for (int p = 0; p < kTileDim; ++p) {
            sum += aTile[ty][p] * bTile[p][tx];
        }
        __syncthreads();
    }

    if (row < m && col < n) {
        c[row * n + col] = sum;
    }
}
// end snippet: tiled-kernel

// Host reference: three nested loops in the textbook order, written to be
// clearly right, not fast. The caller owns every buffer.
//
// It sums in double while the kernels sum in float; the reference is there
// to be correct, not to copy the GPU's rounding. Compensated summation is not
// needed either, because makeInputs keeps every partial sum a whole number
// below 2^24, which float and double both hold exactly.
static void matmulOnHost(const float* a, const float* b, float* c, size_t m,
                         size_t n, size_t k) {
    for (size_t row = 0; row < m; ++row) {
        for (size_t col = 0; col < n; ++col) {
            double sum = 0.0;
            for (size_t p = 0; p < k; ++p) {
                sum += static_cast<double>(a[row * k + p]) *
                       static_cast<double>(b[p * n + col]);
            }
            c[row * n + col] = static_cast<float>(sum);
        }
    }
}

// Small whole numbers stored as floats: A cycles through -3..3 and B through
// -2..2. No product exceeds 6 in size, so no dot product in any case exceeds
// 6 * 617 = 3,702, far below 2^24, where floats stop holding every integer.
// Every intermediate value on the GPU and on the host is exact, and a
// mismatch can only mean an indexing bug.
//
// The periods 7 and 5 divide none of the case dimensions, so an index that is
// transposed by mistake picks up a different value instead of the same one.
static void makeInputs(std::vector<float>& a, std::vector<float>& b,
                       size_t aCount, size_t bCount) {
    for (size_t i = 0; i < aCount; ++i) {
        a[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    }
    for (size_t i = 0; i < bCount; ++i) {
        b[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
    }
}

// A kernel's first disagreement with the reference in one case, kept until
// the end of the run so it can be reported as a row and a column of C.
struct CheckFailure {
    const char* kernel;
    MatmulCase shape;
    size_t row;
    size_t col;
    float got;
    float want;
};

// Index of the first element that differs from the reference by more than the
// relative tolerance, or count when all of them agree. An index rather than a
// yes/no, because "row 608, column 0" points at the ragged tile and "wrong"
// points at nothing.
static size_t firstMismatch(const float* got, const float* want, size_t count,
                            float relTolerance) {
    for (size_t i = 0; i < count; ++i) {
        const float scale = (want[i] == 0.0f) ? 1.0f : std::fabs(want[i]);
        // Written as !(diff <= limit) so that a NaN counts as a mismatch.
        if (!(std::fabs(got[i] - want[i]) <= relTolerance * scale)) {
            return i;
        }
    }
    return count;
}

enum MatmulKernel { kNaive = 0, kTiled, kKernelCount };

// The labels used in the table's kernel column.
static const char* const kKernelLabels[kKernelCount] = {"naive", "tiled"};

// Global-memory loads per thread for one kernel at one k.
static size_t loadsPerThread(MatmulKernel kernel, size_t k) {
    return (kernel == kNaive)
               ? 2 * k
               : 2 * ceilDiv(k, static_cast<size_t>(kTileDim));
}

// One launch of the chosen kernel. Both kernels take the same grid and block.
static void launchMatmul(MatmulKernel kernel, dim3 grid, dim3 block,
                         const float* a, const float* b, float* c,
                         const MatmulCase& shape) {
    if (kernel == kNaive) {
        matmulNaive<<<grid, block>>>(a, b, c, shape.m, shape.n, shape.k);
    } else {
        matmulTiled<<<grid, block>>>(a, b, c, shape.m, shape.n, shape.k);
    }
}

// Mean milliseconds per launch, measured with CUDA events on the GPU's own
// clock. A host timer would measure the launch call instead, since launches
// return before the kernel finishes (day 9).
static float timeKernel(MatmulKernel kernel, dim3 grid, dim3 block,
                        const float* a, const float* b, float* c,
                        const MatmulCase& shape) {
    cudaEvent_t begin;
    cudaEvent_t end;
    CUDA_CHECK(cudaEventCreate(&begin));
    CUDA_CHECK(cudaEventCreate(&end));

    // Each kernel gets its own warm-up: modules load lazily (the Linux default
    // since CUDA 12.2), so the first launch of every kernel carries a one-off
    // loading cost.
    for (int i = 0; i < kWarmupRuns; ++i) {
        launchMatmul(kernel, grid, block, a, b, c, shape);
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());

    CUDA_CHECK(cudaEventRecord(begin));
    for (int i = 0; i < kTimedRuns; ++i) {
        launchMatmul(kernel, grid, block, a, b, c, shape);
    }
    CUDA_CHECK(cudaEventRecord(end));
    CUDA_CHECK(cudaEventSynchronize(end));
    CUDA_CHECK(cudaGetLastError());

    float totalMs = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&totalMs, begin, end));
    CUDA_CHECK(cudaEventDestroy(begin));
    CUDA_CHECK(cudaEventDestroy(end));
    return totalMs / kTimedRuns;
}

// A matrix product costs 2 * m * n * k floating-point operations, one multiply
// and one add per term. Both kernels do exactly that much arithmetic, so the
// figure is computed here from the case and nowhere else.
static double gflopsPerSecond(const MatmulCase& shape, float ms) {
    const double flops = 2.0 * static_cast<double>(shape.m) *
                         static_cast<double>(shape.n) *
                         static_cast<double>(shape.k);
    return flops / (static_cast<double>(ms) * 1.0e-3) / 1.0e9;
}

// One row of the results table.
static void printTableRow(const MatmulCase& shape, const char* label,
                          float ms, size_t loads) {
    char caseName[32];
    std::snprintf(caseName, sizeof(caseName), "%zux%zux%zu", shape.m, shape.n,
                  shape.k);
    std::printf("%-16s %-7s %11.3f %11.1f %13zu\n", caseName, label, ms,
                gflopsPerSecond(shape, ms), loads);
}

int main() {
    const int device = 0;
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf("GPU: %s (compute capability %d.%d)\n", prop.name, prop.major,
                prop.minor);
    std::printf(
        "tile %d x %d, %d threads per block, %zu bytes of shared memory per "
        "block\n\n",
        kTileDim, kTileDim, kThreadsPerBlock, kSharedBytesPerBlock);

    const size_t capacity = kMaxDim * kMaxDim;
    const size_t capacityBytes = capacity * sizeof(float);

    std::vector<float> h_a(capacity);
    std::vector<float> h_b(capacity);
    std::vector<float> h_c(capacity);
    std::vector<float> h_want(capacity);

    float* d_a = nullptr;
    float* d_b = nullptr;
    float* d_c = nullptr;
    CUDA_CHECK(cudaMalloc(&d_a, capacityBytes));
    CUDA_CHECK(cudaMalloc(&d_b, capacityBytes));
    CUDA_CHECK(cudaMalloc(&d_c, capacityBytes));

    std::printf("%-16s %-7s %11s %11s %13s\n", "case", "kernel", "time (ms)",
                "GFLOP/s", "loads/thread");
    std::printf("%-16s %-7s %11s %11s %13s\n", "----------------", "-------",
                "-----------", "-----------", "-------------");

    // Failures are collected, not returned, so the run always reaches the one
    // cleanup block and the one return at the bottom.
    CheckFailure failed[kNumCases * kKernelCount];
    int failureCount = 0;
    int rowsPrinted = 0;

    for (int ci = 0; ci < kNumCases; ++ci) {
        const MatmulCase& shape = kCases[ci];
        const size_t outCount = shape.m * shape.n;
        const size_t outBytes = outCount * sizeof(float);

        makeInputs(h_a, h_b, shape.m * shape.k, shape.k * shape.n);
        CUDA_CHECK(cudaMemcpy(d_a, h_a.data(),
                              shape.m * shape.k * sizeof(float),
                              cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_b, h_b.data(),
                              shape.k * shape.n * sizeof(float),
                              cudaMemcpyHostToDevice));
        matmulOnHost(h_a.data(), h_b.data(), h_want.data(), shape.m, shape.n,
                     shape.k);

        // x runs along the columns of C and y along its rows, which keeps
        // threadIdx.x the fastest-moving index across neighbouring columns.
        const dim3 block(kTileDim, kTileDim);
        const dim3 grid(
            static_cast<unsigned int>(
                ceilDiv(shape.n, static_cast<size_t>(kTileDim))),
            static_cast<unsigned int>(
                ceilDiv(shape.m, static_cast<size_t>(kTileDim))));

        float ms[kKernelCount];
        for (int ki = 0; ki < kKernelCount; ++ki) {
            const MatmulKernel kernel = static_cast<MatmulKernel>(ki);

            // C is zeroed before every checked launch, so an element the
            // kernel never writes cannot pass on values left by an earlier
            // launch.
            CUDA_CHECK(cudaMemset(d_c, 0, outBytes));
            launchMatmul(kernel, grid, block, d_a, d_b, d_c, shape);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaMemcpy(h_c.data(), d_c, outBytes,
                                  cudaMemcpyDeviceToHost));
            const size_t bad = firstMismatch(h_c.data(), h_want.data(),
                                             outCount, kRelTolerance);
            if (bad != outCount) {
                failed[failureCount] =
                    CheckFailure{kKernelLabels[ki], shape, bad / shape.n,
                                 bad % shape.n, h_c[bad], h_want[bad]};
                ++failureCount;
            }

            ms[ki] = timeKernel(kernel, grid, block, d_a, d_b, d_c, shape);
        }

        const size_t naiveLoads = loadsPerThread(kNaive, shape.k);
        const size_t tiledLoads = loadsPerThread(kTiled, shape.k);
        printTableRow(shape, kKernelLabels[kNaive], ms[kNaive], naiveLoads);
        ++rowsPrinted;
        printTableRow(shape, kKernelLabels[kTiled], ms[kTiled], tiledLoads);
        ++rowsPrinted;
        std::printf(
            "%-16s tiled is %.2fx faster and reads %.1fx fewer floats per "
            "thread\n",
            "", static_cast<double>(ms[kNaive]) / ms[kTiled],
            static_cast<double>(naiveLoads) / static_cast<double>(tiledLoads));
    }

    // The one cleanup block.
    CUDA_CHECK(cudaFree(d_a));
    CUDA_CHECK(cudaFree(d_b));
    CUDA_CHECK(cudaFree(d_c));

    int checksFailed = failureCount;

    // An ordinary branch, never an assert() (see the NDEBUG note above the
    // static_asserts). It keeps the printed table and the lesson's promise of
    // two rows per case from drifting apart.
    if (rowsPrinted != kKernelCount * kNumCases) {
        std::fprintf(stderr,
                     "the table has %d rows instead of %d; it no longer "
                     "matches what the lesson describes\n",
                     rowsPrinted, kKernelCount * kNumCases);
        ++checksFailed;
    }

    // The verdict sits below the table after one blank line: the FAILED
    // lines if anything disagreed, the summary line otherwise.
    if (failureCount != 0) {
        std::printf("\n");
    }
    for (int i = 0; i < failureCount; ++i) {
        const CheckFailure& f = failed[i];
        std::printf(
            "FAILED %s case %zux%zux%zu: first wrong element at row %zu, "
            "column %zu: got %.9g, want %.9g\n",
            f.kernel, f.shape.m, f.shape.n, f.shape.k, f.row, f.col,
            static_cast<double>(f.got), static_cast<double>(f.want));
    }

    int exitCode = EXIT_SUCCESS;
    if (checksFailed != 0) {
        std::fprintf(stderr, "%d check(s) failed\n", checksFailed);
        exitCode = EXIT_FAILURE;
    } else {
        std::printf("\nall %d cases match the CPU reference at every element\n",
                    kNumCases);
    }
    return exitCode;
}
