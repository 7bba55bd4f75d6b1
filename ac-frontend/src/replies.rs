//! The reply side of a control stream, shared by the callers waiting for answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use ac_proto::backend::{Reply, Response};
use ac_proto::frame::FrameReader;
use bytes::Bytes;
use tokio::sync::oneshot;

/// An answer to a request.
#[derive(Debug)]
pub(crate) enum Answer {
    Response(Response),
    Data(Bytes),
}

/// Largest payload a reply may announce (the backend's inline limit).
const MAX_REPLY_PAYLOAD: u64 = 64 << 20;

/// The reply side of the control stream. There is no reader task: a caller waiting for its
/// answer takes the reader and reads until its own reply arrives, handing other callers' replies
/// to them on the way. That saves a task hop (a cross-thread wake-up) on every round trip.
#[derive(Debug)]
pub(crate) struct Replies {
    reader: tokio::sync::Mutex<FrameReader>,
    waiters: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    closed: AtomicBool,
}

impl Replies {
    pub(crate) fn new(reader: FrameReader) -> Self {
        Self { reader: tokio::sync::Mutex::new(reader), waiters: Mutex::default(), closed: AtomicBool::new(false) }
    }

    pub(crate) fn register(&self, id: u64) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().expect("waiters poisoned").insert(id, tx);
        rx
    }

    pub(crate) fn forget(&self, id: u64) {
        self.waiters.lock().expect("waiters poisoned").remove(&id);
    }

    /// Marks the stream dead and wakes every waiter (their answers will not come).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waiters.lock().expect("waiters poisoned").clear();
    }

    /// Waits for the answer to `id`; `None` when the reply stream ended first.
    pub(crate) async fn wait(&self, id: u64, mut rx: oneshot::Receiver<Answer>) -> Option<Answer> {
        loop {
            if self.closed.load(Ordering::Acquire) {
                self.forget(id);
                return rx.try_recv().ok();
            }
            tokio::select! {
                biased;
                answer = &mut rx => return answer.ok(),
                mut reader = self.reader.lock() => {
                    if let Ok(answer) = rx.try_recv() {
                        return Some(answer);
                    }
                    match self.read_until(&mut reader, id).await {
                        Some(answer) => return Some(answer),
                        None => continue,
                    }
                }
            }
        }
    }

    /// Reads replies, delivering others', until `id`'s arrives (`Some`) or the stream ends.
    async fn read_until(&self, reader: &mut FrameReader, id: u64) -> Option<Answer> {
        loop {
            let read = reader
                .read_frame_with_payload::<Reply>(
                    |r| match r.response {
                        Response::Data { len } => len,
                        _ => 0,
                    },
                    MAX_REPLY_PAYLOAD,
                )
                .await;
            let Ok(Some((reply, payload))) = read else {
                self.close();
                return None;
            };
            let answer = match reply.response {
                Response::Data { .. } => Answer::Data(payload),
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
