//! The reply side of a control stream, shared by the callers waiting for answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use ac_proto::backend::{Reply, Response};
use ac_proto::frame::FrameReader;
use bytes::Bytes;
use tokio::sync::{oneshot, watch};

use crate::resume::Phase;

/// An answer to a request.
#[derive(Debug)]
pub(crate) enum Answer {
    Response(Response),
    Data(Bytes),
    /// A linked image and the linker's log (protocol 21).
    Linked {
        image: Bytes,
        info_log: String,
    },
}

/// Largest payload a reply may announce (the backend's inline limit).
const MAX_REPLY_PAYLOAD: u64 = 64 << 20;

/// The reply side of the control stream. There is no reader task: a caller waiting for its
/// answer takes the reader and reads until its own reply arrives, handing other callers' replies
/// to them on the way. That saves a task hop (a cross-thread wake-up) on every round trip.
///
/// When the stream ends because the connection was lost, the reader waits for the session's
/// lifeline ([`crate::resume`]): a resumed session's new stream takes its place
/// ([`Replies::resume`]) and the waiters go on waiting there, where the backend answers again
/// what they lack; only the session's end wakes them empty-handed.
#[derive(Debug)]
pub(crate) struct Replies {
    /// The stream's reader, with the epoch of the connection it reads.
    reader: tokio::sync::Mutex<(u64, FrameReader)>,
    waiters: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    closed: AtomicBool,
    /// Reply frames read so far, on every stream of the session (a resumption names it).
    read: AtomicU64,
    phase: watch::Receiver<Phase>,
}

impl Replies {
    pub(crate) fn new(reader: FrameReader, phase: watch::Receiver<Phase>) -> Self {
        Self {
            reader: tokio::sync::Mutex::new((0, reader)),
            waiters: Mutex::default(),
            closed: AtomicBool::new(false),
            read: AtomicU64::new(0),
            phase,
        }
    }

    pub(crate) fn register(&self, id: u64) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("waiters poisoned").insert(id, tx);
        rx
    }

    pub(crate) fn forget(&self, id: u64) {
        self.waiters.lock().expect("waiters poisoned").remove(&id);
    }

    /// Reply frames read so far.
    pub(crate) fn read(&self) -> u64 {
        self.read.load(Ordering::Acquire)
    }

    /// Reads from a resumed session's new stream, of connection `epoch`, from now on.
    pub(crate) async fn resume(&self, reader: FrameReader, epoch: u64) {
        *self.reader.lock().await = (epoch, reader);
    }

    /// Marks the stream dead and wakes every waiter (their answers will not come).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waiters.lock().expect("waiters poisoned").clear();
    }

    /// Waits for the answer to `id`; `None` when the session ended first.
    pub(crate) async fn wait(&self, id: u64, mut rx: oneshot::Receiver<Answer>) -> Option<Answer> {
        loop {
            if self.closed.load(Ordering::Acquire) {
                self.forget(id);
                return rx.try_recv().ok();
            }
            let lost = tokio::select! {
                biased;
                answer = &mut rx => return answer.ok(),
                mut reader = self.reader.lock() => {
                    if let Ok(answer) = rx.try_recv() {
                        return Some(answer);
                    }
                    let (epoch, reader) = &mut *reader;
                    match self.read_until(reader, id).await {
                        Some(answer) => return Some(answer),
                        None => *epoch,
                    }
                }
            };
            // The stream of connection `lost` ended: the session may have resumed on a later one.
            if !crate::resume::resumed_since(self.phase.clone(), lost).await {
                self.close();
            }
        }
    }

    /// Reads replies, delivering others', until `id`'s arrives (`Some`) or the stream ends.
    async fn read_until(&self, reader: &mut FrameReader, id: u64) -> Option<Answer> {
        loop {
            let read = reader
                .read_frame_with_payload::<Reply>(
                    |r| match r.response {
                        Response::Data { len } | Response::Linked { len, .. } => len,
                        _ => 0,
                    },
                    MAX_REPLY_PAYLOAD,
                )
                .await;
            let Ok(Some((reply, payload))) = read else {
                return None;
            };
            self.read.fetch_add(1, Ordering::AcqRel);
            if let Reply { id: 0, response: Response::Printed(bytes) } = &reply {
                // Ahead of the reply that follows it: written out before its caller wakes.
                crate::printed::deliver(bytes);
                continue;
            }
            let answer = match reply.response {
                Response::Data { .. } => Answer::Data(payload),
                Response::Linked { info_log, .. } => Answer::Linked { image: payload, info_log },
                response => Answer::Response(response),
            };
            let waiter = self.waiters.lock().expect("waiters poisoned").remove(&reply.id);
            if reply.id == id {
                return Some(answer);
            }
            if let Some(tx) = waiter {
                let _ = tx.send(answer);
            }
        }
    }
}
