//! CUDA arrays and texture and surface objects (protocol 16), kept by
//! [`crate::session::arrays`]. A creation zeroes the array and waits for it, so it runs off the
//! control loop; a copy is queued on its stream once its region lies inside the array and its
//! linear side inside one of the session's buffers. An object's destruction waits for the work
//! queued before on every stream, as a free does; an array's waits for nothing (whatever reads it
//! holds it: a queued copy, an object), and the device destroys either after its context's work.

use ac_proto::backend::{ArrayCopy, ArrayId, ErrorKind, Response, Sampler, StreamId, TextureResource, WireError};

use super::{blocking, Control};
use crate::device::stream_workers::StreamOp;

impl Control {
    pub(super) async fn create_array(&mut self, spec: ac_proto::backend::ArraySpec) -> Response {
        let session = self.session.clone();
        blocking(move || session.create_array(spec)).await.map_or_else(Response::Error, Response::Array)
    }

    pub(super) fn destroy_array(&mut self, id: ArrayId) -> Response {
        self.session.destroy_array(id).map_or_else(Response::Error, |()| Response::Ok)
    }

    pub(super) async fn enqueue_array_copy(&mut self, copy: ArrayCopy, stream: StreamId) -> Response {
        match self.array_copy(&copy) {
            Ok(op) => self.enqueue_on(stream, op).await,
            Err(e) => Response::Error(e),
        }
    }

    /// The stream operation of `copy`, once it fits its array and its linear side.
    fn array_copy(&self, copy: &ArrayCopy) -> Result<StreamOp, WireError> {
        let array = self.session.array(copy.array)?;
        if let Some(why) = copy.misfit(&array.spec) {
            return Err(WireError::new(ErrorKind::OutOfBounds, why));
        }
        let span = copy.linear_span().ok_or_else(|| {
            WireError::new(
                ErrorKind::OutOfBounds,
                format!("a copy's linear side of pitch {} spans no memory", copy.pitch),
            )
        })?;
        let linear = self.session.resolve(copy.linear, span)?;
        let copy = copy.between(array.handle, linear.mem.0 + copy.linear.offset);
        Ok(StreamOp::CopyArray { array, linear, copy })
    }

    pub(super) async fn create_object(&mut self, resource: TextureResource, sampler: Option<Sampler>) -> Response {
        let session = self.session.clone();
        blocking(move || session.create_object(resource, sampler)).await.map_or_else(Response::Error, Response::Object)
    }

    /// After the work queued before on every stream, as a free: a launch staged here but not
    /// yet handed to its stream passes the object's value, which holds nothing alive.
    pub(super) async fn destroy_object(&mut self, value: u64, surface: bool) -> Response {
        self.drain_streams().await;
        self.session.destroy_object(value, surface).map_or_else(Response::Error, |()| Response::Ok)
    }
}
