// A graph built with the generic node API (cudaGraphAddNode, as CUDA 13's samples build their
// graphs): a copy to the device, a kernel after it, a memset, a host function after both, a
// child graph (itself built so) and an event record, each from a cudaGraphNodeParams; launched
// twice, exact. A kernel node's parameters changed in the graph (cudaGraphNodeSetParams) reach
// the next instantiation, and changed in one executable graph (cudaGraphExecNodeSetParams) its
// next launch alone; the driver reads a node's parameters back (cuGraphNodeGetParams, 13.2).
// Usage: graph_nodes [elements]
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

static int host_runs = 0;

static void CUDART_CB count_run(void*) {
    host_runs++;
}

// A kernel node's parameters: scale(d, *a, *n), one thread an element.
static cudaGraphNodeParams kernel_node(float** d, float* a, int* n, void** args) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = (void*)scale;
    p.kernel.gridDim = dim3((*n + 255) / 256);
    p.kernel.blockDim = dim3(256);
    args[0] = d;
    args[1] = a;
    args[2] = n;
    p.kernel.kernelParams = args;
    return p;
}

// A memset node's parameters: n words of `d` set to `bits`.
static cudaGraphNodeParams memset_node(float* d, unsigned bits, int n) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeMemset;
    p.memset.dst = d;
    p.memset.value = bits;
    p.memset.elementSize = 4;
    p.memset.width = n;
    p.memset.height = 1;
    return p;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    size_t bytes = n * sizeof(float);
    std::vector<float> back(n);
    float *d, *set, *child_set;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMalloc(&set, bytes));
    CHECK(cudaMalloc(&child_set, bytes));
    // Page-locked, as CUDA's graphs want the host side of their copies.
    float* pinned;
    CHECK(cudaMallocHost(&pinned, bytes));
    for (int i = 0; i < n; i++) pinned[i] = (float)i;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    float seven = 7.0f, three = 3.0f;
    unsigned seven_bits, three_bits;
    memcpy(&seven_bits, &seven, 4);
    memcpy(&three_bits, &three, 4);

    cudaGraph_t graph, child;
    CHECK(cudaGraphCreate(&graph, 0));
    CHECK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t copy, kernel, fill, host_fn, nested, record, child_fill;
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeMemcpy;
    p.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(pinned, bytes, bytes, 1);
    p.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(d, bytes, bytes, 1);
    p.memcpy.copyParams.extent = make_cudaExtent(bytes, 1, 1);
    p.memcpy.copyParams.kind = cudaMemcpyHostToDevice;
    CHECK(cudaGraphAddNode(&copy, graph, nullptr, nullptr, 0, &p));
    float two = 2.0f;
    void* args[3];
    p = kernel_node(&d, &two, &n, args);
    CHECK(cudaGraphAddNode(&kernel, graph, &copy, nullptr, 1, &p));
    p = memset_node(set, seven_bits, n);
    CHECK(cudaGraphAddNode(&fill, graph, nullptr, nullptr, 0, &p));
    p = {};
    p.type = cudaGraphNodeTypeHost;
    p.host.fn = count_run;
    cudaGraphNode_t both[2] = {kernel, fill};
    CHECK(cudaGraphAddNode(&host_fn, graph, both, nullptr, 2, &p));
    p = memset_node(child_set, three_bits, n);
    CHECK(cudaGraphAddNode(&child_fill, child, nullptr, nullptr, 0, &p));
    p = {};
    p.type = cudaGraphNodeTypeGraph;
    p.graph.graph = child;
    CHECK(cudaGraphAddNode(&nested, graph, &host_fn, nullptr, 1, &p));
    p = {};
    p.type = cudaGraphNodeTypeEventRecord;
    p.eventRecord.event = done;
    CHECK(cudaGraphAddNode(&record, graph, &nested, nullptr, 1, &p));

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int round = 0; round < 2; round++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventSynchronize(done));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
    bool exact = all_equal(back, [](int i) { return 2.0f * i; });
    CHECK(cudaMemcpy(back.data(), set, bytes, cudaMemcpyDeviceToHost));
    exact = exact && all_equal(back, [](int) { return 7.0f; });
    CHECK(cudaMemcpy(back.data(), child_set, bytes, cudaMemcpyDeviceToHost));
    exact = exact && all_equal(back, [](int) { return 3.0f; }) && host_runs == 2;
    report(exact, "copy, kernel, memset, host, child graph and event record nodes launched twice");

    // Changed in the graph: the next instantiation scales by 3; in `exec` alone: by 5.
    float by_three = 3.0f, by_five = 5.0f;
    p = kernel_node(&d, &by_three, &n, args);
    CHECK(cudaGraphNodeSetParams(kernel, &p));
    cudaGraphExec_t again;
    CHECK(cudaGraphInstantiate(&again, graph, 0));
    p = kernel_node(&d, &by_five, &n, args);
    CHECK(cudaGraphExecNodeSetParams(exec, kernel, &p));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(back.data(), d, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    exact = all_equal(back, [](int i) { return 5.0f * i; });
    CHECK(cudaGraphLaunch(again, s));
    CHECK(cudaMemcpyAsync(back.data(), d, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    report(exact && all_equal(back, [](int i) { return 3.0f * i; }), "a kernel node changed in the graph and in one executable graph");

    using Get = CUresult (*)(CUgraphNode, CUgraphNodeParams*);
    if (auto get = (Get)try_entry_at("cuGraphNodeGetParams", 13020)) {
        CUgraphNodeParams q;
        CUresult r = get((CUgraphNode)fill, &q);
        bool same = r == CUDA_SUCCESS && q.type == CU_GRAPH_NODE_TYPE_MEMSET && q.memset.dst == (CUdeviceptr)set &&
                    q.memset.value == seven_bits && q.memset.elementSize == 4 && q.memset.width == (size_t)n;
        report(same, "the memset node's parameters read back");
    } else {
        printf("reading a node's parameters: not in this driver\n");
    }

    // The first copy again through the driver's own call, but with flags (which must be zero).
    using Add = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                             CUgraphNodeParams*);
    auto add = (Add)entry_at("cuGraphAddNode", 12030);
    CUgraphNodeParams flagged = {};
    flagged.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    CUDA_MEMCPY3D& copy_3d = flagged.memcpy.copyParams;
    copy_3d.srcMemoryType = CU_MEMORYTYPE_HOST;
    copy_3d.srcHost = pinned;
    copy_3d.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy_3d.dstDevice = (CUdeviceptr)d;
    copy_3d.WidthInBytes = bytes;
    copy_3d.Height = 1;
    copy_3d.Depth = 1;
    CUgraphNode refused;
    flagged.memcpy.flags = 1;
    printf("a copy node with flags: %d\n", (int)add(&refused, (CUgraph)graph, nullptr, nullptr, 0, &flagged));
    flagged.memcpy.flags = 0;
    printf("the same copy node without: %d\n", (int)add(&refused, (CUgraph)graph, nullptr, nullptr, 0, &flagged));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphExecDestroy(again));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaGraphDestroy(child));
    CHECK(cudaFreeHost(pinned));
    printf("graph_nodes: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
