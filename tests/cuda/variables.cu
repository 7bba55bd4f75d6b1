// Module variables as CUDA programs use them: a `__constant__` array set with
// cudaMemcpyToSymbol, an initialized `__device__` array read back with cudaMemcpyFromSymbol and
// changed at an offset, a `__device__` counter that the kernel increments, addressed with
// cudaGetSymbolAddress and cleared with a plain cudaMemset, and read with
// cudaMemcpyFromSymbolAsync on a stream; sizes from cudaGetSymbolSize; a copy past a variable's
// end and a cudaFree of one refused, the variable unchanged. The kernel's results show that it
// sees what the program wrote. Every value is a small integer or dyadic fraction, so results
// are exact whether or not the compiler fuses multiply-adds.
// Usage: variables [elements]
// tests/fixtures/variables.sm_90.cubin is this file's device code, for the backend's tests:
//   nvcc -arch=sm_90 -cubin -o tests/fixtures/variables.sm_90.cubin tests/cuda/variables.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__constant__ float coefficients[4];
__device__ int offsets[4] = {1, 2, 3, 4};
__device__ unsigned counted;

// x[i] = c0 + c1 x + c2 x^2 + c3 x^3 + offsets[i % 4], and one count a thread that computed.
__global__ void polynomial(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        x[i] = ((coefficients[3] * v + coefficients[2]) * v + coefficients[1]) * v + coefficients[0] + offsets[i % 4];
        atomicAdd(&counted, 1u);
    }
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;

    size_t sizes[3];
    CHECK(cudaGetSymbolSize(&sizes[0], coefficients));
    CHECK(cudaGetSymbolSize(&sizes[1], offsets));
    CHECK(cudaGetSymbolSize(&sizes[2], counted));
    printf("sizes %zu %zu %zu\n", sizes[0], sizes[1], sizes[2]);

    int initial[4];
    CHECK(cudaMemcpyFromSymbol(initial, offsets, sizeof initial));
    report(initial[0] == 1 && initial[1] == 2 && initial[2] == 3 && initial[3] == 4, "initializer");

    const float c[4] = {1.0f, 2.0f, 0.5f, 0.25f};
    CHECK(cudaMemcpyToSymbol(coefficients, c, sizeof c));
    const int ten = 10;
    CHECK(cudaMemcpyToSymbol(offsets, &ten, sizeof ten, 2 * sizeof(int)));  // offsets[2]

    // Past the end: refused, and offsets unchanged.
    const int past[2] = {-1, -1};
    cudaError_t e = cudaMemcpyToSymbol(offsets, past, sizeof past, 3 * sizeof(int));
    printf("a copy past a variable: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();  // the runtime keeps a failed call's error as the last one: cleared
    int now[4];
    CHECK(cudaMemcpyFromSymbol(now, offsets, sizeof now));
    report(now[0] == 1 && now[1] == 2 && now[2] == 10 && now[3] == 4, "offsets after one changed");

    unsigned* count_at;
    CHECK(cudaGetSymbolAddress((void**)&count_at, counted));
    CHECK(cudaMemset(count_at, 0, sizeof(unsigned)));
    e = cudaFree(count_at);
    printf("a variable freed: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();

    std::vector<float> host(n);
    for (int i = 0; i < n; i++) host[i] = (float)(i % 7);
    float* x;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    polynomial<<<(n + 127) / 128, 128>>>(x, n);
    CHECK(cudaGetLastError());
    std::vector<float> out(n);
    CHECK(cudaMemcpy(out.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool exact = true;
    for (int i = 0; i < n && exact; i++) {
        float v = host[i];
        float want = ((c[3] * v + c[2]) * v + c[1]) * v + c[0] + now[i % 4];
        if (out[i] != want) {
            printf("x[%d] = %f, expected %f\n", i, out[i], want);
            exact = false;
        }
    }
    report(exact, "kernel with the variables");

    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    unsigned count = 0;
    CHECK(cudaMemcpyFromSymbolAsync(&count, counted, sizeof count, 0, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    printf("counted %u of %d\n", count, n);
    report(count == (unsigned)n, "count");

    // Device to device: the variable into an allocation, and back into the variable.
    int* copy;
    CHECK(cudaMalloc(&copy, sizeof now));
    CHECK(cudaMemcpyFromSymbol(copy, offsets, sizeof now, 0, cudaMemcpyDeviceToDevice));
    const int zeros[4] = {0, 0, 0, 0};
    CHECK(cudaMemcpyToSymbol(offsets, zeros, sizeof zeros));
    CHECK(cudaMemcpyToSymbol(offsets, copy, sizeof now, 0, cudaMemcpyDeviceToDevice));
    int back[4];
    CHECK(cudaMemcpyFromSymbol(back, offsets, sizeof back));
    report(back[0] == 1 && back[1] == 2 && back[2] == 10 && back[3] == 4, "device to device through a variable");

    CHECK(cudaFree(copy));
    CHECK(cudaFree(x));
    CHECK(cudaStreamDestroy(stream));
    if (failures) return 1;
    printf("variables: all exact\n");
    return 0;
}
