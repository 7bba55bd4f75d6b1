// Batches of copies (cudaMemcpyBatchAsync, CUDA 12.8; cudaMemcpyWithAttributesAsync, 13.2), as
// vLLM's and LMCache's key-value cache offload make them: one call carries host-to-device,
// device-to-host and device-to-device copies, each under attributes naming when its source may
// be read. A source read only during the call (a stack array) may be overwritten as soon as the
// call returns; the batch as a whole runs in its stream's order, after the kernel before it.
// Malformed batches are refused whole, and the stream goes on.
// Usage: batch_copies [elements]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// x[i] *= a for i < n, one element a thread.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

static void refused(const char* what, cudaError_t e) {
    printf("%s: %d (%s)\n", what, (int)e, cudaGetErrorName(e));
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    size_t bytes = n * sizeof(float);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *up, *ramped, *copied, *small;
    CHECK(cudaMalloc(&up, bytes));
    CHECK(cudaMalloc(&ramped, bytes));
    CHECK(cudaMalloc(&copied, bytes));
    CHECK(cudaMalloc(&small, 16 * sizeof(float)));
    std::vector<float> host(n), down(n, -1.0f);
    for (int i = 0; i < n; i++) host[i] = 3.0f * i + 1.0f;
    float stack[16];
    for (int i = 0; i < 16; i++) stack[i] = 100.0f + i;

    // The kernel comes first in the stream: the batch's reads of `ramped` see its writes.
    std::vector<float> ramp(n);
    for (int i = 0; i < n; i++) ramp[i] = (float)i;
    CHECK(cudaMemcpy(ramped, ramp.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize()); // `s` does not wait for the legacy stream
    scale<<<(n + 255) / 256, 256, 0, s>>>(ramped, 0.5f, n);
    void* dsts[4] = {up, small, down.data(), copied};
    const void* srcs[4] = {host.data(), stack, ramped, ramped};
    size_t sizes[4] = {bytes, sizeof stack, bytes, bytes};
    // Copy 0 reads host memory from malloc, copy 1 the stack array, copies 2 and 3 what the
    // kernel writes (in stream order).
    cudaMemcpyAttributes attrs[3] = {};
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderAny;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    attrs[2].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attrs[2].flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t starts[3] = {0, 1, 2};
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 4, attrs, starts, 3, s));
    for (int i = 0; i < 16; i++) stack[i] = -1.0f; // read during the call: gone now
    CHECK(cudaStreamSynchronize(s));
    report(all_equal(down, [](int i) { return i * 0.5f; }), "device to host after the kernel");
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), up, bytes, cudaMemcpyDeviceToHost));
    report(all_equal(back, [](int i) { return 3.0f * i + 1.0f; }), "host to device");
    CHECK(cudaMemcpy(back.data(), copied, bytes, cudaMemcpyDeviceToHost));
    report(all_equal(back, [](int i) { return i * 0.5f; }), "device to device");
    std::vector<float> few(16);
    CHECK(cudaMemcpy(few.data(), small, sizeof stack, cudaMemcpyDeviceToHost));
    report(all_equal(few, [](int i) { return 100.0f + i; }), "a stack source overwritten after the call");

    // One copy with attributes (CUDA 13.2), where the driver has it: stream order.
    using WithAttributes = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUmemcpyAttributes*, CUstream);
    auto with_attributes = (WithAttributes)try_entry_at("cuMemcpyWithAttributesAsync", 13020);
    if (with_attributes != nullptr) {
        CUmemcpyAttributes ordered = {};
        ordered.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        scale<<<(n + 255) / 256, 256, 0, s>>>(ramped, 4.0f, n);
        CUresult r = with_attributes((CUdeviceptr)copied, (CUdeviceptr)ramped, bytes, &ordered, (CUstream)s);
        CHECK(cudaMemcpyAsync(back.data(), copied, bytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        report(r == CUDA_SUCCESS && all_equal(back, [](int i) { return i * 2.0f; }), "a copy with attributes");
    } else {
        printf("a copy with attributes: not in this driver\n");
    }

    // Malformed batches: nothing of them is done.
    CHECK(cudaMemset(small, 0, sizeof stack));
    size_t late[1] = {1};
    refused("attributes not starting at copy 0", cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, late, 1, s));
    size_t backwards[2] = {0, 0};
    refused("attribute starts not increasing", cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, backwards, 2, s));
    cudaMemcpyAttributes unset = {};
    refused("no source access order", cudaMemcpyBatchAsync(dsts + 1, srcs + 1, sizes + 1, 1, &unset, starts, 1, s));
    refused("more attributes than copies", cudaMemcpyBatchAsync(dsts + 1, srcs + 1, sizes + 1, 1, attrs, starts, 2, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(few.data(), small, sizeof stack, cudaMemcpyDeviceToHost));
    report(all_equal(few, [](int) { return 0.0f; }), "nothing of a refused batch");

    refused("the legacy default stream", cudaMemcpyBatchAsync(dsts + 1, srcs + 1, sizes + 1, 1, attrs, starts, 1, 0));

    // The stack's copy, then one running past the end of a small allocation (a GPU pads it:
    // nothing faults): whether the first is done is said (the shim checks every copy first;
    // CUDA promises nothing).
    float* tiny;
    CHECK(cudaMalloc(&tiny, 100 * sizeof(float)));
    void* past[2] = {small, tiny + 99};
    const void* from[2] = {stack, host.data()};
    size_t lengths[2] = {sizeof stack, 2 * sizeof(float)};
    refused("a copy past its allocation", cudaMemcpyBatchAsync(past, from, lengths, 2, attrs + 1, starts, 1, s));
    // CUDA 12.8's form names the copy refused.
    using Batch = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*, size_t*, size_t,
                               size_t*, CUstream);
    if (auto batch_12_8 = (Batch)try_entry_at("cuMemcpyBatchAsync", 12080)) {
        size_t failed = 0;
        CUresult r = batch_12_8((CUdeviceptr*)past, (CUdeviceptr*)from, lengths, 2, (CUmemcpyAttributes*)attrs + 1,
                                starts, 1, &failed, (CUstream)s);
        printf("the copy past its allocation, by CUDA 12.8's form: %d, copy %zu\n", (int)r, failed);
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(few.data(), small, sizeof stack, cudaMemcpyDeviceToHost));
    bool untouched = true;
    for (float f : few) untouched = untouched && f == 0.0f;
    printf("the good copy of a batch refused for a bad one: %s\n", untouched ? "not done" : "done");
    printf("batch_copies: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
