/* A program whose MPI is not Open MPI, as MPICH looks to libac: MPI functions, but none of Open
 * MPI's globals (its handles are ints). AC_Init_fcomm must refuse it with AC_ERROR_MPI and name
 * it, never misread its handles. Linked with -rdynamic, so that libac finds these functions as
 * it finds those of a real MPI linked into the program. */
#include <ac.h>
#include <stdio.h>
#include <string.h>

/* Declared by ac.h only with AC_WITH_MPI; its communicator is a Fortran integer. */
acError AC_Init_fcomm(int comm, acSet *statics);
int MPI_Initialized(int *flag);
int MPI_Get_library_version(char *version, int *len);

int MPI_Initialized(int *flag) {
    *flag = 1;
    return 0;
}

int MPI_Get_library_version(char *version, int *len) {
    const char *text = "MPICH Version: 4.1 (a stand-in)\nMPICH Release date: none";
    strcpy(version, text);
    *len = (int)strlen(text);
    return 0;
}

int main(void) {
    acSet statics;
    acError e = AC_Init_fcomm(0, &statics);
    printf("AC_Init_fcomm: %d (%s): %s\n", (int)e, acGetErrorString(e), acGetLastErrorMessage());
    return 0;
}
