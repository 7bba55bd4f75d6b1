! Every function of the Fortran module `ac` (but the MPI collectives, in mpi.F90), each checked,
! against a cluster of 2 accelerators: one static (ARM_ACPN=1), one for AC_Get.
program every
  use ac
  implicit none
  integer, parameter :: n = 1024
  integer(c_size_t), parameter :: bytes = 4_c_size_t * n
  real(c_float), allocatable, target :: x(:), y(:), c(:), r(:)
  type(c_ptr) :: statics, more, none, device, other, taken_set, taken
  type(c_ptr) :: dx, dy, dc, dsum, saxpy, sgemm, reduce, fill, stream
  type(ac_device_info) :: info
  type(ac_telemetry) :: telemetry
  type(ac_check_result) :: check
  type(ac_arg) :: args(4), gemm(8)
  integer(c_int) :: count, i
  integer(c_int64_t) :: revoke_at
  integer :: failures = 0

  allocate(x(n), y(n), c(4), r(1))
  do i = 1, n
     x(i) = real(i, c_float)
     y(i) = 1.0
  end do

  call expect("AC_Init", AC_Init(statics), AC_SUCCESS)
  call expect("acSetSize", acSetSize(statics, count), AC_SUCCESS)
  if (count /= 1) call fail("one static accelerator")
  call expect("acSetDevice", acSetDevice(statics, 0, device), AC_SUCCESS)
  call expect("acSetDevice past the end", acSetDevice(statics, 1, other), AC_ERROR_INVALID_DEVICE)
  ! acGetErrorString and acGetLastErrorMessage, through ac_error_message.
  if (ac_error_message(AC_ERROR_INVALID_DEVICE) /= &
       "no accelerator at that index of the set: no accelerator 1 in a set of 1 (indices start at 0)") &
       call fail("the error's text: " // ac_error_message(AC_ERROR_INVALID_DEVICE))
  call expect("acDeviceGetInfo", acDeviceGetInfo(device, info), AC_SUCCESS)
  if (len(ac_string_of(info%name)) == 0 .or. info%memory_total <= 0 .or. info%is_cuda /= 0) &
       call fail("device info")
  print '(a, a)', "device: ", ac_string_of(info%name)
  ! The CPU device has no sensors: every reading -1.
  call expect("acDeviceGetTelemetry", acDeviceGetTelemetry(device, telemetry), AC_SUCCESS)
  if (telemetry%temperature_c /= -1 .or. telemetry%energy_mj /= -1 .or. any(telemetry%clocks_mhz /= -1)) &
       call fail("telemetry of the CPU device")

  ! Memory: whole copies, copies at offsets, memset.
  call expect("acMemAlloc x", acMemAlloc(device, bytes, dx), AC_SUCCESS)
  call expect("acMemAlloc y", acMemAlloc(device, bytes, dy), AC_SUCCESS)
  call expect("acMemCpy x", acMemCpy(dx, c_loc(x), bytes, acMemcpyHostToDevice), AC_SUCCESS)
  call expect("acMemset y to 0", acMemset(dy, 0, 0_c_size_t, bytes), AC_SUCCESS)
  ! The second half of y from the host, at an offset on both sides.
  call expect("acMemCpyAt", acMemCpyAt(dy, bytes / 2, c_loc(y), bytes / 2, bytes / 2, acMemcpyHostToDevice), &
       AC_SUCCESS)

  ! saxpy with acKernelSetArgs + acKernelRun: y = 2 x + y.
  call expect("acKernelCreate saxpy", acKernelCreate(device, AC_SOURCE_BUILTIN, c_null_ptr, 0_c_size_t, &
       "saxpy" // c_null_char, saxpy), AC_SUCCESS)
  args = [ac_f32(2.0_c_float), ac_mem(dx), ac_mem(dy), ac_u64(int(n, c_int64_t))]
  call expect("acKernelSetArgs", acKernelSetArgs(saxpy, 4, args), AC_SUCCESS)
  call expect("acKernelRun", acKernelRun(saxpy, ac_dim(4, 1, 1), ac_dim(256, 1, 1), 0, c_null_ptr), AC_SUCCESS)
  call expect("acDeviceSynchronize", acDeviceSynchronize(device), AC_SUCCESS)
  call expect("acMemCpy back", acMemCpy(c_loc(y), dy, bytes, acMemcpyDeviceToHost), AC_SUCCESS)
  do i = 1, n
     if (i <= n / 2 .and. y(i) /= 2.0 * x(i)) call fail("saxpy, first half")
     if (i > n / 2 .and. y(i) /= 2.0 * x(i) + 1.0) call fail("saxpy, second half")
  end do

  ! acKernelLaunch on a stream, at a pointer into the middle of x: y(1:n/2) += x(n/2+1:n).
  call expect("acStreamCreate", acStreamCreate(device, stream), AC_SUCCESS)
  args = [ac_f32(1.0_c_float), ac_mem_at(dx, int(bytes / 2, c_int64_t)), ac_mem(dy), ac_u64(int(n / 2, c_int64_t))]
  call expect("acKernelLaunch", acKernelLaunch(saxpy, ac_dim(2, 1, 1), ac_dim(256, 1, 1), 0, stream, 4, args), &
       AC_SUCCESS)
  call expect("acStreamSynchronize", acStreamSynchronize(stream), AC_SUCCESS)
  call expect("acStreamDestroy", acStreamDestroy(stream), AC_SUCCESS)
  call expect("acMemCpyAt back", acMemCpyAt(c_loc(r), 0_c_size_t, dy, 0_c_size_t, 4_c_size_t, &
       acMemcpyDeviceToHost), AC_SUCCESS)
  if (r(1) /= 2.0 * x(1) + x(n / 2 + 1)) call fail("launch at an offset")

  ! sgemm takes u32 sizes: [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50].
  x(1:4) = [1.0, 2.0, 3.0, 4.0]
  x(5:8) = [5.0, 6.0, 7.0, 8.0]
  call expect("acMemCpy matrices", acMemCpy(dx, c_loc(x), 32_c_size_t, acMemcpyHostToDevice), AC_SUCCESS)
  call expect("acMemAlloc C", acMemAlloc(device, 16_c_size_t, dc), AC_SUCCESS)
  call expect("acKernelCreate sgemm", acKernelCreate(device, AC_SOURCE_BUILTIN, c_null_ptr, 0_c_size_t, &
       "sgemm" // c_null_char, sgemm), AC_SUCCESS)
  gemm = [ac_u32(2), ac_u32(2), ac_u32(2), ac_f32(1.0_c_float), ac_mem(dx), ac_mem_at(dx, 16_c_int64_t), &
       ac_f32(0.0_c_float), ac_mem(dc)]
  call expect("acKernelLaunch sgemm", acKernelLaunch(sgemm, ac_dim(1, 1, 1), ac_dim(4, 1, 1), 0, c_null_ptr, &
       8, gemm), AC_SUCCESS)
  call expect("acMemCpy C", acMemCpy(c_loc(c), dc, 16_c_size_t, acMemcpyDeviceToHost), AC_SUCCESS)
  if (any(c /= [19.0, 22.0, 43.0, 50.0])) call fail("sgemm")

  ! reduce_sum adds to its output: zero it first.
  call expect("acMemAlloc sum", acMemAlloc(device, 4_c_size_t, dsum), AC_SUCCESS)
  call expect("acMemset sum", acMemset(dsum, 0, 0_c_size_t, 4_c_size_t), AC_SUCCESS)
  call expect("acKernelCreate reduce_sum", acKernelCreate(device, AC_SOURCE_BUILTIN, c_null_ptr, 0_c_size_t, &
       "reduce_sum" // c_null_char, reduce), AC_SUCCESS)
  call expect("acKernelLaunch reduce_sum", acKernelLaunch(reduce, ac_dim(1, 1, 1), ac_dim(64, 1, 1), 0, &
       c_null_ptr, 3, [ac_mem(dx), ac_mem(dsum), ac_u64(8_c_int64_t)]), AC_SUCCESS)
  call expect("acMemCpy sum", acMemCpy(c_loc(r), dsum, 4_c_size_t, acMemcpyDeviceToHost), AC_SUCCESS)
  if (r(1) /= 36.0) call fail("reduce_sum")

  ! The other argument kinds reach the library with their kinds: fill wants (f32*, f32, u64).
  call expect("acKernelCreate fill", acKernelCreate(device, AC_SOURCE_BUILTIN, c_null_ptr, 0_c_size_t, &
       "fill" // c_null_char, fill), AC_SUCCESS)
  call expect("fill with an i32, an i64 and an f64", acKernelLaunch(fill, ac_dim(1, 1, 1), ac_dim(1, 1, 1), 0, &
       c_null_ptr, 3, [ac_i32(1_c_int32_t), ac_i64(2_c_int64_t), ac_f64(3.0_c_double)]), AC_ERROR_INVALID_ARGUMENT)
  call expect("fill with its arguments", acKernelLaunch(fill, ac_dim(1, 1, 1), ac_dim(32, 1, 1), 0, &
       c_null_ptr, 3, [ac_mem(dsum), ac_f32(7.0_c_float), ac_u64(1_c_int64_t)]), AC_SUCCESS)
  call expect("acMemCpy filled", acMemCpy(c_loc(r), dsum, 4_c_size_t, acMemcpyDeviceToHost), AC_SUCCESS)
  if (r(1) /= 7.0) call fail("fill")

  ! Sessions: AC_Get, AC_GetRange, AC_GetPreemptible, AC_PollPreemption, AC_Free.
  call expect("AC_Get", AC_Get(1, more), AC_SUCCESS)
  call expect("AC_GetRange with nothing left", AC_GetRange(1, 2, 0, none), AC_ERROR_REJECTED)
  call expect("AC_GetPreemptible with nothing spare", AC_GetPreemptible(1, 1, 0, none), AC_ERROR_REJECTED)
  call expect("AC_PollPreemption", AC_PollPreemption(0, taken_set, taken, revoke_at), AC_SUCCESS)
  if (c_associated(taken) .or. c_associated(taken_set)) call fail("told of a preemption")
  call expect("AC_Free", AC_Free(more), AC_SUCCESS)
  ! A reconfiguration point: one more lent (the one just freed), then given back device by device
  ! (its last device releases the set).
  call expect("AC_Check", AC_Check(1, 1, 2, 2, 30, check), AC_SUCCESS)
  if (check%action /= AC_CHECK_EXPAND) call fail("AC_Check expands onto the idle accelerator")
  call expect("acSetDevice of the lent set", acSetDevice(check%set, 0, device), AC_SUCCESS)
  call expect("AC_FreeDevice", AC_FreeDevice(check%set, device), AC_SUCCESS)
  call expect("AC_Free after its last device", AC_Free(check%set), AC_ERROR_INVALID_HANDLE)

  call expect("acKernelDestroy", acKernelDestroy(saxpy), AC_SUCCESS)
  call expect("acKernelDestroy again", acKernelDestroy(saxpy), AC_ERROR_INVALID_HANDLE)
  call expect("acKernelDestroy sgemm", acKernelDestroy(sgemm), AC_SUCCESS)
  call expect("acMemFree", acMemFree(dx), AC_SUCCESS)
  call expect("AC_Finalize", AC_Finalize(), AC_SUCCESS)
  call expect("AC_Finalize again", AC_Finalize(), AC_ERROR_NOT_INITIALIZED)
  print '(i0, a)', failures, " failure(s)"
  if (failures /= 0) stop 1

contains

  subroutine expect(what, got, want)
    character(len=*), intent(in) :: what
    integer(c_int), intent(in) :: got, want
    if (got /= want) then
       print '(a, a, i0, a, a)', what, ": got ", got, ", ", ac_error_message(got)
       failures = failures + 1
    end if
  end subroutine expect

  subroutine fail(what)
    character(len=*), intent(in) :: what
    print '(a, a)', "wrong: ", what
    failures = failures + 1
  end subroutine fail
end program every
