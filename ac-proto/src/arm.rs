// shape: the ARM protocol's every message in one file, so that what a protocol version changes
// is read in one place; plain data and its documentation, no logic.
//! The protocol of the Accelerator Resource Manager (ARM), version [`VERSION`], ALPN [`ALPN`].
//!
//! Every request travels on its own bidirectional stream: one [`ArmRequest`] frame, then one
//! [`ArmResponse`] frame back. Program requests (`AC_Init`, `AC_Get`, ...) authenticate with a job
//! credential or a session token; administrative requests need the connection to present an
//! admin client certificate (mutual TLS). A program's connection is its lease: when it stays
//! silent past the lease time, its dynamic allocations are released.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// The protocol version spoken by this build.
pub const VERSION: u16 = 10;
/// The oldest version the manager still answers, so that programs and `armctl` of the last
/// release keep working through a rolling upgrade; a client refused in [`VERSION`] asks again
/// one version lower each time, down to this one. A new version only appends variants to [`Request`] and [`Response`] (and
/// answers the new requests only), so the encodings of the version before stay valid. 5 added
/// [`Request::ManagerKey`]; 6 added [`Request::Devices`] and [`Request::ClearDevice`]; 7 added
/// [`Request::GetElastic`]; 8 added [`Request::LentUntil`]; 9 added
/// [`Request::ClusterStatus`] and [`ArmErrorKind::NotLeader`] (older clients are told it as
/// [`ArmErrorKind::Internal`]); 10 added [`Request::ClusterAdd`], [`Request::ClusterRemove`] and
/// [`Request::ClusterReplace`].
pub const MIN_VERSION: u16 = 4;
/// The ALPN of the ARM service.
pub const ALPN: &[u8] = b"ac-arm";

/// One request: the version travels with every request so a mismatch is reported, not guessed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArmRequest {
    /// The sender's protocol version.
    pub version: u16,
    /// What is asked.
    pub request: Request,
}

/// How a program proves which job it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobAuth {
    /// A job submitted by the batch system; the secret came through the environment.
    Credential {
        /// The job id.
        job: String,
        /// The job credential returned by `job submit`.
        secret: String,
    },
    /// No batch system: create a job for this process with `acpn` accelerators.
    AdHoc {
        /// Accelerators wanted.
        acpn: u32,
    },
    /// A process of a batch-system job (Slurm) proving its Unix user with a munge credential
    /// whose payload is [`munge_payload`]`(job, node)`; the job must be bound by the batch
    /// system's prolog ([`Request::JobBind`]) for that user.
    Munge {
        /// The batch system's job id.
        job: String,
        /// The munge credential (base64 text, as `munge` prints it).
        credential: String,
    },
    /// Another process of the program that opened the session with `token` (an MPI rank):
    /// a session of the same job. An ad-hoc job ends when its last session does.
    SameJob {
        /// The first session's token, shared by the program's processes.
        token: String,
    },
}

/// Requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// `AC_Init`: open a session for `node` of a job. Answers [`Response::Session`].
    Init {
        /// The job.
        auth: JobAuth,
        /// The compute node this process runs on.
        node: String,
        /// The session token, chosen by the client: at least [`MIN_TOKEN_LEN`] random characters.
        /// It is also the request's idempotency key: an `Init` retried with the same token
        /// finds the session the first one opened.
        token: String,
    },
    /// Ask again about a session (while queued, or after reconnecting). Answers
    /// [`Response::Session`].
    Poll {
        /// The session token.
        token: String,
    },
    /// `AC_Get`: between `ask.min` and `ask.max` more accelerators. Answers
    /// [`Response::Granted`], [`Response::Rejected`], or, when `ask.wait_s > 0` and nothing
    /// can be granted now, [`Response::Waiting`] (then ask [`Request::AwaitGet`]).
    Get {
        /// The session token.
        token: String,
        /// What is asked.
        ask: Ask,
    },
    /// Collective `AC_Get` for several nodes of the job: all or nothing, one set.
    CollectiveGet {
        /// The session token.
        token: String,
        /// (node, count) of every participant.
        parts: Vec<(String, u32)>,
        /// Idempotency key (see [`Ask::key`]).
        key: String,
    },
    /// Waits (up to about a second) for the answer to a waiting `AC_Get`. Answers
    /// [`Response::Granted`], [`Response::Rejected`] or [`Response::Waiting`] again.
    AwaitGet {
        /// The session token.
        token: String,
        /// The request id from [`Response::Waiting`].
        request: u64,
    },
    /// The program stopped waiting for a waiting `AC_Get` (its deadline passed): withdraw it.
    /// Answers [`Response::Granted`] when it was granted meanwhile, else [`Response::Rejected`].
    CancelGet {
        /// The session token.
        token: String,
        /// The request id from [`Response::Waiting`].
        request: u64,
    },
    /// A participant of a collective set asks for its node's share. Answers [`Response::Granted`].
    JoinSet {
        /// The session token.
        token: String,
        /// The set.
        set: u64,
    },
    /// `AC_Free`: release a set, or some of its accelerators.
    Free {
        /// The session token.
        token: String,
        /// The set.
        set: u64,
        /// Only these accelerators (not allowed for collective sets).
        accelerators: Option<Vec<String>>,
    },
    /// `AC_Finalize`: release every dynamic set of the session and end it.
    Finalize {
        /// The session token.
        token: String,
    },
    /// Admin: register a backend.
    HostAdd {
        /// Its address.
        addr: SocketAddr,
        /// Its name (unique).
        name: String,
        /// The name in its certificate.
        server_name: String,
        /// The CA that signed its certificate (PEM).
        ca_pem: String,
        /// Labels.
        labels: Vec<(String, String)>,
    },
    /// Admin: every host.
    HostList,
    /// Admin: stop (or resume) new allocations on a host.
    HostDrain {
        /// The host.
        name: String,
        /// Drain (true) or resume (false).
        drain: bool,
    },
    /// Admin: remove a host; only when idle unless `force`, which revokes its allocations.
    HostRemove {
        /// The host.
        name: String,
        /// Revoke allocations.
        force: bool,
    },
    /// Admin (what a batch system calls before the job starts): queue a static request.
    JobSubmit {
        /// The job id.
        id: String,
        /// Its compute nodes.
        nodes: Vec<String>,
        /// Accelerators per node.
        acpn: u32,
        /// The user.
        user: String,
        /// Walltime, seconds (0: none).
        walltime_s: u64,
        /// The user's group (account) for fairness limits; `None`: the ARM's `[accounts]`
        /// table, else the user's own name.
        group: Option<String>,
        /// Run inside this advance reservation (of the same user): the job is planned at the
        /// reservation's start, on its accelerators.
        reservation: Option<u64>,
        /// A pre-allocation (CooRMv2): this many accelerators in all are set aside when the job
        /// starts; it grows into them without asking the fairness policy, and others may borrow
        /// the unused ones preemptibly.
        peak: Option<u32>,
    },
    /// Admin (the batch system's prolog): bind a job the batch system is starting, now or not
    /// at all (`Conflict` when its accelerators cannot be bound now). `acpn` may be 0: the job
    /// holds nothing static and may still ask for accelerators at run time. Its processes prove
    /// their user (`uid`) with munge ([`JobAuth::Munge`]). Answers [`Response::Done`].
    JobBind {
        /// The batch system's job id.
        id: String,
        /// Its compute nodes.
        nodes: Vec<String>,
        /// Accelerators per node.
        acpn: u32,
        /// The user's name.
        user: String,
        /// The user's Unix uid.
        uid: u32,
        /// Walltime, seconds (0: none).
        walltime_s: u64,
    },
    /// Admin: end a job, releasing everything it holds.
    JobEnd {
        /// The job id.
        id: String,
    },
    /// Waits (up to about a second) for news of this session: accelerators of its preemptible
    /// sets taken back by their owners. Answers [`Response::Notices`] (possibly empty).
    Notices {
        /// The session token.
        token: String,
    },
    /// Admin: the jobs, ended ones only when `all`.
    JobList {
        /// Include ended jobs (kept for the configured retention).
        all: bool,
    },
    /// Admin: one job.
    JobShow {
        /// The job id.
        id: String,
    },
    /// Admin: reserve `count` accelerators from `start` for `duration_s`, for a user's jobs or
    /// one queued job. Refused when it does not fit beside running jobs and other reservations.
    /// Answers [`Response::Reservation`].
    ReservationCreate {
        /// Accelerators.
        count: u32,
        /// Unix time of the start (in the future).
        start: u64,
        /// Length, seconds.
        duration_s: u64,
        /// For this user's jobs (submitted with `reservation`), or ...
        user: Option<String>,
        /// ... for this queued job.
        job: Option<String>,
    },
    /// Admin: every reservation not yet over.
    ReservationList,
    /// Admin: delete a reservation; its jobs are planned as ordinary jobs again.
    ReservationDelete {
        /// The reservation.
        id: u64,
    },
    /// Where the accelerators a job already holds on `node` are, without capabilities and
    /// without changing anything: `AC_Init` asks it beside `Init`, and runs the handshakes with
    /// those backends while the manager commits the session. Answers [`Response::Routes`];
    /// empty for anything but a job credential.
    Routes {
        /// The job's credential, checked as `Init` checks it.
        auth: JobAuth,
        /// The compute node.
        node: String,
    },
    /// Admin: what the manager finds wrong with its surroundings now (a batch system's pool
    /// that disagrees with its own, a batch system it cannot reach). Answers
    /// [`Response::Health`].
    Health,
    /// Admin: accelerator time per user, group or job, static and dynamic apart, in the window
    /// `[since_ms, until_ms)` (Unix milliseconds; `None`: from the first record, up to now).
    /// Holdings still open count up to now. Answers [`Response::Accounting`].
    Accounting {
        /// Start of the window (inclusive).
        since_ms: Option<u64>,
        /// End of the window (exclusive).
        until_ms: Option<u64>,
        /// What the rows are.
        by: UsageBy,
    },
    /// The manager's public key, which backends pin (`arm_public_key`); anyone may ask, as it
    /// is public. Answers [`Response::ManagerKey`]. Protocol 5.
    ManagerKey,
    /// Admin: every accelerator's identity, health, compute mode and sessions, as its backend
    /// last reported them. Answers [`Response::Devices`]. Protocol 6.
    Devices,
    /// Admin: put an accelerator that its backend reported faulty (a critical Xid) back in the
    /// pool. A condition that persists (a lost GPU) keeps it out all the same. Answers
    /// [`Response::Done`]. Protocol 6.
    ClearDevice {
        /// `host/index`.
        accelerator: String,
    },
    /// An elastic `AC_Get`: answered as [`Request::Get`], but the accelerators are lent. When a
    /// queued job could start with them, the manager reclaims some: the program is told (a
    /// [`Preemption`] notice, [`Request::Notices`]) and frees them by `revoke_at`, or loses
    /// them then; it gets at least `notice_s` seconds. A request that waits
    /// (`ask.wait_s > 0`) is an offer: it is granted what no queued job can start on. Protocol 7.
    GetElastic {
        /// The session token.
        token: String,
        /// What is asked.
        ask: Ask,
        /// The least notice a reclaim gives, seconds.
        notice_s: u64,
    },
    /// Until when the plan leaves set `set`, lent by [`Request::GetElastic`], to its program:
    /// the earliest planned start of a queued job (a reclaim, with its notice, falls due by
    /// then at the latest, or sooner for a job that arrives meanwhile). Answers
    /// [`Response::LentUntil`]. Protocol 8.
    LentUntil {
        /// The session token.
        token: String,
        /// The set.
        set: u64,
    },
    /// The replicated manager's members, leader, term and each member's progress, as the
    /// replica asked knows them (any replica answers; the leader knows each one's lag). Needs
    /// the admin role. Answers [`Response::Cluster`]. Protocol 9.
    ClusterStatus,
    /// Adds a replica to a replicated manager as a learner (it receives the log, votes for
    /// nothing), its client address and signing key replicated to every replica. Answered at
    /// once by the leader with [`Response::Cluster`], the new replica's progress in it: ask
    /// again (nothing is done twice) until it has caught up ([`CAUGHT_UP_LAG`]). Needs the
    /// admin role. Protocol 10.
    ClusterAdd {
        /// The new replica.
        replica: NewReplica,
    },
    /// Removes replica `id` from a replicated manager (a voter or a learner; not the leader,
    /// nor the last voter). Answers [`Response::Cluster`]. Needs the admin role. Protocol 10.
    ClusterRemove {
        /// The replica.
        id: u64,
    },
    /// Replaces voter `old` by `new`: adds `new` as [`Request::ClusterAdd`] does, and once it
    /// has caught up, makes it a voter in `old`'s place in one membership change. Answers
    /// [`Response::Cluster`]: ask again until `new` votes and `old` is gone. Needs the admin
    /// role. Protocol 10.
    ClusterReplace {
        /// The voter replaced (typically dead).
        old: u64,
        /// Its replacement.
        new: NewReplica,
    },
}

/// A replica joining a replicated manager (`[replication]` with `join = true` in its
/// configuration): its entry of `members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewReplica {
    /// Its id, unused in the cluster so far.
    pub id: u64,
    /// Where it serves the other replicas (Raft).
    pub raft: SocketAddr,
    /// Where it serves programs and admins.
    pub api: SocketAddr,
    /// Its capability signing key's public half, 64 hex digits.
    pub key: String,
}

/// A learner whose log is at most this many entries behind the leader's has caught up: it may
/// become a voter (a few entries are always in flight on a busy manager).
pub const CAUGHT_UP_LAG: u64 = 64;

/// What the rows of [`Response::Accounting`] add up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UsageBy {
    /// One row per user.
    User,
    /// One row per group (account).
    Group,
    /// One row per job.
    Job,
}

/// One row of [`Response::Accounting`]: accelerator time, in accelerator-milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The user, group or job.
    pub key: String,
    /// The user of every record in the row (`None` when they differ).
    pub user: Option<String>,
    /// The group of every record in the row (`None` when they differ).
    pub group: Option<String>,
    /// Accelerator-milliseconds of accelerators bound before the job started.
    pub static_ms: u64,
    /// Accelerator-milliseconds of accelerators granted by `AC_Get`.
    pub dynamic_ms: u64,
}

/// Shortest session token [`Request::Init`] accepts.
pub const MIN_TOKEN_LEN: usize = 32;

/// What an `AC_Get` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    /// Fewest accelerators worth having (a partial grant gives `min..=max`).
    pub min: u32,
    /// Most wanted.
    pub max: u32,
    /// Wait up to this many seconds for them instead of being rejected at once (0: answer now).
    pub wait_s: u64,
    /// Borrow other jobs' idle pre-allocated accelerators, which their owners may take back.
    pub preemptible: bool,
    /// Idempotency key, random per request: the same request sent again (after a lost answer or
    /// a crash of the manager) gets the first answer, never a second set.
    pub key: String,
}

impl Ask {
    /// Exactly `count`, now.
    pub fn exactly(count: u32, key: String) -> Self {
        Self { min: count, max: count, wait_s: 0, preemptible: false, key }
    }
}

/// The reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArmResponse {
    /// Success.
    Ok(Response),
    /// Failure.
    Err(ArmError),
}

/// Successful answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Done.
    Done,
    /// A session and whether its static accelerators are bound yet.
    Session {
        /// The session token (keep it secret: it is the lease).
        token: String,
        /// The job.
        job: String,
        /// Bound or queued.
        state: SessionState,
    },
    /// Accelerators granted as one set.
    Granted {
        /// The set id.
        set: u64,
        /// The accelerators (for this node, or every node of a collective set).
        grants: Vec<Grant>,
    },
    /// Not enough free accelerators now.
    Rejected {
        /// Why.
        reason: String,
    },
    /// The `AC_Get` waits for accelerators (it asked to).
    Waiting {
        /// The request, for [`Request::AwaitGet`].
        request: u64,
        /// Accelerators idle now.
        idle: u32,
        /// Waiting requests ahead of it.
        ahead: u32,
        /// Unix time when it will be rejected if still waiting.
        deadline: u64,
    },
    /// A host.
    Host(HostView),
    /// Hosts.
    Hosts(Vec<HostView>),
    /// A submitted job and its credential.
    Submitted {
        /// The job id.
        id: String,
        /// The credential to hand to the job's processes (`ARM_JOB_CREDENTIAL`).
        credential: String,
    },
    /// A job.
    Job(Box<JobView>),
    /// Jobs.
    Jobs(Vec<JobView>),
    /// News of a session.
    Notices(Vec<Preemption>),
    /// A reservation.
    Reservation(ReservationView),
    /// Reservations.
    Reservations(Vec<ReservationView>),
    /// Where a job's accelerators are (see [`Request::Routes`]).
    Routes(Vec<Route>),
    /// Problems found, one sentence each; empty when there are none.
    Health(Vec<String>),
    /// Accelerator time in a window (see [`Request::Accounting`]).
    Accounting {
        /// Start of the window, Unix milliseconds.
        since_ms: u64,
        /// End of the window (exclusive), Unix milliseconds.
        until_ms: u64,
        /// Rows, by key.
        rows: Vec<UsageRow>,
    },
    /// The manager's Ed25519 public key, 64 hex digits (see [`Request::ManagerKey`]).
    ManagerKey(String),
    /// Every accelerator's state (see [`Request::Devices`]).
    Devices(Vec<DeviceView>),
    /// Unix time (seconds) until which the plan leaves a lent set to its program; `None`: no
    /// queued job is planned, or the set is not lent (see [`Request::LentUntil`]).
    LentUntil(Option<u64>),
    /// The replicated manager as one replica sees it (see [`Request::ClusterStatus`]).
    Cluster(ClusterStatus),
}

/// The replicated manager as one replica sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The replica that answered.
    pub replica: u64,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Its current term.
    pub term: u64,
    /// The last index in its log.
    pub last_log: Option<u64>,
    /// The last index it applied.
    pub applied: Option<u64>,
    /// Every member and learner.
    pub members: Vec<ClusterMember>,
}

/// One replica of the manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMember {
    /// Its id.
    pub id: u64,
    /// Where it serves the other replicas.
    pub raft: String,
    /// Where it serves programs and admins, when configured.
    pub api: Option<SocketAddr>,
    /// Whether it votes (a learner does not).
    pub voter: bool,
    /// The last log index the leader knows it holds (only the leader knows).
    pub matched: Option<u64>,
}

/// The answer of a replica that is not the leader: the leader's address for programs and
/// admins, when it knows it, in words [`leader_named`] reads back.
pub fn not_leader(leader: Option<SocketAddr>) -> ArmError {
    let message = match leader {
        Some(addr) => format!("this replica of the resource manager is not the leader; the leader is at {addr}"),
        None => "this replica of the resource manager is not the leader, and no leader is elected yet".to_string(),
    };
    ArmError::new(ArmErrorKind::NotLeader, message)
}

/// The leader's address a [`not_leader`] answer names.
pub fn leader_named(message: &str) -> Option<SocketAddr> {
    message.rsplit_once("the leader is at ").and_then(|(_, addr)| addr.trim().parse().ok())
}

/// One accelerator's identity, health and load as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceView {
    /// `host/index`.
    pub id: String,
    /// The GPU's or MIG instance's UUID.
    pub uuid: Option<String>,
    /// The GPU's PCI bus id.
    pub pci_bus_id: Option<String>,
    /// `healthy`, `unhealthy`, `unknown` (nothing watches it), or `unreported` (its backend
    /// has not said: down, or older than protocol 6).
    pub health: String,
    /// Why it is unhealthy or unknown.
    pub reason: Option<String>,
    /// `default`, `exclusive_process`, `prohibited`, or `n/a`.
    pub compute_mode: String,
    /// Its MIG profile, for a MIG instance.
    pub mig_profile: Option<String>,
    /// Memory, bytes.
    pub memory: u64,
    /// Sessions open on it now.
    pub sessions: u32,
    /// The most sessions its backend admits at once.
    pub max_sessions: u32,
}

/// Where one accelerator is: enough to run the QUIC handshake with its backend, not to use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The accelerator's id (`host/device`), as its [`Grant`] will name it.
    pub id: String,
    /// The backend's address.
    pub addr: SocketAddr,
    /// The name in the backend's certificate.
    pub server_name: String,
    /// The CA that signed the backend's certificate (PEM).
    pub ca_pem: String,
}

/// Accelerators taken back from a set: from a preemptible set, by the owner of the
/// pre-allocation it borrowed; from an elastic set ([`Request::GetElastic`]), for a queued job.
/// The program may go on using them until `revoke_at`, and should free them before: then
/// their capabilities are revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// The borrower's set.
    pub set: u64,
    /// The accelerators taken back.
    pub accelerators: Vec<String>,
    /// Unix time when their capabilities are revoked.
    pub revoke_at: u64,
}

/// An advance reservation as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationView {
    /// Its id.
    pub id: u64,
    /// Accelerators reserved.
    pub count: u32,
    /// Unix time of the start.
    pub start: u64,
    /// Length, seconds.
    pub duration_s: u64,
    /// The user whose jobs may use it.
    pub user: String,
    /// The jobs planned in it.
    pub jobs: Vec<String>,
    /// `planned` or `active`.
    pub state: String,
}

/// A session's static allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionState {
    /// Bound: this node's accelerators, in a stable order.
    Bound(Vec<Grant>),
    /// Waiting for free accelerators.
    Queued {
        /// Jobs ahead of this one.
        position: u32,
        /// Accelerators the job needs.
        needed: u32,
        /// Accelerators free now.
        free: u32,
        /// When the scheduler's plan expects the job to start (Unix time), if it can.
        expected_start: Option<u64>,
    },
}

/// One accelerator handed to a program: where it is and the capability to use it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The accelerator's id (`host/device`).
    pub id: String,
    /// The device index on the backend.
    pub device: u32,
    /// The compute node it is for.
    pub node: String,
    /// The backend's address.
    pub addr: SocketAddr,
    /// The name in the backend's certificate.
    pub server_name: String,
    /// The CA that signed the backend's certificate (PEM).
    pub ca_pem: String,
    /// The signed capability to present when opening a session.
    pub capability: Vec<u8>,
}

/// A host as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostView {
    /// Its name.
    pub name: String,
    /// Its address.
    pub addr: SocketAddr,
    /// `up`, `down`, `draining`, or `mismatch` (its backend serves other devices than it was
    /// registered with: `armctl health` names the difference).
    pub state: String,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// Its accelerators.
    pub accelerators: Vec<AcceleratorView>,
}

/// An accelerator as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceleratorView {
    /// `host/device`.
    pub id: String,
    /// Device name.
    pub device: String,
    /// Memory, bytes.
    pub memory: u64,
    /// `free`, `allocated`, `draining` or `down`.
    pub state: String,
    /// The job holding it.
    pub holder: Option<String>,
}

/// A job as admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    /// Its id.
    pub id: String,
    /// Its user.
    pub user: String,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Accelerators per node.
    pub acpn: u32,
    /// The group (account) its fairness limits are charged to.
    pub group: String,
    /// `queued`, `running` or `ended`.
    pub state: String,
    /// Unix time of submission.
    pub submitted: u64,
    /// Walltime, seconds (0: none).
    pub walltime_s: u64,
    /// For a queued job, when the scheduler's plan expects it to start (Unix time).
    pub expected_start: Option<u64>,
    /// (node, accelerator) bound statically.
    pub static_accelerators: Vec<(String, String)>,
    /// (set, accelerator) held dynamically.
    pub dynamic_accelerators: Vec<(u64, String)>,
    /// `AC_Get` requests of the job waiting for accelerators.
    pub waiting_requests: u32,
    /// The advance reservation it runs in.
    pub reservation: Option<u64>,
    /// Its pre-allocation in all, if it has one.
    pub peak: Option<u32>,
    /// Pre-allocated accelerators it does not use: spare, or lent to another job.
    pub preallocated_unused: Vec<String>,
}

/// Error categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArmErrorKind {
    /// Missing or wrong credential, token or admin certificate.
    Unauthorized,
    /// No such host, job, session or set.
    NotFound,
    /// The request conflicts with the current state (duplicate id, host busy).
    Conflict,
    /// The request is malformed or impossible (more accelerators than exist).
    Invalid,
    /// The peer speaks another protocol version.
    VersionMismatch,
    /// A backend could not be reached or refused.
    Backend,
    /// The batch system (Slurm) could not be reached or refused.
    BatchSystem,
    /// The ARM failed (storage).
    Internal,
    /// This replica of a replicated manager is not the leader: ask the leader (its address in
    /// the message, [`leader_named`]). Protocol 9.
    NotLeader,
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct ArmError {
    /// The category.
    pub kind: ArmErrorKind,
    /// What happened.
    pub message: String,
}

impl ArmError {
    /// Builds an error.
    pub fn new(kind: ArmErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// What a munge credential for `AC_Init` carries: it ties the credential to one job and node.
pub fn munge_payload(job: &str, node: &str) -> String {
    format!("ac-arm:{job}:{node}")
}
