//! The CPU device: device memory is host memory under a configured capacity, and kernels are the
//! Rust implementations of the `builtin` module. Work runs inside each call; the session's
//! stream workers give it CUDA's asynchrony. Every session shares the device's one context
//! (a fault cannot poison it: kernels are safe Rust that checks every access).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ac_proto::backend::{DeviceInfo, DeviceKind, ErrorKind, LaunchDims, ModuleSource, WireError};
use rustc_hash::FxHashMap;

mod builtins;
mod memory;

use super::builtin;
use super::{
    check_shared, validate_dims, Context, Device, DeviceArg, DeviceMem, DeviceModule, DeviceResult, DeviceStream,
    Kernel, DEFAULT_DYNAMIC_SHARED,
};

/// Elements of work (see [`builtin::work`]) that a quick launch does at most: 4,096 floats
/// take a microsecond or two here.
const QUICK_WORK: u64 = 4096;

/// An allocation, shared by the table and the calls that use it.
type Allocation = Arc<memory::Memory>;

/// An accelerator emulated in host memory.
#[derive(Debug)]
pub struct CpuDevice {
    context: Arc<CpuContext>,
}

impl CpuDevice {
    /// Device `index` with `capacity` bytes of memory.
    pub fn new(index: u32, capacity: u64) -> Self {
        Self { context: Arc::new(CpuContext::new(index, capacity)) }
    }
}

impl Device for CpuDevice {
    fn info(&self) -> DeviceInfo {
        self.context.info()
    }

    fn open_context(&self) -> DeviceResult<Arc<dyn Context>> {
        Ok(self.context.clone())
    }
}

/// The memory and kernels of a CPU device, shared by its sessions.
#[derive(Debug)]
pub struct CpuContext {
    index: u32,
    name: String,
    capacity: u64,
    used: AtomicU64,
    next: AtomicU64,
    /// Fx-hashed: the keys are handed out in sequence by `next`.
    allocations: Mutex<FxHashMap<u64, Allocation>>,
}

impl CpuContext {
    fn new(index: u32, capacity: u64) -> Self {
        Self {
            index,
            name: format!("CPU device ({} MiB)", capacity >> 20),
            capacity,
            used: AtomicU64::new(0),
            next: AtomicU64::new(1),
            allocations: Mutex::new(FxHashMap::default()),
        }
    }

    fn memory(&self, mem: DeviceMem) -> DeviceResult<Allocation> {
        self.allocations
            .lock()
            .expect("allocation table poisoned")
            .get(&mem.0)
            .cloned()
            .ok_or_else(|| WireError::new(ErrorKind::InvalidBuffer, "device memory was freed"))
    }
}

/// Checks that `[offset, offset + len)` lies inside an allocation of `size` bytes.
fn check_range(size: usize, offset: u64, len: u64) -> DeviceResult<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= size as u64 => Ok(offset as usize..end as usize),
        _ => Err(WireError::new(
            ErrorKind::OutOfBounds,
            format!("range {offset}+{len} outside an allocation of {size} bytes"),
        )),
    }
}

impl Context for CpuContext {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            index: self.index,
            name: self.name.clone(),
            kind: DeviceKind::Cpu,
            compute_capability: None,
            memory_total: self.capacity,
            memory_free: self.capacity - self.used.load(Ordering::Relaxed),
        }
    }

    fn alloc(&self, bytes: u64) -> DeviceResult<DeviceMem> {
        if bytes == 0 {
            return Err(WireError::new(ErrorKind::InvalidArgument, "cannot allocate 0 bytes"));
        }
        let reserved = self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(bytes).filter(|&total| total <= self.capacity)
        });
        if let Err(used) = reserved {
            return Err(WireError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "out of device memory: {bytes} bytes requested, {} of {} free",
                    self.capacity - used,
                    self.capacity
                ),
            ));
        }
        let memory = Arc::new(memory::Memory::zeroed(bytes as usize));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.allocations.lock().expect("allocation table poisoned").insert(id, memory);
        Ok(DeviceMem(id))
    }

    fn free(&self, mem: DeviceMem) {
        if let Some(memory) = self.allocations.lock().expect("allocation table poisoned").remove(&mem.0) {
            self.used.fetch_sub(memory.len() as u64, Ordering::AcqRel);
        }
    }

    fn write(&self, dst: DeviceMem, offset: u64, data: &[u8], stream: DeviceStream) -> DeviceResult<()> {
        self.write_with(dst, offset, data.len(), stream, &mut |memory| memory.copy_from_slice(data))
    }

    /// Lends the memory where it lies, locked for writing over this range only: the other
    /// lanes of the same copy write their own ranges meanwhile, and a launch that reads this
    /// range waits for one read buffer's records to be opened at most.
    fn write_with(
        &self,
        dst: DeviceMem,
        offset: u64,
        len: usize,
        _stream: DeviceStream,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> DeviceResult<()> {
        let memory = self.memory(dst)?;
        let range = check_range(memory.len(), offset, len as u64)?;
        fill(&mut memory.write(range));
        Ok(())
    }

    fn writes_in_place(&self) -> bool {
        true
    }

    fn read(&self, src: DeviceMem, offset: u64, out: &mut [u8], stream: DeviceStream) -> DeviceResult<()> {
        self.read_with(src, offset, out.len(), stream, &mut |bytes| out.copy_from_slice(bytes))
    }

    /// Hands the bytes where they lie, locked for reading over this range only: a launch that
    /// writes this range waits for one record's sealing at most.
    fn read_with(
        &self,
        src: DeviceMem,
        offset: u64,
        len: usize,
        _stream: DeviceStream,
        take: &mut dyn FnMut(&[u8]),
    ) -> DeviceResult<()> {
        let memory = self.memory(src)?;
        let range = check_range(memory.len(), offset, len as u64)?;
        take(&memory.read(range));
        Ok(())
    }

    fn copy(
        &self,
        dst: DeviceMem,
        dst_offset: u64,
        src: DeviceMem,
        src_offset: u64,
        len: u64,
        _stream: DeviceStream,
    ) -> DeviceResult<()> {
        if dst == src {
            // One guard over both ranges: a thread never holds two of one allocation.
            let memory = self.memory(dst)?;
            let from = check_range(memory.len(), src_offset, len)?;
            let to = check_range(memory.len(), dst_offset, len)?;
            let base = from.start.min(to.start);
            let mut both = memory.write(base..from.end.max(to.end));
            both.copy_within(from.start - base..from.end - base, to.start - base);
            return Ok(());
        }
        let (src_mem, dst_mem) = (self.memory(src)?, self.memory(dst)?);
        let from = check_range(src_mem.len(), src_offset, len)?;
        let to = check_range(dst_mem.len(), dst_offset, len)?;
        // Lock in handle order so that two opposite copies cannot deadlock.
        let (src_guard, mut dst_guard);
        if src.0 < dst.0 {
            src_guard = src_mem.read(from);
            dst_guard = dst_mem.write(to);
        } else {
            dst_guard = dst_mem.write(to);
            src_guard = src_mem.read(from);
        }
        dst_guard.copy_from_slice(&src_guard);
        Ok(())
    }

    fn memset(&self, dst: DeviceMem, offset: u64, len: u64, value: u8, _stream: DeviceStream) -> DeviceResult<()> {
        let memory = self.memory(dst)?;
        let range = check_range(memory.len(), offset, len)?;
        memory.write(range).fill(value);
        Ok(())
    }

    fn load_module(&self, source: &ModuleSource, _image: &[u8]) -> DeviceResult<DeviceModule> {
        match source {
            ModuleSource::Builtin(name) if name == builtin::MODULE => Ok(DeviceModule(0)),
            ModuleSource::Builtin(name) => Err(WireError::new(
                ErrorKind::ModuleLoad,
                format!("no builtin module `{name}` (the CPU device has `{}`)", builtin::MODULE),
            )),
            ModuleSource::Ptx | ModuleSource::Cubin | ModuleSource::CudaC { .. } => Err(WireError::new(
                ErrorKind::NeedsCuda,
                "loading PTX, cubin or CUDA C needs a CUDA device; this backend runs the CPU device (use the `builtin` module)",
            )),
        }
    }

    fn unload_module(&self, _module: DeviceModule) {}

    fn kernel_names(&self, _module: DeviceModule) -> DeviceResult<Vec<String>> {
        Ok(builtin::KERNELS.iter().map(|(name, _)| name.to_string()).collect())
    }

    fn kernel(&self, _module: DeviceModule, name: &str) -> DeviceResult<Kernel> {
        let (index, params) = builtin::lookup(name).ok_or_else(|| {
            WireError::new(ErrorKind::UnknownKernel, format!("no kernel `{name}` in module `{}`", builtin::MODULE))
        })?;
        let sizes = params.iter().map(|&kind| crate::device::param_width(kind)).collect();
        Ok(Kernel { handle: index as u64, name: name.to_string(), params: Some(params.to_vec()), sizes: Some(sizes) })
    }

    fn launch(
        &self,
        kernel: &Kernel,
        dims: &LaunchDims,
        args: &[DeviceArg],
        _stream: DeviceStream,
    ) -> DeviceResult<()> {
        validate_dims(dims)?;
        check_shared(dims.shared_mem, DEFAULT_DYNAMIC_SHARED)?;
        let index = kernel.handle as usize;
        if index >= builtin::KERNELS.len() || builtin::KERNELS[index].1.len() != args.len() {
            return Err(WireError::new(ErrorKind::InvalidArgument, format!("bad launch of `{}`", kernel.name)));
        }
        // Before any buffer of the kernel's size is built: a size the arguments cannot hold
        // must be an error, not an allocation of terabytes.
        builtin::check_footprint(builtin::KERNELS[index].0, args)?;
        self.run_builtin(index, args)
    }

    fn finishes_in_call(&self) -> bool {
        true
    }

    fn is_quick_launch(&self, kernel: &Kernel, args: &[DeviceArg]) -> bool {
        builtin::KERNELS
            .get(kernel.handle as usize)
            .is_some_and(|(name, _)| builtin::work(name, args).is_ok_and(|work| work <= QUICK_WORK))
    }

    fn create_stream(&self) -> DeviceResult<DeviceStream> {
        Ok(DeviceStream(self.next.fetch_add(1, Ordering::Relaxed)))
    }

    fn destroy_stream(&self, _stream: DeviceStream) {}

    fn synchronize(&self, _stream: DeviceStream) -> DeviceResult<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ac_proto::backend::KernelArg;

    #[test]
    fn capacity_is_enforced_and_returned() {
        let dev = CpuDevice::new(0, 1000).open_context().unwrap();
        let a = dev.alloc(600).unwrap();
        assert_eq!(dev.alloc(600).unwrap_err().kind, ErrorKind::OutOfMemory);
        dev.free(a);
        assert_eq!(dev.info().memory_free, 1000);
        dev.alloc(1000).unwrap();
    }

    #[test]
    fn out_of_range_and_overflowing_accesses_fail() {
        let dev = CpuDevice::new(0, 1 << 20).open_context().unwrap();
        let s = DeviceStream(0);
        let a = dev.alloc(16).unwrap();
        assert_eq!(dev.write(a, 10, &[0; 8], s).unwrap_err().kind, ErrorKind::OutOfBounds);
        assert_eq!(dev.memset(a, u64::MAX, 2, 0, s).unwrap_err().kind, ErrorKind::OutOfBounds);
        dev.write(a, 8, &[7; 8], s).unwrap();
        dev.copy(a, 0, a, 8, 8, s).unwrap();
        let mut out = [0; 16];
        dev.read(a, 0, &mut out, s).unwrap();
        assert_eq!(out, [7; 16]);
    }

    #[test]
    fn a_launch_larger_than_its_buffers_fails_before_building_anything_of_its_size() {
        let dev = CpuDevice::new(0, 1 << 20).open_context().unwrap();
        let a = dev.alloc(16).unwrap();
        let fill = dev.kernel(DeviceModule(0), "fill").unwrap();
        let args = [
            DeviceArg::Mem { mem: a, offset: 0, len: 16 },
            DeviceArg::Scalar(KernelArg::F32(1.0)),
            // Four TiB of floats: building them first would abort the backend.
            DeviceArg::Scalar(KernelArg::U64(1 << 40)),
        ];
        let error = dev.launch(&fill, &LaunchDims::linear(1, 1), &args, DeviceStream(0)).unwrap_err();
        assert_eq!(error.kind, ErrorKind::OutOfBounds);
        assert!(!dev.is_quick_launch(&fill, &args));
    }

    #[test]
    fn lanes_fill_their_own_ranges_of_one_allocation_at_once() {
        let dev = CpuDevice::new(0, 1 << 20).open_context().unwrap();
        let a = dev.alloc(1 << 20).unwrap();
        let inside = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for i in 0..2u64 {
                let (dev, inside) = (&dev, &inside);
                scope.spawn(move || {
                    let mut fill = |part: &mut [u8]| {
                        // Each waits inside its fill for the other to be inside its own: under
                        // one lock per allocation the second never gets in. (The deadline only
                        // ends that wait; a correct device meets it at once.)
                        inside.fetch_add(1, Ordering::SeqCst);
                        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                        while inside.load(Ordering::SeqCst) < 2 {
                            assert!(std::time::Instant::now() < deadline, "the other range was not lent meanwhile");
                            std::thread::yield_now();
                        }
                        part.fill(i as u8 + 1);
                    };
                    dev.write_with(a, i << 19, 1 << 19, DeviceStream(i), &mut fill).unwrap();
                });
            }
        });
        let mut out = vec![0; 1 << 20];
        dev.read(a, 0, &mut out, DeviceStream(0)).unwrap();
        assert!(out[..1 << 19].iter().all(|&b| b == 1) && out[1 << 19..].iter().all(|&b| b == 2));
    }

    #[test]
    fn ptx_needs_cuda() {
        let dev = CpuDevice::new(0, 1 << 20).open_context().unwrap();
        assert_eq!(dev.load_module(&ModuleSource::Ptx, b".version 8.0").unwrap_err().kind, ErrorKind::NeedsCuda);
    }
}
