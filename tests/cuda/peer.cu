// Two devices of a job, as multi-GPU programs use them: peer access asked for and refused
// (remote accelerators map none of each other's memory), then cudaMemcpyPeer and
// cudaMemcpyPeerAsync between the two devices' memory, each checked on the host; the two
// devices may hand out the same addresses, so the copy goes by the devices named.
// Usage: peer [elements]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 65536;
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    if (devices < 2) {
        printf("FAILED: %d devices, 2 wanted\n", devices);
        return 1;
    }
    int can = -1, access = -1, partial = -1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    CHECK(cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, 0, 1));
    // CUDA 13's last attribute (cudaDevP2PAttrOnlyPartialNativeAtomicSupported).
    CHECK(cudaDeviceGetP2PAttribute(&partial, (cudaDeviceP2PAttr)5, 0, 1));
    CHECK(cudaSetDevice(0));
    cudaError_t enable = cudaDeviceEnablePeerAccess(1, 0);
    cudaGetLastError();
    cudaError_t disable = cudaDeviceDisablePeerAccess(1);
    cudaGetLastError();
    cudaError_t itself = cudaDeviceEnablePeerAccess(0, 0);
    cudaGetLastError();
    // Peer access to the current device itself: refused (by the runtime or the driver).
    printf("peer access: can %d, attributes %d %d, enable %s, disable %s, itself %s\n", can, access, partial,
           cudaGetErrorName(enable), cudaGetErrorName(disable), itself == cudaSuccess ? "granted" : "refused");

    size_t bytes = n * sizeof(float);
    std::vector<float> host(n), back(n, -1.0f);
    for (int i = 0; i < n; i++) host[i] = 0.25f * (float)i;
    float *a, *b;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMemset(b, 0, bytes));
    printf("device 0 buffer %p, device 1 buffer %p\n", (void*)a, (void*)b);
    // From device 0 to device 1, with device 1 current.
    CHECK(cudaMemcpyPeer(b, 1, a, 0, bytes));
    CHECK(cudaMemcpy(back.data(), b, bytes, cudaMemcpyDeviceToHost));
    bool same = back == host;
    // Back the other way, the second half only, on a stream of device 0.
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemset(a, 0, bytes));
    CHECK(cudaMemcpyPeerAsync(a + n / 2, 0, b + n / 2, 1, bytes / 2, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(back.data(), a, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) same &= back[i] == (i < n / 2 ? 0.0f : host[i]);
    // A peer copy past the source's allocation is refused.
    cudaError_t past = cudaMemcpyPeer(b, 1, a + 1, 0, bytes);
    cudaGetLastError();
    printf("a peer copy past its allocation: %s\n", cudaGetErrorName(past));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(a));
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(b));
    if (!same) {
        printf("FAILED: peer copies differ\n");
        return 1;
    }
    printf("peer: %d elements each way exact\n", n);
    return 0;
}
