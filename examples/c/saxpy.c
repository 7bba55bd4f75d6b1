/* saxpy in C through libac: y = a*x + y on a remote accelerator.
 *
 *   cc saxpy.c $(pkg-config --cflags --libs ac) -o saxpy
 *   ARM_ADDR=... ARM_CA_CERT=... ARM_ACPN=1 ./saxpy [elements] [rounds]
 *
 * It uses this node's static accelerators, asks for one more with AC_Get and goes on
 * without it when the manager says no. With rounds > 1 it times the round trip of the work:
 * copy x and y in, run, copy y back.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <ac.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        acError e_ = (call);                                                             \
        if (e_ != AC_SUCCESS) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,           \
                    acGetErrorString(e_), acGetLastErrorMessage());                      \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1u << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 1;
    const float a = 2.0f;

    acSet statics, extra;
    int count = 0;
    CHECK(AC_Init(&statics));
    CHECK(acSetSize(statics, &count));
    printf("AC_Init: %d static accelerator(s)\n", count);

    /* One more accelerator, if the manager can spare it now. */
    acError got = AC_Get(1, &extra);
    if (got == AC_ERROR_REJECTED) {
        printf("AC_Get(1): rejected (%s)\n", acGetLastErrorMessage());
    } else {
        CHECK(got);
        printf("AC_Get(1): granted\n");
    }
    acSet use = got == AC_SUCCESS ? extra : statics;
    acDevice dev;
    CHECK(acSetDevice(use, 0, &dev));
    acDeviceInfo info;
    CHECK(acDeviceGetInfo(dev, &info));
    printf("device: %s, %llu MiB\n", info.name, (unsigned long long)(info.memory_total >> 20));

    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y) return 1;
    acMem dx, dy;
    CHECK(acMemAlloc(dev, n * sizeof(float), &dx));
    CHECK(acMemAlloc(dev, n * sizeof(float), &dy));
    acKernel saxpy;
    CHECK(acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &saxpy));
    acArg args[] = {acArgF32(a), acArgMem(dx), acArgMem(dy), acArgU64(n)};
    CHECK(acKernelSetArgs(saxpy, 4, args));

    double start = 0;
    for (int round = 0; round <= rounds; round++) {
        if (round == 1) start = now_s(); /* round 0 warms up */
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)(i % 1000);
            y[i] = (float)round;
        }
        CHECK(acMemCpy(dx, x, n * sizeof(float), acMemcpyHostToDevice));
        CHECK(acMemCpy(dy, y, n * sizeof(float), acMemcpyHostToDevice));
        CHECK(acKernelRun(saxpy, acDim((uint32_t)((n + 255) / 256), 1, 1), acDim(256, 1, 1), 0, NULL));
        CHECK(acMemCpy(y, dy, n * sizeof(float), acMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            float want = a * (float)(i % 1000) + (float)round;
            if (y[i] != want) {
                fprintf(stderr, "round %d: y[%zu] = %f, want %f\n", round, i, y[i], want);
                return 1;
            }
        }
    }
    if (rounds > 1) {
        printf("saxpy: %.3f ms per round\n", (now_s() - start) * 1e3 / rounds);
    }

    CHECK(acKernelDestroy(saxpy));
    CHECK(acMemFree(dx));
    CHECK(acMemFree(dy));
    if (got == AC_SUCCESS) CHECK(AC_Free(extra));
    CHECK(AC_Finalize());
    free(x);
    free(y);
    printf("saxpy: %zu elements OK\n", n);
    return 0;
}
