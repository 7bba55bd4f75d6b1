/* A borrower of other jobs' spare accelerators (AC_GetPreemptible), run as a batch job's
 * program by the tests. It prints "borrowed N" once it holds the loan and has computed on it,
 * then:
 *   listen: waits to be told (AC_PollPreemption) that the owner takes one back, stops using
 *           that one, goes on with the others and frees the loan;
 *   ignore: computes on every borrowed accelerator until a call fails, and prints the failure.
 * Usage: preempt listen|ignore */
#include <ac.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                            \
    do {                                                                                       \
        acError e_ = (call);                                                                   \
        if (e_ != AC_SUCCESS) {                                                                \
            printf("%s: %d (%s): %s\n", #call, (int)e_, acGetErrorString(e_),                  \
                   acGetLastErrorMessage());                                                   \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

/* y = 2 x + y on `dev`, checked; the first failing call's code. */
static acError saxpy(acDevice dev) {
    enum { N = 1024 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    acMem dx = NULL, dy = NULL;
    acKernel k = NULL;
    acError e = acMemAlloc(dev, sizeof x, &dx);
    if (!e) e = acMemAlloc(dev, sizeof y, &dy);
    if (!e) e = acMemCpy(dx, x, sizeof x, acMemcpyHostToDevice);
    if (!e) e = acMemCpy(dy, y, sizeof y, acMemcpyHostToDevice);
    if (!e) e = acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &k);
    acArg args[] = {acArgF32(2.0f), acArgMem(dx), acArgMem(dy), acArgU64(N)};
    if (!e) e = acKernelLaunch(k, acDim(4, 1, 1), acDim(256, 1, 1), 0, NULL, 4, args);
    if (!e) e = acMemCpy(y, dy, sizeof y, acMemcpyDeviceToHost);
    for (int i = 0; !e && i < N; i++) {
        if (y[i] != 2.0f * (float)i + 1.0f) {
            printf("wrong y[%d] = %f\n", i, y[i]);
            e = AC_ERROR_INTERNAL;
        }
    }
    /* The first error is what this reports; the clean-up's own errors are not. */
    if (k) acKernelDestroy(k);
    if (dx) acMemFree(dx);
    if (dy) acMemFree(dy);
    return e;
}

int main(int argc, char **argv) {
    int listen = argc > 1 && strcmp(argv[1], "listen") == 0;
    acSet statics, loan;
    int count;
    CHECK(AC_Init(&statics));
    CHECK(AC_GetPreemptible(1, 2, 0, &loan));
    CHECK(acSetSize(loan, &count));
    acDevice devices[2];
    for (int i = 0; i < count; i++) {
        CHECK(acSetDevice(loan, i, &devices[i]));
        CHECK(saxpy(devices[i]));
    }
    printf("borrowed %d\n", count);
    fflush(stdout);

    if (listen) {
        acSet set;
        acDevice taken;
        int64_t revoke_at;
        CHECK(AC_PollPreemption(60000, &set, &taken, &revoke_at));
        if (taken == NULL || set != loan) {
            printf("not told of the preemption\n");
            return 1;
        }
        for (int i = 0; i < count; i++) {
            if (devices[i] == taken) {
                printf("told: device %d of the loan is taken back, usable for %lld s more\n", i,
                       (long long)(revoke_at - (int64_t)time(NULL)));
            } else {
                CHECK(saxpy(devices[i]));
                printf("device %d still computes\n", i);
            }
        }
        CHECK(AC_PollPreemption(0, &set, &taken, &revoke_at));
        printf("told again: %s\n", taken == NULL ? "no" : "yes");
    } else {
        /* Bounded: the owner takes one back within seconds of "borrowed". */
        time_t give_up = time(NULL) + 60;
        acError e = AC_SUCCESS;
        while (e == AC_SUCCESS && time(NULL) < give_up) {
            for (int i = 0; i < count && e == AC_SUCCESS; i++) {
                e = saxpy(devices[i]);
                if (e != AC_SUCCESS) {
                    printf("device %d: %d (%s): %s\n", i, (int)e, acGetErrorString(e), acGetLastErrorMessage());
                }
            }
        }
        if (e == AC_SUCCESS) {
            printf("never revoked\n");
            return 1;
        }
    }
    CHECK(AC_Free(loan));
    CHECK(AC_Finalize());
    printf("done\n");
    return 0;
}
