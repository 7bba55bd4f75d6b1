//! The device-side memory operations the context's calls share: clearing new memory (an
//! allocation, physical memory, an array) and a copy whose source and destination overlap.

use cudarc::driver::sys;

use super::context::CudaContext;
use super::driver::blocking;
use crate::device::DeviceResult;

impl CudaContext {
    /// Clears new memory before a session sees it: `cuMemAlloc` hands out whatever the memory
    /// held last, possibly another session's data, and the SDK promises zeroed memory. On the
    /// null stream, waited for here, so that work on the session's streams (non-blocking, not
    /// ordered after the null stream) finds it done.
    pub(super) fn zero(&self, ptr: u64, bytes: u64) -> DeviceResult<()> {
        let null = std::ptr::null_mut();
        // SAFETY: `ptr` holds `bytes` bytes of this context, which is current.
        self.check("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(ptr, 0, bytes as usize, null) })?;
        // SAFETY: the null stream of the current context.
        self.check("cuStreamSynchronize", blocking(|| unsafe { sys::cuStreamSynchronize(null) }))
    }

    /// Copies within one allocation whose source and destination overlap: CUDA's copies do
    /// not allow overlap, so it goes through a stream-ordered temporary.
    pub(super) fn copy_overlapping(&self, dst: u64, src: u64, len: u64, stream: sys::CUstream) -> DeviceResult<()> {
        let mut temp = 0;
        // SAFETY: valid out-pointer and stream; the temporary is freed in stream order after
        // the two copies that use it.
        unsafe {
            self.check("cuMemAllocAsync", sys::cuMemAllocAsync(&mut temp, len as usize, stream))?;
            self.check("cuMemcpyDtoDAsync", sys::cuMemcpyDtoDAsync_v2(temp, src, len as usize, stream))?;
            self.check("cuMemcpyDtoDAsync", sys::cuMemcpyDtoDAsync_v2(dst, temp, len as usize, stream))?;
            self.check("cuMemFreeAsync", sys::cuMemFreeAsync(temp, stream))
        }
    }
}
