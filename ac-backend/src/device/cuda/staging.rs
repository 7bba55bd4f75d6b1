//! Pipelined bulk copies through page-locked (pinned) staging buffers.
//!
//! Each GPU has a bounded pool of pinned buffers of one chunk each (`staging_mib` in all). A
//! bulk copy takes up to `copy.depth` of them and a CUDA stream of its own:
//! - host to device: the pieces quinn delivers (a packet's worth each) are gathered into a
//!   buffer; a full buffer (chunk n) is queued as an asynchronous DMA and the next buffer starts
//!   filling at once, so the network delivers chunk n+1 while the DMA of chunk n runs. A buffer
//!   is refilled only once the event recorded after its DMA has completed.
//! - device to host: the DMAs of the next `depth` chunks are queued ahead; each piece asked for
//!   waits for its own chunk's event, so the GPU reads ahead while the network sends.
//!
//! A copy that finds the pool empty still works, through one pageable buffer that is refilled
//! only after its copy has completed (the driver may stage a pageable copy after the call
//! returns): slower, but staging memory stays bounded and no copy ever waits for a buffer.
//! Buffers are allocated with `CU_MEMHOSTALLOC_PORTABLE` under the GPU's primary context, so
//! they serve every session's context and outlive them; the pool frees them when the GPU goes.
//! Every wait for the GPU goes through [`blocking`]: bulk copies run on async threads.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::Mutex;

use ac_proto::pieces;
use bytes::{Bytes, BytesMut};
use cudarc::driver::sys;

use super::driver::{bind, blocking, check, Handle};
use super::gather::{Gather, Step};
use crate::device::{check_piece, gather_next, DeviceResult, Download, Feed, Upload};

/// What a staged copy needs of the session's context. A trait, so that this module does not
/// depend on the context's (which starts staged copies: `upload`, `download`); the copies are
/// generic over it, so that the calls of a copy's hot loop stay static.
pub trait StagingContext: std::fmt::Debug + Sync {
    /// Makes the context current on this thread, unless a fault has lost it.
    fn enter(&self) -> DeviceResult<()>;
    /// Checks a driver result, remembering a fault that loses the context.
    fn check(&self, call: &str, code: sys::CUresult) -> DeviceResult<()>;
    /// The context, to make current again when a copy ends.
    fn raw(&self) -> Handle<sys::CUcontext>;
    /// The GPU's pinned buffers.
    fn pool(&self) -> &StagingPool;
    /// How many buffers one copy keeps in flight at most.
    fn depth(&self) -> usize;
}

/// One pinned host buffer of the pool.
#[derive(Debug)]
pub struct Pinned {
    ptr: Handle<*mut u8>,
    len: usize,
}

impl Pinned {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes allocated by cuMemHostAlloc, owned by this value alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0, self.len) }
    }
}

/// The pinned buffers of one GPU.
#[derive(Debug)]
pub struct StagingPool {
    primary: Handle<sys::CUcontext>,
    chunk: usize,
    limit: usize,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    free: Vec<Pinned>,
    allocated: usize,
}

impl StagingPool {
    /// A pool of at most `bytes` in buffers of `chunk` bytes, allocated on first use.
    pub fn new(primary: Handle<sys::CUcontext>, bytes: u64, chunk: usize) -> Self {
        let limit = (bytes / chunk as u64) as usize;
        Self { primary, chunk, limit, state: Mutex::new(PoolState::default()) }
    }

    /// Chunk size of the buffers.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Up to `want` buffers, fewer (maybe none) when the pool is spent. Leaves the primary
    /// context current: callers bind their own again. New buffers are pinned outside the lock
    /// (pinning takes milliseconds per MiB): the count is reserved under it.
    fn take(&self, want: usize) -> Vec<Pinned> {
        let (mut taken, new) = {
            let mut state = self.state.lock().expect("pool poisoned");
            let taken: Vec<Pinned> = (0..want).map_while(|_| state.free.pop()).collect();
            let new = (want - taken.len()).min(self.limit - state.allocated);
            state.allocated += new;
            (taken, new)
        };
        for i in 0..new {
            match blocking(|| self.allocate()) {
                Ok(buffer) => taken.push(buffer),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot allocate pinned staging memory");
                    self.state.lock().expect("pool poisoned").allocated -= new - i;
                    break;
                }
            }
        }
        taken
    }

    /// Frees the buffers in the pool (all of them once no copy runs: at the GPU's end).
    pub fn release(&self) {
        let mut state = self.state.lock().expect("pool poisoned");
        if state.free.is_empty() || bind(self.primary).is_err() {
            return;
        }
        let buffers = std::mem::take(&mut state.free);
        state.allocated -= buffers.len();
        for buffer in buffers {
            // SAFETY: allocated by cuMemHostAlloc and owned by the pool; no DMA uses a buffer
            // in the pool (lanes wait for theirs before giving them back).
            unsafe { sys::cuMemFreeHost(buffer.ptr.0 as *mut c_void) };
        }
    }

    fn allocate(&self) -> DeviceResult<Pinned> {
        bind(self.primary)?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the primary context is current and lives as long as the
        // backend, so the buffer does too.
        let code = unsafe { sys::cuMemHostAlloc(&mut ptr, self.chunk, sys::CU_MEMHOSTALLOC_PORTABLE) };
        check("cuMemHostAlloc", code)?;
        Ok(Pinned { ptr: Handle(ptr as *mut u8), len: self.chunk })
    }

    fn give_back(&self, buffers: impl IntoIterator<Item = Pinned>) {
        self.state.lock().expect("pool poisoned").free.extend(buffers);
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        self.release();
    }
}

/// A pinned buffer and the event that marks the end of its last DMA.
#[derive(Debug)]
struct Slot {
    buffer: Pinned,
    event: Handle<sys::CUevent>,
}

/// What a bulk copy holds: its stream and its slots. Dropping it waits for the DMAs still in
/// flight (they read or write the pinned buffers), then returns the buffers to the pool.
#[derive(Debug)]
struct Lane<'a, C: StagingContext> {
    context: &'a C,
    stream: Handle<sys::CUstream>,
    slots: Vec<Slot>,
}

impl<'a, C: StagingContext> Lane<'a, C> {
    fn open(context: &'a C, want: usize) -> DeviceResult<Self> {
        context.enter()?;
        let buffers = context.pool().take(want);
        if let Err(e) = bind(context.raw()) {
            context.pool().give_back(buffers);
            return Err(e);
        }
        let mut lane = Self { context, stream: Handle(std::ptr::null_mut()), slots: Vec::new() };
        let mut stream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the session's context is current.
        let code = unsafe { sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
        if let Err(e) = context.check("cuStreamCreate", code) {
            context.pool().give_back(buffers);
            return Err(e);
        }
        lane.stream = Handle(stream);
        for buffer in buffers {
            let mut event = std::ptr::null_mut();
            // SAFETY: valid out-pointer. No timing: cheaper to record and wait on.
            let code = unsafe { sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) };
            if context.check("cuEventCreate", code).is_err() {
                context.pool().give_back([buffer]);
                continue;
            }
            lane.slots.push(Slot { buffer, event: Handle(event) });
        }
        Ok(lane)
    }

    fn record(&self, slot: usize) -> DeviceResult<()> {
        // SAFETY: event and stream of this context.
        self.context.check("cuEventRecord", unsafe { sys::cuEventRecord(self.slots[slot].event.0, self.stream.0) })
    }

    fn wait(&self, slot: usize) -> DeviceResult<()> {
        let event = self.slots[slot].event;
        // SAFETY: an event of this context; waiting on one never recorded returns at once.
        self.context.check("cuEventSynchronize", blocking(|| unsafe { sys::cuEventSynchronize(event.0) }))
    }

    fn finish(&self) -> DeviceResult<()> {
        self.context.enter()?;
        let stream = self.stream;
        // SAFETY: the lane's stream.
        self.context.check("cuStreamSynchronize", blocking(|| unsafe { sys::cuStreamSynchronize(stream.0) }))
    }
}

impl<C: StagingContext> Drop for Lane<'_, C> {
    fn drop(&mut self) {
        let _ = bind(self.context.raw());
        // SAFETY: stream and events of this context, destroyed once, after the stream has no
        // DMA left that touches the buffers handed back below.
        unsafe {
            if !self.stream.0.is_null() {
                let stream = self.stream;
                blocking(|| sys::cuStreamSynchronize(stream.0));
                sys::cuStreamDestroy_v2(self.stream.0);
            }
            for slot in &self.slots {
                sys::cuEventDestroy_v2(slot.event.0);
            }
        }
        self.context.pool().give_back(self.slots.drain(..).map(|s| s.buffer));
    }
}

/// A host-to-device bulk copy through pinned buffers.
///
/// quinn hands over the payload a packet at a time (a few KiB), far too small for one DMA
/// each: [`Gather`] decides how pieces fill the buffers and when a full one goes to the GPU;
/// this carries its steps out.
#[derive(Debug)]
pub struct PinnedUpload<'a, C: StagingContext> {
    lane: Lane<'a, C>,
    address: u64,
    len: u64,
    /// The one buffer, when the pool gave none: refilled only once its copy has completed.
    pageable: Option<Vec<u8>>,
    gather: Gather,
    steps: Vec<Step>,
}

impl<'a, C: StagingContext> PinnedUpload<'a, C> {
    /// Starts a copy of `len` bytes to device address `address`.
    pub fn start(context: &'a C, address: u64, len: u64) -> DeviceResult<Self> {
        let chunk = context.pool().chunk();
        let depth = context.depth().min(len.div_ceil(chunk as u64).max(1) as usize);
        let lane = Lane::open(context, depth)?;
        let (pageable, gather) = if lane.slots.is_empty() {
            (Some(vec![0u8; chunk]), Gather::new(chunk, 1, false))
        } else {
            (None, Gather::new(chunk, lane.slots.len(), true))
        };
        Ok(Self { lane, address, len, pageable, gather, steps: Vec::new() })
    }

    fn buffer(&mut self, slot: usize) -> &mut [u8] {
        match &mut self.pageable {
            Some(buffer) => buffer,
            None => self.lane.slots[slot].buffer.as_mut_slice(),
        }
    }

    /// Carries out the gathered steps; `piece` is the data the fills copy from.
    fn apply(&mut self, piece: &[u8]) -> DeviceResult<()> {
        let steps = std::mem::take(&mut self.steps);
        for &step in &steps {
            match step {
                Step::Wait(slot) => self.lane.wait(slot)?,
                Step::Fill { slot, into, from, len } => {
                    self.buffer(slot)[into..into + len].copy_from_slice(&piece[from..from + len]);
                }
                Step::Dma { slot, at, len } => {
                    let source = self.buffer(slot).as_ptr() as *const c_void;
                    // SAFETY: a pinned buffer is not refilled before the event recorded below has
                    // completed (Gather's `Wait`); a pageable one not before the stream has
                    // drained (below). The target range lies inside the copy, checked when it
                    // started.
                    let code = unsafe { sys::cuMemcpyHtoDAsync_v2(self.address + at, source, len, self.lane.stream.0) };
                    self.lane.context.check("cuMemcpyHtoDAsync", code)?;
                    if self.pageable.is_none() {
                        self.lane.record(slot)?;
                    } else {
                        // The driver may read pageable memory after the call returns.
                        self.lane.finish()?;
                    }
                }
            }
        }
        self.steps = steps;
        self.steps.clear();
        Ok(())
    }
}

impl<C: StagingContext> Upload for PinnedUpload<'_, C> {
    fn push(&mut self, at: u64, data: &[u8]) -> DeviceResult<()> {
        check_piece(at, data.len(), self.len)?;
        self.lane.context.enter()?;
        self.gather.push(at, data.len(), &mut self.steps);
        self.apply(data)
    }

    /// Rooms in the pinned buffers; a pageable buffer has none, since the driver copies it
    /// during the call.
    fn feed(&self) -> Feed {
        if self.pageable.is_some() {
            Feed::Pieces
        } else {
            Feed::Rooms
        }
    }

    /// The free part of the pinned buffer being filled (waited for first if a DMA may still
    /// read it).
    fn room(&mut self, at: u64, max: usize) -> DeviceResult<&mut [u8]> {
        check_piece(at, max, self.len)?;
        self.lane.context.enter()?;
        let (slot, into, len) = self.gather.reserve(at, max, &mut self.steps);
        self.apply(&[])?;
        Ok(&mut self.buffer(slot)[into..into + len])
    }

    fn commit(&mut self, len: usize) -> DeviceResult<()> {
        self.lane.context.enter()?;
        self.gather.commit(len, &mut self.steps);
        self.apply(&[])
    }

    fn finish(mut self: Box<Self>) -> DeviceResult<()> {
        self.lane.context.enter()?;
        self.gather.finish(&mut self.steps);
        self.apply(&[])?;
        self.lane.finish()
    }
}

/// A device-to-host bulk copy through pinned buffers, reading ahead.
#[derive(Debug)]
pub struct PinnedDownload<'a, C: StagingContext> {
    lane: Lane<'a, C>,
    address: u64,
    len: u64,
    /// Bytes whose DMA has been queued.
    issued: u64,
    /// Slots with a queued DMA, oldest first, with the bytes they hold and how many of them
    /// were already handed out.
    in_flight: VecDeque<(usize, usize, usize)>,
    idle: Vec<usize>,
}

impl<'a, C: StagingContext> PinnedDownload<'a, C> {
    /// Starts a copy of `len` bytes from device address `address`, queuing the first DMAs.
    pub fn start(context: &'a C, address: u64, len: u64) -> DeviceResult<Self> {
        let depth = context.depth().min(len.div_ceil(context.pool().chunk() as u64).max(1) as usize);
        let lane = Lane::open(context, depth)?;
        let idle = (0..lane.slots.len()).rev().collect();
        let mut download = Self { lane, address, len, issued: 0, in_flight: VecDeque::new(), idle };
        download.read_ahead()?;
        Ok(download)
    }

    /// Queues DMAs into every idle slot.
    fn read_ahead(&mut self) -> DeviceResult<()> {
        while self.issued < self.len {
            let Some(slot) = self.idle.pop() else { break };
            let n = (self.len - self.issued).min(self.lane.context.pool().chunk() as u64) as usize;
            let buffer = self.lane.slots[slot].buffer.ptr.0;
            // SAFETY: the buffer is pinned and holds a chunk; it is read only after this DMA's
            // event completes. The source range was checked when the copy started.
            let code = unsafe {
                sys::cuMemcpyDtoHAsync_v2(buffer as *mut c_void, self.address + self.issued, n, self.lane.stream.0)
            };
            self.lane.context.check("cuMemcpyDtoHAsync", code)?;
            self.lane.record(slot)?;
            self.in_flight.push_back((slot, n, 0));
            self.issued += n as u64;
        }
        Ok(())
    }

    /// Without pinned buffers: a synchronous read through the driver's staging, into `out`.
    fn read_direct_into(&mut self, out: &mut [u8]) -> DeviceResult<()> {
        // SAFETY: `out` outlives the copy (the stream is synchronized below); the source range
        // lies inside the checked copy (`next`, `next_into` and `next_with` keep within it).
        unsafe {
            let code = sys::cuMemcpyDtoHAsync_v2(
                out.as_mut_ptr() as *mut c_void,
                self.address + self.issued,
                out.len(),
                self.lane.stream.0,
            );
            self.lane.context.check("cuMemcpyDtoHAsync", code)?;
        }
        self.lane.finish()?;
        self.issued += out.len() as u64;
        Ok(())
    }

    /// Bytes read from the device and not yet handed out.
    fn held(&self) -> usize {
        self.in_flight.iter().map(|&(_, filled, taken)| filled - taken).sum()
    }

    /// Hands up to `want` bytes of the chunks read ahead to `put`, in order, waiting for each
    /// chunk's DMA; how many (fewer only at the copy's end).
    fn hand_out(&mut self, want: usize, mut put: impl FnMut(&[u8])) -> DeviceResult<usize> {
        let mut given = 0;
        while given < want {
            let Some(&(slot, filled, taken)) = self.in_flight.front() else { break };
            if taken == 0 {
                self.lane.wait(slot)?;
            }
            let n = (filled - taken).min(want - given);
            put(&self.lane.slots[slot].buffer.as_mut_slice()[taken..taken + n]);
            given += n;
            if taken + n == filled {
                self.in_flight.pop_front();
                self.idle.push(slot);
                self.read_ahead()?;
            } else {
                self.in_flight.front_mut().expect("front exists").2 = taken + n;
            }
        }
        Ok(given)
    }
}

impl<C: StagingContext> Download for PinnedDownload<'_, C> {
    fn next(&mut self, len: usize) -> DeviceResult<Bytes> {
        self.lane.context.enter()?;
        if self.lane.slots.is_empty() {
            let mut piece = BytesMut::zeroed((len as u64).min(self.len - self.issued) as usize);
            self.read_direct_into(&mut piece)?;
            return Ok(piece.freeze());
        }
        let mut piece = BytesMut::with_capacity(len);
        self.hand_out(len, |bytes| piece.extend_from_slice(bytes))?;
        Ok(piece.freeze())
    }

    /// Straight from the pinned buffers into `out` (a session worker's shared slot): one host
    /// copy, not two through a piece of its own; without pinned buffers, a DMA into `out`.
    fn next_into(&mut self, out: &mut [u8]) -> DeviceResult<()> {
        if !self.lane.slots.is_empty() {
            return gather_next(self, out);
        }
        self.lane.context.enter()?;
        check_piece(self.issued - self.held() as u64, out.len(), self.len)?;
        self.read_direct_into(out)
    }

    /// Straight out of the pinned buffers, where a lane seals them: no host copy at all.
    fn next_with(&mut self, len: usize, take: &mut dyn FnMut(&[u8])) -> DeviceResult<()> {
        self.lane.context.enter()?;
        check_piece(self.issued - self.held() as u64, len, self.len)?;
        if self.lane.slots.is_empty() {
            let piece = pieces::filled(len, |buf| self.read_direct_into(buf))?;
            take(&piece);
            return Ok(());
        }
        self.hand_out(len, take)?;
        Ok(())
    }
}
