// Memory pools and stream-ordered allocation as programs and frameworks use them: cudaMallocAsync
// and cudaFreeAsync in a loop on a stream (the block comes back and is handed out again on that
// stream, no more memory reserved), the release threshold at a synchronization and a trim,
// a pool of the program's own with a maximum size, made the device's current pool and destroyed
// with memory still handed out, counters and their high-water marks, and threads each allocating
// and freeing on their own stream from one pool at once. What is refused: destroying a default
// pool, host pools, taking a device's access to its own pool away, setting a high-water mark.
// Every value is exact.
// Usage: pools [elements]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// vadd, scale and iota, which the stand-in runs by name (cuda-standin's kernels.rs).
#include "../fixtures/shim_kernels.cu"

static uint64_t attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
    uint64_t value = 0;
    CHECK(cudaMemPoolGetAttribute(pool, attr, &value));
    return value;
}

// iota into a block from `pool` on `s`, scaled by `factor`, copied out and checked; the block
// is freed on `s`. Answers the block's address, or 0 if a value was wrong.
static uintptr_t round_trip(cudaMemPool_t pool, cudaStream_t s, int n, float factor) {
    float* x;
    CHECK(cudaMallocFromPoolAsync((void**)&x, n * sizeof(float), pool, s));
    int blocks = (n + 255) / 256;
    iota<<<blocks, 256, 0, s>>>((unsigned*)x, n);
    std::vector<unsigned> indices(n);
    CHECK(cudaMemcpyAsync(indices.data(), x, n * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> values(n);
    for (int i = 0; i < n; i++) values[i] = (float)indices[i];
    CHECK(cudaMemcpyAsync(x, values.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    scale<<<blocks, 256, 0, s>>>(x, factor, n);
    CHECK(cudaMemcpyAsync(values.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
        if (indices[i] != (unsigned)i || values[i] != factor * i) {
            printf("  element %d: %u, %g (factor %g)\n", i, indices[i], (double)values[i], (double)factor);
            return 0;
        }
    }
    return (uintptr_t)x;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    size_t bytes = n * sizeof(float);
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    cudaMemPool_t fallback, current;
    CHECK(cudaDeviceGetDefaultMemPool(&fallback, 0));
    CHECK(cudaDeviceGetMemPool(&current, 0));
    printf("pools supported %d, the default current %d\n", supported, fallback == current);

    // A loop of allocate, use, free on one stream: the block is handed out again.
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint64_t keep = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(fallback, cudaMemPoolAttrReleaseThreshold, &keep));
    float *a, *b, *c;
    uintptr_t first = 0;
    int same = 0, exact = 1;
    for (int round = 0; round < 8; round++) {
        CHECK(cudaMallocAsync((void**)&a, bytes, s));
        CHECK(cudaMallocAsync((void**)&b, bytes, s));
        CHECK(cudaMallocAsync((void**)&c, bytes, s));
        if (round == 0) first = (uintptr_t)a;
        same += (uintptr_t)a == first;
        std::vector<float> ha(n), hb(n), hc(n);
        for (int i = 0; i < n; i++) ha[i] = (float)(i + round), hb[i] = (float)(2 * i);
        CHECK(cudaMemcpyAsync(a, ha.data(), bytes, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(b, hb.data(), bytes, cudaMemcpyHostToDevice, s));
        vadd<<<(n + 255) / 256, 256, 0, s>>>(a, b, c, n);
        CHECK(cudaMemcpyAsync(hc.data(), c, bytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaFreeAsync(a, s));
        CHECK(cudaFreeAsync(b, s));
        CHECK(cudaFreeAsync(c, s));
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++) exact &= hc[i] == (float)(3 * i + round);
    }
    uint64_t reserved = attribute(fallback, cudaMemPoolAttrReservedMemCurrent);
    uint64_t used = attribute(fallback, cudaMemPoolAttrUsedMemCurrent);
    report(exact, "8 rounds of cudaMallocAsync, vadd, cudaFreeAsync");
    printf("the same block each round: %d of 8; reserved %s 3 blocks, used %llu\n", same,
           reserved >= 3 * bytes && reserved < 4 * bytes ? "holds" : "does not hold", (unsigned long long)used);

    // Freed on one stream, not handed out on another before a synchronization; after it, it is
    // (the pool trimmed first: the block freed is the only one it holds).
    CHECK(cudaMemPoolTrimTo(fallback, 0));
    cudaStream_t other;
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    float *x, *y, *z;
    CHECK(cudaMallocAsync((void**)&x, bytes, s));
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaMallocAsync((void**)&y, bytes, other));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMallocAsync((void**)&z, bytes, other));
    printf("freed on one stream: another stream's block %s before the free's stream synchronized, %s after\n",
           x == y ? "the same" : "another", x == z ? "the same" : "another");
    CHECK(cudaFreeAsync(y, other));
    CHECK(cudaFreeAsync(z, other));
    CHECK(cudaStreamSynchronize(other));

    // Freed on the legacy default stream, which in CUDA waits for every blocking stream's work
    // (the default stream here does not): handed out again only after the device synchronized.
    CHECK(cudaMemPoolTrimTo(fallback, 0));
    CHECK(cudaMallocAsync((void**)&x, bytes, 0));
    CHECK(cudaFreeAsync(x, 0));
    CHECK(cudaMallocAsync((void**)&y, bytes, 0));
    CHECK(cudaStreamSynchronize(0));
    CHECK(cudaMallocAsync((void**)&z, bytes, 0));
    CHECK(cudaDeviceSynchronize());
    float* w;
    CHECK(cudaMallocAsync((void**)&w, bytes, 0));
    printf("freed on the legacy stream: its block %s before a synchronization, %s after the stream's, %s after the device's\n",
           x == y ? "the same" : "another", x == z ? "the same" : "another", x == w ? "the same" : "another");
    CHECK(cudaFreeAsync(y, 0));
    CHECK(cudaFreeAsync(z, 0));
    CHECK(cudaFreeAsync(w, 0));
    CHECK(cudaDeviceSynchronize());

    // The release threshold: held over synchronizations, freed by a trim; 0 frees at the next one.
    uint64_t held = attribute(fallback, cudaMemPoolAttrReservedMemCurrent);
    CHECK(cudaMemPoolTrimTo(fallback, 0));
    uint64_t trimmed = attribute(fallback, cudaMemPoolAttrReservedMemCurrent);
    uint64_t zero = 0;
    CHECK(cudaMemPoolSetAttribute(fallback, cudaMemPoolAttrReleaseThreshold, &zero));
    CHECK(cudaMallocAsync((void**)&x, bytes, s));
    CHECK(cudaFreeAsync(x, s));
    uint64_t before_sync = attribute(fallback, cudaMemPoolAttrReservedMemCurrent);
    CHECK(cudaStreamSynchronize(s));
    uint64_t after_sync = attribute(fallback, cudaMemPoolAttrReservedMemCurrent);
    printf("threshold: %s held, trimmed to %llu; threshold 0: %s held until the synchronization, %llu after\n",
           held > 0 ? "memory" : "nothing", (unsigned long long)trimmed, before_sync > 0 ? "memory" : "nothing",
           (unsigned long long)after_sync);

    // A pool of the program's own, at most 1 MiB, current for the device (its blocks of at most
    // 10000 elements).
    int small = n < 10000 ? n : 10000;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    props.maxSize = 1 << 20;
    cudaMemPool_t own;
    CHECK(cudaMemPoolCreate(&own, &props));
    report(round_trip(own, s, small, 3.0f) != 0, "a block of the program's pool");
    void* big = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&big, 2 << 20, own, s);
    printf("2 MiB from a pool of at most 1 MiB: %s\n", cudaGetErrorName(e));
    CHECK(cudaDeviceSetMemPool(0, own));
    CHECK(cudaMallocAsync((void**)&x, 4096, s));
    uint64_t own_used = attribute(own, cudaMemPoolAttrUsedMemCurrent);
    uint64_t own_high = attribute(own, cudaMemPoolAttrUsedMemHigh);
    CHECK(cudaMemPoolSetAttribute(own, cudaMemPoolAttrUsedMemHigh, &zero));
    printf("cudaMallocAsync from the current pool: used %llu, high mark %s, reset to %llu\n",
           (unsigned long long)own_used, own_high >= small * sizeof(float) ? "kept the round trip" : "lost it",
           (unsigned long long)attribute(own, cudaMemPoolAttrUsedMemHigh));
    // Destroyed with a block handed out: the block stays usable and is freed when it comes back.
    CHECK(cudaMemPoolDestroy(own));
    CHECK(cudaDeviceGetMemPool(&current, 0));
    CHECK(cudaMemsetAsync(x, 0x7f, 4096, s));
    unsigned char probe[4096];
    CHECK(cudaMemcpyAsync(probe, x, sizeof probe, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaStreamSynchronize(s));
    bool set = true;
    for (unsigned char v : probe) set &= v == 0x7f;
    report(set && current == fallback, "destroyed with a block out: the block, then the default pool current");

    // Threads, each on its own stream, allocating and freeing from one pool at once.
    CHECK(cudaMemPoolCreate(&own, &props));
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 1);
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            CHECK(cudaSetDevice(0));
            cudaStream_t mine;
            CHECK(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
            for (int round = 0; round < 10; round++) ok[t] &= round_trip(own, mine, 1000 + 100 * t, (float)(t + 1)) != 0;
            CHECK(cudaStreamDestroy(mine));
        });
    }
    for (auto& th : threads) th.join();
    report(ok[0] && ok[1] && ok[2] && ok[3], "4 threads allocating on their own streams from one pool");
    CHECK(cudaMemPoolDestroy(own));

    // A synchronous free of stream-ordered memory.
    CHECK(cudaMallocAsync((void**)&x, bytes, s));
    CHECK(cudaMemsetAsync(x, 0, bytes, s));
    CHECK(cudaFree(x));
    printf("cudaFree of cudaMallocAsync memory: used %llu\n",
           (unsigned long long)attribute(fallback, cudaMemPoolAttrUsedMemCurrent));

    // What is refused, and the program goes on.
    e = cudaMemPoolDestroy(fallback);
    printf("destroying the default pool: %s\n", cudaGetErrorName(e));
    cudaMemPoolProps host = {};
    host.allocType = cudaMemAllocationTypePinned;
    host.location.type = cudaMemLocationTypeHost;
    e = cudaMemPoolCreate(&own, &host);
    printf("a host pool: %s\n", cudaGetErrorName(e));
    cudaMemAccessDesc none = {};
    none.location.type = cudaMemLocationTypeDevice;
    none.location.id = 0;
    none.flags = cudaMemAccessFlagsProtNone;
    e = cudaMemPoolSetAccess(fallback, &none, 1);
    printf("the device's own access taken away: %s\n", cudaGetErrorName(e));
    cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolGetAccess(&flags, fallback, &none.location));
    uint64_t high = 1;
    e = cudaMemPoolSetAttribute(fallback, cudaMemPoolAttrUsedMemHigh, &high);
    printf("a high-water mark set to 1: %s; the device's access %d\n", cudaGetErrorName(e), (int)flags);
    report(round_trip(fallback, s, n, 5.0f) != 0, "the default pool after the refusals");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(other));
    printf(failures == 0 ? "pools: all exact\n" : "pools: %d FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
