// A graph's shape read and changed as programs and tools do: its edges and a node's dependents
// (with their default edge data), an edge removed and a node destroyed (the next instantiation
// runs without it), a clone's node found, a child graph node's own graph read and changed
// through the node (the parent runs the change; the program's graph stays as it was), an
// executable graph's child graph replaced by one of the same shape, a capture into the
// program's own graph after one of its nodes, an executable graph's flags, the ids tools name
// graphs and nodes by (CUDA 13.1), the graph written as a DOT file, and a kernel node's launch
// attributes (a window read back, copied and cloned; a cooperative launch).
// Usage: graph_topology [elements]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// x[i] *= a for i < n, one element a thread.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

static int n;
static size_t bytes;

// A kernel node scaling d by *a, after the `count` nodes at `deps`.
static cudaGraphNode_t add_scale(cudaGraph_t g, const cudaGraphNode_t* deps, size_t count, float** d, float* a) {
    static void* args[16][3];
    static int used = 0;
    void** slot = args[used++];
    slot[0] = d;
    slot[1] = a;
    slot[2] = &n;
    cudaKernelNodeParams p = {};
    p.func = (void*)scale;
    p.gridDim = dim3((n + 255) / 256);
    p.blockDim = dim3(256);
    p.kernelParams = slot;
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, g, deps, count, &p));
    return node;
}

// A memset node setting d to `value`, after the `count` nodes at `deps`.
static cudaGraphNode_t add_fill(cudaGraph_t g, const cudaGraphNode_t* deps, size_t count, float* d, float value) {
    cudaMemsetParams p = fill(d, n, value);
    cudaGraphNode_t node;
    CHECK(cudaGraphAddMemsetNode(&node, g, deps, count, &p));
    return node;
}

// Instantiates g, launches it on s and reads d back: whether every element is `want`.
static bool runs_to(cudaGraph_t g, cudaStream_t s, float* d, float want) {
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        if (back[i] != want) {
            printf("element %d: %f, not %f\n", i, back[i], want);
            return false;
        }
    }
    return true;
}

// Whether `a` holds exactly the nodes of `b`, in any order.
static bool same_set(std::vector<cudaGraphNode_t> a, std::vector<cudaGraphNode_t> b) {
    if (a.size() != b.size()) return false;
    for (auto x : a) {
        bool found = false;
        for (auto y : b) found = found || x == y;
        if (!found) return false;
    }
    return true;
}

// Whether `count` edge data at `data` are all the default (zeroed) one.
static bool default_data(const cudaGraphEdgeData* data, size_t count) {
    const unsigned char* bytes_of = (const unsigned char*)data;
    for (size_t i = 0; i < count * sizeof(cudaGraphEdgeData); i++) {
        if (bytes_of[i] != 0) return false;
    }
    return true;
}

// Whether a DOT file names graph `id` ("graph_<id>", no digit after it).
static bool names_graph(const std::string& dot, unsigned id) {
    std::string named = "graph_" + std::to_string(id);
    for (size_t at = dot.find(named); at != std::string::npos; at = dot.find(named, at + 1)) {
        char next = at + named.size() < dot.size() ? dot[at + named.size()] : ' ';
        if (next < '0' || next > '9') return true;
    }
    return false;
}

// The edges and dependents of a graph, an edge removed and a node destroyed.
static void edges_and_removals(cudaStream_t s, float* d) {
    static float two = 2.0f, three = 3.0f;
    static float* dp;
    dp = d;
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t a = add_fill(g, nullptr, 0, d, 1.0f);
    cudaGraphNode_t b = add_scale(g, &a, 1, &dp, &two);
    cudaGraphNode_t c = add_scale(g, &b, 1, &dp, &three);
    cudaGraphNode_t e;
    CHECK(cudaGraphAddEmptyNode(&e, g, &a, 1));

    size_t count = 0;
    CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &count));
    cudaGraphNode_t from[5], to[5];
    cudaGraphEdgeData data[5];
    memset(data, 0xff, sizeof data);
    memset(from, 0xff, sizeof from);
    memset(to, 0xff, sizeof to);
    size_t room = 5;
    CHECK(cudaGraphGetEdges(g, from, to, data, &room));
    bool edges = count == 3 && room == 3 && from[3] == nullptr && from[4] == nullptr && to[3] == nullptr &&
                 to[4] == nullptr && default_data(data, 3);
    std::vector<std::pair<cudaGraphNode_t, cudaGraphNode_t>> got, want = {{a, b}, {b, c}, {a, e}};
    for (size_t i = 0; i < room; i++) got.push_back({from[i], to[i]});
    for (auto w : want) {
        bool found = false;
        for (auto x : got) found = found || x == w;
        edges = edges && found;
    }
    report(edges, "three edges with their default data");
    room = 2;
    CHECK(cudaGraphGetEdges(g, from, to, nullptr, &room));
    report(room == 2 && from[0] != nullptr && to[1] != nullptr, "two edges in a room of two");
    printf("adding an edge that is there: %d\n", (int)cudaGraphAddDependencies(g, &a, &b, nullptr, 1));

    cudaGraphNode_t dependents[4];
    room = 4;
    CHECK(cudaGraphNodeGetDependentNodes(a, dependents, nullptr, &room));
    report(same_set({dependents, dependents + room}, {b, e}), "the memset's dependents, the kernel and the empty node");

    CHECK(cudaGraphRemoveDependencies(g, &b, &c, nullptr, 1));
    printf("removing an edge that is not there: %d\n", (int)cudaGraphRemoveDependencies(g, &b, &c, nullptr, 1));
    room = 4;
    CHECK(cudaGraphNodeGetDependentNodes(b, dependents, nullptr, &room));
    bool removed = room == 0;
    CHECK(cudaGraphDestroyNode(c));
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    report(removed && count == 3 && runs_to(g, s, d, 2.0f), "an edge removed and a node destroyed, the rest run");

    cudaGraph_t copy;
    CHECK(cudaGraphClone(&copy, g));
    cudaGraphNode_t found, other;
    CHECK(cudaGraphNodeFindInClone(&found, b, copy));
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(found, &type));
    room = 4;
    CHECK(cudaGraphNodeGetDependencies(found, dependents, nullptr, &room));
    cudaGraphNode_t a_copy;
    CHECK(cudaGraphNodeFindInClone(&a_copy, a, copy));
    report(found != b && type == cudaGraphNodeTypeKernel && room == 1 && dependents[0] == a_copy,
           "the clone's kernel node found from the original's");
    printf("a node of the clone in the clone: %d\n", (int)cudaGraphNodeFindInClone(&other, found, copy));

    using Id = CUresult (*)(CUgraph, unsigned*);
    using LocalId = CUresult (*)(CUgraphNode, unsigned*);
    using Containing = CUresult (*)(CUgraphNode, CUgraph*);
    auto graph_id = (Id)try_entry_at("cuGraphGetId", 13010);
    auto local_id = (LocalId)try_entry_at("cuGraphNodeGetLocalId", 13010);
    auto containing = (Containing)try_entry_at("cuGraphNodeGetContainingGraph", 13010);
    std::string path = "/tmp/graph_topology_" + std::to_string(getpid()) + ".dot";
    CHECK(cudaGraphDebugDotPrint(g, path.c_str(), 0));
    std::string dot;
    if (FILE* f = fopen(path.c_str(), "r")) {
        char buf[4096];
        size_t got_bytes;
        while ((got_bytes = fread(buf, 1, sizeof buf, f)) > 0) dot.append(buf, got_bytes);
        fclose(f);
    }
    remove(path.c_str());
    bool dot_ok = dot.find("digraph") != std::string::npos && dot.find("scale") != std::string::npos &&
                  dot.find("->") != std::string::npos;
    if (graph_id && local_id && containing) {
        unsigned gid = 0, copy_id = 0, ids[3] = {};
        CUgraph home = nullptr;
        bool ok = graph_id((CUgraph)g, &gid) == 0 && graph_id((CUgraph)copy, &copy_id) == 0 && gid != copy_id;
        ok = ok && local_id((CUgraphNode)a, &ids[0]) == 0 && local_id((CUgraphNode)b, &ids[1]) == 0 &&
             local_id((CUgraphNode)e, &ids[2]) == 0 && ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2];
        ok = ok && containing((CUgraphNode)found, &home) == 0 && home == (CUgraph)copy;
        report(ok && names_graph(dot, gid), "graph and node ids, and the node's graph");
    } else {
        printf("graph and node ids: not in this driver\n");
    }
    report(dot_ok, "the graph written as a DOT file");
    CHECK(cudaGraphDestroy(copy));
    CHECK(cudaGraphDestroy(g));
}

// A child graph node's own graph, changed through the node; an executable graph's child graph
// replaced.
static void child_graphs(cudaStream_t s, float* c) {
    static float two = 2.0f, four = 4.0f;
    static float* cp;
    cp = c;
    cudaGraph_t child, parent;
    CHECK(cudaGraphCreate(&child, 0));
    CHECK(cudaGraphCreate(&parent, 0));
    add_fill(child, nullptr, 0, c, 3.0f);
    cudaGraphNode_t node;
    CHECK(cudaGraphAddChildGraphNode(&node, parent, nullptr, 0, child));
    cudaGraph_t owned;
    CHECK(cudaGraphChildGraphNodeGetGraph(node, &owned));
    cudaGraphNode_t root;
    size_t count = 1;
    CHECK(cudaGraphGetRootNodes(owned, &root, &count));
    add_scale(owned, &root, 1, &cp, &two);
    report(owned != child && runs_to(parent, s, c, 6.0f), "a child graph changed through its node");
    cudaMemAllocNodeParams alloc = {};
    alloc.poolProps.allocType = cudaMemAllocationTypePinned;
    alloc.poolProps.location.type = cudaMemLocationTypeDevice;
    alloc.poolProps.location.id = 0;
    alloc.bytesize = 1 << 20;
    cudaGraphNode_t refused_alloc;
    printf("a memory node in a node's graph: %d\n", (int)cudaGraphAddMemAllocNode(&refused_alloc, owned, nullptr, 0, &alloc));
    report(runs_to(child, s, c, 3.0f), "the program's child graph unchanged");

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, parent, 0));
    cudaGraph_t same_shape, other_shape;
    CHECK(cudaGraphCreate(&same_shape, 0));
    cudaGraphNode_t first = add_fill(same_shape, nullptr, 0, c, 5.0f);
    add_scale(same_shape, &first, 1, &cp, &four);
    CHECK(cudaGraphExecChildGraphNodeSetParams(exec, node, same_shape));
    CHECK(cudaGraphCreate(&other_shape, 0));
    add_fill(other_shape, nullptr, 0, c, 9.0f);
    printf("a child graph of another shape: %d\n", (int)cudaGraphExecChildGraphNodeSetParams(exec, node, other_shape));
    cudaGraph_t unlinked;  // the same nodes, but the kernel not after the memset
    CHECK(cudaGraphCreate(&unlinked, 0));
    add_fill(unlinked, nullptr, 0, c, 9.0f);
    add_scale(unlinked, nullptr, 0, &cp, &four);
    printf("a child graph with other edges: %d\n", (int)cudaGraphExecChildGraphNodeSetParams(exec, node, unlinked));
    CHECK(cudaGraphDestroy(unlinked));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), c, bytes, cudaMemcpyDeviceToHost));
    report(all_equal(back, [](int) { return 20.0f; }), "an executable graph's child graph replaced");
    CHECK(cudaGraphExecDestroy(exec));

    // The driver's generic calls: a child graph node's parameters read back (its graph, and the
    // ownership CUDA marks invalid), and a graph moved into a node (ownership 1, written where
    // CUDA 12.9's header has it: after the graph handle).
    using GetParams = CUresult (*)(CUgraphNode, CUgraphNodeParams*);
    using AddNode = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                 CUgraphNodeParams*);
    auto get_params = (GetParams)try_entry_at("cuGraphNodeGetParams", 13020);
    auto add_node = (AddNode)entry_at("cuGraphAddNode", 12030);
    if (get_params) {
        CUgraphNodeParams q;
        memset(&q, 0x55, sizeof q);
        int ownership = 0;
        bool read = get_params((CUgraphNode)node, &q) == CUDA_SUCCESS;
        memcpy(&ownership, (char*)&q.graph + sizeof(CUgraph), sizeof ownership);
        report(read && q.type == CU_GRAPH_NODE_TYPE_GRAPH && q.graph.graph == (CUgraph)owned && ownership == -1,
               "a child graph node's parameters read back");
    } else {
        printf("reading a node's parameters: not in this driver\n");
    }
    cudaGraph_t moved, holder;
    CHECK(cudaGraphCreate(&moved, 0));
    CHECK(cudaGraphCreate(&holder, 0));
    add_fill(moved, nullptr, 0, c, 7.0f);
    CUgraphNodeParams mp = {};
    mp.type = CU_GRAPH_NODE_TYPE_GRAPH;
    mp.graph.graph = (CUgraph)moved;
    int move = 1;
    memcpy((char*)&mp.graph + sizeof(CUgraph), &move, sizeof move);
    CUgraphNode moved_node;
    CUresult added = add_node(&moved_node, (CUgraph)holder, nullptr, nullptr, 0, &mp);
    cudaGraph_t held = nullptr;
    CHECK(cudaGraphChildGraphNodeGetGraph((cudaGraphNode_t)moved_node, &held));
    report(added == CUDA_SUCCESS && held == moved && runs_to(holder, s, c, 7.0f), "a graph moved into a node runs there");
    cudaGraphExec_t alone;
    printf("a moved graph instantiated alone: %d\n", (int)cudaGraphInstantiate(&alone, moved, 0));
    CHECK(cudaGraphDestroy(holder));  // and the graph moved into it
    for (cudaGraph_t g : {child, parent, same_shape, other_shape}) CHECK(cudaGraphDestroy(g));
}

// Whether two access policy windows are the same.
static bool same_window(const cudaAccessPolicyWindow& a, const cudaAccessPolicyWindow& b) {
    return a.base_ptr == b.base_ptr && a.num_bytes == b.num_bytes && a.hitRatio == b.hitRatio &&
           a.hitProp == b.hitProp && a.missProp == b.missProp;
}

// A kernel node's launch attributes: a window kept, copied to another node and to a clone; a
// cooperative launch of a few blocks that still computes its result.
static void kernel_attributes(cudaStream_t s, float* d) {
    static float two = 2.0f;
    static float* dp;
    static int few = 1024;
    dp = d;
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t first = add_fill(g, nullptr, 0, d, 1.0f);
    void* args[3] = {&dp, &two, &few};
    cudaKernelNodeParams p = {};
    p.func = (void*)scale;
    p.gridDim = dim3(few / 256);
    p.blockDim = dim3(256);
    p.kernelParams = args;
    cudaGraphNode_t kernel, other;
    CHECK(cudaGraphAddKernelNode(&kernel, g, &first, 1, &p));
    CHECK(cudaGraphAddKernelNode(&other, g, &kernel, 1, &p));
    cudaKernelNodeAttrValue window = {}, back = {};
    window.accessPolicyWindow.base_ptr = d;
    window.accessPolicyWindow.num_bytes = 4096;
    window.accessPolicyWindow.hitRatio = 0.5f;
    window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributeAccessPolicyWindow, &window));
    CHECK(cudaGraphKernelNodeGetAttribute(kernel, cudaKernelNodeAttributeAccessPolicyWindow, &back));
    report(same_window(back.accessPolicyWindow, window.accessPolicyWindow), "a kernel node's access policy window read back");
    cudaKernelNodeAttrValue cooperative = {};
    cooperative.cooperative = 1;
    CHECK(cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributeCooperative, &cooperative));
    CHECK(cudaGraphKernelNodeCopyAttributes(other, kernel));
    back = {};
    CHECK(cudaGraphKernelNodeGetAttribute(other, cudaKernelNodeAttributeAccessPolicyWindow, &back));
    cudaKernelNodeAttrValue copied = {};
    CHECK(cudaGraphKernelNodeGetAttribute(other, cudaKernelNodeAttributeCooperative, &copied));
    report(same_window(back.accessPolicyWindow, window.accessPolicyWindow) && copied.cooperative == 1,
           "a kernel node's attributes copied to another");
    cudaGraph_t copy;
    CHECK(cudaGraphClone(&copy, g));
    cudaGraphNode_t cloned;
    CHECK(cudaGraphNodeFindInClone(&cloned, kernel, copy));
    back = {};
    CHECK(cudaGraphKernelNodeGetAttribute(cloned, cudaKernelNodeAttributeAccessPolicyWindow, &back));
    report(same_window(back.accessPolicyWindow, window.accessPolicyWindow), "a clone's kernel node keeps its window");
    cudaKernelNodeAttrValue huge = window;
    huge.accessPolicyWindow.hitRatio = 2.0f;
    printf("a window with a hit ratio of 2: %d\n",
           (int)cudaGraphKernelNodeSetAttribute(kernel, cudaKernelNodeAttributeAccessPolicyWindow, &huge));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> head(few), tail(n - few);
    CHECK(cudaMemcpy(head.data(), d, few * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(tail.data(), d + few, (n - few) * sizeof(float), cudaMemcpyDeviceToHost));
    report(all_equal(head, [](int) { return 4.0f; }) && all_equal(tail, [](int) { return 1.0f; }),
           "two cooperative kernel nodes of a few blocks");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(copy));
    CHECK(cudaGraphDestroy(g));
}

// A capture into the program's graph after one of its nodes; an executable graph's flags.
static void capture_into(cudaStream_t s, float* d) {
    cudaGraph_t g, captured;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t first = add_fill(g, nullptr, 0, d, 1.0f);
    CHECK(cudaStreamBeginCaptureToGraph(s, g, &first, nullptr, 1, cudaStreamCaptureModeGlobal));
    scale<<<(n + 255) / 256, 256, 0, s>>>(d, 4.0f, n);
    CHECK(cudaStreamEndCapture(s, &captured));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    cudaGraphNode_t kernel;
    size_t room = 1;
    CHECK(cudaGraphNodeGetDependentNodes(first, &kernel, nullptr, &room));
    report(captured == g && count == 2 && room == 1 && runs_to(g, s, d, 4.0f),
           "a capture into the program's graph, after its node");

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    unsigned long long flags = 0;
    CHECK(cudaGraphExecGetFlags(exec, &flags));
    report(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch, "the executable graph's flags read back");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));

    // A capture that fails (a synchronization cannot be captured) leaves the program its graph.
    cudaGraph_t h;
    CHECK(cudaGraphCreate(&h, 0));
    first = add_fill(h, nullptr, 0, d, 1.0f);
    CHECK(cudaStreamBeginCaptureToGraph(s, h, &first, nullptr, 1, cudaStreamCaptureModeRelaxed));
    scale<<<(n + 255) / 256, 256, 0, s>>>(d, 4.0f, n);
    printf("a synchronization in the capture: %d\n", (int)cudaStreamSynchronize(s));
    printf("its end: %d\n", (int)cudaStreamEndCapture(s, &captured));
    count = 0;
    printf("the program's graph after the failed capture: %d\n", (int)cudaGraphGetNodes(h, nullptr, &count));
    CHECK(cudaGraphDestroy(h));
}

int main(int argc, char** argv) {
    n = argc > 1 ? atoi(argv[1]) : 100000;
    bytes = n * sizeof(float);
    float *d, *c;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMalloc(&c, bytes));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    edges_and_removals(s, d);
    child_graphs(s, c);
    capture_into(s, d);
    kernel_attributes(s, d);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(c));
    printf("graph_topology: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
