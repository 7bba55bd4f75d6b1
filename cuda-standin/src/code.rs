//! `CUresult` values the stand-in returns (the driver API's numbering).

/// Success.
pub const SUCCESS: u32 = 0;
/// A parameter is invalid.
pub const INVALID_VALUE: u32 = 1;
/// Out of memory.
pub const OUT_OF_MEMORY: u32 = 2;
/// `cuInit` was not called.
pub const NOT_INITIALIZED: u32 = 3;
/// No such device.
pub const INVALID_DEVICE: u32 = 101;
/// The image is not one the stand-in reads.
pub const INVALID_IMAGE: u32 = 200;
/// A fat binary holds no image for the device's architecture.
pub const NO_BINARY_FOR_GPU: u32 = 209;
/// PTX the JIT refuses (here: a module calling a function it does not define).
pub const INVALID_PTX: u32 = 218;
/// No context is current on the calling thread.
pub const INVALID_CONTEXT: u32 = 201;
/// A dead or foreign handle.
pub const INVALID_HANDLE: u32 = 400;
/// No such symbol.
pub const NOT_FOUND: u32 = 500;
/// A kernel or copy touched memory outside the context's allocations (sticky).
pub const ILLEGAL_ADDRESS: u32 = 700;
/// The current context was destroyed.
pub const CONTEXT_IS_DESTROYED: u32 = 709;
/// A cooperative launch of more blocks than the device holds at once.
pub const COOPERATIVE_LAUNCH_TOO_LARGE: u32 = 720;
/// A cluster shape the device refuses (too many blocks).
pub const INVALID_CLUSTER_SIZE: u32 = 912;
/// Not something the stand-in does (kernels it does not know, compressed fatbin images).
pub const NOT_SUPPORTED: u32 = 801;
/// What `cuInit` answers on an NVSwitch host whose fabric manager has not set the fabric up.
pub const SYSTEM_NOT_READY: u32 = 802;
/// What `cuInit` answers when the driver cannot start (e.g. `/dev/nvidia-uvm` missing).
pub const UNKNOWN: u32 = 999;
