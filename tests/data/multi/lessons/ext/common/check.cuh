// Helpers the programs of this folder share, in the manner of cuda-samples'
// Common/ headers: a CUDA error check, and the line every program prints to
// say which version of this header it was built with.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK_VERSION 1

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t status_ = (call);                                                     \
        if (status_ != cudaSuccess) {                                                     \
            std::fprintf(stderr, "CUDA error at %s:%d: %s\n", __FILE__, __LINE__,        \
                         cudaGetErrorString(status_));                                    \
            std::exit(1);                                                                 \
        }                                                                                 \
    } while (0)

inline void print_check_version() { std::printf("built with check.cuh version %d\n", CHECK_VERSION); }
