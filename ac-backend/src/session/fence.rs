//! Fences: how a synchronous copy waits for the work ahead of it.
//!
//! Every envelope of a control stream has a position (1, 2, 3... in the order sent; see "Order"
//! in [`ac_proto::backend`]). A synchronous copy names the position it follows. Only the control
//! loop knows which work was queued before a position, so it is the control loop that **admits**
//! a fence: once it has handled every envelope up to that position, it puts a barrier on each
//! stream and takes its own pending error. The copy then waits on those barriers itself, off the
//! control loop, which goes on handling later requests meanwhile.
//!
//! Invariant: a fence admitted for position `p` is behind the work of every envelope `<= p`, on
//! every stream. It may also be behind some later work (the control loop may already be past
//! `p`); that only makes the copy wait a little longer, never see less.

use std::collections::BTreeMap;

use ac_proto::backend::{ErrorKind, WireError};
use tokio::sync::{mpsc, oneshot};

/// A copy's request to be admitted once the control loop has handled `after` envelopes.
#[derive(Debug)]
pub struct FenceRequest {
    /// The position the copy follows.
    pub after: u64,
    /// Where the admitted fence goes.
    pub admitted: oneshot::Sender<Fence>,
}

/// The work a copy must wait for: barriers queued on every stream, and the error the control
/// loop had pending when it admitted the fence.
#[derive(Debug, Default)]
pub struct Fence {
    pub(crate) pending: Option<WireError>,
    pub(crate) barriers: Vec<oneshot::Receiver<Option<WireError>>>,
}

impl Fence {
    /// Waits until the work ahead has finished; returns its first error, which is thereby
    /// reported (as a synchronous `cudaMemcpy` returns an earlier launch's error).
    pub async fn passed(self) -> Result<(), WireError> {
        let mut first = self.pending;
        for barrier in self.barriers {
            let error = barrier.await.unwrap_or_else(|_| Some(session_ended()));
            if first.is_none() {
                first = error;
            }
        }
        first.map_or(Ok(()), Err)
    }
}

fn session_ended() -> WireError {
    WireError::new(ErrorKind::Internal, "the session ended before the copy could start")
}

/// The sending side, held by the session so that bulk streams on any of its connections can
/// ask for fences.
#[derive(Debug, Clone)]
pub struct Fences {
    tx: mpsc::UnboundedSender<FenceRequest>,
}

impl Fences {
    /// A new pair: this side for the copies, the receiver for the control loop.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<FenceRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    /// Waits until the work of the first `after` envelopes has finished; returns its first
    /// pending error.
    pub async fn wait(&self, after: u64) -> Result<(), WireError> {
        let (admitted, rx) = oneshot::channel();
        self.tx.send(FenceRequest { after, admitted }).map_err(|_| session_ended())?;
        rx.await.map_err(|_| session_ended())?.passed().await
    }
}

/// Fence requests the control loop cannot admit yet, by position.
#[derive(Debug, Default)]
pub struct Waiting {
    by_position: BTreeMap<u64, Vec<oneshot::Sender<Fence>>>,
}

impl Waiting {
    /// Holds a request until the control loop reaches its position.
    pub fn hold(&mut self, request: FenceRequest) {
        self.by_position.entry(request.after).or_default().push(request.admitted);
    }

    /// Removes and returns the requests due once `handled` envelopes have been handled.
    pub fn due(&mut self, handled: u64) -> Vec<oneshot::Sender<Fence>> {
        let later = self.by_position.split_off(&(handled + 1));
        std::mem::replace(&mut self.by_position, later).into_values().flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(after: u64) -> (FenceRequest, oneshot::Receiver<Fence>) {
        let (admitted, rx) = oneshot::channel();
        (FenceRequest { after, admitted }, rx)
    }

    #[test]
    fn requests_become_due_in_position_order_and_only_once() {
        let mut waiting = Waiting::default();
        let (a, _ra) = request(3);
        let (b, _rb) = request(5);
        let (c, _rc) = request(3);
        waiting.hold(a);
        waiting.hold(b);
        waiting.hold(c);
        assert_eq!(waiting.due(2).len(), 0);
        assert_eq!(waiting.due(4).len(), 2);
        assert_eq!(waiting.due(4).len(), 0);
        assert_eq!(waiting.due(5).len(), 1);
    }

    #[tokio::test]
    async fn a_fence_reports_the_older_pending_error_first() {
        let (tx, rx) = oneshot::channel();
        let fence = Fence { pending: Some(WireError::new(ErrorKind::InvalidBuffer, "older")), barriers: vec![rx] };
        tx.send(Some(WireError::new(ErrorKind::Device, "newer"))).unwrap();
        assert_eq!(fence.passed().await.unwrap_err().message, "older");
    }

    #[tokio::test]
    async fn a_fence_whose_stream_died_fails() {
        let (tx, rx) = oneshot::channel::<Option<WireError>>();
        drop(tx);
        let fence = Fence { pending: None, barriers: vec![rx] };
        assert_eq!(fence.passed().await.unwrap_err().kind, ErrorKind::Internal);
    }
}
