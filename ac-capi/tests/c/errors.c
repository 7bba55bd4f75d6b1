/* Error paths through the C ABI, against real daemons; built as C and as C++ by the tests.
 * Each case prints "case: code (string): message"; a code other than the expected one ends
 * the program with status 1. */
#include <ac.h>
/* Included twice, as a program does whose own header includes it too. */
#include <ac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void expect(const char *what, acError got, acError want) {
    printf("%s: %d (%s): %s\n", what, (int)got, acGetErrorString(got),
           got == AC_SUCCESS ? "" : acGetLastErrorMessage());
    if (got != want) {
        printf("  expected %d (%s)\n", (int)want, acGetErrorString(want));
        failures++;
    }
}

int main(void) {
    acSet statics, more;
    acDevice dev;
    acMem mem, other;
    acKernel kernel;
    char host[4096];
    memset(host, 7, sizeof host);

    expect("get before init", AC_Get(1, &more), AC_ERROR_NOT_INITIALIZED);
    expect("init", AC_Init(&statics), AC_SUCCESS);
    expect("init twice", AC_Init(&statics), AC_ERROR_ALREADY_INITIALIZED);
    expect("device 0", acSetDevice(statics, 0, &dev), AC_SUCCESS);
    expect("device 5", acSetDevice(statics, 5, &dev), AC_ERROR_INVALID_DEVICE);
    expect("device -1", acSetDevice(statics, -1, &dev), AC_ERROR_INVALID_DEVICE);
    expect("alloc", acMemAlloc(dev, 1024, &mem), AC_SUCCESS);
    expect("alloc on a NULL device", acMemAlloc(NULL, 1024, &other), AC_ERROR_INVALID_HANDLE);
    expect("alloc on a forged device", acMemAlloc((acDevice)(uintptr_t)0x1234, 1024, &other),
           AC_ERROR_INVALID_HANDLE);
    expect("a memory handle used as a device", acMemAlloc((acDevice)(void *)mem, 16, &other),
           AC_ERROR_INVALID_HANDLE);
    expect("free NULL", acMemFree(NULL), AC_ERROR_INVALID_HANDLE);
    expect("synchronize NULL", acDeviceSynchronize(NULL), AC_ERROR_INVALID_HANDLE);

    expect("host to device", acMemCpy(mem, host, 1024, acMemcpyHostToDevice), AC_SUCCESS);
    expect("wrong direction: host destination", acMemCpy(host, mem, 16, acMemcpyHostToDevice),
           AC_ERROR_INVALID_DIRECTION);
    expect("wrong direction: device destination", acMemCpy(mem, host, 16, acMemcpyDeviceToHost),
           AC_ERROR_INVALID_DIRECTION);
    expect("unknown direction", acMemCpy(mem, host, 16, 42), AC_ERROR_INVALID_ARGUMENT);
    expect("copy past the end", acMemCpy(mem, host, 2048, acMemcpyHostToDevice), AC_ERROR_OUT_OF_RANGE);
    expect("copy at an offset past the end", acMemCpyAt(host, 0, mem, 1000, 100, acMemcpyDeviceToHost),
           AC_ERROR_OUT_OF_RANGE);
    memset(host, 0, sizeof host);
    expect("device to host", acMemCpy(host, mem, 1024, acMemcpyDeviceToHost), AC_SUCCESS);
    if (host[0] != 7 || host[1023] != 7) {
        printf("device to host: wrong bytes\n");
        failures++;
    }
    expect("allocation larger than the device", acMemAlloc(dev, (size_t)1 << 40, &other),
           AC_ERROR_OUT_OF_MEMORY);
    expect("unknown kernel", acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "no_such_kernel", &kernel),
           AC_ERROR_KERNEL);
    const char ptx[] = ".version 7.0\n.target sm_70\n";
    expect("PTX on the CPU device", acKernelCreate(dev, AC_SOURCE_PTX, ptx, sizeof ptx - 1, "k", &kernel),
           AC_ERROR_NEEDS_CUDA);
    expect("builtin kernel", acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &kernel), AC_SUCCESS);
    acArg wrong[] = {acArgF32(1.0f), acArgMem(mem)};
    expect("wrong arguments", acKernelSetArgs(kernel, 2, wrong), AC_SUCCESS);
    expect("run with the wrong arguments", acKernelRun(kernel, acDim(1, 1, 1), acDim(1, 1, 1), 0, NULL),
           AC_ERROR_INVALID_ARGUMENT);
    acArg stale[] = {acArgMem((acMem)(uintptr_t)0xac03000000000999ull)};
    expect("argument: a released acMem", acKernelSetArgs(kernel, 1, stale), AC_ERROR_INVALID_HANDLE);
    /* Streams, memset and a device-to-device copy: set 1 KiB to 9, copy it, read the copy. */
    acStream stream;
    acMem copy;
    expect("stream", acStreamCreate(dev, &stream), AC_SUCCESS);
    expect("memset", acMemset(mem, 9, 0, 1024), AC_SUCCESS);
    expect("memset past the end", acMemset(mem, 9, 1000, 100), AC_ERROR_OUT_OF_RANGE);
    expect("alloc the copy", acMemAlloc(dev, 1024, &copy), AC_SUCCESS);
    expect("device to device", acMemCpy(copy, mem, 1024, acMemcpyDeviceToDevice), AC_SUCCESS);
    expect("device to device from host memory", acMemCpy(copy, host, 16, acMemcpyDeviceToDevice),
           AC_ERROR_INVALID_DIRECTION);
    acArg none[] = {acArgF32(1.0f), acArgMem(mem), acArgMem(copy), acArgU64(0)}; /* 0 elements */
    expect("launch on the stream", acKernelLaunch(kernel, acDim(1, 1, 1), acDim(1, 1, 1), 0, stream, 4, none),
           AC_SUCCESS);
    expect("launch without its arguments", acKernelLaunch(kernel, acDim(1, 1, 1), acDim(1, 1, 1), 0, stream, 0, NULL),
           AC_ERROR_INVALID_ARGUMENT);
    expect("synchronize the stream", acStreamSynchronize(stream), AC_SUCCESS);
    expect("device synchronize", acDeviceSynchronize(dev), AC_SUCCESS);
    memset(host, 0, sizeof host);
    expect("read the copy", acMemCpy(host, copy, 1024, acMemcpyDeviceToHost), AC_SUCCESS);
    if (host[0] != 9 || host[1023] != 9) {
        printf("device to device: wrong bytes %d %d\n", host[0], host[1023]);
        failures++;
    }
    expect("destroy the stream", acStreamDestroy(stream), AC_SUCCESS);
    expect("synchronize a destroyed stream", acStreamSynchronize(stream), AC_ERROR_INVALID_HANDLE);
    expect("free the copy", acMemFree(copy), AC_SUCCESS);

    expect("rejected AC_Get", AC_Get(1000, &more), AC_ERROR_REJECTED);
    expect("AC_Get of nothing", AC_Get(0, &more), AC_ERROR_INVALID_ARGUMENT);
    expect("AC_GetRange with min above max", AC_GetRange(2, 1, 0, &more), AC_ERROR_INVALID_ARGUMENT);
    expect("AC_Get into NULL", AC_Get(1, NULL), AC_ERROR_INVALID_ARGUMENT);
    expect("borrow with nothing spare", AC_GetPreemptible(1, 1, 0, &more), AC_ERROR_REJECTED);
    acSet taken_set;
    acDevice taken;
    int64_t revoke_at;
    expect("poll preemptions: none", AC_PollPreemption(0, &taken_set, &taken, &revoke_at), AC_SUCCESS);
    if (taken != NULL || taken_set != NULL || revoke_at != 0) {
        printf("poll preemptions: told of one that never happened\n");
        failures++;
    }
    expect("poll preemptions into NULL", AC_PollPreemption(0, NULL, &taken, &revoke_at), AC_ERROR_INVALID_ARGUMENT);
    expect("memset with a value that is not a byte", acMemset(mem, 300, 0, 4), AC_ERROR_INVALID_ARGUMENT);
    acDeviceInfo info;
    expect("device info", acDeviceGetInfo(dev, &info), AC_SUCCESS);
    if (info.memory_total == 0 || info.name[0] == 0 || info.is_cuda != 0) {
        printf("device info: %s, %llu bytes, cuda %d\n", info.name, (unsigned long long)info.memory_total,
               info.is_cuda);
        failures++;
    }
    /* The CPU device has no sensors (every reading -1); the session holds `mem`'s 1024 bytes. */
    acTelemetry telemetry;
    expect("telemetry", acDeviceGetTelemetry(dev, &telemetry), AC_SUCCESS);
    if (telemetry.temperature_c != -1 || telemetry.utilization_gpu != -1 || telemetry.power_mw != -1 ||
        telemetry.energy_mj != -1 || telemetry.clocks_mhz[1] != -1 || telemetry.session_memory != 1024) {
        printf("telemetry of the CPU device: temperature %d, power %lld, session memory %llu\n",
               (int)telemetry.temperature_c, (long long)telemetry.power_mw,
               (unsigned long long)telemetry.session_memory);
        failures++;
    }
    expect("telemetry into NULL", acDeviceGetTelemetry(dev, NULL), AC_ERROR_INVALID_ARGUMENT);
    expect("telemetry of no device", acDeviceGetTelemetry(NULL, &telemetry), AC_ERROR_INVALID_HANDLE);
    expect("free the static set", AC_Free(statics), AC_ERROR_INVALID_ARGUMENT);
    expect("free memory", acMemFree(mem), AC_SUCCESS);
    expect("free it again", acMemFree(mem), AC_ERROR_INVALID_HANDLE);
    if (strcmp(acGetErrorString(999), "unknown error code") != 0) {
        printf("acGetErrorString(999): %s\n", acGetErrorString(999));
        failures++;
    }
    expect("finalize", AC_Finalize(), AC_SUCCESS);
    expect("a device after finalize", acMemAlloc(dev, 16, &other), AC_ERROR_INVALID_HANDLE);
    expect("finalize twice", AC_Finalize(), AC_ERROR_NOT_INITIALIZED);
    expect("poll preemptions after finalize", AC_PollPreemption(0, &taken_set, &taken, &revoke_at),
           AC_ERROR_NOT_INITIALIZED);
    /* Every code has its own description. */
    for (int code = 0; code <= (int)AC_ERROR_INVALID_DEVICE; code++) {
        for (int other = 0; other < code; other++) {
            if (strcmp(acGetErrorString(code), acGetErrorString(other)) == 0) {
                printf("codes %d and %d share the description %s\n", other, code, acGetErrorString(code));
                failures++;
            }
        }
        if (strcmp(acGetErrorString(code), "unknown error code") == 0) {
            printf("code %d has no description\n", code);
            failures++;
        }
    }
    printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
