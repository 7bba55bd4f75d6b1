/* AC_Init as the environment sets it up, for the tests of its error codes: prints
 * "AC_Init: code (string): message" and finalizes if it succeeded. Built with -DAC_WITH_MPI
 * (mpicc), "init mpi" calls AC_Init_comm without MPI_Init first. Built without MPI (gcc),
 * "init nompi" calls the Fortran form AC_Init_fcomm, which needs no mpi.h, in a program that
 * has no MPI loaded. */
#include <ac.h>
#include <stdio.h>
#include <string.h>

#if !defined(AC_WITH_MPI)
/* Declared by ac.h only with AC_WITH_MPI; its communicator is a Fortran integer. */
acError AC_Init_fcomm(int comm, acSet *statics);
#endif

int main(int argc, char **argv) {
    acSet statics;
    acError e;
#if defined(AC_WITH_MPI)
    if (argc > 1 && strcmp(argv[1], "mpi") == 0) {
        e = AC_Init_comm(MPI_COMM_WORLD, &statics);
        printf("AC_Init_comm: %d (%s): %s\n", (int)e, acGetErrorString(e), acGetLastErrorMessage());
        return 0;
    }
#else
    if (argc > 1 && strcmp(argv[1], "nompi") == 0) {
        e = AC_Init_fcomm(0, &statics);
        printf("AC_Init_fcomm: %d (%s): %s\n", (int)e, acGetErrorString(e), acGetLastErrorMessage());
        return 0;
    }
#endif
    (void)argc;
    (void)argv;
    e = AC_Init(&statics);
    printf("AC_Init: %d (%s): %s\n", (int)e, acGetErrorString(e), e ? acGetLastErrorMessage() : "");
    if (e == AC_SUCCESS) e = AC_Finalize();
    return 0;
}
