// A kernel that writes through a null pointer: the CUDA error reaches the host,
// which reports it and exits non-zero. coursectl must say FAIL with the stderr tail.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void writeNowhere(float* out) { out[threadIdx.x] = 1.0f; }

int main() {
    std::printf("launching a kernel that writes through a null pointer\n");
    std::fflush(stdout);
    writeNowhere<<<1, 32>>>(nullptr);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
        return EXIT_FAILURE;
    }
    std::printf("returned\n");
    return 0;
}
