//! CUDA arrays and the texture and surface objects that read them (backend protocol 16), for
//! the CUDA shim's `cuArray3DCreate`, `cuMemcpy3D` to and from arrays, `cuTexObjectCreate` and
//! `cuSurfObjectCreate`. An array's bytes move only between it and the session's linear
//! memory, on a stream ([`Accelerator::copy_array`]); a copy from the host goes through a
//! buffer first.

use ac_proto::backend::{ArrayCopy, ArrayId, ArraySpec, DevicePtr, Request, Response, Sampler, TextureResource};
use bytemuck::Pod;
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, DeviceBuffer, Result, Stream};

/// The backend protocol that serves arrays and texture and surface objects.
const ARRAYS: u16 = 16;

/// A CUDA array of the session: dropping it lets it go (it goes once no object reads it).
#[derive(Debug)]
pub struct CudaArray {
    acc: Accelerator,
    id: ArrayId,
    spec: ArraySpec,
}

impl CudaArray {
    /// Its id, which copies and texture resources name.
    pub fn id(&self) -> ArrayId {
        self.id
    }

    /// Its shape.
    pub fn spec(&self) -> ArraySpec {
        self.spec
    }
}

impl Drop for CudaArray {
    fn drop(&mut self) {
        self.acc.post_from_drop(Request::DestroyArray(self.id));
    }
}

/// A texture or surface object of the session: `value` is what kernels take. Dropping it
/// destroys it once the work queued before has run.
#[derive(Debug)]
pub struct DeviceObject {
    acc: Accelerator,
    value: u64,
    surface: bool,
}

impl DeviceObject {
    /// The device's value, a kernel's `cudaTextureObject_t` or `cudaSurfaceObject_t`.
    pub fn value(&self) -> u64 {
        self.value
    }
}

impl Drop for DeviceObject {
    fn drop(&mut self) {
        self.acc.post_from_drop(Request::DestroyObject { object: self.value, surface: self.surface });
    }
}

impl Accelerator {
    /// Creates a zeroed CUDA array of `spec`'s shape; it counts against the session's quota.
    pub async fn create_array(&self, spec: ArraySpec) -> Result<CudaArray> {
        self.needs_protocol(ARRAYS, "a CUDA array")?;
        match self.call(Request::CreateArray(spec), Bytes::new()).await? {
            Answer::Response(Response::Array(id)) => Ok(CudaArray { acc: self.clone(), id, spec }),
            other => Err(unexpected(other)),
        }
    }

    /// Queues `copy` between an array and the session's linear memory on `stream`; a region
    /// outside either is reported at the next synchronizing call.
    pub async fn copy_array(&self, stream: &Stream, copy: ArrayCopy) -> Result<()> {
        self.needs_protocol(ARRAYS, "a copy to or from a CUDA array")?;
        self.post(Request::CopyArray { copy, stream: stream.id() }, Bytes::new()).await
    }

    /// Creates a texture object over `resource` (an array, or linear memory of the session)
    /// that reads as `sampler` says.
    pub async fn create_texture(&self, resource: TextureResource, sampler: Sampler) -> Result<DeviceObject> {
        self.needs_protocol(ARRAYS, "a texture object")?;
        self.create_object(Request::CreateTexture { resource, sampler }, false).await
    }

    /// Creates a surface object over `array` (made with surface loads and stores allowed).
    pub async fn create_surface(&self, array: &CudaArray) -> Result<DeviceObject> {
        self.needs_protocol(ARRAYS, "a surface object")?;
        self.create_object(Request::CreateSurface(array.id), true).await
    }

    async fn create_object(&self, request: Request, surface: bool) -> Result<DeviceObject> {
        match self.call(request, Bytes::new()).await? {
            Answer::Response(Response::Object(value)) => Ok(DeviceObject { acc: self.clone(), value, surface }),
            other => Err(unexpected(other)),
        }
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Where byte `offset` of the buffer is, as copies to arrays and texture resources name it.
    pub fn device_ptr(&self, offset: u64) -> DevicePtr {
        DevicePtr { buffer: self.id(), offset }
    }
}
