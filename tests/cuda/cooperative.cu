// A cooperative launch, as grid-synchronizing kernels make it (launched with
// cudaLaunchCooperativeKernel, the blocks wait for each other: here at a barrier of their own,
// as cooperative groups' this_grid().sync() does, which would never open unless every block is
// resident at once): the device says it supports them; a grid of as many blocks as the occupancy calculator says fit runs, its second phase
// reading what every block wrote in the first; a grid one block larger is refused
// (cudaErrorCooperativeLaunchTooLarge) and the stream goes on.
// Usage: cooperative [elements]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// Blocks that have reached the barrier (the program clears it before each launch).
__device__ unsigned arrived;

// Waits until all `blocks` blocks of the grid have arrived.
__device__ void grid_barrier(unsigned blocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(&arrived, 1u);
        while (atomicAdd(&arrived, 0u) < blocks) {
        }
        __threadfence();  // what the others wrote before arriving, seen after
    }
    __syncthreads();
}

// x[i] = 2i for every i, then, after the whole grid has written, y[i] = x[n - 1 - i].
__global__ void mirror(float* x, float* y, int n) {
    int rank = blockIdx.x * blockDim.x + threadIdx.x, size = gridDim.x * blockDim.x;
    for (int i = rank; i < n; i += size) x[i] = 2.0f * i;
    grid_barrier(gridDim.x);
    for (int i = rank; i < n; i += size) y[i] = x[n - 1 - i];
}

// Clears the barrier on `s`, before the next launch there.
static void clear_barrier(cudaStream_t s) {
    static const unsigned zero = 0;
    CHECK(cudaMemcpyToSymbolAsync(arrived, &zero, sizeof zero, 0, cudaMemcpyHostToDevice, s));
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000000;
    int supported = 0, multiprocessors = 0, per_multiprocessor = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrCooperativeLaunch, 0));
    CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, mirror, 256, 0));
    int blocks = multiprocessors * per_multiprocessor;
    printf("cooperative launch %d, %d blocks at once\n", supported, blocks);

    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* args[] = {&x, &y, &n};
    clear_barrier(s);
    CHECK(cudaLaunchCooperativeKernel((void*)mirror, blocks, 256, args, 0, s));
    std::vector<float> host(n);
    CHECK(cudaMemcpyAsync(host.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    bool mirrored = true;
    for (int i = 0; i < n; i++) mirrored &= host[i] == 2.0f * (n - 1 - i);
    report(mirrored, "a grid-synchronized kernel on every resident block");

    cudaError_t e = cudaLaunchCooperativeKernel((void*)mirror, blocks + 1, 256, args, 0, s);
    printf("one block more: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), s));
    clear_barrier(s);
    CHECK(cudaLaunchCooperativeKernel((void*)mirror, 1, 256, args, 0, s));
    CHECK(cudaMemcpyAsync(host.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    mirrored = true;
    for (int i = 0; i < n; i++) mirrored &= host[i] == 2.0f * (n - 1 - i);
    report(mirrored, "one block, after the refusal");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    printf(failures ? "cooperative: FAILED\n" : "cooperative: all exact\n");
    return failures ? 1 : 0;
}
