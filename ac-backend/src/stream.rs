//! Stream workers: one thread per device stream runs that stream's operations in order.
//!
//! Operations arrive already checked and resolved (ownership, bounds, signature), each holding
//! its allocations alive. The first error a stream meets is kept until the next barrier, which
//! returns it: CUDA's rule that asynchronous errors surface at the next synchronizing call.
//!
//! The control loop **stages** operations and hands them to the worker in batches: once the
//! control stream has no further frame buffered, before it waits for anything (a barrier, an
//! inline payload, room in a queue), every `BATCH` operations, and at once for an inline write.
//! Waking a sleeping worker thread costs a futex call and two context switches; one wake per
//! batch instead of one per launch is what lets a burst of asynchronous launches go past a
//! million per second (see BENCHMARKS.md, issue 13). Order is kept: a batch is handed over
//! whole, in staging order, through one channel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use ac_proto::backend::{LaunchDims, WireError};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::device::{Context, DeviceArg, DeviceStream, Kernel};
use crate::session::Allocation;

/// One stream-ordered operation.
#[derive(Debug)]
pub enum StreamOp {
    /// Host bytes to device memory.
    Write {
        /// Destination allocation.
        dst: Arc<Allocation>,
        /// Offset into it.
        offset: u64,
        /// The bytes.
        data: Bytes,
        /// Holds the session's inline-payload budget until the write is done.
        _budget: OwnedSemaphorePermit,
    },
    /// Device to device.
    Copy {
        /// Destination.
        dst: Arc<Allocation>,
        /// Offset into the destination.
        dst_offset: u64,
        /// Source.
        src: Arc<Allocation>,
        /// Offset into the source.
        src_offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Fill with a byte.
    Memset {
        /// Destination.
        dst: Arc<Allocation>,
        /// Offset into it.
        offset: u64,
        /// Bytes.
        len: u64,
        /// Value.
        value: u8,
    },
    /// A kernel launch.
    Launch {
        /// The kernel.
        kernel: Arc<Kernel>,
        /// Its shape.
        dims: LaunchDims,
        /// Resolved arguments.
        args: Vec<DeviceArg>,
        /// Keeps the arguments' allocations alive until the launch is done.
        _hold: Vec<Arc<Allocation>>,
    },
    /// Answers with the pending error (if any) once everything before it is done.
    Barrier(oneshot::Sender<Option<WireError>>),
}

/// A running stream, as the control loop holds it.
#[derive(Debug)]
pub struct StreamWorker {
    tx: mpsc::UnboundedSender<Vec<StreamOp>>,
    /// Operations staged but not yet handed to the worker, in order.
    staged: Vec<StreamOp>,
    /// One permit per operation the worker may have queued (handed over, not yet done).
    room: Arc<Semaphore>,
    cancelled: Arc<AtomicBool>,
}

/// Operations a stream may have queued before the control loop waits for room.
const QUEUE_DEPTH: usize = 4096;

/// Operations staged before they are handed over even though more frames are buffered.
const BATCH: usize = 256;

impl StreamWorker {
    /// Starts a worker for `stream` on `device`.
    pub fn spawn(device: Arc<dyn Context>, stream: DeviceStream, name: String) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(QUEUE_DEPTH));
        let cancelled = Arc::new(AtomicBool::new(false));
        let (flag, worker_room) = (cancelled.clone(), room.clone());
        thread::Builder::new().name(name).spawn(move || run(device, stream, rx, worker_room, flag))?;
        Ok(Self { tx, staged: Vec::with_capacity(BATCH), room, cancelled })
    }

    /// Stages an operation behind every one staged or queued before it; returns whether a
    /// hand-over is due now: `BATCH` operations are staged, or `op` is an inline write, which
    /// holds the session's payload budget and must not wait behind the control loop.
    pub fn stage(&mut self, op: StreamOp) -> bool {
        let urgent = matches!(op, StreamOp::Write { .. });
        self.staged.push(op);
        urgent || self.staged.len() >= BATCH
    }

    /// Stages a barrier behind everything staged or queued so far; once the worker reaches it,
    /// the receiver gets the stream's pending error (taking it). The caller hands it over.
    pub fn stage_barrier(&mut self) -> oneshot::Receiver<Option<WireError>> {
        let (tx, rx) = oneshot::channel();
        self.staged.push(StreamOp::Barrier(tx));
        rx
    }

    /// Hands the staged operations to the worker if its queue has room now; returns whether
    /// nothing is left staged.
    pub fn try_hand_over(&mut self) -> bool {
        if self.staged.is_empty() {
            return true;
        }
        match self.room.try_acquire_many(self.permits()) {
            Ok(permits) => permits.forget(),
            Err(tokio::sync::TryAcquireError::NoPermits) => return false,
            // Closed: the worker is gone; sending drops the batch, and its barriers say so.
            Err(tokio::sync::TryAcquireError::Closed) => {}
        }
        self.send_staged();
        true
    }

    /// Hands every staged operation to the worker, waiting for room when the stream is far
    /// behind.
    pub async fn hand_over(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        // An error means the worker is gone (see `RoomGuard`): the batch is dropped on sending.
        if let Ok(permits) = self.room.acquire_many(self.permits()).await {
            permits.forget();
        }
        self.send_staged();
    }

    fn permits(&self) -> u32 {
        u32::try_from(self.staged.len().min(QUEUE_DEPTH)).expect("QUEUE_DEPTH fits u32")
    }

    fn send_staged(&mut self) {
        let batch = std::mem::replace(&mut self.staged, Vec::with_capacity(BATCH));
        // Fails only when the worker is gone: the batch drops, and with it any barrier's
        // sender, so that whoever waits on that barrier learns the worker died.
        let _ = self.tx.send(batch);
    }
}

/// Waits for a staged barrier; a worker that died before reaching it is an error.
pub async fn barrier_reached(barrier: oneshot::Receiver<Option<WireError>>) -> Option<WireError> {
    barrier.await.unwrap_or_else(|_| Some(WireError::new(ac_proto::backend::ErrorKind::Internal, "stream worker died")))
}

impl Drop for StreamWorker {
    fn drop(&mut self) {
        // Skip whatever is still queued: nobody waits for it. The thread ends by itself once
        // the queue is closed; joining here could block an async thread behind a long kernel.
        self.cancelled.store(true, Ordering::Release);
    }
}

fn run(
    device: Arc<dyn Context>,
    stream: DeviceStream,
    mut rx: mpsc::UnboundedReceiver<Vec<StreamOp>>,
    room: Arc<Semaphore>,
    cancelled: Arc<AtomicBool>,
) {
    // However the thread ends, even by a panic, the control loop must not wait for room again.
    let room = RoomGuard(room);
    let mut pending: Option<WireError> = None;
    while let Some(batch) = rx.blocking_recv() {
        let done = batch.len().min(QUEUE_DEPTH);
        for op in batch {
            run_one(device.as_ref(), stream, op, &mut pending, &cancelled);
        }
        room.0.add_permits(done);
    }
    device.destroy_stream(stream);
}

/// Closes the stream's room when its worker thread ends, so that a hand-over to a dead worker
/// does not wait for permits nobody will return.
struct RoomGuard(Arc<Semaphore>);

impl Drop for RoomGuard {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Runs one operation, keeping its error pending; a barrier answers with the pending error.
fn run_one(
    device: &dyn Context,
    stream: DeviceStream,
    op: StreamOp,
    pending: &mut Option<WireError>,
    cancelled: &AtomicBool,
) {
    if let StreamOp::Barrier(done) = op {
        if let Err(e) = device.synchronize(stream) {
            pending.get_or_insert(e);
        }
        let _ = done.send(pending.take());
        return;
    }
    if cancelled.load(Ordering::Acquire) {
        return;
    }
    if let Err(e) = execute(device, stream, op) {
        pending.get_or_insert(e);
    }
}

fn execute(device: &dyn Context, stream: DeviceStream, op: StreamOp) -> Result<(), WireError> {
    match op {
        StreamOp::Write { dst, offset, data, .. } => device.write(dst.mem, offset, &data, stream),
        StreamOp::Copy { dst, dst_offset, src, src_offset, len } => {
            device.copy(dst.mem, dst_offset, src.mem, src_offset, len, stream)
        }
        StreamOp::Memset { dst, offset, len, value } => device.memset(dst.mem, offset, len, value, stream),
        StreamOp::Launch { kernel, dims, args, .. } => device.launch(&kernel, &dims, &args, stream),
        StreamOp::Barrier(_) => unreachable!("handled by the caller"),
    }
}
