/* A C program's checked loop through a network outage (issue 50), as `ac-net-client count` is
 * for the Rust SDK. Threads share the job's first accelerator and one kernel handle; each, round
 * after round, queues 50 launches of the builtin `saxpy` that add 1 to each of its counters
 * (acKernelLaunch returns at once), copies 1 MiB of round-specific bytes to the device and back
 * and checks them byte for byte, then reads its counters: each must equal the launches it made
 * (every launch ran exactly once). Prints `task T round N ok mark M launches L`, where M is the
 * number in the file AC_NET_MARK names when the round began; `wrong ...` (exit 1) or
 * `error: ...` (exit 2). Runs until killed.
 * Usage: outage <threads> */
#include <ac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNTERS 4096
#define LAUNCHES 50
#define BYTES (1u << 20)

static acDevice dev;
static acKernel saxpy;

/* The number in the file AC_NET_MARK names, 0 without one. */
static unsigned long mark(void) {
    const char *path = getenv("AC_NET_MARK");
    FILE *f = path ? fopen(path, "r") : NULL;
    unsigned long m = 0;
    if (f) {
        if (fscanf(f, "%lu", &m) != 1) m = 0;
        fclose(f);
    }
    return m;
}

static void fail(long task, const char *what) {
    printf("error: task %ld: %s: %s\n", task, what, acGetLastErrorMessage());
    fflush(stdout);
    exit(2);
}

static void *task(void *arg) {
    long id = (long)arg;
    float *counted = malloc(COUNTERS * sizeof *counted), *ones = malloc(COUNTERS * sizeof *ones);
    unsigned char *data = malloc(BYTES), *back = malloc(BYTES);
    for (int i = 0; i < COUNTERS; i++) {
        counted[i] = 0.0f;
        ones[i] = 1.0f;
    }
    acMem counters, dones, bytes;
    if (acMemAlloc(dev, COUNTERS * sizeof(float), &counters) || acMemAlloc(dev, COUNTERS * sizeof(float), &dones) ||
        acMemAlloc(dev, BYTES, &bytes) || acMemCpy(dones, ones, COUNTERS * sizeof(float), acMemcpyHostToDevice))
        fail(id, "set-up");
    acArg args[] = {acArgF32(1.0f), acArgMem(dones), acArgMem(counters), acArgU64(COUNTERS)};
    unsigned long launches = 0;
    for (unsigned long round = 0;; round++) {
        unsigned long m = mark();
        for (int l = 0; l < LAUNCHES; l++)
            if (acKernelLaunch(saxpy, acDim(COUNTERS / 256, 1, 1), acDim(256, 1, 1), 0, NULL, 4, args))
                fail(id, "launch");
        launches += LAUNCHES;
        for (unsigned i = 0; i < BYTES; i++) data[i] = (unsigned char)((i * 2654435761u + (unsigned)(id << 20) + (unsigned)round) >> 24);
        memset(back, 0, BYTES);
        if (acMemCpy(bytes, data, BYTES, acMemcpyHostToDevice) || acMemCpy(back, bytes, BYTES, acMemcpyDeviceToHost))
            fail(id, "copy");
        if (memcmp(back, data, BYTES) != 0) {
            printf("wrong task %ld round %lu: the bytes differ\n", id, round);
            fflush(stdout);
            exit(1);
        }
        if (acMemCpy(counted, counters, COUNTERS * sizeof(float), acMemcpyDeviceToHost)) fail(id, "counters");
        for (int i = 0; i < COUNTERS; i++)
            if (counted[i] != (float)launches) {
                printf("wrong task %ld round %lu: a counter holds %g after %lu launches\n", id, round, counted[i],
                       launches);
                fflush(stdout);
                exit(1);
            }
        printf("task %ld round %lu ok mark %lu launches %lu\n", id, round, m, launches);
        fflush(stdout);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    acSet statics;
    if (AC_Init(&statics) || acSetDevice(statics, 0, &dev) ||
        acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &saxpy)) {
        printf("error: set-up: %s\n", acGetLastErrorMessage());
        return 2;
    }
    pthread_t t[16];
    for (long i = 0; i < threads && i < 16; i++) pthread_create(&t[i], NULL, task, (void *)i);
    for (long i = 0; i < threads && i < 16; i++) pthread_join(t[i], NULL);
    return 0;
}
