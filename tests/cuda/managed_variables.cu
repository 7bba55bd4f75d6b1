// `__managed__` variables as CUDA programs use them: one name that host code and kernels both
// read and write, with no copy in the program. The host reads an initialized variable before
// any kernel ran; rounds of host writes, a kernel that adds into the variables and host reads
// after a synchronization; a variable's host address passed to a kernel as a pointer (the same
// address on both sides); synchronization by stream; cudaMemcpyToSymbol and
// cudaMemcpyFromSymbol on a managed variable between host accesses; a device memset of one;
// its symbol address and pointer attributes; a cudaFree of one refused; threads each launching
// on their own stream into one variable. The variables are small and sit next to each other,
// as a module lays them out, so one page holds several. Every value is a small integer or a
// dyadic fraction, so results are exact.
// Usage: managed_variables [elements]
// tests/fixtures/managed_variables.sm_90.cubin is this file's device code, for the stand-in's
// tests: nvcc -arch=sm_90 -Itests/cuda -cubin -o tests/fixtures/managed_variables.sm_90.cubin \
//   tests/cuda/managed_variables.cu
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__managed__ int totals[4];
__managed__ float gain = 2.5f;
__managed__ int histogram[1024];

// totals[i % 4] += (int)(gain * x[i]) and histogram[x[i] % 1024] += 1, one element a thread.
__global__ void tally(const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&totals[i % 4], (int)(gain * x[i]));
        atomicAdd(&histogram[x[i] % 1024], 1);
    }
}

// p[i] += v for i < n, one element a thread.
__global__ void add_to(int* p, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        p[i] += v;
    }
}

// Whether totals and histogram hold what a tally of `xs` with `g` adds to `base` and zeros.
static bool tallied(const std::vector<int>& xs, float g, const int base[4]) {
    int want[4] = {base[0], base[1], base[2], base[3]};
    std::vector<int> counts(1024, 0);
    for (size_t i = 0; i < xs.size(); i++) {
        want[i % 4] += (int)(g * xs[i]);
        counts[xs[i] % 1024] += 1;
    }
    bool ok = true;
    for (int k = 0; k < 4; k++) {
        if (totals[k] != want[k]) {
            printf("  totals[%d]: %d, expected %d\n", k, totals[k], want[k]);
            ok = false;
        }
    }
    for (int b = 0; b < 1024; b++) {
        if (histogram[b] != counts[b]) {
            printf("  histogram[%d]: %d, expected %d\n", b, histogram[b], counts[b]);
            return false;
        }
    }
    return ok;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;

    // Read on the host before any kernel: the initializer's value, and zeros.
    printf("initial: gain %g, totals %d %d %d %d\n", gain, totals[0], totals[1], totals[2], totals[3]);
    report(gain == 2.5f && totals[0] == 0 && totals[3] == 0 && histogram[1023] == 0, "initial values");

    std::vector<int> xs(n);
    int* x;
    CHECK(cudaMalloc(&x, n * sizeof(int)));
    bool rounds = true;
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < n; i++) {
            xs[i] = (i * 7 + r * 13) % 3000 + 1;
        }
        CHECK(cudaMemcpy(x, xs.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        gain = r + 0.5f;
        const int base[4] = {r, 2 * r, 3 * r, 4 * r};
        for (int k = 0; k < 4; k++) {
            totals[k] = base[k];
        }
        for (int b = 0; b < 1024; b++) {
            histogram[b] = 0;
        }
        tally<<<(n + 255) / 256, 256>>>(x, n);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        rounds = tallied(xs, gain, base) && rounds;
    }
    report(rounds, "3 rounds of host writes, a kernel and host reads");

    // The host's address of a managed variable is the kernel's.
    const int before[4] = {totals[0], totals[1], totals[2], totals[3]};
    add_to<<<1, 4>>>(totals, 5, 4);
    CHECK(cudaDeviceSynchronize());
    report(totals[0] == before[0] + 5 && totals[3] == before[3] + 5, "its host address passed to a kernel");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    add_to<<<1, 4, 0, s>>>(totals, 1, 4);
    CHECK(cudaStreamSynchronize(s));
    report(totals[0] == before[0] + 6 && totals[2] == before[2] + 6, "a kernel on a stream, read after its synchronization");

    const float set = 8.25f;
    CHECK(cudaMemcpyToSymbol(gain, &set, sizeof set));
    report(gain == 8.25f, "set by cudaMemcpyToSymbol, read by the host");
    gain = 3.0f;
    float back = 0;
    CHECK(cudaMemcpyFromSymbol(&back, gain, sizeof back));
    report(back == 3.0f, "written by the host, read by cudaMemcpyFromSymbol");

    void* at = nullptr;
    CHECK(cudaGetSymbolAddress(&at, totals));
    report(at == (void*)totals, "cudaGetSymbolAddress is the host's address");
    CHECK(cudaMemset(totals, 0, sizeof totals));
    report(totals[0] == 0 && totals[3] == 0 && gain == 3.0f, "a device memset, read by the host, its neighbour unchanged");

    cudaPointerAttributes a;
    CHECK(cudaPointerGetAttributes(&a, histogram));
    printf("pointer attributes: type %s, host pointer %s, device pointer %s\n",
           a.type == cudaMemoryTypeManaged ? "managed" : "other", a.hostPointer == histogram ? "same" : "other",
           a.devicePointer == histogram ? "same" : "other");

    totals[1] = 42;
    cudaError_t e = cudaFree(totals);
    printf("a managed variable freed: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();
    report(totals[1] == 42, "a managed variable after a refused free");

    // Threads each add into their own element of one variable on a stream of their own.
    for (int b = 0; b < 8; b++) {
        histogram[b] = 100 * b;
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([t] {
            cudaStream_t own;
            CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
            for (int k = 0; k < 5; k++) {
                add_to<<<1, 2, 0, own>>>(&histogram[2 * t], t + 1, 2);
            }
            CHECK(cudaStreamSynchronize(own));
            CHECK(cudaStreamDestroy(own));
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    CHECK(cudaDeviceSynchronize());
    bool threaded = true;
    for (int b = 0; b < 8; b++) {
        threaded = threaded && histogram[b] == 100 * b + 5 * (b / 2 + 1);
    }
    report(threaded, "4 threads adding on their own streams");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    printf("managed variables: %s\n", failures ? "FAILED" : "all exact");
    return failures ? 1 : 0;
}
