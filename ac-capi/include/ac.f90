! libac for Fortran: the C ABI through iso_c_binding. Compile this module with the program:
!   gfortran ac.f90 prog.f90 $(pkg-config --libs ac)
! Handles are type(c_ptr); host buffers are passed as c_loc(array) (the array needs TARGET);
! names end with c_null_char. Every function returns AC_SUCCESS (0) or an acError code;
! ac_error_message() gives the calling thread's last failure. Kept by hand beside the
! generated include/ac.h: the tests build and run a Fortran program against it.
module ac
  use, intrinsic :: iso_c_binding
  implicit none

  integer(c_int), parameter :: AC_SUCCESS = 0, AC_ERROR_INVALID_HANDLE = 1, &
       AC_ERROR_INVALID_ARGUMENT = 2, AC_ERROR_INVALID_DIRECTION = 3, AC_ERROR_OUT_OF_RANGE = 4, &
       AC_ERROR_OUT_OF_MEMORY = 5, AC_ERROR_REJECTED = 6, AC_ERROR_NOT_INITIALIZED = 7, &
       AC_ERROR_ALREADY_INITIALIZED = 8, AC_ERROR_MANAGER = 9, AC_ERROR_MANAGER_UNREACHABLE = 10, &
       AC_ERROR_DISCONNECTED = 11, AC_ERROR_KERNEL = 12, AC_ERROR_NEEDS_CUDA = 13, &
       AC_ERROR_DEVICE = 14, AC_ERROR_CONTEXT_LOST = 15, AC_ERROR_UNAUTHORIZED = 16, &
       AC_ERROR_TIMEOUT = 17, AC_ERROR_VERSION_MISMATCH = 18, AC_ERROR_SETUP = 19, &
       AC_ERROR_MPI = 20, AC_ERROR_INTERNAL = 21

  integer(c_int), parameter :: acMemcpyHostToDevice = 1, acMemcpyDeviceToHost = 2, &
       acMemcpyDeviceToDevice = 3
  integer(c_int), parameter :: AC_SOURCE_BUILTIN = 0, AC_SOURCE_PTX = 1, AC_SOURCE_CUBIN = 2, &
       AC_SOURCE_CUDA_C = 3
  integer(c_int), parameter :: AC_ARG_I32 = 0, AC_ARG_U32 = 1, AC_ARG_I64 = 2, AC_ARG_U64 = 3, &
       AC_ARG_F32 = 4, AC_ARG_F64 = 5, AC_ARG_MEM = 6

  ! One kernel argument (acArg); build it with ac_i32, ac_u64, ac_f32, ac_f64, ac_mem.
  type, bind(c) :: ac_arg
     integer(c_int) :: kind
     integer(c_int64_t) :: bits
     integer(c_int64_t) :: offset
  end type ac_arg

  ! Launch dimensions (acDim3).
  type, bind(c) :: ac_dim3
     integer(c_int32_t) :: x, y, z
  end type ac_dim3

  interface
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
       integer(c_int), value :: min, max, wait_s
       type(c_ptr), intent(out) :: set
     end function AC_GetRange

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

     integer(c_int) function acDeviceSynchronize(device) bind(c, name="acDeviceSynchronize")
       import :: c_int, c_ptr
       type(c_ptr), value :: device
     end function acDeviceSynchronize

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
       type(c_ptr), value :: dst, src
       integer(c_size_t), value :: bytes
       integer(c_int), value :: kind
     end function acMemCpy

     integer(c_int) function acKernelCreate(device, kind, source, len, name, kernel) &
          bind(c, name="acKernelCreate")
       import :: c_int, c_ptr, c_size_t, c_char
       type(c_ptr), value :: device, source
       integer(c_int), value :: kind
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
       type(c_ptr), value :: kernel, stream
       type(ac_dim3), value :: grid, block
       integer(c_int32_t), value :: shared_mem
     end function acKernelRun

     integer(c_int) function acKernelDestroy(kernel) bind(c, name="acKernelDestroy")
       import :: c_int, c_ptr
       type(c_ptr), value :: kernel
     end function acKernelDestroy

     type(c_ptr) function acGetErrorString(code) bind(c, name="acGetErrorString")
       import :: c_ptr, c_int
       integer(c_int), value :: code
     end function acGetErrorString

     type(c_ptr) function acGetLastErrorMessage() bind(c, name="acGetLastErrorMessage")
       import :: c_ptr
     end function acGetLastErrorMessage

     integer(c_size_t) function c_strlen(s) bind(c, name="strlen")
       import :: c_ptr, c_size_t
       type(c_ptr), value :: s
     end function c_strlen
  end interface

contains

  function ac_i32(v) result(a)
    integer(c_int32_t), intent(in) :: v
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_I32, int(v, c_int64_t), 0_c_int64_t)
  end function ac_i32

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

  function ac_mem(mem) result(a)
    type(c_ptr), intent(in) :: mem
    type(ac_arg) :: a
    a = ac_arg(AC_ARG_MEM, transfer(mem, 0_c_int64_t), 0_c_int64_t)
  end function ac_mem

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

  ! What `code` means, and what the calling thread's last failure said.
  function ac_error_message(code) result(s)
    integer(c_int), intent(in) :: code
    character(len=:), allocatable :: s
    s = ac_string(acGetErrorString(code)) // ": " // ac_string(acGetLastErrorMessage())
  end function ac_error_message
end module ac
