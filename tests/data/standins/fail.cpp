// Stand-in for a lesson whose CUDA_CHECK caught an error: the first line of
// its output, the error on stderr, and exit status 1.
#include <cstdio>

int main() {
    std::printf("GPU: NVIDIA H200 (compute capability 9.0)\n");
    std::fflush(stdout);
    std::fprintf(stderr, "CUDA error at shared_memory.cu:142: cudaMalloc(&d_in, bytes): "
                         "out of memory (cudaErrorMemoryAllocation)\n");
    return 1;
}
