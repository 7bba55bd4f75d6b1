//! Stream workers: one thread per device stream runs that stream's operations in order.
//!
//! Operations arrive already checked and resolved (ownership, bounds, signature), each holding
//! its allocations alive. The first error a stream meets is kept until the next barrier, which
//! returns it: CUDA's rule that asynchronous errors surface at the next synchronizing call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use ac_proto::backend::{LaunchDims, WireError};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

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

/// A running stream.
#[derive(Debug)]
pub struct StreamWorker {
    tx: mpsc::Sender<StreamOp>,
    cancelled: Arc<AtomicBool>,
}

/// Operations a stream may have queued before the control loop waits for room.
const QUEUE_DEPTH: usize = 4096;

impl StreamWorker {
    /// Starts a worker for `stream` on `device`.
    pub fn spawn(device: Arc<dyn Context>, stream: DeviceStream, name: String) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = cancelled.clone();
        thread::Builder::new().name(name).spawn(move || run(device, stream, rx, flag))?;
        Ok(Self { tx, cancelled })
    }

    /// Queues an operation, waiting for room when the stream is far behind.
    pub async fn enqueue(&self, op: StreamOp) {
        // The worker only stops when this handle is dropped, so sending cannot fail.
        let _ = self.tx.send(op).await;
    }

    /// Waits until everything queued so far is done; returns the stream's pending error.
    pub async fn barrier(&self) -> Option<WireError> {
        self.post_barrier()
            .await
            .await
            .unwrap_or_else(|_| Some(WireError::new(ac_proto::backend::ErrorKind::Internal, "stream worker died")))
    }

    /// Queues a barrier behind everything queued so far; the receiver gets the stream's pending
    /// error (taking it) once the barrier is reached.
    pub async fn post_barrier(&self) -> oneshot::Receiver<Option<WireError>> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(StreamOp::Barrier(tx)).await;
        rx
    }
}

impl Drop for StreamWorker {
    fn drop(&mut self) {
        // Skip whatever is still queued: nobody waits for it. The thread ends by itself once
        // the queue is closed; joining here could block an async thread behind a long kernel.
        self.cancelled.store(true, Ordering::Release);
    }
}

fn run(device: Arc<dyn Context>, stream: DeviceStream, mut rx: mpsc::Receiver<StreamOp>, cancelled: Arc<AtomicBool>) {
    let mut pending: Option<WireError> = None;
    while let Some(op) = rx.blocking_recv() {
        if let StreamOp::Barrier(done) = op {
            if let Err(e) = device.synchronize(stream) {
                pending.get_or_insert(e);
            }
            let _ = done.send(pending.take());
            continue;
        }
        if cancelled.load(Ordering::Acquire) {
            continue;
        }
        if let Err(e) = execute(device.as_ref(), stream, op) {
            pending.get_or_insert(e);
        }
    }
    device.destroy_stream(stream);
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
