// Streams, events, async copies, memsets and device-to-device copies, from several host
// threads sharing one device, as a plain CUDA program. It ends without freeing everything:
// what it held must be given back when it exits. Usage: streams [threads]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void iota(unsigned* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

// One thread's work on a stream of its own: upload, scale twice, download, check.
static void worker(int id, int n, int* failures) {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    std::vector<float> host(n), back(n);
    for (int i = 0; i < n; i++) host[i] = (float)(i + id);
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpyAsync(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    scale<<<(n + 127) / 128, 128, 0, s>>>(d, 2.0f, n);
    scale<<<(n + 127) / 128, 128, 0, s>>>(d, 1.5f, n);
    CHECK(cudaEventRecord(done, s));
    CHECK(cudaEventSynchronize(done));
    CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
        if (back[i] != host[i] * 3.0f) {
            printf("FAILED: thread %d element %d = %f, expected %f\n", id, i, back[i], host[i] * 3.0f);
            __atomic_add_fetch(failures, 1, __ATOMIC_SEQ_CST);
            break;
        }
    }
    CHECK(cudaFree(d));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    const int n = 50000;
    CHECK(cudaSetDevice(0));
    int failures = 0;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) pool.emplace_back(worker, t, n, &failures);
    for (auto& t : pool) t.join();
    if (failures) return 1;
    printf("streams: %d threads exact\n", threads);

    // Memsets and a device-to-device copy.
    unsigned *a, *b;
    const unsigned m = 4096;
    CHECK(cudaMalloc(&a, m * sizeof(unsigned)));
    CHECK(cudaMalloc(&b, m * sizeof(unsigned)));
    CHECK(cudaMemset(a, 0xAB, m * sizeof(unsigned)));
    iota<<<(m / 2 + 255) / 256, 256>>>(b, m / 2);
    CHECK(cudaMemcpy(a + m / 2, b, (m / 2) * sizeof(unsigned), cudaMemcpyDeviceToDevice));
    std::vector<unsigned> out(m);
    CHECK(cudaMemcpy(out.data(), a, m * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < m; i++) {
        unsigned want = i < m / 2 ? 0xABABABABu : i - m / 2;
        if (out[i] != want) {
            printf("FAILED: a[%u] = %#x, expected %#x\n", i, out[i], want);
            return 1;
        }
    }
    printf("memset and device-to-device copy exact\n");

    // Events time a kernel.
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start, 0));
    iota<<<(m + 255) / 256, 256>>>(b, m);
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    printf("event time %s\n", ms >= 0 ? "measured" : "negative");

    // What the shim does not serve fails cleanly and the program goes on
    // (a memory pool's file descriptor: the pool is kept in this process, and no other
    // process could map a remote GPU's memory by a descriptor).
    cudaMemPool_t default_pool;
    CHECK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
    int pool_fd = -1;
    cudaError_t e = cudaMemPoolExportToShareableHandle(&pool_fd, default_pool, cudaMemHandleTypePosixFileDescriptor, 0);
    printf("cudaMemPoolExportToShareableHandle: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    // What PyTorch asks of a stream at its start (CUDA 13's runtime through
    // cuStreamGetCaptureInfo_v3): not capturing, capture id 0.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive, info = cudaStreamCaptureStatusActive;
    unsigned long long capture_id = 7;
    cudaGraph_t capture_graph = (cudaGraph_t)&capturing;
    const cudaGraphNode_t* deps = (const cudaGraphNode_t*)&capturing;
    size_t dep_count = 7;
    CHECK(cudaStreamIsCapturing(s, &capturing));
    CHECK(cudaStreamGetCaptureInfo(s, &info, &capture_id, &capture_graph, &deps, nullptr, &dep_count));
    printf("capture status %d %d id %llu graph %s deps %s %zu\n", (int)capturing, (int)info, capture_id,
           capture_graph ? "set" : "none", deps ? "set" : "none", dep_count);
    // Edge data belongs to dependencies: asked for alone, it is an invalid value (cuda.h).
    const cudaGraphEdgeData* edges = nullptr;
    e = cudaStreamGetCaptureInfo(s, &info, nullptr, nullptr, nullptr, &edges, nullptr);
    printf("edge data without dependencies: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    // Still usable after them.
    iota<<<(m + 255) / 256, 256>>>(b, m);
    CHECK(cudaMemcpy(out.data(), b, m * sizeof(unsigned), cudaMemcpyDeviceToHost));
    if (out[m - 1] != m - 1) {
        printf("FAILED after unsupported calls: b[%u] = %u\n", m - 1, out[m - 1]);
        return 1;
    }
    printf("still working after unsupported calls\n");
    // a and b are left allocated, the stream undestroyed: the exit gives them back.
    return 0;
}
