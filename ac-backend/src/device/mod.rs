//! The device abstraction.
//!
//! A [`Device`] is one accelerator. Its calls are blocking and are made from the session's stream
//! worker threads and the bulk-copy pipeline, never from an async task. Stream-ordered calls
//! (`launch`, `memset`, `copy`, ...) may return before the work is done on devices that queue
//! work themselves (CUDA); `synchronize` waits for a stream and returns the first error met.
//! The CPU device does the work inside the call.
//!
//! The session layer checks ownership and bounds before calling a device; devices check bounds
//! again, so a bug above cannot turn into a stray write.

pub mod builtin;
pub mod cpu;

use ac_proto::backend::{DeviceInfo, KernelArg, LaunchDims, ModuleSource, ParamKind, WireError};

pub use cpu::CpuDevice;

/// Result of a device call: errors travel to the caller as they are.
pub type DeviceResult<T> = Result<T, WireError>;

/// An allocation on a device (opaque to the session layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceMem(pub u64);

/// A loaded module on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceModule(pub u64);

/// A device stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceStream(pub u64);

/// A kernel found in a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// Device-specific handle.
    pub handle: u64,
    /// Its name.
    pub name: String,
    /// Its parameter kinds, when the device knows them.
    pub params: Option<Vec<ParamKind>>,
}

/// A kernel argument with buffer references resolved to device memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DeviceArg {
    /// A scalar, passed by value (never [`KernelArg::Ptr`]).
    Scalar(KernelArg),
    /// A pointer `offset` bytes into `mem`, with `len` bytes valid from there.
    Mem {
        /// The allocation.
        mem: DeviceMem,
        /// Offset into it.
        offset: u64,
        /// Bytes valid from the offset to the end of the allocation.
        len: u64,
    },
}

/// One accelerator.
pub trait Device: Send + Sync + 'static {
    /// Name, kind and memory.
    fn info(&self) -> DeviceInfo;
    /// Allocates `bytes` of device memory, or fails with `OutOfMemory`.
    fn alloc(&self, bytes: u64) -> DeviceResult<DeviceMem>;
    /// Frees an allocation; unknown handles are ignored.
    fn free(&self, mem: DeviceMem);
    /// Copies host bytes into device memory.
    fn write(&self, dst: DeviceMem, offset: u64, data: &[u8]) -> DeviceResult<()>;
    /// Copies device memory into host bytes.
    fn read(&self, src: DeviceMem, offset: u64, out: &mut [u8]) -> DeviceResult<()>;
    /// Copies between two places in this device's memory (they may be the same allocation).
    fn copy(&self, dst: DeviceMem, dst_offset: u64, src: DeviceMem, src_offset: u64, len: u64) -> DeviceResult<()>;
    /// Sets `len` bytes to `value`.
    fn memset(&self, dst: DeviceMem, offset: u64, len: u64, value: u8) -> DeviceResult<()>;
    /// Loads a module; the CPU device knows only `builtin`.
    fn load_module(&self, source: &ModuleSource, image: &[u8]) -> DeviceResult<DeviceModule>;
    /// Unloads a module.
    fn unload_module(&self, module: DeviceModule);
    /// Looks a kernel up by name.
    fn kernel(&self, module: DeviceModule, name: &str) -> DeviceResult<Kernel>;
    /// Launches a kernel on `stream`. Arguments match the kernel's parameters when known.
    fn launch(&self, kernel: &Kernel, dims: &LaunchDims, args: &[DeviceArg], stream: DeviceStream) -> DeviceResult<()>;
    /// Creates a stream.
    fn create_stream(&self) -> DeviceResult<DeviceStream>;
    /// Destroys a stream.
    fn destroy_stream(&self, stream: DeviceStream);
    /// Waits for everything queued on `stream`.
    fn synchronize(&self, stream: DeviceStream) -> DeviceResult<()>;
}

/// Checks a launch shape against the limits CUDA devices share, so that a launch that fails on
/// a GPU fails the same way on the CPU device.
pub fn validate_dims(dims: &LaunchDims) -> DeviceResult<()> {
    use ac_proto::backend::ErrorKind::InvalidArgument;
    if dims.grid.contains(&0) || dims.block.contains(&0) {
        return Err(WireError::new(InvalidArgument, "grid and block dimensions must be at least 1"));
    }
    let threads: u64 = dims.block.iter().map(|&d| d as u64).product();
    if threads > 1024 {
        return Err(WireError::new(InvalidArgument, format!("{threads} threads per block exceed 1024")));
    }
    if dims.grid[1] > 65_535 || dims.grid[2] > 65_535 {
        return Err(WireError::new(InvalidArgument, "grid y and z must be at most 65535"));
    }
    if dims.shared_mem > 48 * 1024 {
        return Err(WireError::new(InvalidArgument, "dynamic shared memory above 48 KiB"));
    }
    Ok(())
}

/// Checks arguments against a kernel's parameter kinds.
pub fn check_signature(kernel: &Kernel, args: &[KernelArg]) -> DeviceResult<()> {
    use ac_proto::backend::ErrorKind::InvalidArgument;
    let Some(params) = &kernel.params else {
        return Ok(());
    };
    if params.len() != args.len() {
        return Err(WireError::new(
            InvalidArgument,
            format!("kernel `{}` takes {} arguments, got {}", kernel.name, params.len(), args.len()),
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if *p != a.kind() {
            return Err(WireError::new(
                InvalidArgument,
                format!("kernel `{}` argument {i}: expected {p:?}, got {:?}", kernel.name, a.kind()),
            ));
        }
    }
    Ok(())
}
