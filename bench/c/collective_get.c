/* ac-bench's MPI program: AC_Get(1) of rank 0 alone, then the collective AC_Get_comm of one
 * accelerator per rank, each followed by its release; rank 0 prints every sample (ms). */
#define _POSIX_C_SOURCE 200809L
#include <ac.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void check(acError e, const char *what) {
    if (e != AC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", what, acGetErrorString(e), acGetLastErrorMessage());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    int rank, reps = argc > 1 ? atoi(argv[1]) : 30;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    acSet statics, set;
    check(AC_Init_comm(MPI_COMM_WORLD, &statics), "AC_Init_comm");
    for (int i = 0; i < reps; i++) {
        if (rank == 0) {
            double start = now_ms();
            check(AC_Get(1, &set), "AC_Get");
            printf("single %.3f\n", now_ms() - start);
            check(AC_Free(set), "AC_Free");
        }
    }
    for (int i = 0; i < reps; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = now_ms();
        check(AC_Get_comm(MPI_COMM_WORLD, 1, &set), "AC_Get_comm");
        double took = now_ms() - start;
        if (rank == 0) printf("collective %.3f\n", took);
        check(AC_Free_comm(MPI_COMM_WORLD, set), "AC_Free_comm");
    }
    check(AC_Finalize_comm(MPI_COMM_WORLD), "AC_Finalize_comm");
    MPI_Finalize();
    return 0;
}
