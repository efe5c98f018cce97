// A kernel that never ends: every thread waits for a flag nobody sets.
// coursectl must kill it at the lesson's timeout and report TIMEOUT.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void waitForever(volatile int* flag) {
    while (*flag == 0) {
    }
}

int main() {
    int* flag = nullptr;
    cudaMalloc(&flag, sizeof(int));
    cudaMemset(flag, 0, sizeof(int));
    std::printf("launching a kernel that waits for a flag nobody sets\n");
    std::fflush(stdout);
    waitForever<<<1, 32>>>(flag);
    cudaError_t err = cudaDeviceSynchronize();
    std::printf("returned: %s\n", cudaGetErrorString(err));
    return 0;
}
