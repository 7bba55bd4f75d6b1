// Managed memory as CUDA programs use it (cudaMallocManaged): the host writes arrays, kernels
// read and write them, the host reads the results after a synchronization, round after round;
// synchronization by stream and by event; copies and memsets between managed and device
// memory; pointer attributes; prefetches and advice taken; memory attached to the host, then
// to every stream; frees; threads each with a stream and memory attached to it alone, whose host
// code touches it while the other threads' kernels run. Every value is a small integer, so
// results are exact.
// Usage: managed [elements]
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
template <typename T, typename F>
static bool all(const T* x, int n, F f) {
    for (int i = 0; i < n; i++) {
        if (x[i] != f(i)) {
            printf("  element %d: %g, expected %g\n", i, (double)x[i], (double)f(i));
            return false;
        }
    }
    return true;
}

// A thread's rounds on memory attached to its own stream: written by the host, scaled on the
// stream, read after the stream's synchronization, while other threads do the same.
static bool rounds_on_own_stream(int n, int t) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* x;
    CHECK(cudaMallocManaged(&x, n * sizeof(float)));
    CHECK(cudaStreamAttachMemAsync(s, x, 0, cudaMemAttachSingle));
    CHECK(cudaStreamSynchronize(s));
    bool ok = true;
    for (int r = 0; r < 10; r++) {
        for (int i = 0; i < n; i++) x[i] = (float)(t * 100 + r + i % 10);
        scale<<<(n + 255) / 256, 256, 0, s>>>(x, 2.0f, n);
        CHECK(cudaStreamSynchronize(s));
        ok = all(x, n, [t, r](int i) { return (float)(2 * (t * 100 + r + i % 10)); }) && ok;
    }
    CHECK(cudaFree(x));
    CHECK(cudaStreamDestroy(s));
    return ok;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    size_t bytes = n * sizeof(float);
    int blocks = (n + 255) / 256;

    int managed = -1, concurrent = -1, pageable = -1;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    CHECK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
    printf("attributes: managed %d, concurrent %d, pageable %d\n", managed, concurrent, pageable);

    float *x, *y, *z;
    CHECK(cudaMallocManaged(&x, bytes));
    CHECK(cudaMallocManaged(&y, bytes));
    CHECK(cudaMallocManaged(&z, bytes));

    // Written on the host, added on the device, read on the host: three rounds.
    bool rounds = true;
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < n; i++) {
            x[i] = (float)(i % 1000 + r);
            y[i] = (float)(2 * (i % 1000));
        }
        vadd<<<blocks, 256>>>(x, y, z, n);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        rounds = all(z, n, [r](int i) { return (float)(3 * (i % 1000) + r); }) && rounds;
    }
    report(rounds, "three rounds of host writes, kernels and host reads");

    // A stream's synchronization, then an event's.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    scale<<<blocks, 256, 0, s>>>(z, 2.0f, n);
    CHECK(cudaStreamSynchronize(s));
    report(all(z, n, [](int i) { return (float)(2 * (3 * (i % 1000) + 2)); }), "stream synchronization");
    cudaEvent_t done;
    CHECK(cudaEventCreate(&done));
    scale<<<blocks, 256, 0, s>>>(z, 0.5f, n);
    CHECK(cudaEventRecord(done, s));
    CHECK(cudaEventSynchronize(done));
    report(all(z, n, [](int i) { return (float)(3 * (i % 1000) + 2); }), "event synchronization");

    // Between managed and device memory, and a host array written through managed memory.
    float* d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, z, bytes, cudaMemcpyDefault));
    scale<<<blocks, 256>>>(d, 3.0f, n);
    CHECK(cudaMemcpy(x, d, bytes, cudaMemcpyDeviceToDevice));
    unsigned* u;
    CHECK(cudaMallocManaged(&u, n * sizeof(unsigned)));
    iota<<<blocks, 256>>>(u, n);
    std::vector<unsigned> host(n);
    CHECK(cudaMemcpy(host.data(), u, n * sizeof(unsigned), cudaMemcpyDefault));
    bool copies = all(x, n, [](int i) { return (float)(3 * (3 * (i % 1000) + 2)); });
    copies = all(host.data(), n, [](int i) { return (unsigned)i; }) && copies;
    for (int i = 0; i < n; i++) host[i] = 7u * i;
    CHECK(cudaMemcpy(u, host.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());  // a pageable copy may return before its bytes land
    copies = all(u, n, [](int i) { return 7u * i; }) && copies;
    // Managed to managed, the destination named as host memory, after a kernel wrote the source.
    scale<<<blocks, 256>>>(x, 2.0f, n);
    CHECK(cudaMemcpy(y, x, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaDeviceSynchronize());
    copies = all(y, n, [](int i) { return (float)(6 * (3 * (i % 1000) + 2)); }) && copies;
    report(copies, "copies between managed, device and host memory");

    CHECK(cudaMemset(y, 0, bytes));
    CHECK(cudaDeviceSynchronize());
    bool zero = all(y, n, [](int) { return 0.0f; });
    CHECK(cudaMemsetAsync(u, 0xff, n * sizeof(unsigned), s));
    CHECK(cudaStreamSynchronize(s));
    zero = all(u, n, [](int) { return 0xffffffffu; }) && zero;
    report(zero, "memsets of managed memory");

    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, z + 10));
    printf("pointer attributes: type %s, host pointer %s, device pointer %s\n",
           a.type == cudaMemoryTypeManaged ? "managed" : "not managed", a.hostPointer == z + 10 ? "same" : "other",
           a.devicePointer == z + 10 ? "same" : "other");

    // Prefetches and advice are hints: taken, and the data stays what it was.
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0};
    cudaMemLocation cpu = {cudaMemLocationTypeHost, 0};
    CHECK(cudaMemAdvise(z, bytes, cudaMemAdviseSetReadMostly, gpu));
    CHECK(cudaMemPrefetchAsync(z, bytes, gpu, 0, s));
    scale<<<blocks, 256, 0, s>>>(z, 2.0f, n);
    CHECK(cudaMemPrefetchAsync(z, bytes, cpu, 0, s));
    CHECK(cudaStreamSynchronize(s));
    report(all(z, n, [](int i) { return (float)(2 * (3 * (i % 1000) + 2)); }), "prefetched and advised");

    // Attached to the host: the host's alone (no synchronization needed) until attached to
    // every stream again, when kernels reach it.
    float* h;
    CHECK(cudaMallocManaged(&h, bytes, cudaMemAttachHost));
    for (int i = 0; i < n; i++) h[i] = (float)(i % 100);
    // Copied and set while attached to the host.
    CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyDefault));
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
    bool host_attached = all(back.data(), n, [](int i) { return (float)(i % 100); });
    CHECK(cudaMemset(h + n / 2, 0, bytes - n / 2 * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    host_attached = all(h, n, [n](int i) { return i < n / 2 ? (float)(i % 100) : 0.0f; }) && host_attached;
    report(host_attached, "copied and set while attached to the host,");
    for (int i = 0; i < n; i++) h[i] = (float)(i % 100);
    CHECK(cudaStreamAttachMemAsync(s, h, 0, cudaMemAttachGlobal));
    CHECK(cudaStreamSynchronize(s));
    scale<<<blocks, 256, 0, s>>>(h, 4.0f, n);
    CHECK(cudaStreamSynchronize(s));
    report(all(h, n, [](int i) { return (float)(4 * (i % 100)); }), "attached to the host, then to every stream,");

    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(z));
    CHECK(cudaFree(u));
    CHECK(cudaFree(h));
    CHECK(cudaFree(d));
    cudaError_t e = cudaFree(x);
    printf("freed twice: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaEventDestroy(done));

    const int threads = 4;
    bool exact[threads];
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++) workers.emplace_back([&exact, n, t] { exact[t] = rounds_on_own_stream(n, t); });
    for (auto& w : workers) w.join();
    bool all_exact = true;
    for (int t = 0; t < threads; t++) all_exact = all_exact && exact[t];
    report(all_exact, "4 threads with memory attached to their own streams");

    // A destroyed stream's memory is every stream's again (as it was allocated); the NULL stream
    // is no stream to attach to alone.
    float* w;
    CHECK(cudaMallocManaged(&w, bytes));
    cudaStream_t gone;
    CHECK(cudaStreamCreate(&gone));
    CHECK(cudaStreamAttachMemAsync(gone, w, 0, cudaMemAttachSingle));
    CHECK(cudaStreamSynchronize(gone));
    CHECK(cudaStreamDestroy(gone));
    for (int i = 0; i < n; i++) w[i] = (float)(i % 10);
    scale<<<blocks, 256>>>(w, 3.0f, n);
    CHECK(cudaDeviceSynchronize());
    report(all(w, n, [](int i) { return (float)(3 * (i % 10)); }), "every stream's again after its stream was destroyed,");
    e = cudaStreamAttachMemAsync(0, w, 0, cudaMemAttachSingle);
    printf("attached to the NULL stream alone: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaFree(w));

    if (failures) {
        printf("managed: %d FAILED\n", failures);
        return 1;
    }
    printf("managed: all exact\n");
    return 0;
}
