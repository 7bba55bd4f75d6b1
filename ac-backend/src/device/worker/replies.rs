//! The worker's replies, read on a thread of their own and handed to their callers.

use std::io::BufReader;
use std::process::Child;
use std::sync::{Arc, Mutex};

use super::ending::how_it_ended;
use super::wire::{read_frame, worker_gone, Frame, Reply};
use super::{lock, Waiters};

/// Reads the worker's replies and hands each to its caller; when the worker's output ends,
/// answers every caller, present and future, with how the worker ended.
pub(super) fn deliver_replies(
    mut output: BufReader<std::process::ChildStdout>,
    waiters: Arc<Mutex<Waiters>>,
    child: Arc<Mutex<Child>>,
) {
    let broken = loop {
        match read_frame::<Reply>(&mut output) {
            // Ahead of the reply it precedes: kept before that reply's caller wakes.
            Ok(Some(Frame { id: 0, header: Reply::Printed, payload })) => {
                if let Some(kept) = lock(&waiters).printed.as_mut() {
                    kept.keep(&payload);
                }
            }
            Ok(Some(frame)) => {
                if let Some(tx) = lock(&waiters).by_id.remove(&frame.id) {
                    let _ = tx.send(Ok((frame.header, frame.payload)));
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        }
    };
    // The output closes as the worker exits (the reaper kills one that lingers).
    let status = how_it_ended(&child).unwrap_or_else(|| "its output closed".into());
    let why = match broken {
        Some(e) => format!("{status}; its output broke: {e}"),
        None => status,
    };
    let mut waiters = lock(&waiters);
    for (_, tx) in waiters.by_id.drain() {
        let _ = tx.send(Err(worker_gone(&why)));
    }
    waiters.ended = Some(why);
}
