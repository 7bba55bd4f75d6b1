! saxpy in Fortran through libac: y = a*x + y on a remote accelerator.
!   gfortran ac.f90 saxpy.f90 $(pkg-config --libs ac) -o saxpy_f
!   ARM_ADDR=... ARM_CA_CERT=... ARM_ACPN=1 ./saxpy_f
program saxpy
  use ac
  implicit none
  integer(c_int), parameter :: n = 1000000
  integer(c_size_t), parameter :: bytes = 4_c_size_t * n
  real(c_float), parameter :: a = 2.0
  real(c_float), allocatable, target :: x(:), y(:)
  type(c_ptr) :: statics, device, dx, dy, kernel
  type(ac_arg) :: args(4)
  integer(c_int) :: count, i
  integer(c_int32_t), parameter :: blocks = (n + 255) / 256

  allocate(x(n), y(n))
  do i = 1, n
     x(i) = real(mod(i, 1000), c_float)
     y(i) = 1.0
  end do

  call check(AC_Init(statics), "AC_Init")
  call check(acSetSize(statics, count), "acSetSize")
  print '(a, i0, a)', "AC_Init: ", count, " static accelerator(s)"
  call check(acSetDevice(statics, 0, device), "acSetDevice")
  call check(acMemAlloc(device, bytes, dx), "acMemAlloc x")
  call check(acMemAlloc(device, bytes, dy), "acMemAlloc y")
  call check(acMemCpy(dx, c_loc(x), bytes, acMemcpyHostToDevice), "acMemCpy x")
  call check(acMemCpy(dy, c_loc(y), bytes, acMemcpyHostToDevice), "acMemCpy y")
  call check(acKernelCreate(device, AC_SOURCE_BUILTIN, c_null_ptr, 0_c_size_t, "saxpy" // c_null_char, &
       kernel), "acKernelCreate")
  args = [ac_f32(a), ac_mem(dx), ac_mem(dy), ac_u64(int(n, c_int64_t))]
  call check(acKernelSetArgs(kernel, 4, args), "acKernelSetArgs")
  call check(acKernelRun(kernel, ac_dim3(blocks, 1, 1), ac_dim3(256, 1, 1), 0, c_null_ptr), &
       "acKernelRun")
  call check(acMemCpy(c_loc(y), dy, bytes, acMemcpyDeviceToHost), "acMemCpy back")
  do i = 1, n
     if (y(i) /= a * real(mod(i, 1000), c_float) + 1.0) then
        print '(a, i0, a, f12.3)', "wrong y(", i, ") = ", y(i)
        stop 1
     end if
  end do
  call check(acKernelDestroy(kernel), "acKernelDestroy")
  call check(acMemFree(dx), "acMemFree x")
  call check(acMemFree(dy), "acMemFree y")
  call check(AC_Finalize(), "AC_Finalize")
  print '(a, i0, a)', "saxpy (Fortran): ", n, " elements OK"

contains

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= AC_SUCCESS) then
       print '(a, a, a)', what, ": ", ac_error_message(code)
       stop 1
    end if
  end subroutine check
end program saxpy
