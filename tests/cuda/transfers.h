// upload(host) and download(device, n): a vector to new device memory and back, for the test
// programs; a failed CUDA call ends the program (check.h).
#pragma once
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

template <typename T>
static T* upload(const std::vector<T>& host) {
    T* d;
    CHECK(cudaMalloc(&d, host.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> host(n);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}
