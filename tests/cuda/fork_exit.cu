// A program that forks once CUDA has started: the child is refused CUDA (exit status 0; 2 if a
// call succeeded) and exits through exit(), running the exit handlers it inherited (the shim's
// among them) without the parent's threads. It must end at once and leave the parent's session
// alone: the parent then computes on the device.
// tests/tests/e2e/cuda_shim.rs runs it through ac-cuda's libcuda.so.1.
#include <cstdio>
#include <cstdlib>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>
#include <cuda_runtime.h>

#include "check.h"

__global__ void iota(unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

int main() {
    const unsigned n = 4096;
    unsigned* d;
    CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    // The child: CUDA is refused it (the session is the parent's), and it exits.
    if (child == 0) exit(cudaMemset(d, 0, sizeof(unsigned)) == cudaSuccess ? 2 : 0);
    // The child's exit: within 10 s (it takes milliseconds), else it hung in the exit handlers.
    int status = 0;
    pid_t done = 0;
    for (int tries = 0; tries < 1000 && done == 0; tries++) {
        done = waitpid(child, &status, WNOHANG);
        if (done == 0) usleep(10000);
    }
    if (done == 0) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        printf("FAILED: the forked child hung in exit\n");
        return 1;
    }
    printf("forked child exited with %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    iota<<<(n + 255) / 256, 256>>>(d, n);
    std::vector<unsigned> out(n);
    CHECK(cudaMemcpy(out.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < n; i++) {
        if (out[i] != i) {
            printf("FAILED: out[%u] = %u after the fork\n", i, out[i]);
            return 1;
        }
    }
    printf("parent computed after the fork exact\n");
    return 0;
}
