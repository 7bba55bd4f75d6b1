// CUDA graphs as programs use them. Stream capture: a copy in, kernels and a memset on two
// streams forked and joined by events, a host function and a copy out, captured, then launched
// round after round on another stream with new input each time (a graph's copy reads the host
// memory when it runs). The graph API: memset, kernel, host and copy nodes with dependencies,
// instantiated, cloned, updated and launched, and launched into a capture as a child graph;
// nodes' parameters read back and changed in the graph or in an executable graph alone, a
// kernel node turned off and on; event record and wait nodes, built and captured.
// Threads each capturing and launching their own graph at once. What CUDA refuses: capturing
// the legacy stream, a synchronization while capturing, a capture ended on another stream or
// with work not joined back. Every value is exact.
// Usage: graphs [elements]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// vadd, scale and iota, which the stand-in runs by name (cuda-standin's kernels.rs).
#include "../fixtures/shim_kernels.cu"

// Whether x[i] == f(i) for every i < n.
template <typename F>
static bool all(const float* x, int n, F f) {
    for (int i = 0; i < n; i++) {
        if (x[i] != f(i)) {
            printf("  element %d: %g, expected %g\n", i, (double)x[i], (double)f(i));
            return false;
        }
    }
    return true;
}

static void count_call(void* calls) { ++*(int*)calls; }

// A kernel node's parameters: scale over n elements, its arguments (d, factor, n) at `args`.
static cudaKernelNodeParams scale_node(void** args, int n) {
    cudaKernelNodeParams k = {};
    k.func = (void*)scale;
    k.gridDim = dim3((n + 255) / 256);
    k.blockDim = dim3(256);
    k.kernelParams = args;
    return k;
}

// The float whose four bytes are all `byte` (what a byte memset makes of each element).
static float filled(unsigned char byte) {
    float f;
    memset(&f, byte, sizeof f);
    return f;
}

// Captures x -> 2x on stream s1 and a memset of b on s2 (forked from s1, joined back), then
// c = x + b, a host call and c copied out; launches it `rounds` times on `run`, each with new
// input. Answers whether every round came out exact and nothing ran while capturing.
static bool capture_fork_join(int n, int rounds, bool verbose) {
    size_t bytes = n * sizeof(float);
    float *a, *b, *c;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    // Page-locked, as CUDA's graphs want the host side of their copies.
    float *in, *out;
    CHECK(cudaMallocHost(&in, bytes));
    CHECK(cudaMallocHost(&out, bytes));
    memset(in, 0, bytes);
    memset(out, 0, bytes);
    cudaStream_t s1, s2, run;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&run, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreate(&fork));
    CHECK(cudaEventCreate(&join));
    int calls = 0;
    int blocks = (n + 255) / 256;

    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(s1, &status));
    CHECK(cudaMemcpyAsync(a, in, bytes, cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    cudaStreamCaptureStatus joined;
    CHECK(cudaStreamIsCapturing(s2, &joined));
    scale<<<blocks, 256, 0, s1>>>(a, 2.0f, n);
    CHECK(cudaMemsetAsync(b, 0x40, bytes, s2));
    CHECK(cudaEventRecord(join, s2));
    CHECK(cudaStreamWaitEvent(s1, join, 0));
    vadd<<<blocks, 256, 0, s1>>>(a, b, c, n);
    CHECK(cudaLaunchHostFunc(s1, count_call, &calls));
    CHECK(cudaMemcpyAsync(out, c, bytes, cudaMemcpyDeviceToHost, s1));
    cudaStreamCaptureStatus info;
    const cudaGraphNode_t* deps = nullptr;
    size_t dep_count = 0;
    CHECK(cudaStreamGetCaptureInfo(s1, &info, nullptr, nullptr, &deps, nullptr, &dep_count));
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s1, &graph));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    bool idle = calls == 0 && all(out, n, [](int) { return 0.0f; });
    if (verbose) {
        printf("capturing: status %d, joined stream %d, info %d with %zu dependency; %zu nodes\n", (int)status,
               (int)joined, (int)info, dep_count, nodes);
        report(idle, "nothing ran while capturing:");
    }

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    bool exact = idle;
    float m = filled(0x40);
    for (int r = 1; r <= rounds; r++) {
        for (int i = 0; i < n; i++) in[i] = (float)(r * (i % 100));
        CHECK(cudaGraphLaunch(exec, run));
        CHECK(cudaStreamSynchronize(run));
        exact = all(out, n, [r, m](int i) { return 2.0f * (float)(r * (i % 100)) + m; }) && exact;
        exact = exact && calls == r;
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(join));
    for (cudaStream_t s : {s1, s2, run}) CHECK(cudaStreamDestroy(s));
    for (float* p : {a, b, c}) CHECK(cudaFree(p));
    CHECK(cudaFreeHost(in));
    CHECK(cudaFreeHost(out));
    return exact;
}

// A graph built node by node: d set to 2.0, scaled by 3, then a host call and d copied out,
// both after the kernel (the copy added first, its dependency on the kernel afterwards). Launched twice, cloned and launched, updated from its clone, and
// launched inside a capture (a child graph).
static void graph_api(int n) {
    size_t bytes = n * sizeof(float);
    float *d, *out;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMallocHost(&out, bytes));
    int calls = 0;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaMemsetParams set = fill(d, n, 2.0f);
    cudaGraphNode_t memset_node, kernel_node, host_node, copy_node;
    CHECK(cudaGraphAddMemcpyNode1D(&copy_node, graph, nullptr, 0, out, d, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &set));
    float factor = 3.0f;
    void* args[] = {&d, &factor, &n};
    cudaKernelNodeParams k = scale_node(args, n);
    CHECK(cudaGraphAddKernelNode(&kernel_node, graph, &memset_node, 1, &k));
    factor = 100.0f;  // read when the node was added: launches scale by 3
    cudaHostNodeParams h = {count_call, &calls};
    CHECK(cudaGraphAddHostNode(&host_node, graph, &kernel_node, 1, &h));
    CHECK(cudaGraphAddDependencies(graph, &kernel_node, &copy_node, nullptr, 1));
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(kernel_node, &type));
    size_t roots = 0, nodes = 0;
    CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    printf("graph API: %zu nodes, %zu root, kernel node type %d\n", nodes, roots, (int)type);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    bool exact = true;
    for (int r = 0; r < 2; r++) {
        memset(out, 0, bytes);
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaStreamSynchronize(s));
        exact = all(out, n, [](int) { return 6.0f; }) && exact;
    }
    report(exact && calls == 2, "graph API: memset, kernel, host and copy nodes launched twice");

    cudaGraph_t copy;
    CHECK(cudaGraphClone(&copy, graph));
    cudaGraphExec_t copy_exec;
    CHECK(cudaGraphInstantiate(&copy_exec, copy, 0));
    memset(out, 0, bytes);
    CHECK(cudaGraphLaunch(copy_exec, s));
    CHECK(cudaStreamSynchronize(s));
    report(all(out, n, [](int) { return 6.0f; }) && calls == 3, "graph API: a clone");
    cudaGraphExecUpdateResultInfo updated;
    CHECK(cudaGraphExecUpdate(exec, copy, &updated));
    printf("graph API: updated from its clone: %d\n", (int)updated.result);

    cudaStream_t outer;
    CHECK(cudaStreamCreateWithFlags(&outer, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCapture(outer, cudaStreamCaptureModeGlobal));
    CHECK(cudaGraphLaunch(exec, outer));
    cudaGraph_t parent;
    CHECK(cudaStreamEndCapture(outer, &parent));
    cudaGraphExec_t parent_exec;
    CHECK(cudaGraphInstantiate(&parent_exec, parent, 0));
    memset(out, 0, bytes);
    CHECK(cudaGraphLaunch(parent_exec, s));
    CHECK(cudaStreamSynchronize(s));
    report(all(out, n, [](int) { return 6.0f; }) && calls == 4, "graph API: launched in a capture, as a child graph,");

    for (cudaGraphExec_t e : {exec, copy_exec, parent_exec}) CHECK(cudaGraphExecDestroy(e));
    for (cudaGraph_t g : {graph, copy, parent}) CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(outer));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(out));
}

static void count_twice(void* calls) { *(int*)calls += 2; }

// A node's parameters read back and changed: d set to 2.0, scaled by 3, copied out, a host
// call. In the executable graph alone: the factor 5, the memset 4.0, the copy to another
// buffer, another host function; the kernel turned off and on. In the graph: the factor 7, which
// a new executable graph takes and the first does not.
static void node_parameters(int n) {
    size_t bytes = n * sizeof(float);
    float *d, *out, *other;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMallocHost(&out, bytes));
    CHECK(cudaMallocHost(&other, bytes));
    int calls = 0;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t graph;
    CHECK(cudaGraphCreate(&graph, 0));
    cudaMemsetParams set = fill(d, n, 2.0f);
    cudaGraphNode_t memset_node, kernel_node, copy_node, host_node;
    CHECK(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &set));
    float factor = 3.0f;
    void* args[] = {&d, &factor, &n};
    cudaKernelNodeParams k = scale_node(args, n);
    CHECK(cudaGraphAddKernelNode(&kernel_node, graph, &memset_node, 1, &k));
    CHECK(cudaGraphAddMemcpyNode1D(&copy_node, graph, &kernel_node, 1, out, d, bytes, cudaMemcpyDeviceToHost));
    cudaHostNodeParams h = {count_call, &calls};
    CHECK(cudaGraphAddHostNode(&host_node, graph, &copy_node, 1, &h));

    cudaKernelNodeParams got = {};
    CHECK(cudaGraphKernelNodeGetParams(kernel_node, &got));
    cudaMemsetParams got_set = {};
    CHECK(cudaGraphMemsetNodeGetParams(memset_node, &got_set));
    cudaHostNodeParams got_host = {};
    CHECK(cudaGraphHostNodeGetParams(host_node, &got_host));
    bool same = got.func == (void*)scale && got.gridDim.x == k.gridDim.x && got.blockDim.x == 256 &&
                *(float**)got.kernelParams[0] == d && *(float*)got.kernelParams[1] == 3.0f &&
                *(int*)got.kernelParams[2] == n && got_set.dst == d && got_set.value == set.value &&
                got_set.width == (size_t)n && got_host.fn == count_call && got_host.userData == &calls;
    printf("node parameters read back: %s\n", same ? "the same" : "DIFFERENT");

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    auto launch = [&](cudaGraphExec_t e) {
        memset(out, 0, bytes);
        memset(other, 0, bytes);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
    };
    launch(exec);
    bool exact = all(out, n, [](int) { return 6.0f; }) && calls == 1;
    factor = 5.0f;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, kernel_node, &k));
    set = fill(d, n, 4.0f);
    CHECK(cudaGraphExecMemsetNodeSetParams(exec, memset_node, &set));
    CHECK(cudaGraphExecMemcpyNodeSetParams1D(exec, copy_node, other, d, bytes, cudaMemcpyDeviceToHost));
    cudaHostNodeParams twice = {count_twice, &calls};
    CHECK(cudaGraphExecHostNodeSetParams(exec, host_node, &twice));
    launch(exec);
    exact = exact && all(other, n, [](int) { return 20.0f; }) && all(out, n, [](int) { return 0.0f; }) && calls == 3;
    report(exact, "node parameters changed in the executable graph:");

    CHECK(cudaGraphNodeSetEnabled(exec, kernel_node, 0));
    unsigned enabled = 1;
    CHECK(cudaGraphNodeGetEnabled(exec, kernel_node, &enabled));
    launch(exec);
    bool off = enabled == 0 && all(other, n, [](int) { return 4.0f; });
    CHECK(cudaGraphNodeSetEnabled(exec, kernel_node, 1));
    launch(exec);
    report(off && all(other, n, [](int) { return 20.0f; }), "a kernel node turned off, then on:");
    printf("a host node turned off: %s\n", cudaGetErrorName(cudaGraphNodeSetEnabled(exec, host_node, 0)));

    factor = 7.0f;
    CHECK(cudaGraphKernelNodeSetParams(kernel_node, &k));
    cudaGraphExec_t fresh;
    CHECK(cudaGraphInstantiate(&fresh, graph, 0));
    launch(fresh);
    bool in_graph = all(out, n, [](int) { return 14.0f; });
    launch(exec);
    report(in_graph && all(other, n, [](int) { return 20.0f; }),
           "a kernel node changed in the graph: a new executable graph takes it, the first keeps its own,");
    printf("a memset node given a kernel's parameters: %s\n",
           cudaGetErrorName(cudaGraphExecKernelNodeSetParams(fresh, memset_node, &k)));

    for (cudaGraphExec_t e : {exec, fresh}) CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(out));
    CHECK(cudaFreeHost(other));
}

// Event record and wait nodes: a graph that fills d and records `done`, and another, launched
// on a second stream, that waits for `done` and copies d out; the record node pointed at
// another event in the executable graph alone; a capture's external wait and record become
// such nodes.
static void event_nodes(int n) {
    size_t bytes = n * sizeof(float);
    float *d, *out;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMallocHost(&out, bytes));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t done, other;
    CHECK(cudaEventCreate(&done));
    CHECK(cudaEventCreate(&other));

    cudaGraph_t producer, consumer;
    CHECK(cudaGraphCreate(&producer, 0));
    CHECK(cudaGraphCreate(&consumer, 0));
    cudaMemsetParams set = fill(d, n, 3.0f);
    cudaGraphNode_t memset_node, record_node, wait_node, copy_node;
    CHECK(cudaGraphAddMemsetNode(&memset_node, producer, nullptr, 0, &set));
    CHECK(cudaGraphAddEventRecordNode(&record_node, producer, &memset_node, 1, done));
    CHECK(cudaGraphAddEventWaitNode(&wait_node, consumer, nullptr, 0, done));
    CHECK(cudaGraphAddMemcpyNode1D(&copy_node, consumer, &wait_node, 1, out, d, bytes, cudaMemcpyDeviceToHost));
    cudaEvent_t got_record = nullptr, got_wait = nullptr;
    CHECK(cudaGraphEventRecordNodeGetEvent(record_node, &got_record));
    CHECK(cudaGraphEventWaitNodeGetEvent(wait_node, &got_wait));
    cudaGraphNodeType record_type, wait_type;
    CHECK(cudaGraphNodeGetType(record_node, &record_type));
    CHECK(cudaGraphNodeGetType(wait_node, &wait_type));
    printf("event nodes: types %d and %d, events read back %s\n", (int)record_type, (int)wait_type,
           got_record == done && got_wait == done ? "the same" : "DIFFERENT");
    cudaGraphExec_t produce, consume;
    CHECK(cudaGraphInstantiate(&produce, producer, 0));
    CHECK(cudaGraphInstantiate(&consume, consumer, 0));
    memset(out, 0, bytes);
    CHECK(cudaGraphLaunch(produce, s1));
    CHECK(cudaGraphLaunch(consume, s2));
    CHECK(cudaStreamSynchronize(s2));
    report(all(out, n, [](int) { return 3.0f; }), "event record and wait nodes across two graphs on two streams");
    // `other` is recorded only by the changed record node: its time can then be asked.
    CHECK(cudaGraphExecEventRecordNodeSetEvent(produce, record_node, other));
    CHECK(cudaGraphLaunch(produce, s1));
    CHECK(cudaStreamSynchronize(s1));
    float ms = -1;
    printf("the record node given another event in the executable graph: %s\n",
           cudaGetErrorName(cudaEventElapsedTime(&ms, other, other)));

    cudaGraph_t captured;
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaStreamWaitEvent(s1, done, cudaEventWaitExternal));
    CHECK(cudaMemsetAsync(d, 0, bytes, s1));
    CHECK(cudaEventRecordWithFlags(other, s1, cudaEventRecordExternal));
    CHECK(cudaStreamEndCapture(s1, &captured));
    printf("captured an external wait and record: %d wait node, %d record node\n",
           nodes_of(captured, cudaGraphNodeTypeWaitEvent), nodes_of(captured, cudaGraphNodeTypeEventRecord));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(captured, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK(cudaGraphGetNodes(captured, nodes.data(), &count));
    bool events_same = true;
    for (auto node : nodes) {
        cudaGraphNodeType t;
        cudaEvent_t e = nullptr;
        CHECK(cudaGraphNodeGetType(node, &t));
        if (t == cudaGraphNodeTypeEventRecord) events_same = cudaGraphEventRecordNodeGetEvent(node, &e) == cudaSuccess && e == other && events_same;
        if (t == cudaGraphNodeTypeWaitEvent) events_same = cudaGraphEventWaitNodeGetEvent(node, &e) == cudaSuccess && e == done && events_same;
    }
    printf("captured event nodes' events read back: %s\n", events_same ? "the same" : "DIFFERENT");
    cudaGraphExec_t replayed;
    CHECK(cudaGraphInstantiate(&replayed, captured, 0));
    CHECK(cudaGraphLaunch(replayed, s1));
    CHECK(cudaEventSynchronize(other));
    CHECK(cudaMemcpy(out, d, bytes, cudaMemcpyDeviceToHost));
    report(all(out, n, [](int) { return 0.0f; }), "the captured graph launched, its event waited for,");

    for (cudaGraphExec_t e : {produce, consume, replayed}) CHECK(cudaGraphExecDestroy(e));
    for (cudaGraph_t g : {producer, consumer, captured}) CHECK(cudaGraphDestroy(g));
    for (cudaEvent_t e : {done, other}) CHECK(cudaEventDestroy(e));
    for (cudaStream_t st : {s1, s2}) CHECK(cudaStreamDestroy(st));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(out));
}

// What CUDA refuses, each printed with its error's name; the program goes on after each.
static void refusals(int n) {
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork;
    CHECK(cudaEventCreate(&fork));
    cudaGraph_t graph;

    cudaError_t e = cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal);
    printf("capturing the legacy stream: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    scale<<<(n + 255) / 256, 256, 0, s1>>>(d, 2.0f, n);
    e = cudaStreamSynchronize(s1);
    cudaError_t ended = cudaStreamEndCapture(s1, &graph);
    printf("synchronized while capturing: %s, then ended: %s, graph %s\n", cudaGetErrorName(e),
           cudaGetErrorName(ended), graph ? "set" : "none");
    cudaGetLastError();

    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    scale<<<(n + 255) / 256, 256, 0, s2>>>(d, 2.0f, n);
    e = cudaStreamEndCapture(s2, &graph);
    printf("ended on the joined stream: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaStreamEndCapture(s1, &graph);
    printf("ended with work not joined back: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // Both streams work as before.
    std::vector<float> out(n, 1.0f);
    CHECK(cudaMemset(d, 0, n * sizeof(float)));
    scale<<<(n + 255) / 256, 256, 0, s2>>>(d, 2.0f, n);
    CHECK(cudaMemcpyAsync(out.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    report(all(out.data(), n, [](int) { return 0.0f; }), "streams after the refusals");
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(d));
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    report(capture_fork_join(n, 3, true), "captured fork and join, launched 3 rounds with new input,");
    graph_api(n);
    node_parameters(n);
    event_nodes(n);
    refusals(n);

    const int threads = 4;
    bool exact[threads];
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++) workers.emplace_back([&exact, n, t] { exact[t] = capture_fork_join(n + t, 2, false); });
    for (auto& w : workers) w.join();
    bool all_exact = true;
    for (int t = 0; t < threads; t++) all_exact = all_exact && exact[t];
    report(all_exact, "4 threads capturing and launching their own graphs");

    if (failures) {
        printf("graphs: %d FAILED\n", failures);
        return 1;
    }
    printf("graphs: all exact\n");
    return 0;
}
