// Contexts a program creates, as driver API programs and PyCUDA make them: cuCtxCreate makes a
// context current that is not the primary one; the runtime works in it (an allocation, a copy,
// a kernel); an allocation's context attribute names it; contexts are pushed and popped; a
// second thread that made the context current sees it destroyed; cuCtxDestroy pops it and frees
// the memory cuMemAlloc made in it, and the primary context goes on.
// Built with -lcuda (the shim's libcuda.so).
// Usage: contexts [elements]
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"

// A driver call that must succeed, as CHECK for the runtime's.
#define DRIVER(call)                                                     \
    do {                                                                 \
        CUresult r_ = (call);                                            \
        if (r_ != CUDA_SUCCESS) {                                        \
            const char* name_ = nullptr;                                 \
            cuGetErrorName(r_, &name_);                                  \
            printf("FAILED %s: %d %s\n", #call, (int)r_, name_);         \
            exit(1);                                                     \
        }                                                                \
    } while (0)

// x[i] *= a for i < n, one element a thread.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    DRIVER(cuInit(0));
    CUdevice device;
    DRIVER(cuDeviceGet(&device, 0));
    CUcontext primary, created, current;
    DRIVER(cuDevicePrimaryCtxRetain(&primary, device));
#if CUDA_VERSION >= 13000
    DRIVER(cuCtxCreate(&created, nullptr, 0, device));  // CUDA 13's, with creation parameters
#else
    DRIVER(cuCtxCreate(&created, 0, device));
#endif
    DRIVER(cuCtxGetCurrent(&current));
    report(current == created && created != primary, "a created context is current, not the primary one");
    unsigned long long primary_id = 0, created_id = 0;
    DRIVER(cuCtxGetId(primary, &primary_id));
    DRIVER(cuCtxGetId(created, &created_id));
    report(primary_id != created_id, "two contexts, two ids");

    // The runtime works in the current context.
    std::vector<float> host(n, 1.0f);
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    scale<<<(n + 255) / 256, 256>>>(d, 3.0f, n);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool tripled = true;
    for (int i = 0; i < n; i++) tripled &= host[i] == 3.0f;
    report(tripled, "runtime work in the created context");

    CUdeviceptr owned;
    DRIVER(cuMemAlloc(&owned, 1 << 20));
    CUcontext of = nullptr;
    DRIVER(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_CONTEXT, owned));
    report(of == created, "an allocation names the context it was made in");

    DRIVER(cuCtxPushCurrent(primary));
    DRIVER(cuCtxGetCurrent(&current));
    bool pushed = current == primary;
    CUcontext popped;
    DRIVER(cuCtxPopCurrent(&popped));
    DRIVER(cuCtxGetCurrent(&current));
    report(pushed && popped == primary && current == created, "the primary context pushed and popped over it");

    // A thread that made the context current, and calls in it only after it was destroyed (a
    // call during cuCtxDestroy is undefined).
    CUresult other_thread = CUDA_SUCCESS;
    std::atomic<bool> holding{false}, destroyed{false};
    std::thread holder([&] {
        cuCtxSetCurrent(created);
        holding = true;
        while (!destroyed) std::this_thread::yield();
        CUdeviceptr p;
        other_thread = cuMemAlloc(&p, 256);
    });
    while (!holding) std::this_thread::yield();
    DRIVER(cuCtxDestroy(created));
    destroyed = true;
    holder.join();
    printf("a thread holding the destroyed context: %d\n", (int)other_thread);
    DRIVER(cuCtxGetCurrent(&current));
    report(current == nullptr, "cuCtxDestroy popped it");
    CUresult r = cuCtxPushCurrent(created);
    printf("the destroyed context pushed again: %d\n", (int)r);

    DRIVER(cuCtxSetCurrent(primary));
    unsigned int type = 0;
    r = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, owned);
    printf("the destroyed context's cuMemAlloc memory: %d\n", (int)r);
    CUdeviceptr again;
    DRIVER(cuMemAlloc(&again, 1 << 20));
    DRIVER(cuMemsetD8(again, 7, 1 << 20));
    unsigned char byte = 0;
    DRIVER(cuMemcpyDtoH(&byte, again + 12345, 1));
    report(byte == 7, "the primary context after");
    DRIVER(cuMemFree(again));
    DRIVER(cuDevicePrimaryCtxRelease(device));
    printf(failures ? "contexts: FAILED\n" : "contexts: all exact\n");
    return failures ? 1 : 0;
}
