/* Threads sharing one accelerator and one kernel handle through libac, as a user program
 * would: each thread allocates, copies in, launches (acKernelLaunch), copies back and frees,
 * with no synchronize anywhere; the copy back must see the launch the thread made before it.
 * Usage: threads <threads> <rounds> <elements>; prints the wrong elements, exits 1 if any. */
#include <ac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static acDevice dev;
static acKernel saxpy;
static int rounds;
static size_t n;

static void *work(void *arg) {
    long id = (long)arg, wrong = 0;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (int r = 0; r < rounds; r++) {
        acMem dx, dy;
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)((i + (size_t)id) % 97);
            y[i] = (float)r;
        }
        if (acMemAlloc(dev, n * sizeof(float), &dx) || acMemAlloc(dev, n * sizeof(float), &dy) ||
            acMemCpy(dx, x, n * sizeof(float), acMemcpyHostToDevice) ||
            acMemCpy(dy, y, n * sizeof(float), acMemcpyHostToDevice)) {
            fprintf(stderr, "thread %ld: %s\n", id, acGetLastErrorMessage());
            exit(2);
        }
        acArg args[] = {acArgF32((float)id), acArgMem(dx), acArgMem(dy), acArgU64(n)};
        if (acKernelLaunch(saxpy, acDim((uint32_t)((n + 255) / 256), 1, 1), acDim(256, 1, 1), 0, NULL, 4, args) ||
            acMemCpy(y, dy, n * sizeof(float), acMemcpyDeviceToHost)) {
            fprintf(stderr, "thread %ld: %s\n", id, acGetLastErrorMessage());
            exit(2);
        }
        for (size_t i = 0; i < n; i++) wrong += y[i] != (float)id * (float)((i + (size_t)id) % 97) + (float)r;
        /* Freed with no synchronize; the next round allocates again at once. */
        acMemFree(dx);
        acMemFree(dy);
    }
    free(x);
    free(y);
    return (void *)wrong;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    rounds = argc > 2 ? atoi(argv[2]) : 20;
    n = argc > 3 ? strtoull(argv[3], NULL, 10) : 100000;
    acSet statics;
    if (AC_Init(&statics) || acSetDevice(statics, 0, &dev) ||
        acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &saxpy)) {
        fprintf(stderr, "set-up: %s\n", acGetLastErrorMessage());
        return 2;
    }
    pthread_t t[64];
    long wrong = 0;
    for (long i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, work, (void *)i);
    for (long i = 0; i < threads && i < 64; i++) {
        void *w;
        pthread_join(t[i], &w);
        wrong += (long)w;
    }
    if (AC_Finalize()) return 2;
    printf("threads: %d, rounds: %d, elements: %zu, wrong: %ld\n", threads, rounds, n, wrong);
    return wrong == 0 ? 0 : 1;
}
