// The settings and queries programs make around their work, which CUDA answers without running
// anything: the profiler's start and stop (torch.cuda.profiler, runs under Nsight), the device's
// flags (cudaSetDeviceFlags), the shared memory bank size (deprecated, still called), a stream's
// device and attributes (an L2 access policy window, as TensorRT and CUTLASS set one), and a
// kernel's parameters, module, library and loading state, the persisting L2 lines' reset, and the
// atomic operations native to the host's link and between devices. Each is answered as CUDA answers it,
// a bad value is refused, and a kernel still runs after them all, exactly.
// Usage: settings [elements]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.h"
#include "driver_entry.h"

// cuda_profiler_api.h's, which NVIDIA's nvcc wheel leaves out.
extern "C" cudaError_t cudaProfilerStart(void);
extern "C" cudaError_t cudaProfilerStop(void);

// x[i] *= a for i < n, one element a thread.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// x[i] = i for i < n: never launched, so never loaded until cuFuncLoad loads it.
__global__ void iota(unsigned* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

static void refused(const char* what, cudaError_t e) {
    printf("%s: %d (%s)\n", what, (int)e, cudaGetErrorName(e));
}

static void profiler() {
    CHECK(cudaProfilerStart());
    CHECK(cudaProfilerStop());
    report(true, "the profiler started and stopped");
}

static void flags() {
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    unsigned got = 0;
    CHECK(cudaGetDeviceFlags(&got));
    report((got & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync, "the device's flags read back");
    refused("spin and yield at once", cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield));
    // The driver's own: the current context's flags.
    DRIVER_AT(CUresult(*)(unsigned), cuCtxSetFlags, 12010, CU_CTX_SCHED_SPIN);
    unsigned driver = 0;
    DRIVER_AT(CUresult(*)(unsigned*), cuCtxGetFlags, 12000, &driver);
    report((driver & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_SPIN, "the context's flags set by the driver read back");
    CUresult bad = ((CUresult(*)(unsigned))entry_at("cuCtxSetFlags", 12010))(0x100);
    printf("an unknown context flag: %d\n", (int)bad);
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleAuto));
}

static void bank_size() {
    CHECK(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte));
    cudaSharedMemConfig config;
    CHECK(cudaDeviceGetSharedMemConfig(&config));
    // Devices since Volta have no configurable banks: set, they stay four bytes wide.
    printf("the bank size after asking for eight bytes: %d\n", (int)config);
    CHECK(cudaFuncSetSharedMemConfig(scale, cudaSharedMemBankSizeFourByte));
    refused("a bank size of 3", cudaDeviceSetSharedMemConfig((cudaSharedMemConfig)3));
}

static void stream_device(int devices) {
    for (int d = 0; d < devices; d++) {
        CHECK(cudaSetDevice(d));
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s));
        int got = -1;
        CHECK(cudaStreamGetDevice(s, &got));
        int current = -1;
        CHECK(cudaSetDevice(0));
        CHECK(cudaStreamGetDevice(s, &current)); // its own device, not the current one
        report(got == d && current == d, d == 0 ? "a stream's device, 0" : "a stream's device, 1");
        CHECK(cudaStreamDestroy(s));
    }
    CHECK(cudaSetDevice(0));
}

static void stream_attributes(float* d, size_t bytes) {
    cudaStream_t s, copy;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamCreate(&copy));
    cudaStreamAttrValue window = {};
    window.accessPolicyWindow.base_ptr = d;
    window.accessPolicyWindow.num_bytes = bytes;
    window.accessPolicyWindow.hitRatio = 0.6f;
    window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window));
    cudaStreamAttrValue policy = {};
    policy.syncPolicy = cudaSyncPolicyBlockingSync;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &policy));
    CHECK(cudaStreamCopyAttributes(copy, s));
    bool same = true;
    for (cudaStream_t each : {s, copy}) {
        cudaStreamAttrValue got = {};
        CHECK(cudaStreamGetAttribute(each, cudaStreamAttributeAccessPolicyWindow, &got));
        const cudaAccessPolicyWindow& w = got.accessPolicyWindow;
        same = same && w.base_ptr == d && w.num_bytes == bytes && w.hitRatio == 0.6f &&
               w.hitProp == cudaAccessPropertyPersisting && w.missProp == cudaAccessPropertyStreaming;
        CHECK(cudaStreamGetAttribute(each, cudaStreamAttributeSynchronizationPolicy, &got));
        same = same && got.syncPolicy == cudaSyncPolicyBlockingSync;
    }
    report(same, "an access policy window and a synchronization policy, set and copied");
    cudaStreamAttrValue bad = window;
    bad.accessPolicyWindow.hitRatio = 1.5f;
    refused("a hit ratio of 1.5", cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &bad));
    bad = window;
    bad.accessPolicyWindow.missProp = cudaAccessPropertyPersisting;
    refused("persisting misses", cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &bad));
    refused("a launch's attribute on a stream", cudaStreamSetAttribute(s, cudaLaunchAttributeCooperative, &policy));
    // The window still applies to the stream's work: a kernel under it is exact.
    scale<<<1, 32, 0, s>>>(d, 2.0f, 32);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(copy));
}

// The persisting L2 lines reset after a window's work (as TensorRT and CUTLASS reset them), and
// which atomic operations the link to the host and one between two devices do natively (CUDA 13).
static void l2_and_atomics(int devices) {
    CHECK(cudaCtxResetPersistingL2Cache());
    report(true, "the persisting L2 lines reset");
    CUatomicOperation ops[3] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS, CU_ATOMIC_OPERATION_FLOAT_ADD};
    unsigned caps[3] = {99, 99, 99};
    using Host = CUresult (*)(unsigned*, const CUatomicOperation*, unsigned, CUdevice);
    DRIVER_AT(Host, cuDeviceGetHostAtomicCapabilities, 13000, caps, ops, 3, 0);
    int native = -1;
    CHECK(cudaDeviceGetAttribute(&native, cudaDevAttrHostNativeAtomicSupported, 0));
    printf("host atomics: %u %u %u, native %d\n", caps[0], caps[1], caps[2], native);
    CUatomicOperation unknown = CU_ATOMIC_OPERATION_MAX;
    CUresult r = ((Host)entry_at("cuDeviceGetHostAtomicCapabilities", 13000))(caps, &unknown, 1, 0);
    printf("an unknown atomic operation: %d\n", (int)r);
    if (devices < 2) return;
    using Peer = CUresult (*)(unsigned*, const CUatomicOperation*, unsigned, CUdevice, CUdevice);
    caps[0] = caps[1] = caps[2] = 99;
    DRIVER_AT(Peer, cuDeviceGetP2PAtomicCapabilities, 13000, caps, ops, 3, 0, 1);
    printf("peer atomics: %u %u %u\n", caps[0], caps[1], caps[2]);
    r = ((Peer)entry_at("cuDeviceGetP2PAtomicCapabilities", 13000))(caps, ops, 3, 1, 1);
    printf("a device's link to itself: %d\n", (int)r);
}

// Parameter counts (CUDA 13.2), where the driver has them.
static void parameter_counts() {
    using Count = CUresult (*)(void*, size_t*);
    Count function_count = (Count)try_entry_at("cuFuncGetParamCount", 13020);
    Count kernel_count = (Count)try_entry_at("cuKernelGetParamCount", 13020);
    if (function_count == nullptr || kernel_count == nullptr) {
        printf("parameter counts: not in this driver\n");
        return;
    }
    CUfunction function;
    CHECK(cudaGetFuncBySymbol(&function, (const void*)scale));
    size_t params = 0;
    report(function_count(function, &params) == CUDA_SUCCESS && params == 3, "the function's parameter count, 3");
    cudaKernel_t kernel;
    CHECK(cudaGetKernel(&kernel, scale));
    params = 0;
    report(kernel_count(kernel, &params) == CUDA_SUCCESS && params == 3, "the kernel's parameter count, 3");
}

static void kernel_queries() {
    cudaKernel_t kernel;
    CHECK(cudaGetKernel(&kernel, scale));
    size_t offset = 0, size = 0;
    DRIVER_AT(CUresult(*)(CUkernel, size_t, size_t*, size_t*), cuKernelGetParamInfo, 12040, (CUkernel)kernel, 1, &offset,
           &size);
    report(offset == 8 && size == 4, "the second parameter at offset 8, 4 bytes");
    CUlibrary library = nullptr;
    DRIVER_AT(CUresult(*)(CUlibrary*, CUkernel), cuKernelGetLibrary, 12050, &library, (CUkernel)kernel);
    const char* name = nullptr;
    DRIVER_AT(CUresult(*)(const char**, CUkernel), cuKernelGetName, 12030, &name, (CUkernel)kernel);
    CUkernel again = nullptr;
    DRIVER_AT(CUresult(*)(CUkernel*, CUlibrary, const char*), cuLibraryGetKernel, 12000, &again, library, name);
    report(library != nullptr && again == (CUkernel)kernel, "the kernel's library holds it by name");
    CUfunction function;
    CHECK(cudaGetFuncBySymbol(&function, (const void*)scale));
    CUmodule module = nullptr;
    DRIVER_AT(CUresult(*)(CUmodule*, CUfunction), cuFuncGetModule, 11000, &module, function);
    CUfunction found = nullptr;
    DRIVER_AT(CUresult(*)(CUfunction*, CUmodule, const char*), cuModuleGetFunction, 2000, &found, module, name);
    report(module != nullptr && found != nullptr, "the function's module holds it by name");
    // A kernel nothing has touched: unloaded (where CUDA loads lazily), then loaded.
    CUfunction untouched;
    CHECK(cudaGetFuncBySymbol(&untouched, (const void*)iota));
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_LOADED;
    DRIVER_AT(CUresult(*)(CUfunctionLoadingState*, CUfunction), cuFuncIsLoaded, 12040, &state, untouched);
    printf("an untouched kernel before cuFuncLoad: %d\n", (int)state);
    DRIVER_AT(CUresult(*)(CUfunction), cuFuncLoad, 12040, untouched);
    DRIVER_AT(CUresult(*)(CUfunctionLoadingState*, CUfunction), cuFuncIsLoaded, 12040, &state, untouched);
    report(state == CU_FUNCTION_LOADING_STATE_LOADED, "the function loaded");
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    std::vector<float> host(n);
    for (int i = 0; i < n; i++) host[i] = (float)i;
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    profiler();
    flags();
    bank_size();
    stream_device(devices < 2 ? devices : 2);
    stream_attributes(d, n * sizeof(float));
    kernel_queries();
    parameter_counts();
    l2_and_atomics(devices);
    // d[0..32) was doubled under the window; all of it once more now.
    scale<<<(n + 255) / 256, 256>>>(d, 3.0f, n);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool exact = true;
    for (int i = 0; i < n; i++) exact = exact && host[i] == (float)i * (i < 32 ? 6.0f : 3.0f);
    report(exact, "a kernel after them all");
    printf("settings: %s\n", failures == 0 ? "all exact" : "FAILED");
    return failures == 0 ? 0 : 1;
}
