// A plain CUDA program, built by nvcc with its default (static) runtime: it knows nothing of
// remote accelerators. tests/tests/cuda_shim.rs runs it through ac-cuda's libcuda.so.1.
// Usage: vector_add [elements] [device]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

__global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    int device = argc > 2 ? atoi(argv[2]) : 0;
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, device));
    printf("devices: %d; device %d: %s, compute %d.%d, %zu MiB\n", count, device, prop.name, prop.major, prop.minor,
           prop.totalGlobalMem >> 20);
    CHECK(cudaSetDevice(device));
    float *a, *b, *c;
    float* ha = (float*)malloc(n * sizeof(float));
    float* hb = (float*)malloc(n * sizeof(float));
    float* hc = (float*)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(2 * i);
    }
    CHECK(cudaMalloc(&a, n * sizeof(float)));
    CHECK(cudaMalloc(&b, n * sizeof(float)));
    CHECK(cudaMalloc(&c, n * sizeof(float)));
    CHECK(cudaMemcpy(a, ha, n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb, n * sizeof(float), cudaMemcpyHostToDevice));
    vadd<<<(n + 255) / 256, 256>>>(a, b, c, n);
    CHECK(cudaGetLastError());
    // Occupancy, as a framework sizes its launches: the shared memory said to be available to
    // each of that many blocks must let that many fit.
    int blocks = 0, fit = 0;
    size_t shared = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vadd, 256, 0));
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&shared, vadd, blocks, 256));
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, vadd, 256, shared));
    if (blocks < 1 || fit < blocks) {
        printf("FAILED: occupancy: %d blocks, %zu bytes of shared memory each let %d fit\n", blocks, shared, fit);
        return 1;
    }
    printf("occupancy: %d blocks of 256 threads, %zu bytes of dynamic shared memory each\n", blocks, shared);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(hc, c, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        if (hc[i] != 3.0f * i) {
            printf("FAILED: c[%d] = %f, expected %f\n", i, hc[i], 3.0f * i);
            return 1;
        }
    }
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    printf("vector_add: %d elements on device %d exact\n", n, device);
    return 0;
}
