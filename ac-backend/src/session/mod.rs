//! Sessions: what one client owns on this backend.
//!
//! A session is created by a control connection's `Hello::Open` and ends with that connection,
//! unless the connection timed out: then its control loop holds it for a while, and a
//! `Hello::Resume` hands it a new connection ([`Session::rejoin`]).
//! Its buffers live in a table shared with the bulk-copy streams of every connection attached
//! to it. Buffer ids are per session, so another session's id is simply unknown here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use ac_proto::backend::{close, BufferId, DevicePtr, ErrorKind, SessionId, Telemetry, WireError};
use rustc_hash::FxHashMap;

pub mod arrays;
pub mod fence;
pub mod images;
pub mod ipc;
pub mod resume;
pub mod serve_control;
pub mod vmm;

use crate::config::CopySettings;
use crate::device::{Context, Device, DeviceMem};
use crate::metrics::Metrics;
use crate::session::fence::Fences;

/// Device memory a buffer names: a device allocation, or a module's variable. Dropping the last
/// reference to an allocation frees the device memory, so an operation still in flight keeps
/// its memory alive even after the client freed the buffer.
#[derive(Debug)]
pub struct Allocation {
    /// The device memory.
    pub mem: DeviceMem,
    /// Its size in bytes.
    pub size: u64,
    context: Arc<dyn Context>,
    /// The session's count of allocated bytes, which an allocation leaves when its memory goes;
    /// `None` for a module's variable, whose memory is the module's (it goes when the module is
    /// unloaded, and a copy to it after that is the context's error).
    held: Option<Arc<AtomicU64>>,
    /// A reserved range's mappings (protocol 14); `None` for memory that is all there.
    pub range: Option<vmm::Range>,
    /// The memory of another session's allocation this one opened (protocol 18); `None` for
    /// memory of the session's own.
    pub opened: Option<ipc::Opened>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let Some(range) = &self.range {
            range.free(&*self.context, self.mem, self.size);
        } else if let Some(opened) = &self.opened {
            if opened.by_driver {
                self.context.close_opened(self.mem);
            }
        } else if let Some(held) = &self.held {
            self.context.free(self.mem);
            held.fetch_sub(self.size, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for dyn Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.info().name)
    }
}

impl std::fmt::Debug for dyn Device {
    /// Asks nothing of the device (a GPU's description is an NVML query).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Device")
    }
}

/// One client's state shared between its connections.
#[derive(Debug)]
pub struct Session {
    /// The session's id.
    pub id: SessionId,
    /// The secret that lets another connection attach.
    pub token: [u8; 16],
    /// Its context on the device it runs on.
    pub context: Arc<dyn Context>,
    /// Chunking of bulk copies.
    pub copy: CopySettings,
    /// The capability the session was opened with, if the backend is managed.
    pub capability: Option<u64>,
    /// The device (its index on the backend) the session runs on.
    pub device: u32,
    /// That device, for what its sensors read ([`Device::telemetry`]).
    pub sensors: Arc<dyn Device>,
    /// Where a resumed session's new connection goes to its control loop.
    rejoins: tokio::sync::mpsc::UnboundedSender<crate::session::resume::Rejoin>,
    /// The backend's module images, by content (shared by every session).
    pub images: Arc<crate::session::images::ImageCache>,
    /// Where synchronous copies ask the control loop for their fence.
    pub fences: Fences,
    /// Payload bytes the session may hold in the backend's memory at once (see [`Session::reserve`]).
    budget: Arc<tokio::sync::Semaphore>,
    budget_total: u32,
    /// The backend's counters.
    pub metrics: Arc<Metrics>,
    /// Fx-hashed: the backend hands out the ids in sequence, so clients cannot make them collide.
    buffers: Mutex<FxHashMap<BufferId, Arc<Allocation>>>,
    next_buffer: AtomicU64,
    attached: Mutex<Vec<quinn::Connection>>,
    /// Bulk lanes attached now (see [`Session::attach_lane`]).
    lanes: Arc<AtomicUsize>,
    /// The lanes' generation: every lane attached since the session's last resumption holds a
    /// receiver of it; [`Session::retire_lanes`] ends them all.
    lane_generation: Mutex<Arc<tokio::sync::watch::Sender<bool>>>,
    /// Turns true when the session ends: its bulk lanes close.
    ended: tokio::sync::watch::Sender<bool>,
    /// Device memory the session holds (its allocations not yet freed), bytes.
    held: Arc<AtomicU64>,
    /// The most it may hold (`session_memory_mib`).
    quota: Option<u64>,
    /// Its physical memory and reserved address space (protocol 14).
    vmm: vmm::Table,
    /// Its CUDA arrays and texture and surface objects (protocol 16).
    arrays: arrays::Table,
    /// The backend's memory shared between sessions (protocols 18 and 19).
    exports: Arc<ipc::Exports>,
}

impl Session {
    /// Takes `len` bytes of the session's payload budget (all of it when `len` is larger),
    /// waiting until earlier payloads let go of theirs. Everything a session's client makes the
    /// backend hold in memory passes through it: queued inline writes, read replies the client
    /// has not taken, bulk pieces on their way. A client that stops reading stalls its own
    /// session; it cannot fill the host.
    pub async fn reserve(&self, len: u64) -> tokio::sync::OwnedSemaphorePermit {
        let permits = u32::try_from(len).unwrap_or(u32::MAX).min(self.budget_total);
        self.budget.clone().acquire_many_owned(permits).await.expect("budget semaphore never closes")
    }

    /// The session's whole payload budget, bytes.
    pub fn budget(&self) -> u64 {
        u64::from(self.budget_total)
    }

    /// Allocates device memory and returns the new buffer's id.
    pub fn alloc(&self, bytes: u64) -> Result<BufferId, WireError> {
        self.alloc_at(bytes).map(|(id, _)| id)
    }

    /// Allocates as [`Session::alloc`] does; also answers the allocation's device address (on
    /// CUDA, where the CUDA shim's kernels take it as a raw pointer; an opaque number elsewhere).
    pub fn alloc_at(&self, bytes: u64) -> Result<(BufferId, u64), WireError> {
        self.charge(bytes)?;
        let mem = match self.context.alloc(bytes) {
            Ok(mem) => mem,
            Err(e) => {
                self.held.fetch_sub(bytes, Ordering::AcqRel);
                return Err(e);
            }
        };
        let held = Some(self.held.clone());
        let id = self.insert(Allocation {
            mem,
            size: bytes,
            context: self.context.clone(),
            held,
            range: None,
            opened: None,
        });
        Ok((id, mem.0))
    }

    /// A buffer over a module's variable, `size` bytes at `mem` (see [`Context::global`]): the
    /// session's quota does not count it, and [`Session::free`] refuses it.
    pub fn adopt_variable(&self, mem: DeviceMem, size: u64) -> BufferId {
        self.insert(Allocation { mem, size, context: self.context.clone(), held: None, range: None, opened: None })
    }

    /// Enters `entry` into the buffer table under a fresh id.
    fn insert(&self, entry: Allocation) -> BufferId {
        self.enter(Arc::new(entry))
    }

    /// Enters `entry` (which may be in the table already) under a fresh id.
    fn enter(&self, entry: Arc<Allocation>) -> BufferId {
        let id = BufferId(self.next_buffer.fetch_add(1, Ordering::Relaxed));
        self.buffers.lock().expect("buffer table poisoned").insert(id, entry);
        id
    }

    /// Removes the buffers over an unloaded module's variables from the table.
    pub fn forget_variables(&self, ids: &[BufferId]) {
        let mut buffers = self.buffers.lock().expect("buffer table poisoned");
        for id in ids {
            buffers.remove(id);
        }
    }

    /// Counts `bytes` more against the session's quota, or refuses them.
    fn charge(&self, bytes: u64) -> Result<(), WireError> {
        let quota = self.quota.unwrap_or(u64::MAX);
        let charged = self.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(bytes).filter(|&total| total <= quota)
        });
        charged.map(drop).map_err(|held| {
            WireError::new(
                ErrorKind::OutOfMemory,
                format!(
                    "{bytes} bytes more would pass this session's quota of {} MiB (session_memory_mib): it holds {held} bytes",
                    quota >> 20
                ),
            )
        })
    }

    /// Counts `to` bytes instead of `from` against the session's quota (a context limit's
    /// reservation changed), or refuses the increase and counts nothing new.
    pub fn recharge(&self, from: u64, to: u64) -> Result<(), WireError> {
        if to > from {
            return self.charge(to - from);
        }
        self.recharge_unchecked(from, to);
        Ok(())
    }

    /// Counts `to` bytes instead of `from`, past the quota if need be: what the device holds
    /// whether the session may or not (a limit that could not be set back).
    pub fn recharge_unchecked(&self, from: u64, to: u64) {
        match to.checked_sub(from) {
            Some(more) => self.held.fetch_add(more, Ordering::AcqRel),
            None => self.held.fetch_sub(from - to, Ordering::AcqRel),
        };
    }

    /// Device memory the session holds now, bytes.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// What its device's sensors read now, and the memory the session holds; an error for a
    /// GPU that is lost.
    pub fn telemetry(&self) -> Result<Telemetry, WireError> {
        Ok(Telemetry { session_memory: self.held(), ..self.sensors.telemetry()? })
    }

    /// Removes a buffer from the table; its memory goes when no operation holds it. A module's
    /// variable is refused: it goes with its module.
    pub fn free(&self, id: BufferId) -> Result<(), WireError> {
        let mut buffers = self.buffers.lock().expect("buffer table poisoned");
        match buffers.get(&id) {
            None => Err(unknown_buffer(id)),
            Some(alloc) if alloc.held.is_none() && alloc.range.is_none() && alloc.opened.is_none() => {
                Err(WireError::new(
                    ErrorKind::InvalidBuffer,
                    format!("buffer {} is a module's variable: it goes when its module is unloaded", id.0),
                ))
            }
            Some(_) => buffers.remove(&id).map(drop).ok_or_else(|| unknown_buffer(id)),
        }
    }

    /// Resolves `len` bytes at `ptr` to its allocation, checking ownership and bounds.
    pub fn resolve(&self, ptr: DevicePtr, len: u64) -> Result<Arc<Allocation>, WireError> {
        let alloc = self.resolve_pointer(ptr)?;
        match ptr.offset.checked_add(len) {
            Some(end) if end <= alloc.size => match &alloc.range {
                Some(range) => range.mappings.check_mapped(ptr.offset, len).map(|()| alloc),
                None => Ok(alloc),
            },
            _ => Err(WireError::new(
                ErrorKind::OutOfBounds,
                format!(
                    "access of {len} bytes at offset {} is outside buffer {} of {} bytes",
                    ptr.offset, ptr.buffer.0, alloc.size
                ),
            )),
        }
    }

    /// Resolves a pointer whose offset must lie inside its buffer (a kernel argument).
    pub fn resolve_pointer(&self, ptr: DevicePtr) -> Result<Arc<Allocation>, WireError> {
        let alloc = self.buffer(ptr.buffer)?;
        if ptr.offset > alloc.size {
            return Err(WireError::new(
                ErrorKind::OutOfBounds,
                format!("offset {} is outside buffer {} of {} bytes", ptr.offset, ptr.buffer.0, alloc.size),
            ));
        }
        Ok(alloc)
    }

    /// The buffer `id` of the session's table.
    pub fn buffer(&self, id: BufferId) -> Result<Arc<Allocation>, WireError> {
        self.buffers.lock().expect("buffer table poisoned").get(&id).cloned().ok_or_else(|| unknown_buffer(id))
    }

    /// Counts a bulk lane in, unless the session has `most` already: the lane holds the
    /// returned ticket for its life, and dropping it counts the lane out.
    pub fn attach_lane(&self, most: usize) -> Option<LaneTicket> {
        let generation = self.lane_generation.lock().expect("lane generation poisoned");
        let counted = self.lanes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < most).then_some(n + 1));
        counted.ok().map(|_| LaneTicket { count: self.lanes.clone(), retired: generation.subscribe() })
    }

    /// Ends every lane attached before now, and returns once none of them can touch the
    /// session's memory any more. A resumption calls it before it answers: the program gave
    /// up its lanes with the lost connection and runs their copies again on new ones, while
    /// the old lanes' TCP connections may still deliver, seconds later, bytes their kernel
    /// sent again after the outage; written then, they would overwrite the copies run since.
    pub async fn retire_lanes(&self) {
        let fresh = Arc::new(tokio::sync::watch::Sender::new(false));
        let old = std::mem::replace(&mut *self.lane_generation.lock().expect("lane generation poisoned"), fresh);
        old.send_replace(true);
        // Each lane's task drops its receiver only once it has stopped serving the lane.
        old.closed().await;
    }

    /// Records a connection attached to this session, to close it when the session ends.
    pub fn attach(&self, conn: quinn::Connection) {
        self.attached.lock().expect("attached list poisoned").push(conn);
    }

    /// Ends the session: closes its connections and drops every buffer.
    pub fn close(&self) {
        self.close_with(close::NORMAL, "session ended");
    }

    /// Ends the session, telling the client why. The QUIC connections close first, so that the
    /// reason is on its way before the lanes break.
    pub fn close_with(&self, code: u32, reason: &str) {
        for conn in self.attached.lock().expect("attached list poisoned").drain(..) {
            conn.close(code.into(), reason.as_bytes());
        }
        self.ended.send_replace(true);
        self.buffers.lock().expect("buffer table poisoned").clear();
        self.arrays.clear();
        self.vmm.clear();
    }

    /// Whose module images this session may load from the cache.
    pub fn image_owner(&self) -> crate::session::images::Owner {
        match self.capability {
            Some(id) => crate::session::images::Owner::Capability(id),
            None => crate::session::images::Owner::Session(self.id.0),
        }
    }

    /// Whether `token` is the session's secret. Every byte is compared whatever the first
    /// difference, so timing tells nothing.
    pub fn owns(&self, token: &[u8; 16]) -> bool {
        self.token.iter().zip(token).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Hands a resumed session's new connection to its control loop; gives it back when the
    /// loop has ended.
    pub fn rejoin(&self, rejoin: crate::session::resume::Rejoin) -> Result<(), crate::session::resume::Rejoin> {
        self.rejoins.send(rejoin).map_err(|e| e.0)
    }

    /// Whether the session has ended (closed, revoked), though it may not have left the
    /// registry yet.
    pub fn has_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Returns once the session has ended.
    pub async fn ended(&self) {
        let _ = self.ended.subscribe().wait_for(|ended| *ended).await;
    }
}

fn unknown_buffer(id: BufferId) -> WireError {
    WireError::new(ErrorKind::InvalidBuffer, format!("buffer {} does not exist in this session", id.0))
}

/// All live sessions of a backend.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: Mutex<HashMap<SessionId, Weak<Session>>>,
    next: AtomicU64,
    images: Arc<crate::session::images::ImageCache>,
    exports: Arc<ipc::Exports>,
}

/// What one session may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Payload bytes in the backend's memory at once (see [`Session::reserve`]).
    pub budget: u32,
    /// Device memory, bytes (`session_memory_mib`).
    pub quota: Option<u64>,
}

impl Registry {
    /// Creates and registers a session on device `device`, opened with `capability`; its
    /// control loop admits the fences asked on `fences` and takes the new connections of a
    /// resumption from the receiver returned; it may hold `budget` payload bytes at once.
    pub fn open(
        &self,
        context: Arc<dyn Context>,
        copy: CopySettings,
        (capability, device, sensors): (Option<u64>, u32, Arc<dyn Device>),
        fences: Fences,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> (Arc<Session>, tokio::sync::mpsc::UnboundedReceiver<crate::session::resume::Rejoin>) {
        let Limits { budget, quota } = limits;
        metrics.session_opened();
        let id = SessionId(self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (rejoins, rejoined) = tokio::sync::mpsc::unbounded_channel();
        let session = Arc::new(Session {
            id,
            token: random_token(),
            context,
            copy,
            capability,
            device,
            sensors,
            rejoins,
            images: self.images.clone(),
            fences,
            budget: Arc::new(tokio::sync::Semaphore::new(budget as usize)),
            budget_total: budget,
            metrics,
            buffers: Mutex::new(FxHashMap::default()),
            next_buffer: AtomicU64::new(1),
            attached: Mutex::new(Vec::new()),
            lanes: Arc::new(AtomicUsize::new(0)),
            lane_generation: Mutex::new(Arc::new(tokio::sync::watch::Sender::new(false))),
            ended: tokio::sync::watch::Sender::new(false),
            held: Arc::new(AtomicU64::new(0)),
            quota,
            vmm: vmm::Table::default(),
            arrays: arrays::Table::default(),
            exports: self.exports.clone(),
        });
        self.sessions.lock().expect("registry poisoned").insert(id, Arc::downgrade(&session));
        (session, rejoined)
    }

    /// The live session `id` if `token` is its secret.
    pub fn find(&self, id: SessionId, token: &[u8; 16]) -> Option<Arc<Session>> {
        self.get(id).filter(|session| session.owns(token))
    }

    /// The live (or held) session `id`, whoever asks: check [`Session::owns`] before use.
    pub fn get(&self, id: SessionId) -> Option<Arc<Session>> {
        self.sessions.lock().expect("registry poisoned").get(&id)?.upgrade()
    }

    /// Ends every session opened with capability `id`.
    pub fn revoke(&self, id: u64) -> usize {
        let sessions: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .expect("registry poisoned")
            .values()
            .filter_map(Weak::upgrade)
            .filter(|s| s.capability == Some(id))
            .collect();
        for session in &sessions {
            session.close_with(close::UNAUTHORIZED, "allocation revoked by the resource manager");
        }
        self.images.forget(crate::session::images::Owner::Capability(id));
        sessions.len()
    }

    /// Forgets a session.
    pub fn remove(&self, id: SessionId) {
        self.sessions.lock().expect("registry poisoned").remove(&id);
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.sessions.lock().expect("registry poisoned").values().filter(|w| w.strong_count() > 0).count()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn random_token() -> [u8; 16] {
    use ring::rand::SecureRandom;
    let mut token = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut token).expect("system randomness");
    token
}

/// One lane of a session counted in ([`Session::attach_lane`]) until it drops; its task holds it
/// for as long as it serves the lane.
#[derive(Debug)]
pub struct LaneTicket {
    count: Arc<AtomicUsize>,
    /// Turns true when the session resumed on a new connection ([`Session::retire_lanes`]).
    retired: tokio::sync::watch::Receiver<bool>,
}

impl LaneTicket {
    /// Returns once the lane is retired: the session resumed since it attached.
    pub async fn retired(&mut self) {
        // A generation's sender lives as long as a session holds it, or as its retirement.
        let _ = self.retired.wait_for(|retired| *retired).await;
    }
}

impl Drop for LaneTicket {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::device::CpuDevice;

    fn session() -> Arc<Session> {
        let device = Arc::new(CpuDevice::new(0, 1 << 20));
        let context = device.open_context().unwrap();
        let limits = Limits { budget: 1 << 20, quota: None };
        let (fences, _asked) = Fences::channel();
        let metrics = Arc::new(Metrics::default());
        Registry::default().open(context, CopySettings::default(), (None, 0, device), fences, limits, metrics).0
    }

    /// A resumption waits until every lane attached before it has stopped, and lanes attached
    /// after it are not retired with them.
    #[tokio::test]
    async fn a_resumption_retires_the_lanes_attached_before_it_and_waits_until_they_stopped() {
        let session = session();
        let mut old = session.attach_lane(4).expect("room for a lane");
        let retiring = {
            let session = session.clone();
            tokio::spawn(async move { session.retire_lanes().await })
        };
        tokio::time::timeout(Duration::from_secs(5), old.retired()).await.expect("the old lane is told it is retired");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!retiring.is_finished(), "the resumption waits while the old lane's task still holds it");
        let mut new = session.attach_lane(4).expect("room for a lane");
        drop(old);
        tokio::time::timeout(Duration::from_secs(5), retiring).await.expect("the resumption goes on").unwrap();
        let still = tokio::time::timeout(Duration::from_millis(50), new.retired()).await;
        assert!(still.is_err(), "a lane attached since is not retired");
    }
}
