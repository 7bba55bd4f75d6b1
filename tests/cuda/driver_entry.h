// The driver's entry points as a program without -lcuda takes them (and CUTLASS, PyTorch and
// Triton do): from the runtime (cudaGetDriverEntryPointByVersion, CUDA 12.0's ABI). vmm.cu's,
// shareable.cu's and tensor_maps.cu's. Needs check.h's CHECK first.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

// The driver's entry point `name`, or exit 1 saying it is missing.
static void* entry(const char* name) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr) {
        printf("FAILED: no driver entry point %s\n", name);
        exit(1);
    }
    return f;
}
