/* Copyright (c) 2024, The coursectl authors. All rights reserved.
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the conditions of the BSD
 * 3-Clause License are met. This notice is the program's own: a course that
 * includes the program must not alter it.
 */

// A test fixture in the shape of a cuda-samples program: a licence notice
// first, a helper header from common/ (built with -Icommon), a kernel for
// nvcc to compile, and a host reference that runs on any machine, so that the
// tests run it without a GPU.

#include <cstdio>
#include <vector>

#include "check.cuh"

// snippet: kernel
__global__ void saxpy(int n, float a, const float* x, float* y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
// end snippet

int main() {
    const int n = 1 << 20;
    std::vector<float> x(n, 1.0f), y(n, 2.0f);
    for (int i = 0; i < n; ++i) {
        y[i] = 3.0f * x[i] + y[i];
    }
    std::printf("saxpy of %d elements, y[0] = %.1f\n", n, y[0]);
    std::printf("%.3f GFLOP per call\n", 2.0 * n / 1e9);
    print_check_version();
    return 0;
}
