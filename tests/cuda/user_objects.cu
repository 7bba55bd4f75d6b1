// User objects (cudaUserObjectCreate, cudaGraphRetainUserObject): a program's resource with a
// destructor, handed to its graphs so that it lives while a graph may use it, as PyTorch keeps
// the work of collectives captured into a CUDA graph. An object moved into a capturing stream's
// graph outlives the capture's end and the graph itself while an executable graph of it lives,
// and its destructor runs once, after that executable graph's launches (their host functions
// all run), when it is destroyed.
// A clone holds references of its own, as does a child graph node; the program's releases
// count; a graph cannot release more than it holds.
// Usage: user_objects [elements]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// x[i] *= a for i < n, one element a thread.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// How many times each object's destructor ran, by the index its pointer carries; the rounds
// of the graph's host function done when the first ran.
static std::atomic<int> destroyed[4];
static std::atomic<int> rounds{0}, rounds_at_destruction{-1};

static void CUDART_CB destroy(void* index) {
    if ((size_t)index == 0) rounds_at_destruction = rounds.load();
    destroyed[(size_t)index]++;
}

static void CUDART_CB count_round(void*) {
    rounds++;
}

// Whether object `index`'s destructor has not run, 50 ms on (it runs on a thread of its own:
// one run too early has its time to show).
static bool still_held(size_t index) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return destroyed[index] == 0;
}

// Waits up to 10 s for object `index`'s destructor (CUDA runs it on a thread of its own, soon
// after the last reference goes), then 50 ms more for a second run that must not come.
static int runs_of(size_t index) {
    for (int waited = 0; destroyed[index] == 0 && waited < 10000; waited++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return destroyed[index];
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    std::vector<float> host(n);
    for (int i = 0; i < n; i++) host[i] = (float)i;
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // Moved into the graph a stream is capturing, as PyTorch does.
    cudaUserObject_t first;
    CHECK(cudaUserObjectCreate(&first, (void*)0, destroy, 1, cudaUserObjectNoDestructorSync));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    scale<<<(n + 255) / 256, 256, 0, s>>>(d, 2.0f, n);
    CHECK(cudaLaunchHostFunc(s, count_round, nullptr));
    cudaStreamCaptureStatus status;
    unsigned long long id = 0;
    cudaGraph_t capturing = nullptr;
    CHECK(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, nullptr, nullptr, nullptr));
    CHECK(cudaGraphRetainUserObject(capturing, first, 1, cudaGraphUserObjectMove));
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphDestroy(graph));
    report(still_held(0), "the object outlives its graph while an executable graph of it lives");
    for (int round = 0; round < 3; round++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaStreamSynchronize(s)); // the destroy does not wait for the launches
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool exact = true;
    for (int i = 0; i < n; i++) exact = exact && host[i] == (float)i * 8.0f;
    report(exact, "3 launches of the captured graph");
    report(runs_of(0) == 1, "its destructor ran once, after its executable graph was destroyed");
    report(rounds_at_destruction == 3, "its destructor ran after the 3 launches' host functions");

    // Three references of the program's and one a graph retains, which its clone takes again;
    // the graph goes, and the program lets two go: it holds one, the clone one.
    cudaUserObject_t second;
    CHECK(cudaUserObjectCreate(&second, (void*)1, destroy, 3, cudaUserObjectNoDestructorSync));
    cudaGraph_t built, clone;
    CHECK(cudaGraphCreate(&built, 0));
    CHECK(cudaGraphRetainUserObject(built, second, 1, 0));
    CHECK(cudaGraphClone(&clone, built));
    CHECK(cudaGraphDestroy(built));
    CHECK(cudaUserObjectRelease(second, 2));
    CHECK(cudaUserObjectRelease(second, 1));
    report(still_held(1), "a clone holds references of its own");
    CHECK(cudaGraphReleaseUserObject(clone, second, 1));
    report(runs_of(1) == 1, "its destructor ran once, when the clone let it go");
    CHECK(cudaGraphDestroy(clone));

    // One reference of the program's and one a graph holds: the graph cannot let go of two
    // (though the object has two), nor may an object lack its flag. An object of its own, and
    // let go unchecked, since CUDA does not say what it does with the first.
    cudaUserObject_t spare;
    CHECK(cudaUserObjectCreate(&spare, (void*)3, destroy, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t holder;
    CHECK(cudaGraphCreate(&holder, 0));
    CHECK(cudaGraphRetainUserObject(holder, spare, 1, 0));
    cudaError_t e = cudaGraphReleaseUserObject(holder, spare, 2);
    printf("a graph releasing more than it holds: %d (%s)\n", (int)e, cudaGetErrorName(e));
    e = cudaUserObjectCreate(&first, (void*)0, destroy, 1, 0);
    printf("an object without its flag: %d (%s)\n", (int)e, cudaGetErrorName(e));
    report(still_held(3), "still held after the refusals");
    cudaUserObjectRelease(spare, 1);
    cudaGraphDestroy(holder);

    // A graph holding an object embedded as a child graph node: the node's copy holds it too.
    cudaUserObject_t third;
    CHECK(cudaUserObjectCreate(&third, (void*)2, destroy, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t inner, outer;
    CHECK(cudaGraphCreate(&inner, 0));
    CHECK(cudaGraphRetainUserObject(inner, third, 1, cudaGraphUserObjectMove));
    CHECK(cudaGraphCreate(&outer, 0));
    cudaGraphNode_t embedded;
    CHECK(cudaGraphAddChildGraphNode(&embedded, outer, nullptr, 0, inner));
    CHECK(cudaGraphDestroy(inner));
    report(still_held(2), "an object of a child graph held by its node");
    CHECK(cudaGraphDestroy(outer));
    report(runs_of(2) == 1, "its destructor ran once, when the parent graph went");
    CHECK(cudaStreamDestroy(s));
    printf("user_objects: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
