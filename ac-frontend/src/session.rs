//! A program's session with the resource manager: `AC_Init`, `AC_Get`, `AC_Free`,
//! `AC_Finalize`. Handles are ordinary [`Accelerator`]s, connected with the capabilities the
//! manager issued; they keep working, unchanged, across `get` and `free`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ac_proto::arm::{Grant, JobAuth, Preemption, Request, Response, SessionState};
use ac_proto::transport;
use ac_proto::transport::Tuning;
use futures_util::future::try_join_all;
use quinn::Endpoint;
use tokio::sync::mpsc;

use crate::arm::{ArmClient, ArmOptions};
use crate::task::Owned;
use crate::{link, Accelerator, ConnectOptions, Error, Result};

mod get;

/// How to start a session.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The resource manager.
    pub arm: ArmOptions,
    /// The job (credential from the batch system, or an ad-hoc job).
    pub job: JobAuth,
    /// This compute node's name.
    pub node: String,
    /// Give up waiting for static accelerators after this long (`None`: wait).
    pub init_timeout: Option<Duration>,
    /// Connections per accelerator for striped copies.
    pub stripes: usize,
    /// Print progress while queued.
    pub progress: bool,
}

impl SessionOptions {
    /// Options from the environment: `ARM_ADDR` (one address, or several routes to the same
    /// manager separated by commas), `ARM_CA_CERT`, then one of: `ARM_JOB_ID` and
    /// `ARM_JOB_CREDENTIAL` (a job submitted to the ARM); `ARM_JOB_ID` and `ARM_AUTH=munge` (a
    /// Slurm job: the SPANK plugin sets these, and `ARM_MUNGE_SOCKET` if munged listens
    /// elsewhere); `ARM_ACPN` (an ad-hoc job, the embedded default). Optionally `ARM_NODE`
    /// (default: the host name), `ARM_INIT_TIMEOUT_S`, `AC_STRIPES`, and the transport settings
    /// of [`ac_proto::transport::ENV_SETTINGS`] (`AC_MTU`, `AC_IDLE_TIMEOUT_MS`, ...).
    pub fn from_env() -> Result<Self> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let need = |name: &str| var(name).ok_or_else(|| Error::Setup(format!("{name} is not set")));
        let (addr, alternates) =
            crate::arm::parse_addresses(&need("ARM_ADDR")?).map_err(|e| Error::Setup(format!("ARM_ADDR: {e}")))?;
        let mut arm = ArmOptions::new(addr, need("ARM_CA_CERT")?);
        arm.alternates = alternates;
        arm.tuning = Tuning::default().with_env()?;
        let node = var("ARM_NODE")
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
            .unwrap_or_else(|| "localhost".into());
        let munge = var("ARM_AUTH").is_some_and(|a| a == "munge");
        let job = match (var("ARM_JOB_ID"), var("ARM_JOB_CREDENTIAL"), var("ARM_ACPN")) {
            (Some(job), _, _) if munge => {
                let credential = munge_credential(&job, &node, var("ARM_MUNGE_SOCKET").as_deref())?;
                JobAuth::Munge { job, credential }
            }
            (Some(job), Some(secret), _) => JobAuth::Credential { job, secret },
            (_, _, Some(acpn)) => {
                JobAuth::AdHoc { acpn: acpn.parse().map_err(|e| Error::Setup(format!("ARM_ACPN: {e}")))? }
            }
            _ => {
                return Err(Error::Setup(
                    "set ARM_JOB_ID with ARM_JOB_CREDENTIAL or ARM_AUTH=munge (batch job), or ARM_ACPN".into(),
                ))
            }
        };
        let init_timeout = var("ARM_INIT_TIMEOUT_S")
            .map(|s| {
                s.parse().map(Duration::from_secs_f64).map_err(|e| Error::Setup(format!("ARM_INIT_TIMEOUT_S: {e}")))
            })
            .transpose()?;
        let stripes = var("AC_STRIPES").map(|s| s.parse().unwrap_or(1)).unwrap_or(1);
        Ok(Self { arm, job, node, init_timeout, stripes, progress: true })
    }
}

/// A munge credential of this process's user for `AC_Init` of `job` on `node` (from munge's own
/// `munge` command, which asks the local munged at `socket`, or its default one).
pub fn munge_credential(job: &str, node: &str, socket: Option<&str>) -> Result<String> {
    let mut command = std::process::Command::new("munge");
    command.arg("--string").arg(ac_proto::arm::munge_payload(job, node));
    if let Some(socket) = socket {
        command.arg("--socket").arg(socket);
    }
    let output = command.output().map_err(|e| Error::Setup(format!("cannot run munge (is it installed?): {e}")))?;
    if !output.status.success() {
        return Err(Error::Setup(format!("munge failed: {}", String::from_utf8_lossy(&output.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// One accelerator handed to this program.
#[derive(Debug, Clone)]
pub struct Handle {
    /// The accelerator's id (`host/device`).
    pub id: String,
    /// The connected accelerator.
    pub acc: Accelerator,
}

/// Accelerators obtained together by `get`.
#[derive(Debug)]
pub struct DynamicSet {
    /// The set's id (shared by every participant of a collective set).
    pub id: u64,
    /// This node's accelerators of the set.
    pub handles: Vec<Handle>,
    /// A lent (elastic) set: Unix time (seconds) until which the manager's plan leaves it to
    /// the program, the earliest planned start of a queued job: a reclaim (with its notice)
    /// falls due by then at the latest, or sooner for a job that arrives meanwhile. `None`: a
    /// firm set, no queued job planned, or a manager older than protocol 8.
    pub until: Option<u64>,
}

/// Where the preemptions of a session's loans go: to the program, if it listens.
type Listener = Arc<Mutex<Option<mpsc::UnboundedSender<Preemption>>>>;

/// The task that watches the manager for news of the session; stopped with the session.
#[derive(Debug)]
struct Watcher {
    _task: Owned<()>,
}

/// A program's session. Its `Debug` leaves the token out (a credential of the job).
pub struct Session {
    client: Arc<ArmClient>,
    listener: Listener,
    _watcher: Watcher,
    token: String,
    job: String,
    node: String,
    stripes: usize,
    tuning: Tuning,
    endpoint: Endpoint,
    handles: Vec<Handle>,
    progress: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("job", &self.job)
            .field("node", &self.node)
            .field("handles", &self.handles)
            .finish_non_exhaustive()
    }
}

/// How to reach the backend at `addr` over the session's shared endpoint (a new endpoint when
/// the shared one speaks the other address family).
fn backend_options(
    addr: SocketAddr,
    server_name: &str,
    ca_pem: &str,
    tuning: &Tuning,
    endpoint: &Endpoint,
) -> ConnectOptions {
    let mut options = ConnectOptions::new(addr, "");
    options.server_name = server_name.to_string();
    options.ca_pem = Some(ca_pem.to_string());
    options.tuning = tuning.clone();
    let same_family = endpoint.local_addr().is_ok_and(|local| local.is_ipv6() == addr.is_ipv6());
    options.endpoint = same_family.then(|| endpoint.clone());
    options
}

/// Connects to granted accelerators in parallel, over the session's shared endpoint, opening
/// each session on its connection in `dialed` when there is one.
async fn connect_grants(
    grants: &[Grant],
    stripes: usize,
    tuning: &Tuning,
    endpoint: &Endpoint,
    mut dialed: HashMap<String, link::Dialed>,
) -> Result<Vec<Handle>> {
    try_join_all(grants.iter().map(|g| {
        let ready = dialed.remove(&g.id).filter(|d| d.connection.remote_address() == g.addr);
        async move {
            let mut options = backend_options(g.addr, &g.server_name, &g.ca_pem, tuning, endpoint);
            options.capability = g.capability.clone();
            options.device = g.device;
            options.stripes = stripes;
            Ok::<_, Error>(Handle { id: g.id.clone(), acc: Accelerator::connect_via(&options, ready).await? })
        }
    }))
    .await
}

/// The grants `select` picks by their ids, in its order; an index past them or one picked twice
/// is refused.
fn picked(
    grants: &[Grant],
    select: impl FnOnce(&[String]) -> std::result::Result<Vec<usize>, String>,
) -> std::result::Result<Vec<Grant>, String> {
    let ids: Vec<String> = grants.iter().map(|g| g.id.clone()).collect();
    let picks = select(&ids)?;
    let mut seen = HashSet::new();
    match picks.iter().all(|&i| i < grants.len() && seen.insert(i)) {
        true => Ok(picks.into_iter().map(|i| grants[i].clone()).collect()),
        false => Err(format!("picked {picks:?} of {} accelerators: each at most once", grants.len())),
    }
}

/// Asks the manager where the job's accelerators on this node are and runs the handshakes with
/// their backends, while `Init` is being committed: the connections `connect_grants` then opens
/// sessions on. Best effort: whatever fails here is dialed again once the grants are known.
async fn dial_routes(
    client: &ArmClient,
    auth: &JobAuth,
    node: &str,
    tuning: &Tuning,
    endpoint: &Endpoint,
) -> HashMap<String, link::Dialed> {
    let Ok(Response::Routes(routes)) =
        client.request(Request::Routes { auth: auth.clone(), node: node.to_string() }).await
    else {
        return HashMap::new();
    };
    let dials = routes.into_iter().map(|route| async move {
        let options = backend_options(route.addr, &route.server_name, &route.ca_pem, tuning, endpoint);
        let shared = options.endpoint.as_ref()?;
        let crypto = link::client_crypto(&options).ok()?;
        let connection = link::dial(&options, crypto.clone(), shared).await.ok()?;
        Some((route.id, link::Dialed { connection, crypto }))
    });
    futures_util::future::join_all(dials).await.into_iter().flatten().collect()
}

impl Session {
    /// `AC_Init`: opens the session and waits until this node's static accelerators are bound,
    /// then connects to them in parallel.
    #[doc(alias = "AC_Init")]
    pub async fn init(options: SessionOptions) -> Result<Self> {
        Self::init_selecting(options, |ids| Ok((0..ids.len()).collect())).await
    }

    /// [`Session::init`] that opens sessions only on the accelerators `select` picks from the
    /// node's static ones (their ids, in the stable order of [`Session::accelerators`]), in the
    /// order it gives them: a process that uses some of its job's accelerators (one rank a GPU,
    /// as `CUDA_VISIBLE_DEVICES` says) holds no session on the others, which its job's other
    /// processes may need (a device in exclusive mode serves one session). The others stay the
    /// job's. A refusal by `select` ends the session with the manager and is a setup error.
    pub async fn init_selecting(
        options: SessionOptions,
        select: impl FnOnce(&[String]) -> std::result::Result<Vec<usize>, String>,
    ) -> Result<Self> {
        let mut select = Some(select);
        let start = Instant::now();
        // Made while the manager's handshake runs, and shared by every accelerator's connection.
        let endpoint_for = |addr| transport::client_endpoint(addr, None, &options.arm.tuning);
        let (client, endpoint) =
            tokio::join!(ArmClient::connect(options.arm.clone()), async { endpoint_for(options.arm.addr) });
        let (client, endpoint) = (client?, endpoint?);
        // The token is ours: an `Init` retried after a lost answer finds the same session.
        let token = ac_proto::random_hex(32);
        let init = client.request(Request::Init { auth: options.job.clone(), node: options.node.clone(), token });
        // The handshakes with the job's backends run while the manager commits the session.
        let dialing = dial_routes(&client, &options.job, &options.node, &options.arm.tuning, &endpoint);
        let (response, mut dialed) = tokio::join!(init, dialing);
        let mut response = response?;
        let mut last_report = None;
        loop {
            let Response::Session { token, job, state } = response else {
                return Err(Error::Protocol(format!("expected a session, got {response:?}")));
            };
            match state {
                SessionState::Bound(grants) => {
                    let select = select.take().expect("a session is bound once");
                    let grants = match picked(&grants, select) {
                        Ok(grants) => grants,
                        Err(why) => {
                            let _ = client.request(Request::Finalize { token }).await;
                            return Err(Error::Setup(why));
                        }
                    };
                    let dialed = std::mem::take(&mut dialed);
                    let connected =
                        connect_grants(&grants, options.stripes, &options.arm.tuning, &endpoint, dialed).await;
                    let handles = match connected {
                        Ok(handles) => handles,
                        Err(e) => {
                            // Bound at the manager but not usable here: the manager gives the
                            // accelerators back now rather than when the lease runs out.
                            let _ = client.request(Request::Finalize { token }).await;
                            return Err(e);
                        }
                    };
                    let client = Arc::new(client);
                    let listener = Listener::default();
                    let watcher =
                        Watcher { _task: Owned::spawn(watch(client.clone(), token.clone(), listener.clone())) };
                    return Ok(Self {
                        client,
                        listener,
                        _watcher: watcher,
                        token,
                        job,
                        node: options.node,
                        stripes: options.stripes,
                        tuning: options.arm.tuning,
                        endpoint,
                        handles,
                        progress: options.progress,
                    });
                }
                SessionState::Queued { position, needed, free, expected_start } => {
                    if options.progress && last_report != Some((position, free)) {
                        let eta = expected_start
                            .map(|t| {
                                format!(
                                    ", expected to start in {} s",
                                    t.saturating_sub(ac_proto::capability::unix_now())
                                )
                            })
                            .unwrap_or_default();
                        eprintln!(
                            "AC_Init: job {job} waits for {needed} accelerator(s): {free} free, {position} job(s) ahead{eta}"
                        );
                        last_report = Some((position, free));
                    }
                    if options.init_timeout.is_some_and(|t| start.elapsed() >= t) {
                        let _ = client.request(Request::Finalize { token }).await;
                        return Err(Error::Timeout(format!(
                            "job {job} was not bound in {:?}",
                            options.init_timeout.unwrap_or_default()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    response = client.request(Request::Poll { token }).await?;
                }
            }
        }
    }

    /// This node's statically allocated accelerators, in a stable order (those the selection
    /// picked, in its order, for a session opened by [`Session::init_selecting`]).
    pub fn accelerators(&self) -> &[Handle] {
        &self.handles
    }

    /// The job this session belongs to.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The compute node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The session's secret, which other processes of the program present to join its job
    /// (`JobAuth::SameJob`: MPI ranks of an ad-hoc job, a forked child of the CUDA shim's).
    /// Keep it as a credential: it opens sessions of the job.
    pub fn token(&self) -> &str {
        &self.token
    }

    async fn granted(&self, response: Response, node_only: bool) -> Result<Option<DynamicSet>> {
        Ok(self.granted_or_why(response, node_only).await?.ok())
    }

    /// The set granted, or why the manager rejected the request.
    async fn granted_or_why(&self, response: Response, node_only: bool) -> Result<Result<DynamicSet, String>> {
        match response {
            Response::Granted { set, grants } => {
                let mine: Vec<Grant> = grants.into_iter().filter(|g| !node_only || g.node == self.node).collect();
                self.connect(set, &mine).await.map(Ok)
            }
            Response::Rejected { reason } => Ok(Err(reason)),
            other => Err(Error::Protocol(format!("expected a grant, got {other:?}"))),
        }
    }

    /// Connects to `grants` of set `set`.
    pub(crate) async fn connect(&self, set: u64, grants: &[Grant]) -> Result<DynamicSet> {
        let handles = connect_grants(grants, self.stripes, &self.tuning, &self.endpoint, HashMap::new()).await?;
        Ok(DynamicSet { id: set, handles, until: None })
    }

    /// A collective set's id and every participant's grants, unconnected (`Err(reason)`:
    /// rejected, and why).
    pub(crate) async fn collective_grants(
        &self,
        parts: Vec<(String, u32)>,
    ) -> Result<Result<(u64, Vec<Grant>), String>> {
        let key = ac_proto::random_hex(16);
        match self.client.request(Request::CollectiveGet { token: self.token.clone(), parts, key }).await? {
            Response::Granted { set, grants } => Ok(Ok((set, grants))),
            Response::Rejected { reason } => Ok(Err(reason)),
            other => Err(Error::Protocol(format!("expected a grant, got {other:?}"))),
        }
    }

    /// Collective `AC_Get` for several nodes of the job: all or nothing, one set id, released
    /// only as a whole. Returns this node's share; other participants call [`Session::join_set`].
    pub async fn get_collective(&self, parts: &[(&str, u32)]) -> Result<Option<DynamicSet>> {
        let parts = parts.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        let Ok((set, grants)) = self.collective_grants(parts).await? else { return Ok(None) };
        let mine: Vec<Grant> = grants.into_iter().filter(|g| g.node == self.node).collect();
        self.connect(set, &mine).await.map(Some)
    }

    /// This node's share of a collective set obtained by another participant.
    pub async fn join_set(&self, set: u64) -> Result<DynamicSet> {
        let response = self.client.request(Request::JoinSet { token: self.token.clone(), set }).await?;
        self.granted(response, true).await?.ok_or_else(|| Error::Protocol("join refused".into()))
    }

    /// `AC_Free`: releases a whole set.
    #[doc(alias = "AC_Free")]
    pub async fn free(&self, set: DynamicSet) -> Result<()> {
        let id = set.id;
        close_handles(set.handles).await;
        let answer = self.client.request(Request::Free { token: self.token.clone(), set: id, accelerators: None });
        already_released_is_done(id, answer.await)
    }

    /// `AC_Free` of some handles of a set (by id); the others keep working. Ids not in the set
    /// are refused before anything is asked.
    pub async fn free_some(&self, set: &mut DynamicSet, ids: &[&str]) -> Result<()> {
        if let Some(stranger) = ids.iter().find(|id| !set.handles.iter().any(|h| h.id == **id)) {
            return Err(Error::InvalidArgument(format!("{stranger} is not in set {}", set.id)));
        }
        let accelerators: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        let request =
            Request::Free { token: self.token.clone(), set: set.id, accelerators: Some(accelerators.clone()) };
        already_released_is_done(set.id, self.client.request(request).await)?;
        let (gone, kept): (Vec<Handle>, Vec<Handle>) =
            set.handles.drain(..).partition(|h| accelerators.contains(&h.id));
        set.handles = kept;
        close_handles(gone).await;
        Ok(())
    }

    /// Preemptions of this session's preemptible sets: accelerators their owner took back,
    /// usable until `revoke_at`. Without a listener they are reported on stderr.
    pub fn preemptions(&self) -> mpsc::UnboundedReceiver<Preemption> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.listener.lock().expect("listener poisoned") = Some(tx);
        rx
    }

    /// `AC_Finalize` of another process of this job that died without it (its session's
    /// `token`, which it told this one): the manager forgets that process's session, so that the
    /// job's accelerators are not kept for it until its lease runs out. The future borrows
    /// nothing of `self`.
    pub fn finalize_other(&self, token: String) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let client = self.client.clone();
        async move { client.request(Request::Finalize { token }).await.map(drop) }
    }

    /// `AC_Finalize`: releases every dynamic set and ends the session.
    #[doc(alias = "AC_Finalize")]
    pub async fn finalize(self) -> Result<()> {
        drop(self._watcher);
        close_handles(self.handles).await;
        // The manager has released everything once this answer arrives: a program may exit
        // right after, and nothing is left behind (it also revokes the released capabilities,
        // which closes their sessions on the backends).
        let result = self.client.request(Request::Finalize { token: self.token.clone() }).await.map(drop);
        // The closes of the connections are a courtesy to the backends (a static accelerator's
        // session would otherwise end at its idle timeout): give the endpoint's driver a moment
        // to send them, not the whole draining period.
        let flushed = tokio::time::timeout(CLOSE_FLUSH, self.endpoint.wait_idle());
        let _ = tokio::join!(self.client.close_now(), flushed);
        result
    }
}

/// The answer to a `Free` of a set this program was granted. The manager answers `NotFound`
/// only when the set (or those of its accelerators) is no longer the job's: released by an
/// earlier attempt whose answer was lost with its connection (the request is asked again), or
/// revoked at a reclaim's deadline. Either way what the program asked is done.
fn already_released_is_done(set: u64, answer: Result<Response>) -> Result<()> {
    match answer {
        Err(Error::Manager { kind: ac_proto::arm::ArmErrorKind::NotFound, message }) => {
            tracing::debug!(set, message, "already released at the manager");
            Ok(())
        }
        other => other.map(drop),
    }
}

/// How long `AC_Finalize` lets the close frames leave (the draining period is 3 PTOs, tens of
/// ms on loopback; the frames go out within microseconds of the close).
const CLOSE_FLUSH: Duration = Duration::from_millis(2);

/// Asks the manager for news of the session (a long poll) until the session ends, and hands
/// each preemption to the program's listener, or to stderr, once: the manager tells again, on
/// a new connection, what it told on one that was lost, in case the answer was lost with it.
async fn watch(client: Arc<ArmClient>, token: String, listener: Listener) {
    let mut heard: HashSet<(u64, String)> = HashSet::new();
    loop {
        match client.request(Request::Notices { token: token.clone() }).await {
            Ok(Response::Notices(notices)) => {
                for mut notice in notices {
                    notice.accelerators.retain(|a| heard.insert((notice.set, a.clone())));
                    if !notice.accelerators.is_empty() {
                        tell(&listener, notice);
                    }
                }
            }
            // The session is gone (finalized, or its job ended): nothing more will come.
            Err(Error::Manager { kind: ac_proto::arm::ArmErrorKind::Unauthorized, .. }) => return,
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

fn tell(listener: &Listener, notice: Preemption) {
    let delivered =
        listener.lock().expect("listener poisoned").as_ref().is_some_and(|tx| tx.send(notice.clone()).is_ok());
    if !delivered {
        let left = notice.revoke_at.saturating_sub(ac_proto::capability::unix_now());
        eprintln!(
            "AC: the owner took back {} of preemptible set {}; they stop working in {left} s",
            notice.accelerators.join(", "),
            notice.set
        );
    }
}

async fn close_handles(handles: Vec<Handle>) {
    futures_util::future::join_all(handles.into_iter().map(|h| h.acc.close())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants() -> Vec<Grant> {
        let grant = |id: &str| Grant {
            id: id.into(),
            device: 0,
            node: "n1".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            server_name: "b".into(),
            ca_pem: String::new(),
            capability: Vec::new(),
        };
        vec![grant("b1/0"), grant("b1/1"), grant("b2/0")]
    }

    #[test]
    fn a_selection_picks_grants_in_its_order_each_at_most_once() {
        let ids = |g: Vec<Grant>| g.into_iter().map(|g| g.id).collect::<Vec<_>>();
        assert_eq!(ids(picked(&grants(), |_| Ok(vec![2, 0])).unwrap()), ["b2/0", "b1/0"]);
        assert!(picked(&grants(), |_| Ok(vec![1, 1])).unwrap_err().contains("each at most once"));
        assert!(picked(&grants(), |_| Ok(vec![3])).is_err(), "past the grants");
        assert_eq!(picked(&grants(), |_| Err("no".into())).unwrap_err(), "no");
        let mut seen = Vec::new();
        picked(&grants(), |ids| {
            seen = ids.to_vec();
            Ok(vec![])
        })
        .unwrap();
        assert_eq!(seen, ["b1/0", "b1/1", "b2/0"], "the selection is shown every grant's id");
    }
}
