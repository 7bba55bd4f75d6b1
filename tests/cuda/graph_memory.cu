// Graph memory as programs and frameworks use it (PyTorch's cudaMallocAsync allocator captures
// its allocations this way): cudaMallocAsync and cudaFreeAsync on a capturing stream become the
// graph's allocation and free nodes, the addresses fixed at capture and the same at every
// launch; a graph instantiated with auto-free launched round after round; one without it
// refused a second launch before its memory is freed; memory the graph does not free outliving
// the graph until the program frees it; allocation and free nodes built with the graph API;
// the device's graph memory counters. What CUDA refuses: a second executable graph or a clone
// of a graph with memory nodes, such a graph launched into a capture, a free outside the graph
// of memory its graph frees, a second free node, a free node or a captured free of memory no
// graph allocated. Every value is exact. The counters printed are the shim's (a block each
// allocation); CUDA's reserve memory in larger granules, so a native run prints others.
// Usage: graph_memory [elements]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// vadd, scale and iota, which the stand-in runs by name (cuda-standin's kernels.rs).
#include "../fixtures/shim_kernels.cu"

static uint64_t graph_memory(cudaGraphMemAttributeType attr) {
    uint64_t value = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, attr, &value));
    return value;
}

// Whether out[i] == factor * in[i] for every i < n.
static bool scaled(const float* out, const float* in, int n, float factor) {
    for (int i = 0; i < n; i++) {
        if (out[i] != factor * in[i]) {
            printf("  element %d: %g, expected %g\n", i, (double)out[i], (double)(factor * in[i]));
            return false;
        }
    }
    return true;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    size_t bytes = n * sizeof(float);
    int blocks = (n + 255) / 256;
    float *in, *res;
    CHECK(cudaMallocHost(&in, bytes));
    CHECK(cudaMallocHost(&res, bytes));
    cudaStream_t s, other;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

    // Captured: a temporary and an output allocated, the input scaled in the temporary and
    // copied to the output, the temporary freed.
    cudaGraph_t graph;
    float *t, *out;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync(&t, bytes, s));
    CHECK(cudaMallocAsync(&out, bytes, s));
    CHECK(cudaMemcpyAsync(t, in, bytes, cudaMemcpyHostToDevice, s));
    scale<<<blocks, 256, 0, s>>>(t, 2.0f, n);
    CHECK(cudaMemcpyAsync(out, t, bytes, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaFreeAsync(t, s));
    CHECK(cudaStreamEndCapture(s, &graph));
    printf("captured: %d allocation nodes, %d free node; reserved %d blocks, used %d before a launch\n",
           nodes_of(graph, cudaGraphNodeTypeMemAlloc), nodes_of(graph, cudaGraphNodeTypeMemFree),
           (int)(graph_memory(cudaGraphMemAttrReservedMemCurrent) / bytes),
           (int)graph_memory(cudaGraphMemAttrUsedMemCurrent));

    // Auto-free: each launch frees the output the last one left.
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    bool exact = true;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < n; i++) in[i] = (float)(i + round);
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaMemcpyAsync(res, out, bytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        exact = exact && scaled(res, in, n, 2.0f);
    }
    report(exact, "auto-free graph launched 3 rounds, its output read at the address the capture gave,");
    printf("used after a launch: %d block (the output; the temporary freed in the graph)\n",
           (int)(graph_memory(cudaGraphMemAttrUsedMemCurrent) / bytes));
    cudaGraphExec_t second;
    cudaGraph_t copy;
    printf("a second executable graph: %s; a clone: %s\n",
           cudaGetErrorName(cudaGraphInstantiate(&second, graph, 0)), cudaGetErrorName(cudaGraphClone(&copy, graph)));
    CHECK(cudaGraphExecDestroy(exec));

    // Without auto-free: the output must be freed before the next launch.
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaFreeAsync(out, s));  // the last auto-free launch's output
    CHECK(cudaGraphLaunch(exec, s));
    cudaError_t again = cudaGraphLaunch(exec, s);
    CHECK(cudaFreeAsync(out, s));
    for (int i = 0; i < n; i++) in[i] = (float)(3 * i);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(res, out, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    printf("without auto-free: launched again before the free: %s\n", cudaGetErrorName(again));
    report(scaled(res, in, n, 2.0f), "without auto-free: launched after cudaFreeAsync");

    cudaGraph_t outer;
    CHECK(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal));
    cudaError_t nested = cudaGraphLaunch(exec, other);
    cudaError_t ended = cudaStreamEndCapture(other, &outer);
    printf("launched into a capture: %s, then ended: %s\n", cudaGetErrorName(nested), cudaGetErrorName(ended));

    // The output, not freed in the graph, outlives it until the program frees it.
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    std::vector<float> kept(n);
    CHECK(cudaMemcpy(kept.data(), out, bytes, cudaMemcpyDeviceToHost));
    report(scaled(kept.data(), in, n, 2.0f), "the output after its graph was destroyed");
    CHECK(cudaFree(out));
    printf("freed with cudaFree: used %d, reserved %d\n", (int)graph_memory(cudaGraphMemAttrUsedMemCurrent),
           (int)graph_memory(cudaGraphMemAttrReservedMemCurrent));

    // Memory its own graph frees cannot be freed outside it.
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync(&t, bytes, s));
    CHECK(cudaMemsetAsync(t, 0, bytes, s));
    CHECK(cudaFreeAsync(t, s));
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaGraphLaunch(exec, s));  // freed in the graph: launched again at once
    CHECK(cudaStreamSynchronize(s));
    printf("freed in its graph, then by cudaFree: %s\n", cudaGetErrorName(cudaFree(t)));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));

    // The graph API: an allocation node, copies and a kernel using it, a free node.
    CHECK(cudaGraphCreate(&graph, 0));
    cudaMemAllocNodeParams alloc = {};
    alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    alloc.poolProps.location.type = cudaMemLocationTypeDevice;
    alloc.poolProps.location.id = 0;
    alloc.bytesize = bytes;
    cudaGraphNode_t alloc_node, copy_in, kernel, copy_out, free_node, extra;
    CHECK(cudaGraphAddMemAllocNode(&alloc_node, graph, nullptr, 0, &alloc));
    float* d = (float*)alloc.dptr;
    CHECK(cudaGraphAddMemcpyNode1D(&copy_in, graph, &alloc_node, 1, d, in, bytes, cudaMemcpyHostToDevice));
    float factor = 3.0f;
    void* args[] = {&d, &factor, &n};
    cudaKernelNodeParams k = {};
    k.func = (void*)scale;
    k.gridDim = dim3(blocks);
    k.blockDim = dim3(256);
    k.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&kernel, graph, &copy_in, 1, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&copy_out, graph, &kernel, 1, res, d, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &copy_out, 1, d));
    cudaMemAllocNodeParams got = {};
    void* freed = nullptr;
    CHECK(cudaGraphMemAllocNodeGetParams(alloc_node, &got));
    CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed));
    printf("graph API: node parameters read back %s\n",
           got.dptr == d && got.bytesize == bytes && got.poolProps.location.id == 0 && freed == d ? "the same" : "DIFFERENT");
    float* plain;
    CHECK(cudaMalloc(&plain, bytes));
    printf("graph API: a second free node: %s; a free node of cudaMalloc memory: %s\n",
           cudaGetErrorName(cudaGraphAddMemFreeNode(&extra, graph, &free_node, 1, d)),
           cudaGetErrorName(cudaGraphAddMemFreeNode(&extra, graph, &free_node, 1, plain)));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    exact = true;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++) in[i] = (float)(i - round);
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        exact = exact && scaled(res, in, n, 3.0f);
    }
    report(exact, "graph API: allocation, copy, kernel, copy and free nodes launched twice");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));

    // Freed by another graph: a free node in each of two other graphs, then none in the owner's.
    cudaGraph_t owner, freer, second_freer;
    CHECK(cudaGraphCreate(&owner, 0));
    CHECK(cudaGraphAddMemAllocNode(&alloc_node, owner, nullptr, 0, &alloc));
    d = (float*)alloc.dptr;
    cudaMemsetParams set = fill(d, n, 1.5f);
    cudaGraphNode_t memset_node;
    CHECK(cudaGraphAddMemsetNode(&memset_node, owner, &alloc_node, 1, &set));
    CHECK(cudaGraphCreate(&freer, 0));
    CHECK(cudaGraphCreate(&second_freer, 0));
    CHECK(cudaGraphAddMemcpyNode1D(&copy_out, freer, nullptr, 0, res, d, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaGraphAddMemFreeNode(&free_node, freer, &copy_out, 1, d));
    CHECK(cudaGraphAddMemFreeNode(&extra, second_freer, nullptr, 0, d));
    cudaError_t in_owner = cudaGraphAddMemFreeNode(&extra, owner, &memset_node, 1, d);
    cudaGraphExec_t owner_exec, freer_exec;
    CHECK(cudaGraphInstantiate(&owner_exec, owner, 0));
    CHECK(cudaGraphInstantiate(&freer_exec, freer, 0));
    exact = true;
    for (int round = 0; round < 2; round++) {
        memset(res, 0, bytes);
        CHECK(cudaGraphLaunch(owner_exec, s));
        CHECK(cudaGraphLaunch(freer_exec, s));  // reads and frees what the owner allocated
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) exact = exact && res[i] == 1.5f;
    }
    printf("freed by other graphs: a free node in the owner's then: %s\n", cudaGetErrorName(in_owner));
    report(exact, "allocated by one graph and freed by another, launched twice");
    CHECK(cudaGraphExecDestroy(owner_exec));
    CHECK(cudaGraphExecDestroy(freer_exec));
    for (cudaGraph_t g : {owner, freer, second_freer}) CHECK(cudaGraphDestroy(g));

    // A captured free of memory no graph allocated breaks the capture, as CUDA's.
    CHECK(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal));
    cudaError_t refused = cudaFreeAsync(plain, other);
    ended = cudaStreamEndCapture(other, &outer);
    printf("a captured free of cudaMalloc memory: %s, then ended: %s\n", cudaGetErrorName(refused),
           cudaGetErrorName(ended));
    CHECK(cudaFree(plain));

    uint64_t zero = 0;
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero));
    CHECK(cudaDeviceGraphMemTrim(0));
    printf("high marks reset: used %d, reserved %d; trimmed\n", (int)graph_memory(cudaGraphMemAttrUsedMemHigh),
           (int)graph_memory(cudaGraphMemAttrReservedMemHigh));
    if (failures == 0) printf("graph memory: all exact\n");
    return failures == 0 ? 0 : 1;
}
