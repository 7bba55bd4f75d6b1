! libac for Fortran: the whole C ABI of ac.h through iso_c_binding. Compile this module with the
! program:
!   gfortran ac.f90 prog.f90 $(pkg-config --libs ac)
!   mpifort ac.f90 prog.f90 $(pkg-config --libs ac)      (the MPI collectives: libac built with MPI)
! Handles are type(c_ptr) (c_null_ptr for none); host buffers are passed as c_loc(array) (the
! array needs TARGET); names end with c_null_char. Every function returns AC_SUCCESS (0) or an
! acError code; ac_error_message(code) gives its description and the calling thread's last
! failure. The MPI collectives take a Fortran communicator: an integer of `use mpi`
! (MPI_COMM_WORLD), or comm%MPI_VAL of `use mpi_f08` (MPI_COMM_WORLD%MPI_VAL).
! Kept by hand beside the generated ac.h, which documents each function: ac-capi/tests/fortran.rs
! checks every function, constant, type and argument helper against ac.h.
module ac
  use, intrinsic :: iso_c_binding
  implicit none

  ! acError
  integer(c_int), parameter :: AC_SUCCESS = 0, AC_ERROR_INVALID_HANDLE = 1, &
       AC_ERROR_INVALID_ARGUMENT = 2, AC_ERROR_INVALID_DIRECTION = 3, AC_ERROR_OUT_OF_RANGE = 4, &
       AC_ERROR_OUT_OF_MEMORY = 5, AC_ERROR_REJECTED = 6, AC_ERROR_NOT_INITIALIZED = 7, &
       AC_ERROR_ALREADY_INITIALIZED = 8, AC_ERROR_MANAGER = 9, AC_ERROR_MANAGER_UNREACHABLE = 10, &
       AC_ERROR_DISCONNECTED = 11, AC_ERROR_KERNEL = 12, AC_ERROR_NEEDS_CUDA = 13, &
       AC_ERROR_DEVICE = 14, AC_ERROR_CONTEXT_LOST = 15, AC_ERROR_UNAUTHORIZED = 16, &
       AC_ERROR_TIMEOUT = 17, AC_ERROR_VERSION_MISMATCH = 18, AC_ERROR_SETUP = 19, &
       AC_ERROR_MPI = 20, AC_ERROR_INTERNAL = 21, AC_ERROR_REVOKED = 22, AC_ERROR_JOB_ENDED = 23, &
       AC_ERROR_INVALID_DEVICE = 24, AC_ERROR_DEVICE_REFUSED = 25

  ! acMemcpyKind
  integer(c_int), parameter :: acMemcpyHostToDevice = 1, acMemcpyDeviceToHost = 2, &
       acMemcpyDeviceToDevice = 3
  ! acSourceKind
  integer(c_int), parameter :: AC_SOURCE_BUILTIN = 0, AC_SOURCE_PTX = 1, AC_SOURCE_CUBIN = 2, &
       AC_SOURCE_CUDA_C = 3
  ! acCheckAction (what AC_Check says to do)
  integer(c_int), parameter :: AC_CHECK_KEEP = 0, AC_CHECK_EXPAND = 1, AC_CHECK_SHRINK = 2
  ! acArgKind
  integer(c_int), parameter :: AC_ARG_I32 = 0, AC_ARG_U32 = 1, AC_ARG_I64 = 2, AC_ARG_U64 = 3, &
       AC_ARG_F32 = 4, AC_ARG_F64 = 5, AC_ARG_MEM = 6

  ! One kernel argument (acArg); build it with ac_i32, ac_u32, ac_i64, ac_u64, ac_f32, ac_f64,
  ! ac_mem, ac_mem_at.
  type, bind(c) :: ac_arg
     integer(c_int) :: kind
     integer(c_int64_t) :: bits
     integer(c_int64_t) :: offset
  end type ac_arg

  ! Launch dimensions (acDim3): ac_dim(x, y, z) or ac_dim3(x, y, z).
  type, bind(c) :: ac_dim3
     integer(c_int32_t) :: x
     integer(c_int32_t) :: y
     integer(c_int32_t) :: z
  end type ac_dim3

  ! What acDeviceGetInfo tells (acDeviceInfo); ac_string_of(info%name) gives the name.
  type, bind(c) :: ac_device_info
     character(kind=c_char) :: name(64)
     integer(c_int64_t) :: memory_total
     integer(c_int64_t) :: memory_free
     integer(c_int) :: is_cuda
  end type ac_device_info

  ! What acDeviceGetTelemetry reads (acTelemetry): each reading -1 where the device cannot say;
  ! clocks in NVML's order (graphics, SM, memory, video).
  type, bind(c) :: ac_telemetry
     integer(c_int32_t) :: utilization_gpu
     integer(c_int32_t) :: utilization_memory
     integer(c_int32_t) :: temperature_c
     integer(c_int32_t) :: performance_state
     integer(c_int64_t) :: power_mw
     integer(c_int64_t) :: power_limit_mw
     integer(c_int64_t) :: power_management_limit_mw
     integer(c_int64_t) :: energy_mj
     integer(c_int32_t) :: clocks_mhz(4)
     integer(c_int32_t) :: max_clocks_mhz(4)
     integer(c_int64_t) :: session_memory
  end type ac_telemetry

  ! What AC_Check says (acCheckResult): action, the set (and device) it concerns, and by when.
  type, bind(c) :: ac_check_result
     integer(c_int) :: action
     type(c_ptr) :: set
     type(c_ptr) :: device
     integer(c_int64_t) :: by
     integer(c_int64_t) :: until
  end type ac_check_result

  interface
     ! Errors
     type(c_ptr) function acGetErrorString(code) bind(c, name="acGetErrorString")
       import :: c_ptr, c_int
       integer(c_int), value :: code
     end function acGetErrorString

     type(c_ptr) function acGetLastErrorMessage() bind(c, name="acGetLastErrorMessage")
       import :: c_ptr
     end function acGetLastErrorMessage

     ! Sessions, sets and devices
     integer(c_int) function AC_Init(statics) bind(c, name="AC_Init")
       import :: c_int, c_ptr
       type(c_ptr), intent(out) :: statics
     end function AC_Init

     integer(c_int) function AC_Get(count, set) bind(c, name="AC_Get")
       import :: c_int, c_ptr
       integer(c_int), value :: count
       type(c_ptr), intent(out) :: set
     end function AC_Get

     integer(c_int) function AC_GetRange(min, max, wait_s, set) bind(c, name="AC_GetRange")
       import :: c_int, c_ptr
       integer(c_int), value :: min
       integer(c_int), value :: max
       integer(c_int), value :: wait_s
       type(c_ptr), intent(out) :: set
     end function AC_GetRange

     integer(c_int) function AC_GetPreemptible(min, max, wait_s, set) bind(c, name="AC_GetPreemptible")
       import :: c_int, c_ptr
       integer(c_int), value :: min
       integer(c_int), value :: max
       integer(c_int), value :: wait_s
       type(c_ptr), intent(out) :: set
     end function AC_GetPreemptible

     integer(c_int) function AC_GetElastic(min, max, wait_s, notice_s, set) bind(c, name="AC_GetElastic")
       import :: c_int, c_ptr
       integer(c_int), value :: min
       integer(c_int), value :: max
       integer(c_int), value :: wait_s
       integer(c_int), value :: notice_s
       type(c_ptr), intent(out) :: set
     end function AC_GetElastic

     integer(c_int) function AC_PollPreemption(wait_ms, set, device, revoke_at) &
          bind(c, name="AC_PollPreemption")
       import :: c_int, c_ptr, c_int64_t
       integer(c_int), value :: wait_ms
       type(c_ptr), intent(out) :: set
       type(c_ptr), intent(out) :: device
       integer(c_int64_t), intent(out) :: revoke_at
     end function AC_PollPreemption

     integer(c_int) function AC_Check(held, min, max, preferred, notice_s, result) bind(c, name="AC_Check")
       import :: c_int, ac_check_result
       integer(c_int), value :: held
       integer(c_int), value :: min
       integer(c_int), value :: max
       integer(c_int), value :: preferred
       integer(c_int), value :: notice_s
       type(ac_check_result), intent(out) :: result
     end function AC_Check

     integer(c_int) function AC_FreeDevice(set, device) bind(c, name="AC_FreeDevice")
       import :: c_int, c_ptr
       type(c_ptr), value :: set
       type(c_ptr), value :: device
     end function AC_FreeDevice

     integer(c_int) function AC_Free(set) bind(c, name="AC_Free")
       import :: c_int, c_ptr
       type(c_ptr), value :: set
     end function AC_Free

     integer(c_int) function AC_Finalize() bind(c, name="AC_Finalize")
       import :: c_int
     end function AC_Finalize

     integer(c_int) function acSetSize(set, count) bind(c, name="acSetSize")
       import :: c_int, c_ptr
       type(c_ptr), value :: set
       integer(c_int), intent(out) :: count
     end function acSetSize

     integer(c_int) function acSetDevice(set, index, device) bind(c, name="acSetDevice")
       import :: c_int, c_ptr
       type(c_ptr), value :: set
       integer(c_int), value :: index
       type(c_ptr), intent(out) :: device
     end function acSetDevice

     integer(c_int) function acDeviceGetInfo(device, info) bind(c, name="acDeviceGetInfo")
       import :: c_int, c_ptr, ac_device_info
       type(c_ptr), value :: device
       type(ac_device_info), intent(out) :: info
     end function acDeviceGetInfo

     integer(c_int) function acDeviceGetTelemetry(device, telemetry) bind(c, name="acDeviceGetTelemetry")
       import :: c_int, c_ptr, ac_telemetry
       type(c_ptr), value :: device
       type(ac_telemetry), intent(out) :: telemetry
     end function acDeviceGetTelemetry

     integer(c_int) function acDeviceSynchronize(device) bind(c, name="acDeviceSynchronize")
       import :: c_int, c_ptr
       type(c_ptr), value :: device
     end function acDeviceSynchronize

     ! MPI collectives (a Fortran communicator; libac built with MPI)
     integer(c_int) function AC_Init_comm(comm, statics) bind(c, name="AC_Init_fcomm")
       import :: c_int, c_ptr
       integer(c_int), value :: comm
       type(c_ptr), intent(out) :: statics
     end function AC_Init_comm

     integer(c_int) function AC_Get_comm(comm, count, set) bind(c, name="AC_Get_fcomm")
       import :: c_int, c_ptr
       integer(c_int), value :: comm
       integer(c_int), value :: count
       type(c_ptr), intent(out) :: set
     end function AC_Get_comm

     integer(c_int) function AC_Free_comm(comm, set) bind(c, name="AC_Free_fcomm")
       import :: c_int, c_ptr
       integer(c_int), value :: comm
       type(c_ptr), value :: set
     end function AC_Free_comm

     integer(c_int) function AC_Finalize_comm(comm) bind(c, name="AC_Finalize_fcomm")
       import :: c_int
       integer(c_int), value :: comm
     end function AC_Finalize_comm

     ! Memory
     integer(c_int) function acMemAlloc(device, bytes, mem) bind(c, name="acMemAlloc")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: device
       integer(c_size_t), value :: bytes
       type(c_ptr), intent(out) :: mem
     end function acMemAlloc

     integer(c_int) function acMemFree(mem) bind(c, name="acMemFree")
       import :: c_int, c_ptr
       type(c_ptr), value :: mem
     end function acMemFree

     integer(c_int) function acMemCpy(dst, src, bytes, kind) bind(c, name="acMemCpy")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: dst
       type(c_ptr), value :: src
       integer(c_size_t), value :: bytes
       integer(c_int), value :: kind
     end function acMemCpy

     integer(c_int) function acMemCpyAt(dst, dst_offset, src, src_offset, bytes, kind) &
          bind(c, name="acMemCpyAt")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: dst
       integer(c_size_t), value :: dst_offset
       type(c_ptr), value :: src
       integer(c_size_t), value :: src_offset
       integer(c_size_t), value :: bytes
       integer(c_int), value :: kind
     end function acMemCpyAt

     integer(c_int) function acMemset(mem, value_byte, offset, bytes) bind(c, name="acMemset")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: mem
       integer(c_int), value :: value_byte
       integer(c_size_t), value :: offset
       integer(c_size_t), value :: bytes
     end function acMemset

     ! Kernels
     integer(c_int) function acKernelCreate(device, kind, source, len, name, kernel) &
          bind(c, name="acKernelCreate")
       import :: c_int, c_ptr, c_size_t, c_char
       type(c_ptr), value :: device
       integer(c_int), value :: kind
       type(c_ptr), value :: source
       integer(c_size_t), value :: len
       character(kind=c_char), dimension(*), intent(in) :: name
       type(c_ptr), intent(out) :: kernel
     end function acKernelCreate

     integer(c_int) function acKernelSetArgs(kernel, count, args) bind(c, name="acKernelSetArgs")
       import :: c_int, c_ptr, ac_arg
       type(c_ptr), value :: kernel
       integer(c_int), value :: count
       type(ac_arg), dimension(*), intent(in) :: args
     end function acKernelSetArgs

     integer(c_int) function acKernelRun(kernel, grid, block, shared_mem, stream) &
          bind(c, name="acKernelRun")
       import :: c_int, c_ptr, c_int32_t, ac_dim3
       type(c_ptr), value :: kernel
       type(ac_dim3), value :: grid
       type(ac_dim3), value :: block
       integer(c_int32_t), value :: shared_mem
       type(c_ptr), value :: stream
     end function acKernelRun

     integer(c_int) function acKernelLaunch(kernel, grid, block, shared_mem, stream, count, args) &
          bind(c, name="acKernelLaunch")
       import :: c_int, c_ptr, c_int32_t, ac_dim3, ac_arg
       type(c_ptr), value :: kernel
       type(ac_dim3), value :: grid
       type(ac_dim3), value :: block
       integer(c_int32_t), value :: shared_mem
       type(c_ptr), value :: stream
       integer(c_int), value :: count
       type(ac_arg), dimension(*), intent(in) :: args
     end function acKernelLaunch

     integer(c_int) function acKernelDestroy(kernel) bind(c, name="acKernelDestroy")
       import :: c_int, c_ptr
       type(c_ptr), value :: kernel
     end function acKernelDestroy

     ! Streams
     integer(c_int) function acStreamCreate(device, stream) bind(c, name="acStreamCreate")
       import :: c_int, c_ptr
       type(c_ptr), value :: device
       type(c_ptr), intent(out) :: stream
     end function acStreamCreate

     integer(c_int) function acStreamSynchronize(stream) bind(c, name="acStreamSynchronize")
       import :: c_int, c_ptr
       type(c_ptr), value :: stream
     end function acStreamSynchronize

     integer(c_int) function acStreamDestroy(stream) bind(c, name="acStreamDestroy")
       import :: c_int, c_ptr
       type(c_ptr), value :: stream
     end function acStreamDestroy

     ! The C library's strlen, for ac_string.
     integer(c_size_t) function c_strlen(s) bind(c, name="strlen")
       import :: c_ptr, c_size_t
       type(c_ptr), value :: s
     end function c_strlen
  end interface

contains

  ! Kernel arguments (ac.h's acArgI32 ... acArgMemAt).
  function ac_i32(v) result(a)
    integer(c_int32_t), intent(in) :: v
    type(ac_arg) :: a
    ! The value in the low 32 bits (the high ones are ignored).
    a = ac_arg(AC_ARG_I32, int(v, c_int64_t), 0_c_int64_t)
  end function ac_i32

  ! A uint32_t: Fortran has no unsigned integers, so the bits of `v` are taken as unsigned
  ! (values up to 2**31-1 as they are; larger ones as their two's complement).
  function ac_u32(v) result(a)
    integer(c_int32_t), intent(in) :: v
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_U32, int(v, c_int64_t), 0_c_int64_t)
  end function ac_u32

  function ac_i64(v) result(a)
    integer(c_int64_t), intent(in) :: v
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_I64, v, 0_c_int64_t)
  end function ac_i64

  ! A uint64_t (the bits of `v`, as ac_u32).
  function ac_u64(v) result(a)
    integer(c_int64_t), intent(in) :: v
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_U64, v, 0_c_int64_t)
  end function ac_u64

  function ac_f32(v) result(a)
    real(c_float), intent(in) :: v
    type(ac_arg) :: a
    ! The bit pattern in the low 32 bits (the high ones are ignored).
    a = ac_arg(AC_ARG_F32, int(transfer(v, 0_c_int32_t), c_int64_t), 0_c_int64_t)
  end function ac_f32

  function ac_f64(v) result(a)
    real(c_double), intent(in) :: v
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_F64, transfer(v, 0_c_int64_t), 0_c_int64_t)
  end function ac_f64

  ! A pointer to the start of device memory `mem`.
  function ac_mem(mem) result(a)
    type(c_ptr), intent(in) :: mem
    type(ac_arg) :: a
    a = ac_mem_at(mem, 0_c_int64_t)
  end function ac_mem

  ! A pointer `offset` bytes into device memory `mem`.
  function ac_mem_at(mem, offset) result(a)
    type(c_ptr), intent(in) :: mem
    integer(c_int64_t), intent(in) :: offset
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_MEM, transfer(mem, 0_c_int64_t), offset)
  end function ac_mem_at

  ! Launch dimensions (ac.h's acDim).
  function ac_dim(x, y, z) result(d)
    integer(c_int32_t), intent(in) :: x, y, z
    type(ac_dim3) :: d
    d = ac_dim3(x, y, z)
  end function ac_dim

  ! A C string as a Fortran one.
  function ac_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
       s(i:i) = chars(i)
    end do
  end function ac_string

  ! A NUL-terminated character array (acDeviceInfo's name) as a Fortran string.
  function ac_string_of(chars) result(s)
    character(kind=c_char), intent(in) :: chars(:)
    character(len=:), allocatable :: s
    integer :: i, n
    n = size(chars)
    do i = 1, size(chars)
       if (chars(i) == c_null_char) then
          n = i - 1
          exit
       end if
    end do
    allocate(character(len=n) :: s)
    do i = 1, n
       s(i:i) = chars(i)
    end do
  end function ac_string_of

  ! What `code` means, and what the calling thread's last failure said.
  function ac_error_message(code) result(s)
    integer(c_int), intent(in) :: code
    character(len=:), allocatable :: s
    s = ac_string(acGetErrorString(code)) // ": " // ac_string(acGetLastErrorMessage())
  end function ac_error_message
end module ac
