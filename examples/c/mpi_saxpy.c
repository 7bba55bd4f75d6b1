/* An MPI program on remote accelerators: every rank opens its session (AC_Init_comm), the
 * ranks get accelerators together with one collective AC_Get (all or nothing), each runs saxpy
 * on its own share, and they give them back together.
 *
 *   mpicc mpi_saxpy.c $(pkg-config --cflags --libs ac-mpi) -o mpi_saxpy
 *   ARM_ADDR=... ARM_CA_CERT=... ARM_ACPN=1 mpirun -n 2 ./mpi_saxpy [per-rank count]
 */
#include <ac.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        acError e_ = (call);                                                             \
        if (e_ != AC_SUCCESS) {                                                          \
            fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, acGetErrorString(e_),  \
                    acGetLastErrorMessage());                                            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                \
        }                                                                                \
    } while (0)

static int saxpy_on(acDevice dev, int rank, size_t n) {
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(i % 100);
        y[i] = (float)rank;
    }
    acMem dx, dy;
    acKernel k;
    CHECK(acMemAlloc(dev, n * sizeof(float), &dx));
    CHECK(acMemAlloc(dev, n * sizeof(float), &dy));
    CHECK(acMemCpy(dx, x, n * sizeof(float), acMemcpyHostToDevice));
    CHECK(acMemCpy(dy, y, n * sizeof(float), acMemcpyHostToDevice));
    CHECK(acKernelCreate(dev, AC_SOURCE_BUILTIN, NULL, 0, "saxpy", &k));
    acArg args[] = {acArgF32(3.0f), acArgMem(dx), acArgMem(dy), acArgU64(n)};
    CHECK(acKernelSetArgs(k, 4, args));
    CHECK(acKernelRun(k, acDim((uint32_t)((n + 255) / 256), 1, 1), acDim(256, 1, 1), 0, NULL));
    CHECK(acMemCpy(y, dy, n * sizeof(float), acMemcpyDeviceToHost));
    int wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += y[i] != 3.0f * (float)(i % 100) + (float)rank;
    CHECK(acKernelDestroy(k));
    CHECK(acMemFree(dx));
    CHECK(acMemFree(dy));
    free(x);
    free(y);
    return wrong;
}

int main(int argc, char **argv) {
    int rank, size, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int per_rank = argc > 1 ? atoi(argv[1]) : 1;

    acSet statics, mine;
    int count;
    CHECK(AC_Init_comm(MPI_COMM_WORLD, &statics));
    CHECK(acSetSize(statics, &count));
    printf("rank %d: AC_Init_comm: %d static accelerator(s)\n", rank, count);

    acError got = AC_Get_comm(MPI_COMM_WORLD, per_rank, &mine);
    if (got == AC_ERROR_REJECTED) {
        printf("rank %d: AC_Get_comm(%d per rank): rejected: %s\n", rank, per_rank, acGetLastErrorMessage());
    } else {
        CHECK(got);
        CHECK(acSetSize(mine, &count));
        int wrong = 0;
        for (int i = 0; i < count; i++) {
            acDevice dev;
            CHECK(acSetDevice(mine, i, &dev));
            wrong += saxpy_on(dev, rank, 1 << 18);
        }
        int all_wrong = 0;
        MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf("rank %d: AC_Get_comm: %d accelerator(s) of my own; saxpy %s\n", rank, count,
               all_wrong == 0 ? "OK on every rank" : "WRONG");
        CHECK(AC_Free_comm(MPI_COMM_WORLD, mine));
        if (all_wrong != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CHECK(AC_Finalize_comm(MPI_COMM_WORLD));
    MPI_Finalize();
    return 0;
}
