// SPDX-License-Identifier: MIT
//
// Day 14: __syncthreads() and the order of shared-memory traffic.
//
// Every block copies its slice of the input into a shared tile and writes the
// tile back out mirrored. Three kernels do that job. reverseTileRacy reads
// the tile without waiting for the rest of the block to fill it.
// reverseTileSynced differs from it by a single barrier. reverseTilePrefix
// lets most of each block return before its barrier, to show that threads
// which have exited are not waited for and the launch still completes.
//
// No clock is read anywhere in this file. The lesson is about which write a
// read is guaranteed to see, and a speed figure would only distract from it.
//
// Only the barrier-protected kernels are gated. The racy kernel's mismatch
// counts are printed for the reader and never judged: a race is free to
// produce the right answer on some run, so a check that required wrong output
// would depend on undefined behaviour. The gate falls on reverseTileSynced,
// which must be exact at every block size, and on reverseTilePrefix, which
// must match its own reference. Output is not where a race is caught
// reliably; the course runs compute-sanitizer --tool racecheck on a build with
// -lineinfo added, and racecheck names the unsynchronised pair of accesses in
// reverseTileRacy.
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o syncthreads syncthreads.cu
// Run:   ./syncthreads
// Verified 2026-12-02 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, CUDA 13.0, nvcc 13.0.88. Transcript: evidence/day14-syncthreads/nvidia-h200/transcript.txt

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

// Threads per warp on every GPU the course covers. The runtime `warpSize` is
// not a constant expression, so static_asserts and array bounds use this.
constexpr int kWarpWidth = 32;

// Capacity of the shared tile, fixed by the widest block in the sweep. A
// narrower launch simply leaves the upper part of the tile unused.
constexpr int kTileCapacity = 256;

// The block sizes the table walks through, narrowest first. 256 is the
// course's default block and the widest here; 32 is exactly one warp, and
// that single-warp row is the one the lesson asks the reader to distrust.
constexpr int kSweep[] = {32, 64, 128, 256};
constexpr int kSweepLength = static_cast<int>(sizeof(kSweep) / sizeof(kSweep[0]));

// reverseTilePrefix keeps this many threads per block; the remaining 160 of
// a 256-thread block return before the barrier. Being a whole number of warps,
// it makes every warp either stay or leave as a unit.
constexpr unsigned int kPrefixThreads = 96;

// 2^18 elements plus 611 (= 13 x 47). No block size in the sweep divides the
// total, so the last block of every launch is partly out of range and the
// bounds checks are exercised. The array is kept small on purpose: racecheck
// tracks every shared-memory access, and a much larger input would make the
// sanitizer pass drag.
constexpr size_t kElementCount = 256ull * 1024ull + 611ull;

// Inputs are small integers and the kernels only move them, so an exact
// comparison would do; a relative tolerance is still used because that is
// how every comparison in the course is written.
constexpr float kRelTol = 1e-5f;

constexpr int gridFor(size_t elements, int blockThreads) {
    return static_cast<int>((elements + static_cast<size_t>(blockThreads) - 1) /
                            static_cast<size_t>(blockThreads));
}

constexpr bool sweepFitsTheTile() {
    for (int s = 0; s < kSweepLength; ++s) {
        if (kSweep[s] % kWarpWidth != 0 || kSweep[s] > kTileCapacity) {
            return false;
        }
    }
    return true;
}

constexpr bool sweepAlwaysEndsPartway() {
    for (int s = 0; s < kSweepLength; ++s) {
        if (kElementCount % static_cast<size_t>(kSweep[s]) == 0) {
            return false;
        }
    }
    return true;
}

static_assert(kTileCapacity <= 1024,
              "no GPU in the course accepts more than 1024 threads per block");
static_assert(sweepFitsTheTile(),
              "each swept block size has to be whole warps and no wider than "
              "the shared tile");
static_assert(sweepAlwaysEndsPartway(),
              "a block size that divides kElementCount would leave the bounds "
              "checks untested");
static_assert(kSweep[0] == kWarpWidth,
              "the sweep has to open with a one-warp block, the case that "
              "can hide the missing barrier");
static_assert(kSweep[kSweepLength - 1] == kTileCapacity,
              "the widest swept block must fill the tile; the prefix launch "
              "uses that width too");
static_assert(kPrefixThreads > 0 && kPrefixThreads % kWarpWidth == 0 &&
                  kPrefixThreads < static_cast<unsigned int>(kTileCapacity),
              "the prefix kernel has to keep at least one warp, drop at least "
              "one warp, and never split a warp");
static_assert(static_cast<size_t>(gridFor(kElementCount, kSweep[0])) *
                      static_cast<size_t>(kSweep[0]) >=
                  kElementCount,
              "even the narrowest block's grid must reach the last element");

// Mirrors each block-wide slice of `in` into `out` through shared memory,
// with the synchronisation left out.
//
// A thread stores its own element in the tile and then loads the element at
// the opposite end. With 256 threads, thread 0 loads the slot thread 255
// stores, and that thread belongs to warp 7, so most loads depend on another
// warp's store having happened first; nothing here makes sure it has. In a
// 32-thread block every slot is written and read by the same warp.
//
// Memory: global reads and writes are one float per thread at consecutive
// addresses, fully coalesced; the shared tile is indexed by thread, and the
// reversed read hits distinct banks. Global traffic is not the subject here.
//
// Launch assumption: blockDim.x is a multiple of 32 and at most
// kTileCapacity. The shared store and the shared load are not separated by a
// barrier; that omission is the bug this kernel exists to exhibit.
// snippet: racy
__global__ void reverseTileRacy(const float* __restrict__ in,
                                float* __restrict__ out, size_t n) {
    __shared__ float stage[kTileCapacity];

    const unsigned int t = threadIdx.x;
    const size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + t;

    stage[t] = (g < n) ? in[g] : 0.0f;
    // Nothing stops the load below from running before its slot is stored.

    const unsigned int mirror = blockDim.x - 1u - t;
    if (g < n) {
        out[g] = stage[mirror];
    }
}
// end snippet: racy

// The racy kernel with its barrier in place. That single statement is all
// that separates the two kernels' rows in the table.
//
// A thread stores its element, blocks until all of its block has stored
// theirs, and only then loads the mirrored slot.
//
// Memory: global and shared access patterns are exactly those of
// reverseTileRacy.
//
// Launch assumption: blockDim.x is a multiple of 32 and at most
// kTileCapacity. All threads of a block arrive at the barrier: the range
// checks wrap the global load and store only, and no thread leaves early.
__global__ void reverseTileSynced(const float* __restrict__ in,
                                  float* __restrict__ out, size_t n) {
    __shared__ float stage[kTileCapacity];

    const unsigned int t = threadIdx.x;
    const size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + t;

    // snippet: barrier
    stage[t] = (g < n) ? in[g] : 0.0f;
    __syncthreads();  // every store to stage is visible after this line
    // end snippet

    const unsigned int mirror = blockDim.x - 1u - t;
    if (g < n) {
        out[g] = stage[mirror];
    }
}

// Mirrors only the leading `keep` elements of each slice. Threads at or past
// `keep` return before reaching the barrier, and the block still finishes.
//
// A leaving thread does nothing at all. A staying thread stores one element,
// waits at the barrier with the other staying threads, and loads the slot
// mirrored within the first `keep`. Since `keep` is whole warps, entire warps
// leave together.
//
// Memory: stage slots at index `keep` and above are neither stored nor loaded,
// so the kernel never depends on leftover shared-memory contents.
//
// Launch assumption: keep <= blockDim.x <= kTileCapacity. This is the only
// course kernel that returns above a __syncthreads(). The style guide forbids
// the pattern, and this kernel shows the reason: exited threads are not
// counted at the barrier and anything they stored is not ordered by it, so
// the pattern is only safe when the leaving threads store nothing that a
// remaining thread reads, as here.
// snippet: early-return
__global__ void reverseTilePrefix(const float* __restrict__ in,
                                  float* __restrict__ out, size_t n,
                                  unsigned int keep) {
    __shared__ float stage[kTileCapacity];

    const unsigned int t = threadIdx.x;
    if (t >= keep) {
        return;
    }

    const size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + t;
    stage[t] = (g < n) ? in[g] : 0.0f;
    __syncthreads();

    const unsigned int mirror = keep - 1u - t;
    if (g < n) {
        out[g] = stage[mirror];
    }
}
// end snippet: early-return

// Host model of a launch that mirrors the first `active` slots of every
// `width`-wide slice and leaves the rest of the slice at zero. With active ==
// width it is the expected output of reverseTileRacy and reverseTileSynced
// at block size `width`; with active == kPrefixThreads it is the expected
// output of reverseTilePrefix. The width matters to the answer, not just to
// the launch: mirroring within 32 and within 256 produce different arrays.
// Plain loops, chosen for being easy to check by eye.
static void mirrorSlicesOnHost(const std::vector<float>& in,
                               std::vector<float>* out, size_t width,
                               size_t active) {
    const size_t n = in.size();
    for (size_t slice = 0; slice < n; slice += width) {
        for (size_t t = 0; t < width && slice + t < n; ++t) {
            float value = 0.0f;
            if (t < active) {
                const size_t from = slice + (active - 1 - t);
                value = (from < n) ? in[from] : 0.0f;
            }
            (*out)[slice + t] = value;
        }
    }
}

// How many elements disagree and where the first one is. The index is what
// turns "it is wrong" into a diagnosis: together with the block size it names
// the reading thread and the thread that should have written.
struct Mismatches {
    size_t count;
    size_t first;  // equal to the element count when count == 0
};

static Mismatches compareWithTolerance(const std::vector<float>& got,
                                       const std::vector<float>& want,
                                       float relTol) {
    Mismatches m{0, want.size()};
    for (size_t i = 0; i < want.size(); ++i) {
        const float magnitude = (want[i] == 0.0f) ? 1.0f : std::fabs(want[i]);
        if (std::fabs(got[i] - want[i]) > relTol * magnitude) {
            if (m.count == 0) {
                m.first = i;
            }
            ++m.count;
        }
    }
    return m;
}

// Clears the device output, runs one of the two full-tile kernels and brings
// its result back to the host.
using TileKernel = void (*)(const float*, float*, size_t);

static void launchAndFetch(TileKernel kernel, int blockThreads,
                           const float* d_in, float* d_out,
                           std::vector<float>* h_out) {
    const size_t bytes = h_out->size() * sizeof(float);
    CUDA_CHECK(cudaMemset(d_out, 0, bytes));
    kernel<<<gridFor(h_out->size(), blockThreads), blockThreads>>>(
        d_in, d_out, h_out->size());
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h_out->data(), d_out, bytes, cudaMemcpyDeviceToHost));
}

// One table row. For a wrong row the two warp columns locate the first bad
// element: the warp of the thread that read it and the warp of the thread
// across the tile that was supposed to have written it first. When those
// are always the same warp, the block size cannot expose the race.
static void printTableRow(int blockThreads, const char* kernel,
                          const Mismatches& m) {
    if (m.count == 0) {
        std::printf("%6d  %-18s %12zu  %11s  %10s  %10s\n", blockThreads,
                    kernel, m.count, "-", "-", "-");
        return;
    }
    const unsigned int width = static_cast<unsigned int>(blockThreads);
    const unsigned int reader =
        static_cast<unsigned int>(m.first % static_cast<size_t>(width));
    const unsigned int writer = width - 1u - reader;
    std::printf("%6d  %-18s %12zu  %11zu  %10u  %10u\n", blockThreads, kernel,
                m.count, m.first, reader / kWarpWidth, writer / kWarpWidth);
}

// A gate that did not hold, kept until the end of the run so the table is
// printed whole before any FAILED line.
struct GateFailure {
    const char* kernel;
    int blockThreads;
    Mismatches mismatches;
    float got;
    float want;
};

int main() {
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s (compute capability %d.%d)\n", prop.name, prop.major,
                prop.minor);
    std::printf("n = %zu floats, each block reverses its own tile\n",
                kElementCount);
    std::printf("%d block sizes, no timing anywhere in this program\n",
                kSweepLength);

    // Values 0..1023 repeating: exact in float, so any disagreement with the
    // host model comes from ordering, never from rounding.
    std::vector<float> h_in(kElementCount);
    for (size_t i = 0; i < kElementCount; ++i) {
        h_in[i] = static_cast<float>(i % 1024);
    }
    std::vector<float> h_got(kElementCount);
    std::vector<float> h_want(kElementCount);

    const size_t bytes = kElementCount * sizeof(float);
    float* d_in = nullptr;
    float* d_out = nullptr;
    CUDA_CHECK(cudaMalloc(&d_in, bytes));
    CUDA_CHECK(cudaMalloc(&d_out, bytes));
    CUDA_CHECK(cudaMemcpy(d_in, h_in.data(), bytes, cudaMemcpyHostToDevice));

    // Gate failures are recorded here, never acted on in place: every path
    // reaches the single cleanup block and the single return at the bottom.
    GateFailure failures[kSweepLength + 1];
    int failureCount = 0;

    std::printf("\n%6s  %-18s %12s  %11s  %10s  %10s\n", "block", "kernel",
                "mismatches", "first bad", "read warp", "wrote it");

    for (int s = 0; s < kSweepLength; ++s) {
        const int blockThreads = kSweep[s];
        const size_t width = static_cast<size_t>(blockThreads);
        mirrorSlicesOnHost(h_in, &h_want, width, width);

        // Reported, not gated: a race that happens to come out right is not
        // a failure of this program, and one that comes out wrong is the
        // expected demonstration.
        launchAndFetch(reverseTileRacy, blockThreads, d_in, d_out, &h_got);
        printTableRow(blockThreads, "reverseTileRacy",
                      compareWithTolerance(h_got, h_want, kRelTol));

        // Gated: with the barrier the result must be exact at every width.
        // A plain branch rather than assert(), which NDEBUG would compile
        // away in exactly the optimised builds that get run.
        launchAndFetch(reverseTileSynced, blockThreads, d_in, d_out, &h_got);
        const Mismatches synced = compareWithTolerance(h_got, h_want, kRelTol);
        printTableRow(blockThreads, "reverseTileSynced", synced);
        if (synced.count != 0) {
            failures[failureCount++] = {"reverseTileSynced", blockThreads,
                                        synced, h_got[synced.first],
                                        h_want[synced.first]};
        }
    }

    // Second part: 160 of every 256 threads return above the barrier. The
    // barrier only waits for threads that are still running, so the launch
    // has to come back, and the 96 that stayed must still be right.
    const int prefixBlock = kTileCapacity;
    std::printf(
        "\nreverseTilePrefix: %d threads per block, %u reach the barrier\n",
        prefixBlock, kPrefixThreads);

    mirrorSlicesOnHost(h_in, &h_want, static_cast<size_t>(prefixBlock),
                       static_cast<size_t>(kPrefixThreads));
    CUDA_CHECK(cudaMemset(d_out, 0, bytes));
    reverseTilePrefix<<<gridFor(kElementCount, prefixBlock), prefixBlock>>>(
        d_in, d_out, kElementCount, kPrefixThreads);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h_got.data(), d_out, bytes, cudaMemcpyDeviceToHost));

    const Mismatches prefix = compareWithTolerance(h_got, h_want, kRelTol);
    std::printf("  the launch returned, so the barrier did not deadlock\n");
    std::printf("  %zu of %zu elements differ from the prefix reference\n",
                prefix.count, kElementCount);
    if (prefix.count != 0) {
        failures[failureCount++] = {"reverseTilePrefix", prefixBlock, prefix,
                                    h_got[prefix.first], h_want[prefix.first]};
    }

    if (failureCount == 0) {
        std::printf("\nevery gated kernel matched its reference\n");
    } else {
        std::printf("\n");
        for (int f = 0; f < failureCount; ++f) {
            const GateFailure& bad = failures[f];
            std::printf(
                "FAILED %s block %d: %zu mismatches, first at element %zu: "
                "got %.9g, want %.9g\n",
                bad.kernel, bad.blockThreads, bad.mismatches.count,
                bad.mismatches.first, static_cast<double>(bad.got),
                static_cast<double>(bad.want));
        }
        std::fprintf(stderr, "%d gated check(s) failed\n", failureCount);
    }

    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
    return failureCount == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
