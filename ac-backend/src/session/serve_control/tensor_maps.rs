//! Tensor maps (protocol 13's `EncodeTensorMap`, `cuTensorMapEncodeTiled`): the whole tensor
//! must lie in one of the session's buffers (or its address be null), so that a program is told
//! at once, by name, of a map that would run past its memory; the driver's own checks are of the
//! arguments alone. This is not what isolates sessions (a kernel may forge a descriptor's bytes,
//! as it may forge a pointer): their contexts and session workers are. The device's driver
//! encodes the map at once: it depends on the arguments alone, so nothing queued waits.

use ac_proto::backend::{ErrorKind, Response, TensorMapSpec, WireError};

use super::{blocking, Control};

impl Control {
    pub(super) async fn encode_tensor_map(&mut self, spec: TensorMapSpec) -> Response {
        let at = match self.tensor_address(&spec) {
            Ok(at) => at,
            Err(e) => return Response::Error(e),
        };
        let spec = spec.at(at);
        let context = self.session.context.clone();
        match blocking(move || context.encode_tensor_map(&spec)).await {
            Ok(map) => Response::TensorMap(map),
            Err(e) => Response::Error(e),
        }
    }

    /// The device address of the tensor `spec` describes, once its shape is whole and every
    /// byte of it lies in the buffer its address points into; 0 for a null address.
    fn tensor_address(&self, spec: &TensorMapSpec) -> Result<u64, WireError> {
        if let Some(why) = spec.misshapen() {
            return Err(WireError::new(ErrorKind::InvalidArgument, why));
        }
        let Some(address) = spec.address else { return Ok(0) };
        let extent = spec.extent().ok_or_else(|| {
            let why = format!("a tensor of element type {} and dimensions {:?} has no size", spec.data_type, spec.dims);
            WireError::new(ErrorKind::InvalidArgument, why)
        })?;
        let alloc = self.session.resolve(address, extent)?;
        Ok(alloc.mem.0 + address.offset)
    }
}
