/* An iterative C program that resizes at reconfiguration points (AC_Check), as DMR's programs
 * do: each iteration computes y = 2x + y on N elements spread over every accelerator it holds
 * (its static set and the elastic sets AC_Check gave it) and checks the result; between
 * iterations it calls AC_Check and adds a new set (AC_CHECK_EXPAND) or gives back the device a
 * reclaim asks for (AC_CHECK_SHRINK, with AC_FreeDevice). Prints `size N` whenever the count it
 * runs on changes; once it has shrunk, it runs 2 s more, then prints `rounds R wrong W` and
 * `done`; without a reclaim within 60 s it says so and stops. Exits 2 on an error. */
#include <ac.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 100000
#define MAX_SETS 16
#define MAX_DEVICES 16

static void fail(const char *what) {
    printf("error: %s: %s\n", what, acGetLastErrorMessage());
    fflush(stdout);
    exit(2);
}

/* Every device of every set held, in `devices`; returns how many. */
static int gather(acSet *sets, int nsets, acDevice *devices) {
    int n = 0;
    for (int s = 0; s < nsets; s++) {
        int size;
        if (acSetSize(sets[s], &size)) fail("acSetSize");
        for (int i = 0; i < size && n < MAX_DEVICES; i++)
            if (acSetDevice(sets[s], i, &devices[n++])) fail("acSetDevice");
    }
    return n;
}

/* One iteration on `n` devices: the values that came back wrong. */
static long iterate(acDevice *devices, int n, int round, float *x, float *y) {
    size_t share = (N + (size_t)n - 1) / (size_t)n;
    for (size_t i = 0; i < N; i++) {
        x[i] = (float)((i + (size_t)round) % 101);
        y[i] = (float)(i % 7);
    }
    for (int d = 0; d < n; d++) {
        size_t start = (size_t)d * share, len = start >= N ? 0 : (N - start < share ? N - start : share);
        if (len == 0) continue;
        acMem dx, dy;
        acKernel saxpy;
        if (acMemAlloc(devices[d], len * sizeof(float), &dx) || acMemAlloc(devices[d], len * sizeof(float), &dy) ||
            acMemCpy(dx, x + start, len * sizeof(float), acMemcpyHostToDevice) ||
            acMemCpy(dy, y + start, len * sizeof(float), acMemcpyHostToDevice) ||
            acKernelCreate(devices[d], AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &saxpy))
            fail("set-up of an iteration");
        acArg args[] = {acArgF32(2.0f), acArgMem(dx), acArgMem(dy), acArgU64(len)};
        if (acKernelLaunch(saxpy, acDim((uint32_t)((len + 255) / 256), 1, 1), acDim(256, 1, 1), 0, NULL, 4, args) ||
            acMemCpy(y + start, dy, len * sizeof(float), acMemcpyDeviceToHost))
            fail("iteration");
        acKernelDestroy(saxpy);
        acMemFree(dx);
        acMemFree(dy);
    }
    long wrong = 0;
    for (size_t i = 0; i < N; i++) wrong += y[i] != 2.0f * (float)((i + (size_t)round) % 101) + (float)(i % 7);
    return wrong;
}

int main(void) {
    acSet sets[MAX_SETS];
    acDevice devices[MAX_DEVICES];
    int nsets = 1, last = 0, shrunk = 0;
    long wrong = 0;
    time_t shrunk_at = 0;
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    if (AC_Init(&sets[0])) fail("AC_Init");
    int round = 0;
    time_t started = time(NULL);
    for (; !shrunk || time(NULL) < shrunk_at + 2; round++) {
        if (time(NULL) > started + 60) {
            printf("no reclaim within 60 s\n");
            break;
        }
        int n = gather(sets, nsets, devices);
        if (n != last) {
            printf("size %d\n", n);
            fflush(stdout);
            last = n;
        }
        wrong += iterate(devices, n, round, x, y);
        acCheckResult check;
        if (AC_Check(n, 1, 4, 4, 30, &check)) fail("AC_Check");
        if (check.action == AC_CHECK_EXPAND && nsets < MAX_SETS) {
            sets[nsets++] = check.set;
        } else if (check.action == AC_CHECK_SHRINK) {
            if (check.by < time(NULL) + 20) printf("short notice: %lld\n", (long long)(check.by - time(NULL)));
            if (AC_FreeDevice(check.set, check.device)) fail("AC_FreeDevice");
            if (!shrunk) shrunk_at = time(NULL);
            shrunk = 1;
        }
    }
    printf("rounds %d wrong %ld\n", round, wrong);
    if (AC_Finalize()) fail("AC_Finalize");
    printf("done\n");
    return wrong == 0 ? 0 : 1;
}
