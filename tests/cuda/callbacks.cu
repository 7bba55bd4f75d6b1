// Host functions and stream callbacks, as CUDA programs use them to learn that a stream got
// somewhere: cudaLaunchHostFunc and cudaStreamAddCallback on two streams, each run after the
// stream's earlier work (the bytes a copy to the host brought are there) and in the order they
// were queued, told the stream and its status; every one has run when the stream is
// synchronized.
// Usage: callbacks [elements]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// What a callback sees: the host buffer a copy filled, and the log of callbacks run.
struct Seen {
    const float* host;
    int n;
    float want;
    int log[8];
    int logged;
    int bad;
};

// Appends its tag to the log; fails it if the copy before it had not landed.
struct Tagged {
    Seen* seen;
    int tag;
};

static void CUDART_CB host_function(void* data) {
    Tagged* t = (Tagged*)data;
    for (int i = 0; i < t->seen->n; i++)
        if (t->seen->host[i] != t->seen->want) t->seen->bad++;
    t->seen->log[t->seen->logged++] = t->tag;
}

static cudaStream_t callback_stream;

static void CUDART_CB stream_callback(cudaStream_t stream, cudaError_t status, void* data) {
    Tagged* t = (Tagged*)data;
    if (stream != callback_stream || status != cudaSuccess) t->seen->bad++;
    host_function(data);
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    size_t bytes = n * sizeof(float);
    float* d;
    CHECK(cudaMalloc(&d, bytes));
    std::vector<float> host(n, 0.0f), ones(n, 1.0f);
    CHECK(cudaStreamCreate(&callback_stream));
    Seen seen = {host.data(), n, 1.0f, {0}, 0, 0};
    Tagged first = {&seen, 1}, second = {&seen, 2}, third = {&seen, 3};
    CHECK(cudaMemcpyAsync(d, ones.data(), bytes, cudaMemcpyHostToDevice, callback_stream));
    CHECK(cudaMemcpyAsync(host.data(), d, bytes, cudaMemcpyDeviceToHost, callback_stream));
    CHECK(cudaLaunchHostFunc(callback_stream, host_function, &first));
    CHECK(cudaStreamAddCallback(callback_stream, stream_callback, &second, 0));
    CHECK(cudaLaunchHostFunc(callback_stream, host_function, &third));
    CHECK(cudaStreamSynchronize(callback_stream));
    bool in_order = seen.logged == 3 && seen.log[0] == 1 && seen.log[1] == 2 && seen.log[2] == 3;
    printf("host functions and callbacks: %d run, in order %d, saw the copy %d\n", seen.logged, in_order,
           seen.bad == 0);
    // On the default stream too, after a memset.
    CHECK(cudaMemset(d, 0, bytes));
    CHECK(cudaMemcpyAsync(host.data(), d, bytes, cudaMemcpyDeviceToHost, 0));
    seen.want = 0.0f;
    Tagged fourth = {&seen, 4};
    CHECK(cudaLaunchHostFunc(0, host_function, &fourth));
    CHECK(cudaDeviceSynchronize());
    bool ok = in_order && seen.logged == 4 && seen.log[3] == 4 && seen.bad == 0;
    // Flags other than 0 are refused.
    cudaError_t flags = cudaStreamAddCallback(callback_stream, stream_callback, &second, 1);
    cudaGetLastError();
    printf("a callback with flags 1: %s\n", cudaGetErrorName(flags));
    CHECK(cudaStreamDestroy(callback_stream));
    CHECK(cudaFree(d));
    if (!ok) {
        printf("FAILED: %d callbacks run, %d saw the wrong bytes\n", seen.logged, seen.bad);
        return 1;
    }
    printf("callbacks: all in order\n");
    return 0;
}
