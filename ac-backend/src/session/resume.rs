//! What lets a session outlive its control connection (protocol 8, "Resumption" in
//! `ac_proto::backend`): the log of the replies it sent, and the hand-over of a new connection
//! to its control loop.
//!
//! A session whose control connection timed out is held by its control loop (`serve_control/`) for
//! its hold time. [`Outbox`] numbers every reply frame the session sends and keeps the last ones,
//! so that a client that resumes gets again exactly the replies it had not read: they are always
//! the last ones sent, since replies leave in one order, one stream after another.

use std::collections::VecDeque;
use std::sync::Arc;

use ac_proto::backend::{Reply, Response, MAX_PRINTED};
use ac_proto::frame::{frame_bytes, write_with_payload, FrameReader};
use bytes::Bytes;
use quinn::{Connection, SendStream};
use serde::Serialize;

use crate::device::Context;

/// Reply bytes the log keeps at least (more when one reply is larger): twice the default
/// stream window, since a client cannot have more than its stream window of replies unread
/// (flow control), and whatever it has read it has counted.
pub const REPLY_LOG_BYTES: usize = 32 << 20;

/// A new control connection for a held (or still attached) session: a client's
/// [`ac_proto::backend::Hello::Resume`] that proved the session its own.
#[derive(Debug)]
pub struct Rejoin {
    /// The new connection.
    pub conn: Connection,
    /// Its control stream's sending half (replies).
    pub send: SendStream,
    /// Its control stream's receiving half (envelopes), past the hello.
    pub reader: FrameReader,
    /// Reply frames the client has read so far.
    pub replies: u64,
}

/// The replies of one session: written to its control stream while it has one, and logged.
/// With a device context to forward kernel output from (protocol 11), each reply goes after
/// what the session's kernels printed before it ([`Response::Printed`]).
pub struct Outbox {
    state: tokio::sync::Mutex<Log>,
    printed: Option<Arc<dyn Context>>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("state", &self.state).field("forwards_printed", &self.printed.is_some()).finish()
    }
}

#[derive(Debug)]
struct Log {
    /// The control stream, while the session has one.
    stream: Option<SendStream>,
    /// The last frames sent, with their payloads; `entries[0]` is frame number `first`.
    entries: VecDeque<(Bytes, Bytes)>,
    first: u64,
    /// Frames numbered so far.
    sent: u64,
    bytes: usize,
}

impl Outbox {
    /// An outbox writing to `stream`.
    pub fn new(stream: SendStream) -> Self {
        let log = Log { stream: Some(stream), entries: VecDeque::new(), first: 1, sent: 0, bytes: 0 };
        Self { state: tokio::sync::Mutex::new(log), printed: None }
    }

    /// Sends what `context`'s kernels print ahead of each reply (a client of protocol 11).
    pub fn forwarding_printed(self, context: Arc<dyn Context>) -> Self {
        context.forward_printed();
        Self { printed: Some(context), ..self }
    }

    /// Sends a reply frame and the raw payload it announces (empty: none), and logs them. A
    /// failed write is not an error here: the control loop learns of a lost connection from
    /// its reads, and a client that resumes gets the reply again.
    pub async fn send_with_payload(&self, frame: Bytes, payload: Bytes) {
        let mut log = self.state.lock().await;
        // Taken under the log's lock: output that a call's synchronization wrote out goes
        // ahead of that call's reply, whichever task sends a reply first.
        let printed = self.printed.as_ref().map(|context| context.take_printed()).unwrap_or_default();
        for chunk in printed.chunks(MAX_PRINTED) {
            let printed = Reply { id: 0, response: Response::Printed(chunk.to_vec()) };
            log.send(frame_bytes(&printed).expect("printed output encodes"), Bytes::new()).await;
        }
        log.send(frame, payload).await;
    }

    /// Encodes `msg` as a frame, then as [`Outbox::send_with_payload`].
    pub async fn send_frame<T: Serialize>(&self, msg: &T) {
        self.send_with_payload(frame_bytes(msg).expect("a reply encodes"), Bytes::new()).await;
    }

    /// Forgets the control stream (its connection is gone): replies are only logged until a
    /// client resumes.
    pub async fn detach(&self) {
        self.state.lock().await.stream = None;
    }

    /// Makes `stream` the control stream: answers [`Response::Resumed`] with `handled`, then
    /// every reply after the `read` the client has. Refused when the log no longer holds them
    /// all: the session cannot be resumed exactly once (the reason says why).
    pub async fn rejoin(&self, mut stream: SendStream, handled: u64, read: u64) -> Result<(), String> {
        let mut log = self.state.lock().await;
        if read > log.sent {
            return Err(format!("the client counts {read} replies; {} were sent", log.sent));
        }
        if read + 1 < log.first {
            return Err(format!(
                "replies {} to {} are no longer kept (the client read {read}); they cannot be answered again",
                read + 1,
                log.first - 1
            ));
        }
        let resumed = frame_bytes(&Reply { id: 0, response: Response::Resumed { handled } }).expect("encodes");
        let skip = (read + 1 - log.first) as usize;
        let mut chunks = vec![resumed];
        for (frame, payload) in log.entries.iter().skip(skip) {
            chunks.push(frame.clone());
            if !payload.is_empty() {
                chunks.push(payload.clone());
            }
        }
        // A client that goes away again meanwhile resumes again; nothing here is lost.
        if stream.write_all_chunks(&mut chunks).await.is_ok() {
            log.stream = Some(stream);
        }
        Ok(())
    }
}

impl Log {
    /// Logs a frame and its payload, and writes them while the session has a control stream.
    async fn send(&mut self, frame: Bytes, payload: Bytes) {
        self.record(frame.clone(), payload.clone());
        if let Some(stream) = self.stream.as_mut() {
            if write_with_payload(stream, frame, payload).await.is_err() {
                self.stream = None;
            }
        }
    }

    /// Numbers and keeps a frame, letting the oldest go past [`REPLY_LOG_BYTES`].
    fn record(&mut self, frame: Bytes, payload: Bytes) {
        self.sent += 1;
        self.bytes += frame.len() + payload.len();
        self.entries.push_back((frame, payload));
        while self.bytes > REPLY_LOG_BYTES && self.entries.len() > 1 {
            let (frame, payload) = self.entries.pop_front().expect("more than one entry");
            self.bytes -= frame.len() + payload.len();
            self.first += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> Log {
        Log { stream: None, entries: VecDeque::new(), first: 1, sent: 0, bytes: 0 }
    }

    #[test]
    fn the_log_keeps_the_last_replies_within_its_bytes() {
        let mut log = log();
        for _ in 0..5 {
            log.record(Bytes::from(vec![0u8; 10 << 20]), Bytes::new());
        }
        // 50 MiB sent: the last three (30 MiB) fit under 32 MiB.
        assert_eq!((log.sent, log.first, log.entries.len()), (5, 3, 3));
        // One reply larger than the whole log is still kept, alone.
        log.record(Bytes::new(), Bytes::from(vec![0u8; 40 << 20]));
        assert_eq!((log.sent, log.first, log.entries.len()), (6, 6, 1));
    }
}
