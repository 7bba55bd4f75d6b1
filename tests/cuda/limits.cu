// Context limits (cudaDeviceSetLimit, backend protocol 11), as programs with deep recursion,
// many printf lines or in-kernel malloc set them: a thread's stack, the printf buffer and the
// heap, each set on the remote GPU and read back; a stack no device holds refused and the old
// value kept; a heap past the session's memory quota (which counts what limits reserve beyond
// their defaults: a stack for every thread the device holds at once) refused and the old value
// kept, then a smaller one that fits only if the refused one is not counted; the device's work
// goes on (a kernel after them, exact).
// Usage: limits [heap MiB to ask for past the quota]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// Sets `limit` to `value` and reads it back: the driver may round it up.
static void set_and_read(cudaLimit limit, size_t value, const char* what) {
    CHECK(cudaDeviceSetLimit(limit, value));
    size_t now = 0;
    CHECK(cudaDeviceGetLimit(&now, limit));
    printf("%s: %zu\n", what, now);
    report(now >= value, what);
}

// Asks for `value`, which must be refused, and checks the limit is still `kept`.
static void refused(cudaLimit limit, size_t value, size_t kept, const char* what) {
    cudaError_t e = cudaDeviceSetLimit(limit, value);
    printf("%s: %d (%s)\n", what, (int)e, cudaGetErrorName(e));
    size_t now = 0;
    CHECK(cudaDeviceGetLimit(&now, limit));
    report(e != cudaSuccess && now == kept, what);
}

int main(int argc, char** argv) {
    size_t heap_past_quota = argc > 1 ? (size_t)atoi(argv[1]) << 20 : 0;
    size_t stack = 0;
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    printf("default stack %zu\n", stack);
    set_and_read(cudaLimitStackSize, 8 << 10, "an 8 KiB stack");
    set_and_read(cudaLimitPrintfFifoSize, 4 << 20, "a 4 MiB printf buffer");
    set_and_read(cudaLimitMallocHeapSize, 64 << 20, "a 64 MiB heap");
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    refused(cudaLimitStackSize, (size_t)1 << 30, stack, "a 1 GiB stack");
    if (heap_past_quota) {
        refused(cudaLimitMallocHeapSize, heap_past_quota, 64 << 20, "a heap past the quota");
        // Fits only if the refused heap is no longer counted.
        set_and_read(cudaLimitMallocHeapSize, (size_t)1 << 30, "a 1 GiB heap after the refusal");
    }

    // The device works on after the limits: x[i] = i, scaled by 3 twice.
    int n = 4096;
    std::vector<float> x(n);
    for (int i = 0; i < n; i++) x[i] = (float)i;
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    for (int round = 0; round < 2; round++) scale<<<n / 128, 128>>>(d, 3.0f, n);
    CHECK(cudaMemcpy(x.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
    bool exact = true;
    for (int i = 0; i < n; i++) exact &= x[i] == (float)(9 * i);
    report(exact, "a kernel after the limits");
    if (failures) return 1;
    printf("limits: all exact\n");
    return 0;
}
