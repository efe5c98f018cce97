// SPDX-License-Identifier: MIT
//
// A test fixture: the second program of a folder that shares common/check.cuh
// with saxpy.cu. It sums the numbers of a file named on its command line,
// relative to the folder it runs in (this one), and checks the sum on the host.

#include <cstdio>

#include "check.cuh"

__global__ void sumKernel(const int* values, int n, int* total) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(total, values[i]);
    }
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s NUMBERS\n", argv[0]);
        return 2;
    }
    std::FILE* file = std::fopen(argv[1], "r");
    if (file == nullptr) {
        std::perror(argv[1]);
        return 1;
    }
    int value = 0, count = 0;
    long total = 0;
    while (std::fscanf(file, "%d", &value) == 1) {
        total += value;
        ++count;
    }
    std::fclose(file);
    std::printf("sum of %d numbers from %s = %ld\n", count, argv[1], total);
    print_check_version();
    return 0;
}
