//! Tensor maps (protocol 13's `EncodeTensorMap`, `cuTensorMapEncodeTiled`): the whole tensor
//! must lie in one of the session's buffers, so that a descriptor the session's kernels hand
//! the GPU's copy engine describes the session's memory and no other; the device's driver
//! encodes it at once (it depends on the arguments alone: nothing queued waits).

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
    /// byte of it lies in the buffer its address points into.
    fn tensor_address(&self, spec: &TensorMapSpec) -> Result<u64, WireError> {
        if let Some(why) = spec.misshapen() {
            return Err(WireError::new(ErrorKind::InvalidArgument, why));
        }
        let extent = spec.extent().ok_or_else(|| {
            let why = format!("a tensor of element type {} and dimensions {:?} has no size", spec.data_type, spec.dims);
            WireError::new(ErrorKind::InvalidArgument, why)
        })?;
        let alloc = self.session.resolve(spec.address, extent)?;
        Ok(alloc.mem.0 + spec.address.offset)
    }
}
