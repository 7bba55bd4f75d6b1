//! `Buffer`: device memory as bytes. `ac.DeviceArray` (python/ac/array.py) gives it a shape and
//! a dtype; views are byte offsets into one buffer.

use ac_frontend::DeviceBuffer;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use tokio::sync::RwLock;

use crate::error;
use crate::stream::Stream;
use crate::wait::{Local, Owner};

/// Device memory: freed by `free()`, or when the garbage collector drops it (no round trip:
/// the free goes ahead of the accelerator's later calls).
#[pyclass(module = "ac._ac", frozen)]
#[derive(Debug)]
pub struct Buffer {
    owner: Owner,
    nbytes: usize,
    /// Its accelerator's default stream, for memsets and device copies given none.
    default: Local<ac_frontend::Stream>,
    /// `None` once freed. Read-locked by calls (inside their futures, without the GIL), written
    /// by `free`.
    memory: Local<RwLock<Option<DeviceBuffer<u8>>>>,
}

/// A host buffer held for the length of a call: the object cannot be released meanwhile.
struct Host {
    view: PyUntypedBuffer,
}

impl Host {
    /// Any C-contiguous buffer-protocol object; `writable` for a destination.
    fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        let view = PyUntypedBuffer::get(obj)?;
        if !view.is_c_contiguous() {
            return Err(error::invalid("the host buffer is not C-contiguous (numpy.ascontiguousarray makes it so)"));
        }
        if writable && view.readonly() {
            return Err(error::invalid("the host buffer is read-only"));
        }
        Ok(Self { view })
    }

    fn len(&self) -> usize {
        self.view.len_bytes()
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the view holds the exporter's buffer (PyObject_GetBuffer) until it is
        // dropped, which is after every use of this slice; it is C-contiguous, `len_bytes` long.
        unsafe { std::slice::from_raw_parts(self.view.buf_ptr() as *const u8, self.len()) }
    }

    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as `bytes`, and the exporter said it is writable (`get(.., true)`). Python
        // code of another thread may touch the same memory meanwhile, as with any buffer
        // handed to a C extension that releases the GIL (numpy's own copies do the same).
        unsafe { std::slice::from_raw_parts_mut(self.view.buf_ptr() as *mut u8, self.len()) }
    }
}

impl Buffer {
    pub(crate) fn new(owner: Owner, buffer: DeviceBuffer<u8>, default: Local<ac_frontend::Stream>) -> Self {
        Self { owner, nbytes: buffer.len(), default, memory: Local::new(RwLock::new(Some(buffer))) }
    }

    /// Checks that `len` bytes at `offset` lie within the buffer.
    fn range(&self, offset: usize, len: usize) -> PyResult<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.nbytes) {
            return Err(error::out_of_range(format!(
                "{len} bytes at offset {offset} do not fit in a buffer of {} bytes",
                self.nbytes
            )));
        }
        Ok(())
    }

    /// The kernel argument pointing `offset` bytes into the buffer.
    pub(crate) fn arg_at(&self, offset: usize) -> PyResult<ac_frontend::KernelArg> {
        self.owner.check()?;
        if offset > self.nbytes {
            return Err(error::out_of_range(format!("offset {offset} is past a buffer of {} bytes", self.nbytes)));
        }
        let memory = self.memory.try_read().map_err(|_| error::released("the device buffer"))?;
        Ok(memory.as_ref().ok_or_else(|| error::released("the device buffer"))?.at(offset))
    }
}

/// Runs `call` on the buffer's memory, a freed buffer being an error.
macro_rules! on_memory {
    ($self:ident, $py:ident, |$m:ident| $call:expr) => {
        $self
            .owner
            .wait($py, async {
                let guard = $self.memory.read().await;
                match guard.as_ref() {
                    Some($m) => Some($call.await),
                    None => None,
                }
            })?
            .ok_or_else(|| error::released("the device buffer"))?
            .map_err(error::sdk)
    };
}

#[pymethods]
impl Buffer {
    /// Its size, bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// Whether it was freed.
    #[getter]
    fn freed(&self) -> bool {
        self.memory.try_read().map(|m| m.is_none()).unwrap_or(false)
    }

    /// Copies the bytes of `src` (any C-contiguous buffer) to `offset`: synchronous (returns
    /// when they have arrived, after all earlier work), or queued on `stream` (returns once the
    /// bytes are sent; `src` may be reused at once).
    #[pyo3(signature = (offset, src, stream=None))]
    fn write(&self, py: Python<'_>, offset: usize, src: &Bound<'_, PyAny>, stream: Option<&Stream>) -> PyResult<()> {
        let host = Host::get(src, false)?;
        self.range(offset, host.len())?;
        let bytes = host.bytes();
        match stream {
            None => on_memory!(self, py, |m| m.copy_from_host_at(offset, bytes)),
            Some(s) => on_memory!(self, py, |m| m.copy_from_host_async(&s.stream, offset, bytes)),
        }
    }

    /// Copies bytes from `offset` into `dst` (any writable C-contiguous buffer), after all
    /// earlier work on every stream.
    fn read(&self, py: Python<'_>, offset: usize, dst: &Bound<'_, PyAny>) -> PyResult<()> {
        let host = Host::get(dst, true)?;
        self.range(offset, host.len())?;
        let bytes = host.bytes_mut();
        on_memory!(self, py, |m| m.copy_to_host_at(offset, bytes))
    }

    /// Sets `count` bytes from `offset` to `value`, on `stream` (the default stream if `None`).
    #[pyo3(signature = (offset, count, value, stream=None))]
    fn memset(&self, py: Python<'_>, offset: usize, count: usize, value: u8, stream: Option<&Stream>) -> PyResult<()> {
        self.range(offset, count)?;
        let stream: &ac_frontend::Stream = stream.map_or(&self.default, |s| &s.stream);
        on_memory!(self, py, |m| m.memset_range(stream, offset, count, value))
    }

    /// Copies `count` bytes from `src` at `src_offset` to `offset`, device to device, on
    /// `stream` (the default stream if `None`).
    #[pyo3(signature = (offset, src, src_offset, count, stream=None))]
    fn copy_from(
        &self,
        py: Python<'_>,
        offset: usize,
        src: &Buffer,
        src_offset: usize,
        count: usize,
        stream: Option<&Stream>,
    ) -> PyResult<()> {
        self.range(offset, count)?;
        src.range(src_offset, count)?;
        let stream: &ac_frontend::Stream = stream.map_or(&self.default, |s| &s.stream);
        self.owner
            .wait(py, async {
                // One guard for a copy within a buffer, else both in address order: a reader
                // queued behind a waiting `free` must not hold the other lock meanwhile.
                let same = std::ptr::eq(self, src);
                let (first, second) =
                    if same || (self as *const Self) < (src as *const Self) { (self, src) } else { (src, self) };
                let first_guard = first.memory.read().await;
                let second_guard = if same { None } else { Some(second.memory.read().await) };
                let second_memory = second_guard.as_ref().map_or(first_guard.as_ref(), |g| g.as_ref());
                let (dst, from) = if std::ptr::eq(first, self) {
                    (first_guard.as_ref(), second_memory)
                } else {
                    (second_memory, first_guard.as_ref())
                };
                let (Some(dst), Some(from)) = (dst, from) else { return None };
                Some(dst.copy_from_device_at(stream, offset, from, src_offset, count).await)
            })?
            .ok_or_else(|| error::released("the device buffer"))?
            .map_err(error::sdk)
    }

    /// Frees the memory now (`acMemFree`); later calls on it raise.
    fn free(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.owner.wait(py, async { self.memory.write().await.take() })?;
        match taken {
            Some(memory) => self.owner.wait(py, memory.free())?.map_err(error::sdk),
            None => Ok(()),
        }
    }
}
