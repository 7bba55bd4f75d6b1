// cudaLaunchKernelEx with launch attributes, as libraries launch their kernels: a priority,
// programmatic stream serialization, a 1x1x1 cluster, a memory synchronization domain and a
// launch completion event run the kernel as asked, the event reached once it is done; a
// programmatic event lets another stream wait for the kernel; a cooperative launch by attribute
// runs; a launch in clusters of two blocks runs (a cooperative one in clusters is refused
// through the shim, and changes nothing either way); the stream goes on.
// Usage: launch_ex [elements]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// x[i] *= a for i < n, one element a thread.
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// Whether every element of d is `want`.
static bool all_equal(const float* d, int n, float want) {
    if (n == 0) return true;
    std::vector<float> host(n);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (host[i] != want) return false;
    return true;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    std::vector<float> ones(n, 1.0f);
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s, other;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    cudaEvent_t done, triggered;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&triggered, cudaEventDisableTiming));

    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((n + 255) / 256);
    config.blockDim = dim3(256);
    config.stream = s;
    cudaLaunchAttribute attrs[5];
    attrs[0].id = cudaLaunchAttributePriority;
    attrs[0].val.priority = 1;
    attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[1].val.programmaticStreamSerializationAllowed = 1;
    attrs[2].id = cudaLaunchAttributeClusterDimension;
    attrs[2].val.clusterDim.x = 1;
    attrs[2].val.clusterDim.y = 1;
    attrs[2].val.clusterDim.z = 1;
    attrs[3].id = cudaLaunchAttributeMemSyncDomain;
    attrs[3].val.memSyncDomain = cudaLaunchMemSyncDomainRemote;
    attrs[4].id = cudaLaunchAttributeLaunchCompletionEvent;
    attrs[4].val.launchCompletionEvent.event = done;
    attrs[4].val.launchCompletionEvent.flags = 0;
    config.attrs = attrs;
    config.numAttrs = 5;
    CHECK(cudaLaunchKernelEx(&config, scale, d, 2.0f, n));
    CHECK(cudaEventSynchronize(done));
    report(all_equal(d, n, 2.0f), "hints and a completion event: the kernel ran, the event reached");

    cudaLaunchAttribute programmatic;
    programmatic.id = cudaLaunchAttributeProgrammaticEvent;
    programmatic.val.programmaticEvent.event = triggered;
    programmatic.val.programmaticEvent.flags = 0;
    programmatic.val.programmaticEvent.triggerAtBlockStart = 0;
    config.attrs = &programmatic;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, scale, d, 3.0f, n));
    CHECK(cudaStreamWaitEvent(other, triggered, 0));
    scale<<<(n + 255) / 256, 256, 0, other>>>(d, 5.0f, n);
    CHECK(cudaStreamSynchronize(other));
    report(all_equal(d, n, 30.0f), "a stream waited for a programmatic event");

    cudaLaunchAttribute cooperative;
    cooperative.id = cudaLaunchAttributeCooperative;
    cooperative.val.cooperative = 1;
    config.attrs = &cooperative;
    // 64 blocks at most, which any GPU holds at once (a cooperative grid must be resident).
    const int part = n < 64 * 256 ? n : 64 * 256;
    config.gridDim = dim3((part + 255) / 256);
    cudaError_t e = cudaLaunchKernelEx(&config, scale, d, 7.0f, part);
    printf("a cooperative launch: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaStreamSynchronize(s));
    report(all_equal(d, part, 210.0f) && all_equal(d + part, n - part, 30.0f), "a cooperative launch by attribute");
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 2;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.gridDim = dim3(((n + 255) / 256 + 1) / 2 * 2);
    e = cudaLaunchKernelEx(&config, scale, d, 7.0f, n);
    printf("a cluster of 2 blocks: %d (%s)\n", (int)e, cudaGetErrorName(e));
    CHECK(cudaStreamSynchronize(s));
    report(all_equal(d, part, 1470.0f) && all_equal(d + part, n - part, 210.0f), "a launch in clusters of 2 blocks");
    cudaLaunchAttribute both[2] = {cooperative, cluster};
    config.attrs = both;
    config.numAttrs = 2;
    config.gridDim = dim3(2);
    e = cudaLaunchKernelEx(&config, scale, d, 1.0f, n);  // a scale of 1: no change if it runs
    printf("a cooperative launch in clusters: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();

    config.numAttrs = 0;
    config.gridDim = dim3((n + 255) / 256);
    CHECK(cudaLaunchKernelEx(&config, scale, d, 0.5f, n));
    CHECK(cudaStreamSynchronize(s));
    report(all_equal(d, part, 735.0f) && all_equal(d + part, n - part, 105.0f), "the stream after the refusals");

    CHECK(cudaEventDestroy(done));
    CHECK(cudaEventDestroy(triggered));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(other));
    CHECK(cudaFree(d));
    printf(failures ? "launch_ex: FAILED\n" : "launch_ex: all exact\n");
    return failures ? 1 : 0;
}
