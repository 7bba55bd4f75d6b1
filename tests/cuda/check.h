// CHECK(call): a CUDA runtime call that must succeed; otherwise the test programs print the
// call, its error number and string, and exit 1 (the tests read these lines).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            printf("FAILED %s: %d %s\n", #call, (int)e_, cudaGetErrorString(e_));        \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
