// SPDX-License-Identifier: MIT
//
// Day 13: shared memory, seen through a matrix transpose.
//
// A transpose reads its input along rows and has to write its output along
// columns, so a direct kernel always hits global memory with a stride on one
// side. This program runs four kernels over one 2003 x 3001 matrix, every one
// of them with the same grid, the same 32 x 8 block and four elements per
// thread, and tables their bandwidth:
//
//   copyRowMajor           no transpose: the speed limit for this traffic
//   transposeNaive         reads rows, writes columns (day 12's kernel)
//   transposeTiledStatic   turns the data around in a 32 x 32 __shared__ tile
//   transposeTiledDynamic  the same tile, its size handed over at launch
//
// The byte count behind the GB/s column comes from the matrix size alone, so
// every kernel is charged for identical traffic and none can look faster by
// moving less (day 11 is about the benchmark that fell into that trap).
//
// After the table the program asks for more dynamic shared memory than a
// block receives by default, prints the refusal, raises the limit for that
// one kernel with cudaFuncSetAttribute and tries again. Day 74 depends on that
// call, and the error it prevents does not mention shared memory at all.
//
// Left for later: bank conflicts. The tile has no padding column, so reading
// it down a column sends a whole warp to one bank. Day 15 measures that and
// fixes it.
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o shared_memory shared_memory.cu
// Run:   ./shared_memory
// Verified 2026-12-02 on NVIDIA H200 (compute capability 9.0), driver 580.159.04, CUDA 13.0, nvcc 13.0.88. Transcript: evidence/day13-shared-memory/nvidia-h200/transcript.txt

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

// The matrix. 2003 and 3001 are both prime, so a 32-wide tile divides neither
// side, the grid rounds up along x and along y, and the bounds checks inside
// every kernel have real work to do on every launch. The shape is far from
// square as well: a kernel that confuses the two extents produces a
// visibly different layout instead of a believable wrong answer.
constexpr size_t kRows = 2003;
constexpr size_t kCols = 3001;

// One tile covers 32 x 32 floats and one block has 32 x 8 threads, so each
// thread handles four elements spaced eight rows apart. Thirty-two floats
// across is exactly one warp of neighbouring addresses, which is what the tile
// exists to provide, and 32 * 8 = 256 is the course's default block size.
constexpr int kTileDim = 32;
constexpr int kBlockRows = 8;
constexpr int kThreadsPerBlock = kTileDim * kBlockRows;

// What transposeTiledDynamic asks for at launch: the same number of bytes that
// transposeTiledStatic declares, so only the source of the size differs.
constexpr size_t kTileBytes = sizeof(float) * kTileDim * kTileDim;

constexpr int kWarmupRuns = 3;
constexpr int kTimedRuns = 10;

// Everything below follows from the constants alone, so it is checked by the
// compiler. A runtime assert() would be no substitute: release builds define
// NDEBUG, which removes assert() from exactly the binary that gets run.
static_assert(kThreadsPerBlock % 32 == 0,
              "a block should hold whole warps only");
static_assert(kThreadsPerBlock <= 1024,
              "no block may exceed 1024 threads on the GPUs this course uses");
static_assert(kTileDim % kBlockRows == 0,
              "the per-thread loops advance by kBlockRows and must land "
              "exactly on kTileDim, or some tile rows are never visited");
static_assert(kRows % kTileDim != 0 && kCols % kTileDim != 0,
              "neither side may be a multiple of the tile, or the grid never "
              "rounds up and the bounds checks go untested");
static_assert(kTileBytes <= 48 * 1024,
              "a statically declared __shared__ array must fit the 48 KiB "
              "every block gets by default; anything larger has to be "
              "dynamic and opted in, which is what demonstrateSharedOptIn() "
              "shows");
static_assert(kRows * kCols <= (size_t{1} << 24),
              "the test pattern stores each element's flat index as a float, "
              "which is exact only up to 2^24");

// Rounds a / b up. constexpr so the same function sizes the grid at run time
// and takes part in the static_assert right after it.
static constexpr size_t ceilDiv(size_t a, size_t b) {
    return (a + b - 1) / b;
}

static_assert(ceilDiv(kRows, static_cast<size_t>(kTileDim)) <= 65535,
              "gridDim.y is capped at 65535 (gridDim.x goes far higher); a "
              "taller matrix would have to fold its rows into x");

// dst[r][c] = src[r][c]: a plain copy, no transpose.
//
// It moves the same bytes as the three transposes, with well-ordered addresses
// on both the read and the write, so its time is the practical floor for this
// much traffic on whichever GPU runs the program.
//
// Memory: the 32 lanes of a warp share one row and take 32 neighbouring
// columns, so the warp's read is one 128-byte run (four 32-byte sectors) and
// its write is another.
//
// Launch assumption: blocks of kTileDim x kBlockRows threads, and a grid of
// ceilDiv(cols, kTileDim) x ceilDiv(rows, kTileDim) blocks.
__global__ void copyRowMajor(const float* __restrict__ src,
                             float* __restrict__ dst, size_t rows,
                             size_t cols) {
    const size_t col = static_cast<size_t>(blockIdx.x) * kTileDim + threadIdx.x;
    const size_t rowStart =
        static_cast<size_t>(blockIdx.y) * kTileDim + threadIdx.y;
    for (int step = 0; step < kTileDim; step += kBlockRows) {
        const size_t row = rowStart + step;
        if (row < rows && col < cols) {
            dst[row * cols + col] = src[row * cols + col];
        }
    }
}

// dst[c][r] = src[r][c], straight from global memory to global memory. This
// is day 12's kernel, repeated here so all four rows of the table come from
// one run on one GPU.
//
// Memory: the read is fine, 32 neighbouring floats of one source row per warp.
// The write is not. The warp's 32 lanes hold one source row and 32 source
// columns, which are 32 different destination rows, each `rows` floats
// (8,012 bytes here) from the next. Every lane gets a sector and a cache line
// of its own: 32 transactions for a store the read did in 4.
//
// No choice of which index comes from threadIdx.x repairs that. Swap them and
// the stride simply moves from the write to the read, because a transpose
// walks its two matrices in opposite orders.
//
// Launch assumption: the same grid and block as copyRowMajor.
__global__ void transposeNaive(const float* __restrict__ src,
                               float* __restrict__ dst, size_t rows,
                               size_t cols) {
    const size_t inCol =
        static_cast<size_t>(blockIdx.x) * kTileDim + threadIdx.x;
    const size_t inRowStart =
        static_cast<size_t>(blockIdx.y) * kTileDim + threadIdx.y;
    for (int step = 0; step < kTileDim; step += kBlockRows) {
        const size_t inRow = inRowStart + step;
        if (inRow < rows && inCol < cols) {
            dst[inCol * rows + inRow] = src[inRow * cols + inCol];
        }
    }
}

// dst[c][r] = src[r][c], with the turn made inside a 32 x 32 shared tile so
// that both trips to global memory are row-ordered.
//
// Each block owns one 32 x 32 square of src. In the first loop the block reads
// that square row by row, 32 consecutive floats per warp, and parks it in the
// tile. After the barrier, the second loop reads the tile column by column and
// writes each column out as 32 consecutive floats of a dst row. The square
// lands at the mirrored block position in dst, which is why outBlock swaps the
// two block coordinates; keeping the source's coordinates there still
// compiles and runs, and the output comes out wrong.
//
// Memory: four sectors per warp for the global read and four for the global
// write, as in copyRowMajor. The column-order access has not gone away; it
// has moved into shared memory, which does not fetch in sectors.
//
// Barrier: no thread may skip the __syncthreads(), including threads whose
// element lies outside the matrix. The bounds checks wrap the memory accesses
// only, and nothing returns before the barrier.
//
// Bank conflicts: tile[threadIdx.x][j] for 32 lanes with consecutive
// threadIdx.x is 32 words spaced 32 words apart, all in one bank. Day 15
// measures the cost and adds the padding column that removes it.
//
// Launch assumption: the same grid and block as copyRowMajor.
// snippet: tiled-kernel
__global__ void transposeTiledStatic(const float* __restrict__ src,
                                     float* __restrict__ dst, size_t rows,
                                     size_t cols) {
    __shared__ float tile[kTileDim][kTileDim];

    // Read phase: this block's square of src, row by row, into the tile.
    const size_t srcCol =
        static_cast<size_t>(blockIdx.x) * kTileDim + threadIdx.x;
    const size_t srcRowStart =
        static_cast<size_t>(blockIdx.y) * kTileDim + threadIdx.y;
    for (int step = 0; step < kTileDim; step += kBlockRows) {
        const size_t srcRow = srcRowStart + step;
        if (srcRow < rows && srcCol < cols) {
            tile[threadIdx.y + step][threadIdx.x] = src[srcRow * cols + srcCol];
        }
    }

    __syncthreads();

    // Write phase: dst has cols rows and rows columns, and this square belongs
    // at block (blockIdx.y, blockIdx.x) of it.
    const dim3 outBlock(blockIdx.y, blockIdx.x);
    const size_t dstCol =
        static_cast<size_t>(outBlock.x) * kTileDim + threadIdx.x;
    const size_t dstRowStart =
        static_cast<size_t>(outBlock.y) * kTileDim + threadIdx.y;
    for (int step = 0; step < kTileDim; step += kBlockRows) {
        const size_t dstRow = dstRowStart + step;
        if (dstRow < cols && dstCol < rows) {
            dst[dstRow * rows + dstCol] = tile[threadIdx.x][threadIdx.y + step];
        }
    }
}
// end snippet: tiled-kernel

// The tiled transpose again, but with the tile's storage sized by the launch
// rather than by the declaration.
//
// `extern __shared__` names a per-block array with no length. Its length in
// bytes is the third value inside <<< >>>, which every earlier launch in this
// course left out. Because the compiler never sees a shape, the array is flat
// and the two-dimensional subscript becomes row * kTileDim + column, written
// by hand. That multiply is all the dynamic form costs; what it buys is one
// kernel that works with whatever tile size the caller picks. The block
// origins are computed once at the top here, which is the same mapping as
// outBlock in the static kernel, spelled differently.
//
// Memory: the same global traffic as transposeTiledStatic (four sectors per
// warp each way) and the same one-bank column read of the tile.
//
// Launch assumption: the same grid and block as copyRowMajor, and at least
// kTileBytes of dynamic shared memory per block.
__global__ void transposeTiledDynamic(const float* __restrict__ src,
                                      float* __restrict__ dst, size_t rows,
                                      size_t cols) {
    extern __shared__ float tileFlat[];

    // First source row and first source column of this block's square.
    const size_t rowOrigin = static_cast<size_t>(blockIdx.y) * kTileDim;
    const size_t colOrigin = static_cast<size_t>(blockIdx.x) * kTileDim;

    for (int step = 0; step < kTileDim; step += kBlockRows) {
        const unsigned int r = threadIdx.y + step;
        const size_t srcRow = rowOrigin + r;
        const size_t srcCol = colOrigin + threadIdx.x;
        if (srcRow < rows && srcCol < cols) {
            tileFlat[r * kTileDim + threadIdx.x] = src[srcRow * cols + srcCol];
        }
    }

    __syncthreads();

    // A dst row index is a src column index and the other way round.
    for (int step = 0; step < kTileDim; step += kBlockRows) {
        const unsigned int r = threadIdx.y + step;
        const size_t dstRow = colOrigin + r;
        const size_t dstCol = rowOrigin + threadIdx.x;
        if (dstRow < cols && dstCol < rows) {
            dst[dstRow * rows + dstCol] = tileFlat[threadIdx.x * kTileDim + r];
        }
    }
}

// Fills `count` floats of a dynamically sized shared array and reads the last
// one back out, so the compiler has to keep the stores. The kernel exists to
// be launched with more shared memory than the default allows: once before
// the opt-in, once after.
//
// Memory: not a concern. This is a launch-time probe, never timed.
//
// Launch assumption: at least count * sizeof(float) bytes of dynamic shared
// memory, and count >= 1.
__global__ void touchDynamicShared(float* __restrict__ sink, int count) {
    extern __shared__ float scratch[];
    for (int i = static_cast<int>(threadIdx.x); i < count;
         i += static_cast<int>(blockDim.x)) {
        scratch[i] = static_cast<float>(i);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        sink[0] = scratch[count - 1];
    }
}

// Host reference: the transpose as two plain loops, chosen to be obviously
// right rather than fast. The caller owns both buffers. Because the loops and
// the kernels' grids express the same mapping independently, agreement
// between them means something.
static void transposeOnHost(const float* src, float* dst, size_t rows,
                            size_t cols) {
    for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < cols; ++c) {
            dst[c * rows + r] = src[r * cols + c];
        }
    }
}

// Where a result first disagrees with the reference, as a row and a column of
// the result (a flat offset names nothing a reader can look at).
struct Mismatch {
    bool found;
    size_t row;
    size_t col;
    float got;
    float want;
};

// Exact comparison, on purpose. A transpose only moves bits: no arithmetic,
// no rounding, nothing for the two sides to do differently. Any difference is
// an indexing bug. NaN never compares equal, so an element no kernel wrote
// (the output is filled with NaN before each check) is caught as well.
static Mismatch findFirstMismatch(const float* got, const float* want,
                                  size_t count, size_t resultCols) {
    Mismatch m{false, 0, 0, 0.0f, 0.0f};
    for (size_t i = 0; i < count; ++i) {
        if (got[i] != want[i]) {
            m = Mismatch{true, i / resultCols, i % resultCols, got[i],
                         want[i]};
            break;
        }
    }
    return m;
}

// The four kernels, in table order.
enum KernelId { kCopy = 0, kNaive, kTiledStatic, kTiledDynamic, kKernelCount };

static const char* const kKernelNames[kKernelCount] = {
    "copyRowMajor", "transposeNaive", "transposeTiledStatic",
    "transposeTiledDynamic"};

// One launch of the chosen kernel over the whole matrix. Only the dynamic
// kernel passes a third launch argument: without it, its extern __shared__
// array would have no bytes behind it and the first store would overrun.
static void launchKernel(KernelId id, dim3 grid, dim3 block, const float* src,
                         float* dst) {
    switch (id) {
        case kCopy:
            copyRowMajor<<<grid, block>>>(src, dst, kRows, kCols);
            break;
        case kNaive:
            transposeNaive<<<grid, block>>>(src, dst, kRows, kCols);
            break;
        case kTiledStatic:
            transposeTiledStatic<<<grid, block>>>(src, dst, kRows, kCols);
            break;
        case kTiledDynamic:
            transposeTiledDynamic<<<grid, block, kTileBytes>>>(src, dst, kRows,
                                                               kCols);
            break;
        default:
            break;
    }
}

// Mean milliseconds per launch, measured with CUDA events on the GPU's own
// clock. A host timer would measure the launch call instead, since launches
// return before the kernel finishes (day 9).
static float timeKernel(KernelId id, dim3 grid, dim3 block, const float* src,
                        float* dst) {
    cudaEvent_t begin;
    cudaEvent_t end;
    CUDA_CHECK(cudaEventCreate(&begin));
    CUDA_CHECK(cudaEventCreate(&end));

    // Each kernel gets its own warm-up: modules load lazily (the Linux default
    // since CUDA 12.2), so the first launch of every kernel carries a one-off
    // loading cost.
    for (int i = 0; i < kWarmupRuns; ++i) {
        launchKernel(id, grid, block, src, dst);
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());

    CUDA_CHECK(cudaEventRecord(begin));
    for (int i = 0; i < kTimedRuns; ++i) {
        launchKernel(id, grid, block, src, dst);
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

// Bytes per launch are the same for every kernel: each reads kRows * kCols
// floats and writes as many. The figure is derived from the constants in this
// one place, never per kernel, so it cannot differ between rows.
static double gigabytesPerSecond(float ms) {
    const double bytesMoved =
        2.0 * static_cast<double>(kRows * kCols) * sizeof(float);
    return bytesMoved / (static_cast<double>(ms) * 1.0e-3) / 1.0e9;
}

// One row of the kernel table; the last column is time relative to the copy.
static void printTableRow(const char* name, float ms, float copyMs) {
    std::printf("%-24s %11.3f %11.1f %9.2fx\n", name, ms,
                gigabytesPerSecond(ms), static_cast<double>(ms) / copyMs);
}

// The per-block shared memory limit and how a kernel is allowed past it.
//
// Every kernel may use the default amount without asking. More than that must
// be requested per kernel, and a launch that asks without permission fails
// when it is launched, not when it is compiled, with an error string that
// never says "shared memory". Day 74's pipelined kernel needs more than the
// default, so the opt-in is shown here, where __shared__ first appears.
//
// Returns 1 when the launch fails even after the opt-in, because then nothing
// was demonstrated and the run should not count as a pass.
static int demonstrateSharedOptIn(size_t defaultBytes, size_t optInBytes,
                                  float* d_sink) {
    const size_t askBytes = defaultBytes + 4096;
    if (askBytes > optInBytes) {
        std::printf(
            "No shared memory probe: the opt-in limit of this device leaves\n"
            "no room above its %zu byte default.\n",
            defaultBytes);
        return 0;
    }
    const int count = static_cast<int>(askBytes / sizeof(float));

    // Neither launch goes through CUDA_CHECK: the first one is supposed to
    // fail, and the point is to print the failure, not to stop on it.
    // cudaGetLastError() returns the launch error and also clears it, so each
    // status below belongs to its own launch only.
    // snippet: shared-optin
    touchDynamicShared<<<1, kThreadsPerBlock, askBytes>>>(d_sink, count);
    const cudaError_t withoutOptIn = cudaGetLastError();
    std::printf("%zu bytes of dynamic shared memory, no opt-in: %s\n",
                askBytes, cudaGetErrorString(withoutOptIn));

    // The attribute value is an int. askBytes was checked against the opt-in
    // limit above, so the conversion cannot overflow.
    CUDA_CHECK(cudaFuncSetAttribute(touchDynamicShared,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(askBytes)));

    touchDynamicShared<<<1, kThreadsPerBlock, askBytes>>>(d_sink, count);
    const cudaError_t withOptIn = cudaGetLastError();
    std::printf("%zu bytes after cudaFuncSetAttribute:         %s\n",
                askBytes, cudaGetErrorString(withOptIn));
    // end snippet: shared-optin

    if (withoutOptIn == cudaSuccess || withOptIn == cudaSuccess) {
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    if (withoutOptIn == cudaSuccess) {
        std::printf(
            "This device took %zu bytes without any opt-in, so its default\n"
            "limit is not the one the lesson describes. Say so on the page.\n",
            askBytes);
    }
    int failed = 0;
    if (withOptIn != cudaSuccess) {
        std::fprintf(stderr,
                     "the launch failed even after the opt-in, so the probe "
                     "demonstrated nothing\n");
        failed = 1;
    }
    return failed;
}

int main() {
    const int device = 0;
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

    const size_t elems = kRows * kCols;
    const size_t bufferBytes = elems * sizeof(float);
    const double bufferMiB =
        static_cast<double>(bufferBytes) / (1024.0 * 1024.0);

    std::printf("GPU: %s (compute capability %d.%d)\n", prop.name, prop.major,
                prop.minor);
    std::printf("Matrix: %zu x %zu floats, %.1f MiB per buffer\n", kRows, kCols,
                bufferMiB);
    // Both properties are size_t and are printed with %zu; handing a size_t
    // to %d in a variadic call is undefined behaviour.
    std::printf(
        "Shared memory per block: %zu bytes default, %zu bytes opt-in\n",
        prop.sharedMemPerBlock, prop.sharedMemPerBlockOptin);
    std::printf("Shared memory per SM:    %zu bytes\n",
                prop.sharedMemPerMultiprocessor);
    std::printf("Tile: %d x %d floats, %zu bytes per block\n\n", kTileDim,
                kTileDim, kTileBytes);

    // Each element holds its own flat index, row * kCols + col, so every value
    // in the matrix is different and a value in the wrong place gives away
    // where it came from. The largest is kRows * kCols - 1, below 2^24 (see
    // the static_assert), so every value is an exact float and the check can
    // demand equality.
    std::vector<float> h_src(elems);
    std::vector<float> h_expected(elems);
    std::vector<float> h_result(elems);
    for (size_t i = 0; i < elems; ++i) {
        h_src[i] = static_cast<float>(i);
    }
    transposeOnHost(h_src.data(), h_expected.data(), kRows, kCols);

    // The output buffer is allocated last, so a write that runs past its end
    // lands outside every allocation, where compute-sanitizer's memcheck
    // reports it instead of letting it quietly corrupt a neighbour.
    float* d_sink = nullptr;
    float* d_src = nullptr;
    float* d_dst = nullptr;
    CUDA_CHECK(cudaMalloc(&d_sink, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_src, bufferBytes));
    CUDA_CHECK(cudaMalloc(&d_dst, bufferBytes));
    CUDA_CHECK(
        cudaMemcpy(d_src, h_src.data(), bufferBytes, cudaMemcpyHostToDevice));

    const size_t tileDim = static_cast<size_t>(kTileDim);
    const dim3 block(kTileDim, kBlockRows);
    const dim3 grid(static_cast<unsigned int>(ceilDiv(kCols, tileDim)),
                    static_cast<unsigned int>(ceilDiv(kRows, tileDim)));

    // Correctness before speed: one launch per kernel, each compared with the
    // host result. The copy is compared with its own input, the transposes
    // with the transposed reference. A failure is recorded and counted, never
    // returned on the spot, so the single cleanup block below always runs.
    int failures = 0;
    Mismatch mismatches[kKernelCount];
    for (int k = 0; k < kKernelCount; ++k) {
        const KernelId id = static_cast<KernelId>(k);
        // All bits set is a NaN, so any element the kernel skips fails the
        // comparison instead of inheriting the previous kernel's answer.
        CUDA_CHECK(cudaMemset(d_dst, 0xFF, bufferBytes));
        launchKernel(id, grid, block, d_src, d_dst);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(h_result.data(), d_dst, bufferBytes,
                              cudaMemcpyDeviceToHost));
        const bool isCopy = (id == kCopy);
        mismatches[k] = findFirstMismatch(
            h_result.data(), isCopy ? h_src.data() : h_expected.data(), elems,
            isCopy ? kCols : kRows);
        if (mismatches[k].found) {
            ++failures;
        }
    }

    // Timed regions hold launches and nothing else; every allocation and copy
    // happened above.
    float ms[kKernelCount];
    for (int k = 0; k < kKernelCount; ++k) {
        ms[k] = timeKernel(static_cast<KernelId>(k), grid, block, d_src, d_dst);
    }

    std::printf("%-24s %11s %11s %10s\n", "kernel", "time (ms)", "GB/s",
                "vs copy");
    std::printf("%-24s %11s %11s %10s\n", "------------------------",
                "----------", "----------", "---------");
    printTableRow(kKernelNames[kCopy], ms[kCopy], ms[kCopy]);
    printTableRow(kKernelNames[kNaive], ms[kNaive], ms[kCopy]);
    printTableRow(kKernelNames[kTiledStatic], ms[kTiledStatic], ms[kCopy]);
    printTableRow(kKernelNames[kTiledDynamic], ms[kTiledDynamic], ms[kCopy]);
    std::printf(
        "\nEvery row above moved exactly %.1f MiB. All four launch the same\n"
        "grid and the same block and read and write every element once, so\n"
        "no row can win by doing less work.\n\n",
        2.0 * bufferMiB);

    failures += demonstrateSharedOptIn(prop.sharedMemPerBlock,
                                       prop.sharedMemPerBlockOptin, d_sink);

    for (int k = 0; k < kKernelCount; ++k) {
        const Mismatch& bad = mismatches[k];
        if (bad.found) {
            std::printf(
                "FAILED %s: first wrong element at output row %zu, column "
                "%zu: got %.9g, want %.9g\n",
                kKernelNames[k], bad.row, bad.col,
                static_cast<double>(bad.got), static_cast<double>(bad.want));
        }
    }

    // The one cleanup block, reached on every path before the one return.
    CUDA_CHECK(cudaFree(d_sink));
    CUDA_CHECK(cudaFree(d_src));
    CUDA_CHECK(cudaFree(d_dst));

    // The verdict is an ordinary branch, never an assert(), for the NDEBUG
    // reason given above the static_asserts.
    int exitCode = EXIT_SUCCESS;
    if (failures != 0) {
        std::fprintf(stderr, "%d check(s) failed\n", failures);
        exitCode = EXIT_FAILURE;
    } else {
        std::printf(
            "all four kernels match the CPU reference at %zu elements\n",
            elems);
    }
    return exitCode;
}
