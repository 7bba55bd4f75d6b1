! The MPI collectives from Fortran, with `use mpi` or, built with -DAC_F08, `use mpi_f08`: every
! rank opens its session, the ranks get one accelerator each with one collective AC_Get, fill
! it with their rank, and give everything back together.
program mpi_collectives
#if defined(AC_F08)
  use mpi_f08
#define WORLD MPI_COMM_WORLD%MPI_VAL
#else
  use mpi
#define WORLD MPI_COMM_WORLD
#endif
  use ac
  implicit none
  type(c_ptr) :: statics, mine, device, mem, fill
  real(c_float), target :: back(4)
  integer :: rank, ierr
  integer(c_int) :: count

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call check(AC_Init_comm(WORLD, statics), "AC_Init_comm")
  call check(AC_Get_comm(WORLD, 1, mine), "AC_Get_comm")
  call check(acSetSize(mine, count), "acSetSize")
  call check(acSetDevice(mine, 0, device), "acSetDevice")
  call check(acMemAlloc(device, 16_c_size_t, mem), "acMemAlloc")
  call check(acKernelCreate(device, AC_SOURCE_BUILTIN, c_null_ptr, 0_c_size_t, "fill" // c_null_char, fill), &
       "acKernelCreate")
  call check(acKernelLaunch(fill, ac_dim(1, 1, 1), ac_dim(32, 1, 1), 0, c_null_ptr, 3, &
       [ac_mem(mem), ac_f32(real(rank, c_float)), ac_u64(4_c_int64_t)]), "acKernelLaunch")
  call check(acMemCpy(c_loc(back), mem, 16_c_size_t, acMemcpyDeviceToHost), "acMemCpy")
  if (any(back /= real(rank, c_float))) then
     print '(a, i0, a)', "rank ", rank, ": wrong values"
     call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  call check(AC_Free_comm(WORLD, mine), "AC_Free_comm")
  call check(AC_Finalize_comm(WORLD), "AC_Finalize_comm")
  print '(a, i0, a, i0, a)', "rank ", rank, ": ", count, " accelerator(s) of my own, filled and given back"
  call MPI_Finalize(ierr)

contains

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= AC_SUCCESS) then
       print '(a, i0, a, a, a, a)', "rank ", rank, ": ", what, ": ", ac_error_message(code)
       call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end subroutine check
end program mpi_collectives
