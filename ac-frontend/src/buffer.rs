//! Typed device buffers.

use std::marker::PhantomData;

use ac_proto::backend::{BufferId, DevicePtr, KernelArg, Request, Response};
use bytemuck::Pod;
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, Error, Result, Stream};

/// `len` elements of `T` in an accelerator's memory. Dropping it frees the memory (unless it is
/// a module's variable, whose memory goes with its module).
///
/// Elements travel as their in-memory bytes; the protocol is little-endian, as are the hosts
/// this SDK supports.
#[derive(Debug)]
pub struct DeviceBuffer<T: Pod> {
    acc: Accelerator,
    id: BufferId,
    len: usize,
    /// Whether dropping it frees it: not once freed, nor a module's variable.
    frees_on_drop: bool,
    _elem: PhantomData<T>,
}

fn byte_len<T>(len: usize) -> Result<u64> {
    len.checked_mul(size_of::<T>())
        .map(|b| b as u64)
        .ok_or_else(|| Error::InvalidArgument(format!("{len} elements overflow the address space")))
}

impl Accelerator {
    /// Allocates room for `len` elements of `T` (zeroed).
    pub async fn alloc<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = byte_len::<T>(len)?;
        match self.call(Request::MemAlloc { bytes }, Bytes::new()).await? {
            Answer::Response(Response::Buffer(id)) => Ok(DeviceBuffer::adopt(self.clone(), id, len)),
            other => Err(unexpected(other)),
        }
    }

    /// Allocates a buffer holding a copy of `data`.
    pub async fn alloc_from<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buffer = self.alloc(data.len()).await?;
        buffer.copy_from_host(data).await?;
        Ok(buffer)
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Takes charge of buffer `id` of `acc`, `len` elements long: dropping it frees it.
    pub(crate) fn adopt(acc: Accelerator, id: BufferId, len: usize) -> Self {
        DeviceBuffer { acc, id, len, frees_on_drop: true, _elem: PhantomData }
    }

    /// Buffer `id` of `acc`, `len` elements long, that the backend owns (a module's variable):
    /// dropping it frees nothing.
    pub(crate) fn borrow(acc: Accelerator, id: BufferId, len: usize) -> Self {
        DeviceBuffer { acc, id, len, frees_on_drop: false, _elem: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The backend's id of this buffer.
    pub fn id(&self) -> BufferId {
        self.id
    }

    /// A device pointer to element `index`, as a kernel argument.
    pub fn at(&self, index: usize) -> KernelArg {
        KernelArg::Ptr(DevicePtr { buffer: self.id, offset: (index * size_of::<T>()) as u64 })
    }

    /// A device pointer to the start, as a kernel argument.
    pub fn arg(&self) -> KernelArg {
        self.at(0)
    }

    fn ptr(&self, index: usize, count: usize) -> Result<DevicePtr> {
        match index.checked_add(count) {
            Some(end) if end <= self.len => Ok(DevicePtr { buffer: self.id, offset: byte_len::<T>(index)? }),
            _ => Err(Error::InvalidArgument(format!(
                "elements {index}..{index}+{count} are outside a buffer of {} elements",
                self.len
            ))),
        }
    }

    /// Copies `src` to the start of the buffer and waits until it is there.
    pub async fn copy_from_host(&self, src: &[T]) -> Result<()> {
        self.copy_from_host_at(0, src).await
    }

    /// Copies `src` to elements `index..` and waits until it is there.
    pub async fn copy_from_host_at(&self, index: usize, src: &[T]) -> Result<()> {
        self.acc.write_bytes(self.ptr(index, src.len())?, bytemuck::cast_slice(src)).await
    }

    /// Copies the start of the buffer into `dst`, after the work that writes it.
    pub async fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.copy_to_host_at(0, dst).await
    }

    /// Copies elements `index..` into `dst`.
    pub async fn copy_to_host_at(&self, index: usize, dst: &mut [T]) -> Result<()> {
        let ptr = self.ptr(index, dst.len())?;
        self.acc.read_bytes(ptr, bytemuck::cast_slice_mut(dst)).await
    }

    /// The whole buffer as a vector.
    pub async fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut out).await?;
        Ok(out)
    }

    /// Queues a copy of `src` to elements `index..` on `stream` and returns at once. The bytes
    /// are sent now; the write happens in the stream's order.
    pub async fn copy_from_host_async(&self, stream: &Stream, index: usize, src: &[T]) -> Result<()> {
        let mut ptr = self.ptr(index, src.len())?;
        // Chunks keep each message well under the backend's inline limit.
        for chunk in bytemuck::cast_slice::<T, u8>(src).chunks(4 << 20) {
            let request = Request::MemWrite { dst: ptr, len: chunk.len() as u64, stream: stream.id() };
            self.acc.post(request, Bytes::copy_from_slice(chunk)).await?;
            ptr.offset += chunk.len() as u64;
        }
        Ok(())
    }

    /// Queues a copy of `src`'s elements into this buffer, device to device, on `stream`.
    pub async fn copy_from_device(&self, stream: &Stream, src: &DeviceBuffer<T>) -> Result<()> {
        self.copy_from_device_at(stream, 0, src, 0, src.len.min(self.len)).await
    }

    /// Queues a copy of `count` elements of `src`, from `src_index`, to `index..` of this
    /// buffer, device to device, on `stream`.
    pub async fn copy_from_device_at(
        &self,
        stream: &Stream,
        index: usize,
        src: &DeviceBuffer<T>,
        src_index: usize,
        count: usize,
    ) -> Result<()> {
        let request = Request::MemCopy {
            dst: self.ptr(index, count)?,
            src: src.ptr(src_index, count)?,
            len: byte_len::<T>(count)?,
            stream: stream.id(),
        };
        self.acc.post(request, Bytes::new()).await
    }

    /// Queues setting every byte of the buffer to `value` on `stream`.
    pub async fn memset(&self, stream: &Stream, value: u8) -> Result<()> {
        self.memset_range(stream, 0, self.len, value).await
    }

    /// Queues setting every byte of elements `index..index + count` to `value` on `stream`.
    pub async fn memset_range(&self, stream: &Stream, index: usize, count: usize, value: u8) -> Result<()> {
        let request =
            Request::Memset { dst: self.ptr(index, count)?, len: byte_len::<T>(count)?, value, stream: stream.id() };
        self.acc.post(request, Bytes::new()).await
    }

    /// Frees the memory now and reports errors (dropping frees it too, silently).
    pub async fn free(mut self) -> Result<()> {
        self.frees_on_drop = false;
        self.acc.call_ok(Request::MemFree { buffer: self.id }).await
    }
}

impl<T: Pod> From<&DeviceBuffer<T>> for KernelArg {
    fn from(buffer: &DeviceBuffer<T>) -> Self {
        buffer.arg()
    }
}

impl<T: Pod> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.frees_on_drop {
            self.acc.post_from_drop(Request::MemFree { buffer: self.id });
        }
    }
}
