// Kernels that print (device-side printf), as programs debug theirs: the driver writes its
// printf buffer out at synchronizations, so every thread's line is on the program's standard
// output before the synchronization after the launch returns, ahead of the program's next
// line; the session goes on after its kernels printed (a vector add, checked exactly); a
// stream's synchronization brings its kernel's lines; and a kernel launched just before exit,
// with no synchronization, prints at exit (the shim synchronizes its devices then).
// Usage: printf [blocks] [threads]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__global__ void greet(int tag) {
    printf("kernel %d: block %d thread %d\n", tag, (int)blockIdx.x, (int)threadIdx.x);
}

__global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 3;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    // Under a test, standard output is a pipe, fully buffered: the kernels' lines must take
    // their place in that buffer, not pass it.
    printf("before the launch\n");
    greet<<<blocks, threads>>>(1);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("synchronized\n");

    int n = 1000;
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = (float)(3 * i);
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, n * sizeof(float)));
    CHECK(cudaMalloc(&db, n * sizeof(float)));
    CHECK(cudaMalloc(&dc, n * sizeof(float)));
    CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool exact = true;
    for (int i = 0; i < n; i++) exact &= c[i] == (float)(4 * i);
    report(exact, "a vector add after the kernel printed:");

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    greet<<<1, 2, 0, s>>>(2);
    CHECK(cudaStreamSynchronize(s));
    printf("stream synchronized\n");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));

    if (failures) return 1;
    printf("printf: all exact\n");
    // No synchronization: the shim writes the line out at exit.
    greet<<<1, 1>>>(3);
    CHECK(cudaGetLastError());
    return 0;
}
