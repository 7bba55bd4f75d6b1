/* A batch job's program that loses its accelerators while it runs. It prints "ready" once it
 * holds a static and a dynamic accelerator, then waits for a line on stdin (sent once the test
 * has done its part) and checks what a program is told from then on.
 *   ended job: the job was ended (`armctl job end`): calls on an accelerator fail with
 *     AC_ERROR_REVOKED once the revocation has reached its daemon; AC_Get, AC_Free and
 *     AC_Finalize with AC_ERROR_JOB_ENDED, and AC_Finalize afterwards AC_ERROR_NOT_INITIALIZED.
 *   ended daemon: the static accelerator's daemon was stopped: calls on it fail with
 *     AC_ERROR_DISCONNECTED; the session goes on.
 * Usage: ended job|daemon */
#include <ac.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int failures = 0;

static void expect(const char *what, acError got, acError want) {
    printf("%s: %d (%s): %s\n", what, (int)got, acGetErrorString(got),
           got == AC_SUCCESS ? "" : acGetLastErrorMessage());
    if (got != want) {
        printf("  expected %d (%s)\n", (int)want, acGetErrorString(want));
        failures++;
    }
}

int main(int argc, char **argv) {
    int daemon = argc > 1 && strcmp(argv[1], "daemon") == 0;
    acSet statics, more, again;
    acDevice dev;
    acMem mem;
    char host[1024], line[16];
    expect("init", AC_Init(&statics), AC_SUCCESS);
    expect("device", acSetDevice(statics, 0, &dev), AC_SUCCESS);
    expect("alloc", acMemAlloc(dev, sizeof host, &mem), AC_SUCCESS);
    expect("get", AC_Get(1, &more), AC_SUCCESS);
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 2;

    /* A revocation travels to the daemon after the manager's answer, and a stopped daemon's
     * close to the program: a bounded wait for either. */
    time_t give_up = time(NULL) + 10;
    acError e;
    do {
        e = acMemCpy(host, mem, sizeof host, acMemcpyDeviceToHost);
    } while (e == AC_SUCCESS && time(NULL) < give_up);
    if (daemon) {
        expect("a copy from the stopped daemon's accelerator", e, AC_ERROR_DISCONNECTED);
        expect("free the dynamic set", AC_Free(more), AC_SUCCESS);
        expect("finalize", AC_Finalize(), AC_SUCCESS);
        printf("%d failure(s)\n", failures);
        return failures == 0 ? 0 : 1;
    }
    expect("a copy from the ended job's accelerator", e, AC_ERROR_REVOKED);
    expect("get after the end", AC_Get(1, &again), AC_ERROR_JOB_ENDED);
    expect("free after the end", AC_Free(more), AC_ERROR_JOB_ENDED);
    expect("the freed set is released all the same", AC_Free(more), AC_ERROR_INVALID_HANDLE);
    expect("finalize after the end", AC_Finalize(), AC_ERROR_JOB_ENDED);
    expect("finalize again", AC_Finalize(), AC_ERROR_NOT_INITIALIZED);
    printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
