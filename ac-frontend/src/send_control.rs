//! The sending side of a session's control stream: numbered envelopes, and the ones that
//! `Drop` cannot wait to send.
//!
//! The backend numbers envelopes in the order they arrive (their **position**, see "Order" in
//! [`ac_proto::backend`]), so the client must know how many it has written: a bulk copy travels on
//! a stream of its own and names the position it follows. Every write goes through
//! [`ControlStream`], which counts under the same lock that orders the bytes.
//!
//! Every envelope is **queued** here first, under a lock that gives it its position; whoever then
//! holds the stream writes everything queued, in order. A call that waits for an answer writes
//! the queue itself. Asynchronous calls (launches, memsets, frees from `Drop`, which cannot
//! wait) leave their envelope queued for a write task, so that a burst of them leaves in one
//! write; past `EAGER_BYTES` queued, the caller writes and waits instead. So a free from `Drop`
//! is ahead of every call made after the drop (a program that drops a large buffer and
//! allocates again finds the memory returned), and a thread's calls reach the backend in the
//! order it made them.
//!
//! Every envelope is also **logged** with its position until the backend is known to have
//! handled it (a reply to a later one, [`ControlStream::handled_through`]): when a session
//! resumes after an outage ([`crate::resume`]), the envelopes after the backend's position are
//! written again, on the new stream, before anything else ([`ControlStream::resume`]). The log
//! keeps at least [`LOG_BYTES`]; a backend cannot hold more than its stream window of them
//! unread (16 MiB by default), and a resumption that needs one let go of is refused, never run
//! with a gap.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ac_proto::backend::Envelope;
use ac_proto::frame::encode_frame;
use ac_proto::ProtoError;
use bytes::Bytes;
use quinn::SendStream;
use tokio::runtime::Handle;

/// The control stream's sending half, shared by every handle to one accelerator.
#[derive(Debug)]
pub(crate) struct ControlStream {
    queue: Mutex<Queue>,
    /// Whoever holds the stream writes everything queued, in order.
    stream: tokio::sync::Mutex<SendStream>,
    runtime: Handle,
}

/// Frames not yet written, in position order: envelopes are encoded straight into `run`; a raw
/// payload closes the run and follows it as a chunk of its own (no copy).
#[derive(Debug, Default)]
struct Queue {
    chunks: Vec<Bytes>,
    run: Vec<u8>,
    bytes: usize,
    /// Envelopes queued so far: the position of the last one.
    queued: u64,
    /// A task is due to write what is queued.
    flush_scheduled: bool,
    /// Envelopes (and their payloads) not yet known handled, oldest first.
    log: VecDeque<Logged>,
    log_bytes: usize,
    /// The last position let go of while possibly unhandled (to keep the log's bytes bounded).
    dropped_through: u64,
}

/// One envelope, encoded, with its payload.
#[derive(Debug)]
struct Logged {
    position: u64,
    frame: Bytes,
    payload: Bytes,
}

/// Envelope bytes the log keeps at least (more when one envelope is larger): twice a
/// backend's default stream window.
pub(crate) const LOG_BYTES: usize = 32 << 20;

/// Queued asynchronous calls above this many bytes are written by their caller, which then
/// waits for the stream (back-pressure) instead of queueing more.
const EAGER_BYTES: usize = 256 << 10;

impl ControlStream {
    /// Wraps the stream; must be called inside the runtime that drives its connection.
    pub(crate) fn new(stream: SendStream) -> Self {
        Self { queue: Mutex::default(), stream: tokio::sync::Mutex::new(stream), runtime: Handle::current() }
    }

    /// Queues an envelope and the raw payload it announces (nothing comes between them) at the
    /// next position; returns the bytes queued, whether a write must be scheduled, and the
    /// envelope's position.
    fn enqueue(&self, envelope: &Envelope, payload: Bytes) -> Result<(usize, bool, u64), ProtoError> {
        let mut queue = self.queue.lock().expect("control queue poisoned");
        let before = queue.run.len();
        if let Err(e) = encode_frame(envelope, &mut queue.run) {
            queue.run.truncate(before);
            return Err(e);
        }
        queue.bytes += queue.run.len() - before + payload.len();
        let frame = Bytes::copy_from_slice(&queue.run[before..]);
        if !payload.is_empty() {
            let run = Bytes::from(std::mem::take(&mut queue.run));
            queue.chunks.push(run);
            queue.chunks.push(payload.clone());
        }
        queue.queued += 1;
        let position = queue.queued;
        queue.log(Logged { position, frame, payload });
        let schedule = !std::mem::replace(&mut queue.flush_scheduled, true);
        Ok((queue.bytes, schedule, position))
    }

    /// Writes everything queued, including what is queued while it writes. The scheduled write
    /// task (`scheduled`) also clears the flag, in the same critical section that finds the
    /// queue empty, so that no call is left queued with nobody due to write it.
    async fn flush(&self, scheduled: bool) -> Result<(), ProtoError> {
        let mut stream = self.stream.lock().await;
        loop {
            let mut chunks = {
                let mut queue = self.queue.lock().expect("control queue poisoned");
                queue.bytes = 0;
                if !queue.run.is_empty() {
                    let run = Bytes::from(std::mem::take(&mut queue.run));
                    queue.chunks.push(run);
                }
                if queue.chunks.is_empty() && scheduled {
                    queue.flush_scheduled = false;
                }
                std::mem::take(&mut queue.chunks)
            };
            if chunks.is_empty() {
                return Ok(());
            }
            stream.write_all_chunks(&mut chunks).await?;
        }
    }

    /// Has a task write what is queued, soon: asynchronous calls that follow each other quickly
    /// leave in one write.
    fn schedule_flush(self: &Arc<Self>) {
        let this = self.clone();
        self.runtime.spawn(async move {
            if this.flush(true).await.is_err() {
                // The stream is dead; the next call that waits for an answer reports it.
                this.queue.lock().expect("control queue poisoned").flush_scheduled = false;
            }
        });
    }

    /// A call that waits for its answer: queued at a position, then written (with everything
    /// before it) before this returns. The position comes back with the write's outcome: a
    /// write that fails leaves the envelope logged, for a resumption to send again.
    pub(crate) async fn send(
        self: &Arc<Self>,
        envelope: &Envelope,
        payload: Bytes,
    ) -> Result<(u64, Result<(), ProtoError>), ProtoError> {
        // If no write was due, this caller is the one due to write (and to clear the flag).
        let (_, due, position) = self.enqueue(envelope, payload)?;
        Ok((position, self.write_as(due).await))
    }

    /// Writes the queue; a caller that was due to write and gives up (its future dropped) hands
    /// the duty to a write task, so that nothing stays queued with nobody due to write it.
    async fn write_as(self: &Arc<Self>, due: bool) -> Result<(), ProtoError> {
        let mut guard = DueWrite { stream: self, armed: due };
        let written = self.flush(due).await;
        guard.armed = false;
        written
    }

    /// An asynchronous call: queued and written soon, in order, without waiting (but for
    /// back-pressure). A failure to write shows at the next call that waits for an answer.
    pub(crate) async fn post(self: &Arc<Self>, envelope: &Envelope, payload: Bytes) -> Result<(), ProtoError> {
        let (queued, due, _) = self.enqueue(envelope, payload)?;
        if queued >= EAGER_BYTES {
            return self.write_as(due).await;
        }
        if due {
            self.schedule_flush();
        }
        Ok(())
    }

    /// The position a copy starting now follows: every envelope queued so far, written first.
    /// A write that fails leaves the envelopes logged, for a resumption to send again: the
    /// position comes back with the write's outcome.
    pub(crate) async fn position(&self) -> (u64, Result<(), ProtoError>) {
        let position = self.queue.lock().expect("control queue poisoned").queued;
        (position, self.flush(false).await)
    }

    /// The backend has handled every envelope up to `position` (it answered the one there):
    /// the log lets them go.
    pub(crate) fn handled_through(&self, position: u64) {
        let mut queue = self.queue.lock().expect("control queue poisoned");
        while queue.log.front().is_some_and(|logged| logged.position <= position) {
            let logged = queue.log.pop_front().expect("an entry");
            queue.log_bytes -= logged.frame.len() + logged.payload.len();
        }
    }

    /// Continues on a resumed session's new stream: every envelope after `handled` (the
    /// backend's position) is written again first, then what is queued from now on. Refused
    /// when the log let go of one of them.
    pub(crate) async fn resume(&self, send: SendStream, handled: u64) -> Result<(), String> {
        let mut stream = self.stream.lock().await;
        *stream = send;
        let mut chunks = {
            let mut queue = self.queue.lock().expect("control queue poisoned");
            if handled < queue.dropped_through {
                return Err(format!(
                    "the backend had handled {handled} requests, and those up to {} are no longer kept to send again",
                    queue.dropped_through
                ));
            }
            // Everything queued is in the log too: it is written from there, once.
            queue.chunks.clear();
            queue.run.clear();
            queue.bytes = 0;
            // A write that failed on the lost stream may have left the duty to write set.
            queue.flush_scheduled = false;
            let mut chunks = Vec::new();
            for logged in queue.log.iter().filter(|logged| logged.position > handled) {
                chunks.push(logged.frame.clone());
                if !logged.payload.is_empty() {
                    chunks.push(logged.payload.clone());
                }
            }
            chunks
        };
        // A stream that fails here is lost again: the next resumption sends these again.
        let _ = stream.write_all_chunks(&mut chunks).await;
        Ok(())
    }

    /// Queues `envelope` at the next position without waiting: for `Drop`. It leaves with the
    /// next write, ahead of every call made after this.
    pub(crate) fn defer(self: &Arc<Self>, envelope: &Envelope) {
        if let Ok((_, true, _)) = self.enqueue(envelope, Bytes::new()) {
            self.schedule_flush();
        }
    }
}

impl Queue {
    /// Logs an envelope, letting the oldest go past [`LOG_BYTES`].
    fn log(&mut self, logged: Logged) {
        self.log_bytes += logged.frame.len() + logged.payload.len();
        self.log.push_back(logged);
        while self.log_bytes > LOG_BYTES && self.log.len() > 1 {
            let old = self.log.pop_front().expect("more than one entry");
            self.log_bytes -= old.frame.len() + old.payload.len();
            self.dropped_through = old.position;
        }
    }
}

/// See [`ControlStream::write_as`].
struct DueWrite<'a> {
    stream: &'a Arc<ControlStream>,
    armed: bool,
}

impl Drop for DueWrite<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.stream.schedule_flush();
        }
    }
}
