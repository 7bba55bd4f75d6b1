// A kernel that takes a struct by value (12 bytes), as frameworks' kernels do, launched with
// <<<>>> (the runtime passes cuLaunchKernel a pointer per parameter, and no sizes).
// Usage: struct_param [elements]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

struct Affine {
    float a;
    float b;
    int n;
};

__global__ void affine(float* x, Affine p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) x[i] = p.a * x[i] + p.b;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    std::vector<float> host(n);
    for (int i = 0; i < n; i++) host[i] = (float)i;
    float* x;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    // Only the first half: p.n limits the kernel, not the launch's shape.
    Affine p = {2.0f, 1.0f, n / 2};
    affine<<<(n + 255) / 256, 256>>>(x, p);
    CHECK(cudaMemcpy(host.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float want = i < n / 2 ? 2.0f * i + 1.0f : (float)i;
        if (host[i] != want) {
            printf("FAILED: x[%d] = %f, expected %f\n", i, host[i], want);
            return 1;
        }
    }
    printf("struct_param: %d elements exact\n", n);
    return 0;
}
