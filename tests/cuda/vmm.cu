// Virtual memory management as PyTorch's expandable segments use it: the program takes the
// driver's cuMem* calls (cudaGetDriverEntryPointByVersion), reserves a range of address space,
// creates pieces of physical memory, maps two side by side and makes them accessible with one
// cuMemSetAccess; a copy and a kernel run across the boundary between them; the segment grows
// in place by a third piece; a piece unmapped and mapped elsewhere, or back at once where it was,
// keeps its bytes; a handle is
// retained from an address and its properties read; what the driver refuses is refused (a
// second mapping over mapped bytes, an unmap of nothing, cudaFree of a range, a copy into
// unmapped bytes), the device usable after; four threads grow ranges of their own at once. A
// device that says it has no virtual memory management is left alone.
// Usage: vmm
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// p[i] += v for i < n, one element a thread (the stand-in's `add_to` fixture).
__global__ void add_to(int* p, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += v;
}

#define DRIVER(name) static decltype(&name) p_##name = (decltype(&name))entry(#name)

#define CU(call)                                                          \
    do {                                                                  \
        CUresult r_ = (call);                                             \
        if (r_ != CUDA_SUCCESS) {                                         \
            printf("FAILED %s: %d\n", #call, (int)r_);                   \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

static CUmemAllocationProp pinned_on(int device) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

static CUmemAccessDesc read_write_on(int device) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

// Adds `v` to every int of `bytes` at `at` with a kernel, on `stream`.
static void add_over(CUdeviceptr at, size_t bytes, int v, cudaStream_t stream) {
    int n = (int)(bytes / sizeof(int));
    add_to<<<(n + 255) / 256, 256, 0, stream>>>((int*)at, v, n);
    CHECK(cudaGetLastError());
}

// Whether the ints of `bytes` at `at` are `first`, `first + 1`, ... each plus `plus`.
static bool holds_sequence(CUdeviceptr at, size_t bytes, int first, int plus) {
    std::vector<int> host(bytes / sizeof(int));
    CHECK(cudaMemcpy(host.data(), (void*)at, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < host.size(); i++)
        if (host[i] != first + (int)i + plus) return false;
    return true;
}

static void write_sequence(CUdeviceptr at, size_t bytes, int first) {
    std::vector<int> host(bytes / sizeof(int));
    for (size_t i = 0; i < host.size(); i++) host[i] = first + (int)i;
    CHECK(cudaMemcpy((void*)at, host.data(), bytes, cudaMemcpyHostToDevice));
}

int main() {
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    DRIVER(cuMemGetAllocationGranularity);
    DRIVER(cuMemAddressReserve);
    DRIVER(cuMemAddressFree);
    DRIVER(cuMemCreate);
    DRIVER(cuMemRelease);
    DRIVER(cuMemMap);
    DRIVER(cuMemUnmap);
    DRIVER(cuMemSetAccess);
    DRIVER(cuMemGetAccess);
    DRIVER(cuMemRetainAllocationHandle);
    DRIVER(cuMemGetAllocationPropertiesFromHandle);
    DRIVER(cuDeviceGetAttribute);

    int supported = 0;
    CU(p_cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    printf("virtual memory management: %d\n", supported);
    if (!supported) {
        printf("vmm: not served here\n");
        return 0;
    }
    CUmemAllocationProp prop = pinned_on(0);
    size_t gran = 0;
    CU(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("granularity: %zu\n", gran);

    // An expandable segment: a range of eight pieces' address space, two pieces mapped.
    CUdeviceptr base = 0;
    CU(p_cuMemAddressReserve(&base, 8 * gran, 0, 0, 0));
    CUmemGenericAllocationHandle piece[3];
    for (int i = 0; i < 2; i++) {
        CU(p_cuMemCreate(&piece[i], gran, &prop, 0));
        CU(p_cuMemMap(base + i * gran, gran, 0, piece[i], 0));
    }
    CUmemAccessDesc access = read_write_on(0);
    CU(p_cuMemSetAccess(base, 2 * gran, &access, 1));
    write_sequence(base, 2 * gran, 0);
    add_over(base, 2 * gran, 7, 0);
    report(holds_sequence(base, 2 * gran, 0, 7), "a copy and a kernel across two pieces of physical memory");

    // Growing in place: a third piece after the two, memset and added to across the boundary.
    CU(p_cuMemCreate(&piece[2], gran, &prop, 0));
    CU(p_cuMemMap(base + 2 * gran, gran, 0, piece[2], 0));
    CU(p_cuMemSetAccess(base + 2 * gran, gran, &access, 1));
    CHECK(cudaMemset((void*)(base + 2 * gran), 0, gran));
    write_sequence(base + gran + gran / 2, gran, 1000);
    add_over(base + gran, 2 * gran, 1, 0);
    bool kept = holds_sequence(base, gran, 0, 7) && holds_sequence(base + gran + gran / 2, gran, 1000, 1);
    std::vector<int> tail(gran / 2 / sizeof(int));
    CHECK(cudaMemcpy(tail.data(), (void*)(base + 2 * gran + gran / 2), gran / 2, cudaMemcpyDeviceToHost));
    for (int v : tail) kept = kept && v == 1;
    report(kept, "the segment grown in place by a third piece");

    unsigned long long flags = 0;
    CUmemLocation here = access.location;
    CU(p_cuMemGetAccess(&flags, &here, base + gran));
    printf("access: %llu\n", flags);
    CUmemGenericAllocationHandle retained = 0;
    CU(p_cuMemRetainAllocationHandle(&retained, (void*)(base + gran + 100)));
    printf("retained the second piece: %d\n", retained == piece[1]);
    CUmemAllocationProp read = {};
    CU(p_cuMemGetAllocationPropertiesFromHandle(&read, retained));
    printf("its properties: type %d on device %d\n", (int)read.type, read.location.id);
    CU(p_cuMemRelease(retained));

    // A piece unmapped and mapped again elsewhere in the range keeps its bytes.
    CHECK(cudaDeviceSynchronize());
    CU(p_cuMemUnmap(base, gran));
    CU(p_cuMemMap(base + 4 * gran, gran, 0, piece[0], 0));
    CU(p_cuMemSetAccess(base + 4 * gran, gran, &access, 1));
    report(holds_sequence(base + 4 * gran, gran, 0, 7), "a piece mapped elsewhere keeps its bytes");
    // Unmapped and mapped back where it was at once (the unmap is done when it returns).
    CU(p_cuMemUnmap(base + 4 * gran, gran));
    CU(p_cuMemMap(base + 4 * gran, gran, 0, piece[0], 0));
    CU(p_cuMemSetAccess(base + 4 * gran, gran, &access, 1));
    report(holds_sequence(base + 4 * gran, gran, 0, 7), "a piece mapped back where it was unmapped keeps its bytes");

    // Refusals; the device goes on.
    printf("a mapping over mapped bytes refused: %d\n", p_cuMemMap(base + gran, gran, 0, piece[2], 0) != CUDA_SUCCESS);
    printf("an unmap of nothing refused: %d\n", p_cuMemUnmap(base + 6 * gran, gran) != CUDA_SUCCESS);
    printf("cudaFree of a range refused: %d\n", cudaFree((void*)base) != cudaSuccess);
    cudaGetLastError();
    std::vector<int> host(gran / sizeof(int), 5);
    cudaError_t into_unmapped = cudaMemcpy((void*)base, host.data(), gran, cudaMemcpyHostToDevice);
    printf("a copy into unmapped bytes refused: %d\n", into_unmapped != cudaSuccess);
    cudaGetLastError();
    add_over(base + gran, gran, 1, 0);
    report(holds_sequence(base + gran, gran / 2, 0 + (int)(gran / sizeof(int)), 9), "the device after the refusals");

    // Everything goes: unmapped, released, the range freed.
    CHECK(cudaDeviceSynchronize());
    CU(p_cuMemUnmap(base + gran, 2 * gran));
    CU(p_cuMemUnmap(base + 4 * gran, gran));
    for (int i = 0; i < 3; i++) CU(p_cuMemRelease(piece[i]));
    CU(p_cuMemAddressFree(base, 8 * gran));
    printf("released and freed: 0\n");

    // Four threads, each growing a range of its own on its own stream.
    const int threads = 4;
    std::vector<int> ok(threads, 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++) {
        workers.emplace_back([&, t] {
            CHECK(cudaSetDevice(0));
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            CUdeviceptr own = 0;
            CU(p_cuMemAddressReserve(&own, 4 * gran, 0, 0, 0));
            CUmemGenericAllocationHandle h[2];
            bool good = true;
            for (int i = 0; i < 2; i++) {
                CU(p_cuMemCreate(&h[i], gran, &prop, 0));
                CU(p_cuMemMap(own + i * gran, gran, 0, h[i], 0));
                CU(p_cuMemSetAccess(own + i * gran, gran, &access, 1));
                write_sequence(own + i * gran, gran, 100 * t + i * (int)(gran / sizeof(int)));
            }
            add_over(own, 2 * gran, t + 1, s);
            CHECK(cudaStreamSynchronize(s));
            good = holds_sequence(own, 2 * gran, 100 * t, t + 1);
            CU(p_cuMemUnmap(own, 2 * gran));
            for (int i = 0; i < 2; i++) CU(p_cuMemRelease(h[i]));
            CU(p_cuMemAddressFree(own, 4 * gran));
            CHECK(cudaStreamDestroy(s));
            ok[t] = good;
        });
    }
    for (auto& w : workers) w.join();
    bool all = true;
    for (int t = 0; t < threads; t++) all = all && ok[t];
    report(all, "4 threads growing ranges of their own");

    if (failures) return 1;
    printf("vmm: all exact\n");
    return 0;
}
