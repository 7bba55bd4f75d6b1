// The CUDA shim's costs, as a plain CUDA program measures them: asynchronous launches of a
// one-thread kernel, then one synchronize; a cudaMemcpy each way; a round of managed memory
// (written by the host, a kernel, a synchronization, read by the host); the same launches
// captured in a CUDA graph, launched once; pairs of a 1 MiB allocation and its free, by
// cudaMalloc and cudaFree, then by cudaMallocAsync and cudaFreeAsync. `ac-bench --only shim` runs it
// through the shim and the same work through the SDK against the same backend.
// Usage: shim_bench [launches] [copy MiB]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

// The same kernel as tests/fixtures/shim_kernels.cu's, which the SDK side launches.
__global__ void iota(unsigned* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int main(int argc, char** argv) {
    int launches = argc > 1 ? atoi(argv[1]) : 20000;
    size_t bytes = (size_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
    unsigned* x;
    CHECK(cudaMalloc(&x, sizeof(unsigned)));
    for (int i = 0; i < launches / 10; i++) iota<<<1, 1>>>(x, 1);
    CHECK(cudaDeviceSynchronize());
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; i++) iota<<<1, 1>>>(x, 1);
    CHECK(cudaDeviceSynchronize());
    printf("launches/s %.0f\n", launches / seconds_since(t));

    // The same launches in a graph: captured on a stream, instantiated, then one launch (after
    // a first, which warms as the loop above did).
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < launches; i++) iota<<<1, 1, 0, s>>>(x, 1);
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    t = std::chrono::steady_clock::now();
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    printf("graph launches/s %.0f\n", launches / seconds_since(t));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));

    // Allocation and free pairs: cudaMalloc each a round trip, cudaMallocAsync after the first
    // the block its stream freed (the device's memory pool).
    int pairs = launches / 10;
    void* p;
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; i++) {
        CHECK(cudaMalloc(&p, 1 << 20));
        CHECK(cudaFree(p));
    }
    printf("alloc pairs/s %.0f\n", pairs / seconds_since(t));
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < pairs; i++) {
        CHECK(cudaMallocAsync(&p, 1 << 20, s));
        CHECK(cudaFreeAsync(p, s));
    }
    CHECK(cudaStreamSynchronize(s));
    printf("pooled alloc pairs/s %.0f\n", pairs / seconds_since(t));
    CHECK(cudaStreamDestroy(s));

    char* host = (char*)malloc(bytes);
    memset(host, 7, bytes);
    char* device;
    CHECK(cudaMalloc(&device, bytes));
    // A copy each way first, as the SDK side does: pages touched, staging warm.
    CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
    t = std::chrono::steady_clock::now();
    CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    printf("h2d MB/s %.0f\n", bytes / seconds_since(t) / 1e6);
    t = std::chrono::steady_clock::now();
    CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
    printf("d2h MB/s %.0f\n", bytes / seconds_since(t) / 1e6);
    CHECK(cudaFree(device));

    // Managed memory: through the shim its bytes go to the GPU before the kernel and come back
    // at the synchronization, the work of a copy each way. A round first: pages touched.
    unsigned char* managed;
    CHECK(cudaMallocManaged(&managed, bytes));
    memset(managed, 1, bytes);
    iota<<<1, 1>>>((unsigned*)managed, 1);
    CHECK(cudaDeviceSynchronize());
    memset(managed, 3, bytes);
    t = std::chrono::steady_clock::now();
    iota<<<1, 1>>>((unsigned*)managed + 1, 1);
    CHECK(cudaDeviceSynchronize());
    bool kept = managed[bytes - 1] == 3 && managed[4] == 0 && managed[8] == 3;
    printf("managed round MB/s %.0f\n", bytes / seconds_since(t) / 1e6);
    if (!kept) {
        printf("FAILED: managed memory after the round\n");
        return 1;
    }
    CHECK(cudaFree(managed));
    CHECK(cudaFree(x));
    return 0;
}
