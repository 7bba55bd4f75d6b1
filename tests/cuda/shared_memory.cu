// Dynamic shared memory past the default 48 KiB, as kernels that stage large tiles ask for it:
// a launch with 64 KiB is refused until the program opts in (cudaFuncSetAttribute with
// cudaFuncAttributeMaxDynamicSharedMemorySize), then runs; a limit past the device's opt-in
// maximum less the kernel's static shared memory is refused and the limit stays; lowering it
// refuses the launch again. cudaFuncGetAttributes answers the kernel's static shared memory
// (a 1 KiB array) and its limit; the occupancy calculator counts both; the preferred carveout
// is set and read back, one out of range refused. Each block reverses its chunk through
// shared memory, so the result is exact only if every block ran.
// Usage: shared_memory [blocks]
// tests/fixtures/shared_memory.sm_90.cubin is this file's device code, for the backend's tests:
//   nvcc -arch=sm_90 -cubin -o tests/fixtures/shared_memory.sm_90.cubin tests/cuda/shared_memory.cu
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

// Block b reverses x[b * chunk, (b + 1) * chunk), staged in `chunk` floats of dynamic shared
// memory; `bias` (static, 1 KiB) holds zeros, added so the compiler keeps it.
__global__ void reverse_blocks(float* x, int chunk) {
    extern __shared__ float stage[];
    __shared__ float bias[256];
    float* mine = x + (size_t)blockIdx.x * chunk;
    if (threadIdx.x < 256) bias[threadIdx.x] = 0.0f;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) stage[i] = mine[i];
    __syncthreads();
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) mine[i] = stage[chunk - 1 - i] + bias[i % 256];
}

// The launch's error, cleared, as the program sees it.
static cudaError_t launch(float* d, int blocks, int chunk) {
    reverse_blocks<<<blocks, 256, chunk * sizeof(float)>>>(d, chunk);
    return cudaGetLastError();
}

int main(int argc, char** argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 8;
    const int chunk = 16384;  // 64 KiB of floats a block
    const size_t n = (size_t)blocks * chunk;
    std::vector<float> host(n), back(n);
    for (size_t i = 0; i < n; i++) host[i] = (float)(i % 100000);
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    cudaFuncAttributes attributes;
    CHECK(cudaFuncGetAttributes(&attributes, reverse_blocks));
    printf("static %zu, limit %d, registers %d\n", attributes.sharedSizeBytes, attributes.maxDynamicSharedSizeBytes,
           attributes.numRegs);
    int optin = 0;
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));

    cudaError_t e = launch(d, blocks, chunk);
    printf("64 KiB before opting in: %d (%s)\n", (int)e, cudaGetErrorName(e));

    const int wanted = chunk * sizeof(float);
    CHECK(cudaFuncSetAttribute(reverse_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize, wanted));
    CHECK(cudaFuncGetAttributes(&attributes, reverse_blocks));
    report(attributes.maxDynamicSharedSizeBytes == wanted, "the raised limit read back");
    CHECK(launch(d, blocks, chunk));
    CHECK(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    bool reversed = true;
    for (size_t b = 0; b < (size_t)blocks; b++)
        for (size_t i = 0; i < (size_t)chunk; i++)
            reversed &= back[b * chunk + i] == host[b * chunk + chunk - 1 - i];
    report(reversed, "every block reversed with 64 KiB of dynamic shared memory");

    int past = optin - (int)attributes.sharedSizeBytes + 1;
    e = cudaFuncSetAttribute(reverse_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize, past);
    printf("a limit past the opt-in maximum: %d (%s)\n", (int)e, cudaGetErrorName(e));
    CHECK(cudaFuncGetAttributes(&attributes, reverse_blocks));
    report(attributes.maxDynamicSharedSizeBytes == wanted, "the limit kept after a refused one");

    int resident = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, reverse_blocks, 256, wanted));
    printf("resident blocks of 64 KiB: %d\n", resident);

    CHECK(cudaFuncSetAttribute(reverse_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize, 32 << 10));
    e = launch(d, blocks, chunk);
    printf("64 KiB after lowering the limit: %d (%s)\n", (int)e, cudaGetErrorName(e));
    CHECK(launch(d, blocks, 8192));  // 32 KiB: within it
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaFuncSetAttribute(reverse_blocks, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    CHECK(cudaFuncGetAttributes(&attributes, reverse_blocks));
    report(attributes.preferredShmemCarveout == 50, "the carveout read back");
    e = cudaFuncSetAttribute(reverse_blocks, cudaFuncAttributePreferredSharedMemoryCarveout, 101);
    printf("a carveout of 101: %d (%s)\n", (int)e, cudaGetErrorName(e));
    cudaGetLastError();

    // Threads sharing the kernel, as a library's callers do: each sets the same limit (again)
    // and launches on its own stream with its own data.
    const int threads = 4;
    std::vector<int> reversed_by(threads, 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++) {
        workers.emplace_back([&, t] {
            cudaStream_t stream;
            CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
            float* mine;
            CHECK(cudaMalloc(&mine, (size_t)chunk * sizeof(float)));
            CHECK(cudaMemcpyAsync(mine, host.data() + (size_t)t * chunk % n, chunk * sizeof(float),
                                  cudaMemcpyHostToDevice, stream));
            for (int round = 0; round < 3; round++) {
                CHECK(cudaFuncSetAttribute(reverse_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize, wanted));
                reverse_blocks<<<1, 256, wanted, stream>>>(mine, chunk);
                CHECK(cudaGetLastError());
            }
            std::vector<float> out(chunk);
            CHECK(cudaMemcpyAsync(out.data(), mine, chunk * sizeof(float), cudaMemcpyDeviceToHost, stream));
            CHECK(cudaStreamSynchronize(stream));
            bool ok = true;  // three reversals: reversed once
            const float* in = host.data() + (size_t)t * chunk % n;
            for (int i = 0; i < chunk; i++) ok &= out[i] == in[chunk - 1 - i];
            reversed_by[t] = ok;
            CHECK(cudaFree(mine));
            CHECK(cudaStreamDestroy(stream));
        });
    }
    for (auto& w : workers) w.join();
    bool all = true;
    for (int ok : reversed_by) all &= ok == 1;
    report(all, "4 threads setting the limit and launching on their own streams");

    CHECK(cudaFree(d));
    printf(failures ? "shared memory: FAILED\n" : "shared memory: all exact\n");
    return failures ? 1 : 0;
}
