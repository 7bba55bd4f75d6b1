/* A rank dies in the middle of a collective AC_Get: rank 1 kills itself after AC_Init_comm,
 * while rank 0 waits in AC_Get_comm. The tests check that the MPI job fails and that the
 * resource manager gets everything back once the sessions' leases run out. */
#include <ac.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    acSet statics, mine;
    acError e = AC_Init_comm(MPI_COMM_WORLD, &statics);
    printf("rank %d: AC_Init_comm: %s\n", rank, acGetErrorString(e));
    fflush(stdout);
    if (e != AC_SUCCESS) return 2;
    if (rank == 1) raise(SIGKILL);
    e = AC_Get_comm(MPI_COMM_WORLD, 1, &mine);
    printf("rank %d: AC_Get_comm: %s: %s\n", rank, acGetErrorString(e), acGetLastErrorMessage());
    MPI_Finalize();
    return e == AC_SUCCESS ? 0 : 1;
}
