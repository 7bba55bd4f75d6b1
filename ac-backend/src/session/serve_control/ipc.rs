//! Memory shared between sessions (protocols 18 and 19), kept by [`crate::session::ipc`]. An
//! import may call two session workers' drivers (the exporter's handle, the importer's open),
//! so it runs off the control loop.

use ac_proto::backend::{BufferId, Response};

use super::{blocking, Control};

impl Control {
    pub(super) fn export_memory(&mut self, buffer: BufferId) -> Response {
        self.session.export_memory(buffer).map_or_else(Response::Error, Response::Exported)
    }

    pub(super) async fn import_memory(&mut self, secret: [u8; 16]) -> Response {
        let session = self.session.clone();
        match blocking(move || session.import_memory(&secret)).await {
            Ok((buffer, address, size)) => Response::Global { buffer, address, size },
            Err(e) => Response::Error(e),
        }
    }

    /// Off the loop too: the driver is asked for the handle (a session worker's call and its
    /// descriptor's wait).
    pub(super) async fn export_physical(&mut self, physical: u64) -> Response {
        let session = self.session.clone();
        blocking(move || session.export_physical(physical)).await.map_or_else(Response::Error, Response::Exported)
    }

    pub(super) async fn import_physical(&mut self, secret: [u8; 16]) -> Response {
        let session = self.session.clone();
        match blocking(move || session.import_physical(&secret)).await {
            Ok((physical, size)) => Response::ImportedPhysical { physical, size },
            Err(e) => Response::Error(e),
        }
    }
}
