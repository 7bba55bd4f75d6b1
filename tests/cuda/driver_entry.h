// The driver's entry points as a program without -lcuda takes them (and CUTLASS, PyTorch and
// Triton do): from the runtime (cudaGetDriverEntryPointByVersion, CUDA 12.0's ABI unless a
// version is named). vmm.cu's, shareable.cu's, tensor_maps.cu's and settings.cu's. Needs
// check.h's CHECK first.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

// The driver's entry point `name` as of CUDA `version`, or null where the driver has none (a
// driver older than `version`).
[[maybe_unused]] static void* try_entry_at(const char* name, int version) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &found);
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? f : nullptr;
}

// The driver's entry point `name` as of CUDA `version`, or exit 1 saying it is missing.
[[maybe_unused]] static void* entry_at(const char* name, int version) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr) {
        printf("FAILED: no driver entry point %s\n", name);
        exit(1);
    }
    return f;
}

// A driver call through its entry point (introduced in CUDA `version`), that must succeed.
#define DRIVER_AT(type, name, version, ...)                                               \
    do {                                                                                 \
        CUresult r_ = ((type)entry_at(#name, version))(__VA_ARGS__);                     \
        if (r_ != CUDA_SUCCESS) {                                                        \
            printf("FAILED %s: %d\n", #name, (int)r_);                                   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

// The driver's entry point `name` as of CUDA 12.0, or exit 1 saying it is missing.
[[maybe_unused]] static void* entry(const char* name) {
    return entry_at(name, 12000);
}
