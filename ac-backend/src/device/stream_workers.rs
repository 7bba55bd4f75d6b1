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
//!
//! **Settled on the control loop.** A barrier costs two more wake-ups (the worker's, then the
//! control loop's), which made launch + synchronize half again as slow as a round trip
//! (BENCHMARKS.md, issue 25). On a device whose calls finish their work before returning (the
//! CPU device), a barrier staged while the worker is idle, behind at most `QUICK_RUN` quick
//! operations (small launches the device vouches for, small memory operations), runs those
//! operations on the control loop and answers at once. Nothing else can touch the stream then:
//! the worker is idle and only the control loop hands it work. A long kernel still runs on the
//! worker, so it never stalls the session's other streams and copies. (A quick operation on a
//! buffer that another stream's worker is busy with waits for it, as the CPU device locks a
//! buffer per operation; a barrier on the control loop waited for that stream before as well.)

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use ac_proto::backend::{ArrayCopy, LaunchDims, WireError};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::device::{Context, DeviceArg, DeviceStream, Kernel, LaunchMode};
use crate::session::arrays::DeviceArray;
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
        /// How its blocks run.
        mode: LaunchMode,
        /// Keeps the arguments' allocations alive until the launch is done.
        _hold: Vec<Arc<Allocation>>,
    },
    /// Between a CUDA array and linear device memory.
    CopyArray {
        /// The array.
        array: Arc<DeviceArray>,
        /// The allocation the linear side lies in.
        linear: Arc<Allocation>,
        /// The copy, between their device handle and address.
        copy: ArrayCopy<u64, u64>,
    },
    /// Answers with the pending error (if any) once everything before it is done.
    Barrier(oneshot::Sender<Option<WireError>>),
}

/// A running stream, as the control loop holds it.
pub struct StreamWorker {
    tx: mpsc::UnboundedSender<Vec<StreamOp>>,
    /// Operations staged but not yet handed to the worker, in order.
    staged: Vec<StreamOp>,
    /// One permit per operation the worker may have queued (handed over, not yet done).
    room: Arc<Semaphore>,
    /// Runs operations here when a barrier is settled on the control loop; shares the device,
    /// the pending error and the cancel flag with the worker thread.
    runner: Worker,
}

impl std::fmt::Debug for StreamWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamWorker").field("stream", &self.runner.stream).field("staged", &self.staged.len()).finish()
    }
}

/// Operations a stream may have queued before the control loop waits for room.
const QUEUE_DEPTH: usize = 4096;

/// Operations staged before they are handed over even though more frames are buffered.
const BATCH: usize = 256;

/// Operations a barrier may run on the control loop (see "Settled on the control loop").
const QUICK_RUN: usize = 8;

/// Bytes a memory operation moves at most to count as quick.
const QUICK_BYTES: u64 = 16 << 10;

impl StreamWorker {
    /// Starts a worker for `stream` on `device`.
    pub fn spawn(device: Arc<dyn Context>, stream: DeviceStream, name: String) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(QUEUE_DEPTH));
        let cancelled = Arc::new(AtomicBool::new(false));
        let runner = Worker { device, stream, pending: Arc::new(Mutex::new(None)), cancelled };
        let (thread_runner, worker_room) = (runner.clone(), room.clone());
        thread::Builder::new().name(name).spawn(move || thread_runner.run(rx, worker_room))?;
        Ok(Self { tx, staged: Vec::with_capacity(BATCH), room, runner })
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
    /// the receiver gets the stream's pending error (taking it). The caller hands it over. A
    /// barrier that can be settled on the control loop is answered before this returns.
    pub fn stage_barrier(&mut self) -> oneshot::Receiver<Option<WireError>> {
        let (tx, rx) = oneshot::channel();
        if self.settle_here() {
            let _ = tx.send(take_pending(&self.runner.pending));
        } else {
            self.staged.push(StreamOp::Barrier(tx));
        }
        rx
    }

    /// Runs the staged operations on this thread if a barrier behind them may be settled here
    /// (see "Settled on the control loop"); returns whether it did.
    fn settle_here(&mut self) -> bool {
        let device = self.runner.device.as_ref();
        let quick = device.finishes_in_call()
            && self.worker_is_idle()
            && self.staged.len() <= QUICK_RUN
            && self.staged.iter().all(|op| is_quick(device, op));
        if !quick {
            return false;
        }
        for op in self.staged.drain(..) {
            self.runner.run_one(op);
        }
        true
    }

    /// Whether everything handed to the worker is done (it returns a batch's permits after
    /// the batch's last operation), and the worker is alive to take more.
    fn worker_is_idle(&self) -> bool {
        !self.room.is_closed() && self.room.available_permits() == QUEUE_DEPTH
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
        self.runner.cancelled.store(true, Ordering::Release);
    }
}

/// What runs a stream's operations: its worker thread, or the control loop when it settles a
/// barrier itself.
#[derive(Clone)]
struct Worker {
    device: Arc<dyn Context>,
    stream: DeviceStream,
    pending: Arc<Mutex<Option<WireError>>>,
    cancelled: Arc<AtomicBool>,
}

impl Worker {
    /// The worker thread: batches in order until the control loop drops the stream.
    fn run(self, mut rx: mpsc::UnboundedReceiver<Vec<StreamOp>>, room: Arc<Semaphore>) {
        // However the thread ends, even by a panic, the control loop must not wait for room again.
        let room = RoomGuard(room);
        while let Some(batch) = rx.blocking_recv() {
            let done = batch.len().min(QUEUE_DEPTH);
            for op in batch {
                self.run_one(op);
            }
            room.0.add_permits(done);
        }
        self.device.destroy_stream(self.stream);
    }

    /// Runs one operation, keeping its error pending; a barrier answers with the pending error.
    fn run_one(&self, op: StreamOp) {
        if let StreamOp::Barrier(done) = op {
            if let Err(e) = self.device.synchronize(self.stream) {
                self.record(e);
            }
            // Nobody waits any more (a copy given up after its fence was admitted): the error
            // stays pending for the next barrier instead of being lost.
            if let Err(Some(error)) = done.send(take_pending(&self.pending)) {
                self.record(error);
            }
            return;
        }
        if self.cancelled.load(Ordering::Acquire) {
            return;
        }
        // A panic is the device's bug; on the control loop it must not end the session with it.
        let outcome = catch_unwind(AssertUnwindSafe(|| execute(self.device.as_ref(), self.stream, op)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.record(e),
            Err(_) => {
                self.record(WireError::new(ac_proto::backend::ErrorKind::Internal, "a stream operation panicked"))
            }
        }
    }

    /// Keeps `error` unless an earlier one is pending.
    fn record(&self, error: WireError) {
        self.pending.lock().expect("pending error poisoned").get_or_insert(error);
    }
}

/// Takes the stream's pending error: a barrier reports it once.
fn take_pending(pending: &Mutex<Option<WireError>>) -> Option<WireError> {
    pending.lock().expect("pending error poisoned").take()
}

/// Whether `op` may run on the control loop at a barrier.
fn is_quick(device: &dyn Context, op: &StreamOp) -> bool {
    match op {
        StreamOp::Launch { kernel, args, .. } => device.is_quick_launch(kernel, args),
        StreamOp::Write { data, .. } => data.len() as u64 <= QUICK_BYTES,
        StreamOp::Copy { len, .. } | StreamOp::Memset { len, .. } => *len <= QUICK_BYTES,
        StreamOp::CopyArray { copy, .. } => {
            copy.extent.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).is_some_and(|n| n <= QUICK_BYTES)
        }
        StreamOp::Barrier(_) => false,
    }
}

/// Closes the stream's room when its worker thread ends, so that a hand-over to a dead worker
/// does not wait for permits nobody will return.
struct RoomGuard(Arc<Semaphore>);

impl Drop for RoomGuard {
    fn drop(&mut self) {
        self.0.close();
    }
}

fn execute(device: &dyn Context, stream: DeviceStream, op: StreamOp) -> Result<(), WireError> {
    match op {
        StreamOp::Write { dst, offset, data, .. } => device.write(dst.mem, offset, &data, stream),
        StreamOp::Copy { dst, dst_offset, src, src_offset, len } => {
            device.copy(dst.mem, dst_offset, src.mem, src_offset, len, stream)
        }
        StreamOp::Memset { dst, offset, len, value } => device.memset(dst.mem, offset, len, value, stream),
        StreamOp::Launch { kernel, dims, args, mode: LaunchMode::Plain, .. } => {
            device.launch(&kernel, &dims, &args, stream)
        }
        StreamOp::Launch { kernel, dims, args, mode, .. } => device.launch_as(&kernel, &dims, &args, stream, mode),
        StreamOp::CopyArray { copy, .. } => device.copy_array(&copy, stream),
        StreamOp::Barrier(_) => unreachable!("handled by the caller"),
    }
}

#[cfg(test)]
mod tests {
    use ac_proto::backend::{ErrorKind, KernelArg};

    use super::*;
    use crate::device::{CpuDevice, Device, DeviceMem};

    fn worker() -> (Arc<dyn Context>, StreamWorker) {
        let context = CpuDevice::new(0, 64 << 20).open_context().unwrap();
        let stream = context.create_stream().unwrap();
        let worker = StreamWorker::spawn(context.clone(), stream, "test-stream".into()).unwrap();
        (context, worker)
    }

    /// A launch of the builtin `fill` of `n` floats of `value` over `mem` (of `len` bytes).
    fn fill(context: &dyn Context, mem: DeviceMem, len: u64, value: f32, n: u64) -> StreamOp {
        let kernel = Arc::new(context.kernel(crate::device::DeviceModule(0), "fill").unwrap());
        let args = vec![
            DeviceArg::Mem { mem, offset: 0, len },
            DeviceArg::Scalar(KernelArg::F32(value)),
            DeviceArg::Scalar(KernelArg::U64(n)),
        ];
        StreamOp::Launch { kernel, dims: LaunchDims::linear(1, 1), args, mode: LaunchMode::Plain, _hold: Vec::new() }
    }

    fn floats(context: &dyn Context, mem: DeviceMem, n: usize) -> Vec<f32> {
        let mut bytes = vec![0u8; n * 4];
        context.read(mem, 0, &mut bytes, DeviceStream(0)).unwrap();
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn a_barrier_behind_quick_work_on_an_idle_stream_is_answered_before_any_hand_over() {
        let (context, mut worker) = worker();
        let mem = context.alloc(16).unwrap();
        worker.stage(fill(context.as_ref(), mem, 16, 2.0, 4));
        let mut barrier = worker.stage_barrier();
        assert_eq!(barrier.try_recv().expect("answered at once"), None);
        assert!(worker.staged.is_empty(), "nothing is left for the worker");
        assert_eq!(floats(context.as_ref(), mem, 4), [2.0; 4]);
    }

    #[test]
    fn an_error_of_work_run_on_the_control_loop_is_reported_by_one_barrier() {
        let (context, mut worker) = worker();
        let mem = context.alloc(16).unwrap();
        // Eight floats into a buffer of four: quick, and out of bounds.
        worker.stage(fill(context.as_ref(), mem, 16, 2.0, 8));
        let error = worker.stage_barrier().try_recv().expect("answered at once").expect("an error");
        assert_eq!(error.kind, ErrorKind::OutOfBounds);
        assert_eq!(worker.stage_barrier().try_recv().expect("answered at once"), None);
    }

    #[tokio::test]
    async fn an_error_whose_barrier_nobody_awaits_stays_pending_for_the_next_one() {
        let (context, mut worker) = worker();
        let mem = context.alloc(16).unwrap();
        // Too long to be quick, and out of bounds: the worker meets the error.
        worker.stage(fill(context.as_ref(), mem, 16, 2.0, 5000));
        drop(worker.stage_barrier());
        worker.hand_over().await;
        let error = barrier_reached(stage_and_hand_over(&mut worker).await).await.expect("the error, kept");
        assert_eq!(error.kind, ErrorKind::OutOfBounds);
        assert_eq!(barrier_reached(stage_and_hand_over(&mut worker).await).await, None, "reported once");
    }

    #[test]
    fn a_matrix_product_with_an_empty_dimension_is_not_quick_when_its_matrices_are_large() {
        let context = CpuDevice::new(0, 64 << 20).open_context().unwrap();
        let sgemm = context.kernel(crate::device::DeviceModule(0), "sgemm").unwrap();
        let c = context.alloc(16 << 20).unwrap();
        let mem = DeviceArg::Mem { mem: c, offset: 0, len: 16 << 20 };
        let args = |m: u32, n: u32, k: u32| {
            [m, n, k].map(|v| DeviceArg::Scalar(KernelArg::U32(v))).into_iter().chain([
                DeviceArg::Scalar(KernelArg::F32(1.0)),
                mem,
                mem,
                DeviceArg::Scalar(KernelArg::F32(0.0)),
                mem,
            ])
        };
        let quick = |m, n, k| context.is_quick_launch(&sgemm, &args(m, n, k).collect::<Vec<_>>());
        assert!(quick(8, 8, 8));
        assert!(!quick(2048, 2048, 0), "k = 0 still walks C's four million elements");
    }

    #[tokio::test]
    async fn a_long_launch_is_left_to_the_worker() {
        let (context, mut worker) = worker();
        let n = 1u64 << 20;
        let mem = context.alloc(n * 4).unwrap();
        worker.stage(fill(context.as_ref(), mem, n * 4, 3.0, n));
        let mut barrier = worker.stage_barrier();
        assert!(barrier.try_recv().is_err(), "a long launch must not run on the control loop");
        worker.hand_over().await;
        assert_eq!(barrier_reached(barrier).await, None);
        assert!(floats(context.as_ref(), mem, n as usize).iter().all(|&v| v == 3.0));
    }

    #[tokio::test]
    async fn quick_work_staged_behind_work_on_the_worker_runs_after_it() {
        let (context, mut worker) = worker();
        let n = 1u64 << 20;
        let mem = context.alloc(n * 4).unwrap();
        for round in 0..20 {
            let value = round as f32;
            worker.stage(fill(context.as_ref(), mem, n * 4, value, n));
            worker.hand_over().await;
            // Whether the worker is still busy or already idle, the small fill lands second.
            worker.stage(fill(context.as_ref(), mem, n * 4, -value, 4));
            assert_eq!(barrier_reached(stage_and_hand_over(&mut worker).await).await, None);
            let data = floats(context.as_ref(), mem, n as usize);
            assert_eq!(data[..4], [-value; 4], "round {round}");
            assert!(data[4..].iter().all(|&v| v == value), "round {round}");
        }
    }

    async fn stage_and_hand_over(worker: &mut StreamWorker) -> oneshot::Receiver<Option<WireError>> {
        let barrier = worker.stage_barrier();
        worker.hand_over().await;
        barrier
    }
}
