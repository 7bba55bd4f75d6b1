//! Virtual memory management (protocol 14): ranges, physical memory and mappings, kept by
//! [`crate::session::vmm`]. The driver's calls block (a creation zeroes its memory and waits for
//! it), so they run off the control loop. An unmap waits for the work queued before on every
//! stream, as a free does: a kernel or copy queued before it still finds the memory.

use ac_proto::backend::{BufferId, Response};

use super::{blocking, Control};

impl Control {
    pub(super) async fn reserve_range(&mut self, bytes: u64, alignment: u64) -> Response {
        let session = self.session.clone();
        match blocking(move || session.reserve_range(bytes, alignment)).await {
            Ok((buffer, address)) => Response::BufferAt { buffer, address },
            Err(e) => Response::Error(e),
        }
    }

    pub(super) async fn create_physical(&mut self, bytes: u64) -> Response {
        let session = self.session.clone();
        blocking(move || session.create_physical(bytes)).await.map_or_else(Response::Error, Response::Physical)
    }

    pub(super) fn release_physical(&mut self, physical: u64) -> Response {
        self.session.release_physical(physical).map_or_else(Response::Error, |()| Response::Ok)
    }

    pub(super) async fn map_physical(&mut self, range: BufferId, offset: u64, bytes: u64, physical: u64) -> Response {
        let session = self.session.clone();
        let mapped = blocking(move || session.map_physical(range, offset, bytes, physical)).await;
        mapped.map_or_else(Response::Error, |()| Response::Ok)
    }

    pub(super) async fn unmap_range(&mut self, range: BufferId, offset: u64, bytes: u64) -> Response {
        self.drain_streams().await;
        let session = self.session.clone();
        let unmapped = blocking(move || session.unmap_range(range, offset, bytes)).await;
        unmapped.map_or_else(Response::Error, |()| Response::Ok)
    }
}
