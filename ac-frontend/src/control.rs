//! The sending side of a session's control stream: numbered envelopes, and the ones that
//! `Drop` cannot wait to send.
//!
//! The backend numbers envelopes in the order they arrive (their **position**, see "Order" in
//! [`ac_proto::backend`]), so the client must know how many it has written: a bulk copy travels on
//! a stream of its own and names the position it follows. Every write goes through
//! [`ControlStream`], which counts under the same lock that orders the bytes.
//!
//! `Drop` cannot wait for the lock. A dropped buffer's free is **deferred**: queued here, and
//! written ahead of the next envelope by whoever writes next (or by a task spawned to flush it,
//! if nobody does). So a free is always ahead of every call made after the drop: a program that
//! drops a large buffer and allocates again finds the memory returned.

use std::sync::Mutex;

use ac_proto::backend::Envelope;
use ac_proto::frame::{frame_bytes, write_with_payload};
use ac_proto::ProtoError;
use bytes::Bytes;
use quinn::SendStream;
use tokio::runtime::Handle;

/// The control stream's sending half, shared by every handle to one accelerator.
#[derive(Debug)]
pub(crate) struct ControlStream {
    send: tokio::sync::Mutex<Sending>,
    /// Envelopes from `Drop`, in the order they were deferred.
    deferred: Mutex<Vec<Bytes>>,
    runtime: Handle,
}

#[derive(Debug)]
struct Sending {
    stream: SendStream,
    /// Envelopes written so far: the position of the last one.
    written: u64,
}

impl Sending {
    async fn write_deferred(&mut self, deferred: &Mutex<Vec<Bytes>>) -> Result<(), ProtoError> {
        let frames = std::mem::take(&mut *deferred.lock().expect("deferred frames poisoned"));
        for frame in frames {
            self.stream.write_chunk(frame).await?;
            self.written += 1;
        }
        Ok(())
    }
}

impl ControlStream {
    /// Wraps the stream; must be called inside the runtime that drives its connection.
    pub(crate) fn new(stream: SendStream) -> Self {
        Self {
            send: tokio::sync::Mutex::new(Sending { stream, written: 0 }),
            deferred: Mutex::default(),
            runtime: Handle::current(),
        }
    }

    /// Writes one envelope frame and the raw payload it announces, after every deferred one;
    /// nothing from another writer comes between them.
    pub(crate) async fn send(&self, envelope: Bytes, payload: Bytes) -> Result<(), ProtoError> {
        let mut sending = self.send.lock().await;
        sending.write_deferred(&self.deferred).await?;
        write_with_payload(&mut sending.stream, envelope, payload).await?;
        sending.written += 1;
        Ok(())
    }

    /// The position a copy starting now follows: every envelope written so far, deferred ones
    /// included (they are written first).
    pub(crate) async fn position(&self) -> Result<u64, ProtoError> {
        let mut sending = self.send.lock().await;
        sending.write_deferred(&self.deferred).await?;
        Ok(sending.written)
    }

    /// Queues `envelope` ahead of the next one written, and makes sure it leaves even if no
    /// other call follows. Never waits: for `Drop`.
    pub(crate) fn defer(self: &std::sync::Arc<Self>, envelope: &Envelope) {
        let Ok(frame) = frame_bytes(envelope) else { return };
        self.deferred.lock().expect("deferred frames poisoned").push(frame);
        let this = self.clone();
        // Writing it is the next writer's job too; this only covers a program that goes quiet.
        self.runtime.spawn(async move {
            let _ = this.position().await;
        });
    }
}
