//! The client side of the resource manager's protocol: one request per QUIC stream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ac_proto::arm::{ArmError, ArmErrorKind, ArmRequest, ArmResponse, Request, Response, ALPN, MIN_VERSION, VERSION};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::transport::Tuning;
use ac_proto::{tls, transport};
use quinn::{Connection, Endpoint};
use tokio::sync::Mutex;

use crate::{Error, Result};

/// The idle timeout a program offers on its manager connection: longer than any manager's
/// (half its lease), so that the manager's governs (QUIC takes the smaller of the two).
const IDLE_TO_THE_MANAGER_MS: u64 = 3_600_000;

/// How long one request may take before the connection is considered dead.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether `request` came after protocol `MIN_VERSION`, so that a manager of that version cannot
/// be asked it.
/// The protocol version that introduced `request`: older managers cannot answer it.
fn introduced_in(request: &Request) -> u16 {
    match request {
        Request::ManagerKey => 5,
        Request::Devices | Request::ClearDevice { .. } => 6,
        Request::GetElastic { .. } => 7,
        Request::LentUntil { .. } => 8,
        Request::ClusterStatus => 9,
        Request::ClusterAdd { .. } | Request::ClusterRemove { .. } | Request::ClusterReplace { .. } => 10,
        _ => MIN_VERSION,
    }
}

/// How to reach the resource manager.
#[derive(Debug, Clone)]
pub struct ArmOptions {
    /// Its address.
    pub addr: SocketAddr,
    /// The other addresses of the same manager (another route to it, or the other replicas of
    /// a replicated manager), dialled with `addr` when the connection is made: the first to
    /// answer is used, and a replica that is not the leader sends the client to the leader.
    pub alternates: Vec<SocketAddr>,
    /// The name in its certificate (defaults to the address's IP; each alternate is then checked
    /// against its own IP).
    pub server_name: String,
    /// Its CA certificate (PEM file).
    pub ca_cert: PathBuf,
    /// An admin client certificate and key (PEM files), for `armctl`.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// QUIC settings, for the manager's connection and the accelerators' (the manager's own
    /// idle timeout, half its lease, bounds the first).
    pub tuning: Tuning,
    /// The protocol version to ask in first (this build's `VERSION`); a manager that refuses
    /// it is asked again one version lower each time, down to `MIN_VERSION` (a manager not yet
    /// upgraded).
    pub protocol: u16,
}

impl ArmOptions {
    /// Options for `addr`, trusting `ca_cert`.
    pub fn new(addr: SocketAddr, ca_cert: impl Into<PathBuf>) -> Self {
        Self {
            addr,
            alternates: Vec::new(),
            server_name: addr.ip().to_string(),
            ca_cert: ca_cert.into(),
            identity: None,
            tuning: Tuning::default(),
            protocol: VERSION,
        }
    }
}

/// The addresses of a manager as `ARM_ADDR` and `armctl --arm` take them: one `IP:PORT`, or
/// several separated by commas (a replicated manager's replicas), the first the address and the
/// others its alternates.
pub fn parse_addresses(list: &str) -> Result<(SocketAddr, Vec<SocketAddr>)> {
    let mut addrs = list.split(',').map(str::trim).filter(|a| !a.is_empty()).map(|a| {
        a.parse::<SocketAddr>().map_err(|e| Error::Setup(format!("the manager's address {a:?}: {e} (IP:PORT)")))
    });
    let first = addrs.next().ok_or_else(|| Error::Setup("no address of the resource manager".into()))??;
    Ok((first, addrs.collect::<Result<_>>()?))
}

/// A connection to the resource manager that reconnects when it finds it closed.
pub struct ArmClient {
    options: ArmOptions,
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    link: Mutex<Option<(Endpoint, Connection)>>,
    /// The protocol version requests are sent in: `options.protocol`, or `MIN_VERSION` once the
    /// manager refused that.
    version: std::sync::atomic::AtomicU16,
    /// The leader of a replicated manager, as a replica named it last: dialled first, alone.
    leader: std::sync::Mutex<Option<SocketAddr>>,
    /// The replica whose connection died last, and when: the others name it as the leader
    /// until their election, which it is no use following.
    died: std::sync::Mutex<Option<(SocketAddr, std::time::Instant)>>,
}

/// How long a replica seen dying is not followed when named the leader: the others elect a
/// new one within two seconds of its last heartbeat.
const DEAD_FOR: std::time::Duration = std::time::Duration::from_secs(3);
/// How long the leader, dialled alone, has to answer before every replica is dialled. An idle
/// one answers in a round trip, but just after a failover the new leader answers a thousand
/// programs' handshakes at once: at 500 ms a third of them gave up a handshake half done, dialled
/// every replica, were sent back and dialled it again, more of the same work (2,796 given up
/// over 20 kills under `ac-bench --only failover`, docs/benchmarks/replication.md, stop 80). A
/// dead leader named (by a replica that has not seen it die yet, until the others elect, a
/// second or so after its death) costs this much more each time; one this program saw die is
/// not followed at all ([`DEAD_FOR`]).
const LEADER_DIAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Closes an endpoint when dropped, unless kept: a dial's, until it connects.
struct CloseUnlessKept(Option<Endpoint>);

impl CloseUnlessKept {
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for CloseUnlessKept {
    fn drop(&mut self) {
        if let Some(endpoint) = self.0.take() {
            endpoint.close(0u32.into(), b"another address answered");
        }
    }
}

/// The answer to `request`: an `AC_Free` sent again (its first answer lost with a connection or
/// a leader) that finds its set gone was carried out the first time: it is answered as done.
/// The set is not held either way, which is all a free asks; sets' ids are never reused.
fn freed_before(request: &Request, resent: bool, answer: Result<Response>) -> Result<Response> {
    match answer {
        Err(Error::Manager { kind: ArmErrorKind::NotFound, .. })
            if resent && matches!(request, Request::Free { accelerators: None, .. }) =>
        {
            Ok(Response::Done)
        }
        answer => answer,
    }
}

/// A replica of the manager that sends nothing back this long while packets go to it is dead.
const SILENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Returns once `conn`'s peer has sent nothing for `window` while at least two packets went to
/// it (never while it answers). A live peer acknowledges what it is sent within its
/// acknowledgement delay (25 ms), and the packets a client sends unprompted are requests,
/// their retransmissions and pings: every one of them calls for an acknowledgement. Two, not
/// one: an acknowledgement of ours, sent once for what the peer sent last, calls for nothing.
async fn silent(conn: &Connection, window: std::time::Duration) {
    const STEPS: usize = 4;
    let counts = || {
        let stats = conn.stats();
        (stats.udp_tx.datagrams, stats.udp_rx.datagrams)
    };
    let mut seen = std::collections::VecDeque::from([counts()]);
    loop {
        tokio::time::sleep(window / STEPS as u32).await;
        let (sent, received) = counts();
        seen.push_back((sent, received));
        if seen.len() > STEPS + 1 {
            seen.pop_front();
        }
        let (sent_then, received_then) = seen[0];
        if seen.len() == STEPS + 1 && received == received_then && sent >= sent_then + 2 {
            return;
        }
    }
}

/// How long a request follows "not the leader" answers: an election takes one to two seconds
/// (a replica that does not know the leader yet is asked again every [`LEADER_PAUSE`]).
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// The pause before asking again when no leader is known, or the leader named is not serving yet.
const LEADER_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

impl std::fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmClient").field("addr", &self.options.addr).finish()
    }
}

impl From<ArmError> for Error {
    fn from(e: ArmError) -> Self {
        match e.kind {
            ArmErrorKind::VersionMismatch => Error::VersionMismatch(e.message),
            kind => Error::Manager { kind, message: e.message },
        }
    }
}

impl ArmClient {
    /// Connects.
    pub async fn connect(options: ArmOptions) -> Result<Self> {
        let roots = tls::load_roots(&options.ca_cert)?;
        let identity = match &options.identity {
            Some((cert, key)) => Some(tls::load_identity(cert, key)?),
            None => None,
        };
        let crypto = Arc::new(tls::client_crypto_with_identity(roots, ALPN, identity)?);
        let version = std::sync::atomic::AtomicU16::new(options.protocol);
        let client = Self {
            options,
            crypto,
            link: Mutex::new(None),
            version,
            leader: Default::default(),
            died: Default::default(),
        };
        client.connection().await.map_err(|e| client.unreachable(e))?;
        Ok(client)
    }

    /// The live connection, dialling again if the last one closed (e.g. the manager restarted).
    async fn connection(&self) -> Result<Connection> {
        let mut link = self.link.lock().await;
        if let Some((_, conn)) = link.as_ref().filter(|(_, c)| c.close_reason().is_none()) {
            return Ok(conn.clone());
        }
        // The manager's idle timeout (half its lease) must be the connection's: it dates a
        // silent program's last sign of life from it. A shorter one of ours would end the
        // connection earlier, and the manager would date the program's silence too early. The
        // handshake is still given up after our own idle timeout (quinn bounds it by the idle
        // timeout it offers): a manager that cannot be reached is said so as soon as before.
        let tuning = Tuning { idle_timeout_ms: IDLE_TO_THE_MANAGER_MS, ..self.options.tuning.clone() };
        let handshake = std::time::Duration::from_millis(self.options.tuning.idle_timeout_ms);
        let leader = *self.leader.lock().expect("leader poisoned");
        if let Some(leader) = leader {
            let dialled = tokio::time::timeout(LEADER_DIAL, self.dial(leader, self.name_of(leader), &tuning)).await;
            let why = match dialled {
                Ok(Ok(connected)) => {
                    let conn = connected.1.clone();
                    *link = Some(connected);
                    return Ok(conn);
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no handshake in {LEADER_DIAL:?}"),
            };
            // The leader named last is gone: every address again, to find the next one. Not
            // barred from being followed again (as one seen dying is): under a failover's flood
            // a live leader's handshake can outlast the wait, and barred, a program would not
            // follow the leader every replica names for `DEAD_FOR`.
            tracing::info!(%leader, why, "the leader named did not connect: dialling every replica");
            *self.leader.lock().expect("leader poisoned") = None;
        }
        // Every address at once: a dead one costs nothing (its handshake would only time out),
        // and the first to answer is used.
        let dials = self.addresses().map(|(addr, name)| Box::pin(self.dial(addr, name, &tuning)));
        let connected = match tokio::time::timeout(handshake, futures_util::future::select_ok(dials)).await {
            Ok(connected) => connected?.0,
            Err(_) => return Err(Error::Disconnected(quinn::ConnectionError::TimedOut.to_string())),
        };
        let conn = connected.1.clone();
        *link = Some(connected);
        Ok(conn)
    }

    /// The manager's addresses, each with the name its certificate is checked against.
    fn addresses(&self) -> impl Iterator<Item = (SocketAddr, String)> + '_ {
        std::iter::once(self.options.addr)
            .chain(self.options.alternates.iter().copied())
            .map(move |addr| (addr, self.name_of(addr)))
    }

    /// The name `addr`'s certificate is checked against: the one configured, or its IP.
    fn name_of(&self, addr: SocketAddr) -> String {
        if self.options.server_name != self.options.addr.ip().to_string() {
            self.options.server_name.clone()
        } else {
            addr.ip().to_string()
        }
    }

    /// Dials the manager at `addr` (its certificate naming `name`): the endpoint and connection.
    async fn dial(&self, addr: SocketAddr, name: String, tuning: &Tuning) -> Result<(Endpoint, Connection)> {
        let endpoint = transport::client_endpoint(addr, Some(self.crypto.clone()), tuning)?;
        // A dial given up (another address answered first, or the wait ran out) closes its
        // endpoint: quinn would go on with the handshake, socket and buffers, for the idle
        // timeout (an hour on this connection), and each failover would leave one per program.
        let abandoned = CloseUnlessKept(Some(endpoint.clone()));
        let connecting = endpoint
            .connect(addr, &name)
            .map_err(|e| Error::Setup(format!("cannot connect to the resource manager: {e}")))?;
        let conn = connecting.await?;
        abandoned.keep();
        Ok((endpoint, conn))
    }

    /// A failure to talk to the manager, named as such (not as a lost accelerator).
    fn unreachable(&self, e: Error) -> Error {
        match e {
            Error::Disconnected(reason) | Error::Setup(reason) if self.options.alternates.is_empty() => {
                Error::ManagerUnreachable { addr: self.options.addr, reason }
            }
            Error::Disconnected(reason) | Error::Setup(reason) => {
                let others: Vec<String> = self.options.alternates.iter().map(|a| a.to_string()).collect();
                let reason = format!("{reason} (nor at {})", others.join(", "));
                Error::ManagerUnreachable { addr: self.options.addr, reason }
            }
            other => other,
        }
    }

    /// Sends a request and returns the answer; a refusal becomes [`Error::Manager`], a manager
    /// that cannot be reached [`Error::ManagerUnreachable`].
    ///
    /// When the connection turns out dead (the manager restarted: a new process cannot even
    /// reset the old connection), the request is sent once more on a fresh connection. Requests
    /// that change state carry an idempotency key (a session's token, an `AC_Get`'s key), so
    /// the retry gets the first answer if the first request was carried out: never a second set.
    pub async fn request(&self, request: Request) -> Result<Response> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut tried = self.version.load(Relaxed);
        let needs = introduced_in(&request);
        if tried < needs {
            return Err(Error::VersionMismatch(format!(
                "the resource manager speaks protocol {tried}, which lacks this request (protocol {needs}): upgrade it"
            )));
        }
        let asked = std::time::Instant::now();
        // Whether the request went out more than once (the first may have been carried out).
        let mut resent = false;
        loop {
            let answer = self.request_in(&request, tried, &mut resent).await;
            match answer {
                // A replica of a replicated manager that is not the leader: asked again at the
                // leader it names (or, during an election, again in a moment).
                Err(Error::Manager { kind: ArmErrorKind::NotLeader, message }) if asked.elapsed() < LEADER_WAIT => {
                    self.follow_leader(ac_proto::arm::leader_named(&message)).await;
                    resent = true;
                }
                // A replica that died under the request: the others elect a leader within
                // about a second, and the request (which carries its idempotency key) is sent
                // to it.
                Err(Error::ManagerUnreachable { .. })
                    if !self.options.alternates.is_empty() && asked.elapsed() < LEADER_WAIT =>
                {
                    tokio::time::sleep(LEADER_PAUSE).await;
                    resent = true;
                }
                // A manager of an older version (a rolling upgrade): asked again one version
                // down, unless the request is newer than that (then the manager's refusal says
                // which versions it speaks).
                Err(Error::VersionMismatch(reason)) if tried > MIN_VERSION && tried > needs => {
                    tried -= 1;
                    tracing::info!(reason, version = tried, "asking the resource manager in an older version");
                    self.version.store(tried, Relaxed);
                }
                answer => return freed_before(&request, resent, answer),
            }
        }
    }

    /// Makes `leader` (a replica named as the leader) the address dialled next; without one,
    /// the next replica; waits a moment when the leader named is the replica already connected
    /// (elected, not serving yet) or none is named.
    async fn follow_leader(&self, leader: Option<SocketAddr>) {
        let mut link = self.link.lock().await;
        let connected = link.as_ref().map(|(_, conn)| conn.remote_address());
        match leader.filter(|leader| !self.seen_dead(*leader)) {
            Some(leader) if connected != Some(leader) => {
                tracing::info!(%leader, "the resource manager's replica is not the leader: asking the leader");
                *self.leader.lock().expect("leader poisoned") = Some(leader);
                // Not closed: requests still in flight on it end there (a closed one would
                // fail them); it closes when the last is done.
                link.take();
            }
            Some(_) => {
                drop(link);
                tokio::time::sleep(LEADER_PAUSE).await;
            }
            None => {
                // No leader named: an election, or a replica cut off from the others, which
                // cannot know that they elected one. The next replica is asked: it may know.
                if let Some(next) = connected.and_then(|addr| self.next_replica(addr)) {
                    *self.leader.lock().expect("leader poisoned") = Some(next);
                    link.take();
                }
                drop(link);
                tokio::time::sleep(LEADER_PAUSE).await;
            }
        }
    }

    /// The replica after `addr` in the manager's addresses (wrapping round), if it has others;
    /// one seen dying lately is passed over (dialled alone, it would only time out).
    fn next_replica(&self, addr: SocketAddr) -> Option<SocketAddr> {
        let all: Vec<SocketAddr> = self.addresses().map(|(a, _)| a).collect();
        let at = all.iter().position(|a| *a == addr)?;
        (1..all.len()).map(|step| all[(at + step) % all.len()]).find(|next| !self.seen_dead(*next))
    }

    /// Whether `addr` is the replica whose connection died last, within [`DEAD_FOR`].
    fn seen_dead(&self, addr: SocketAddr) -> bool {
        let died = *self.died.lock().expect("died poisoned");
        died.is_some_and(|(dead, when)| dead == addr && when.elapsed() < DEAD_FOR)
    }

    /// [`Self::request`] in protocol `version`.
    async fn request_in(&self, request: &Request, version: u16, resent: &mut bool) -> Result<Response> {
        let request = &(version, request.clone());
        let answer = match self.connection().await {
            Ok(conn) => match self.try_request(&conn, request).await {
                Err(Error::Disconnected(_)) => {
                    self.forget(&conn).await;
                    // A leader that died is not dialled alone again, nor followed when the
                    // others still name it: every replica is dialled.
                    *self.leader.lock().expect("leader poisoned") = None;
                    *self.died.lock().expect("died poisoned") =
                        Some((conn.remote_address(), std::time::Instant::now()));
                    *resent = true;
                    match self.connection().await {
                        Ok(conn) => self.try_request(&conn, request).await,
                        Err(e) => Err(e),
                    }
                }
                other => other,
            },
            Err(e) => Err(e),
        };
        answer.map_err(|e| self.unreachable(e))
    }

    /// Drops `conn` if it is still the live one: requests run concurrently (a session's watcher
    /// beside the program's calls), and one that failed on an old connection must not close the
    /// new one another request has just opened.
    async fn forget(&self, conn: &Connection) {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|(_, live)| live.stable_id() == conn.stable_id()) {
            if let Some((_, dead)) = link.take() {
                dead.close(0u32.into(), b"no answer");
            }
        }
    }

    async fn try_request(&self, conn: &Connection, request: &(u16, Request)) -> Result<Response> {
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(conn, request));
        let answer = async {
            answer.await.unwrap_or_else(|_| {
                Err(Error::Disconnected(format!("no answer from the resource manager in {REQUEST_TIMEOUT:?}")))
            })
        };
        if self.options.alternates.is_empty() {
            return answer.await;
        }
        // With other replicas to ask, a dead one is left as soon as it is seen dead, not after
        // the request's whole timeout: a failover then costs the program about an election.
        tokio::select! {
            answer = answer => answer,
            () = silent(conn, SILENCE) => Err(Error::Disconnected(format!(
                "the resource manager at {} sent nothing back in {SILENCE:?}",
                conn.remote_address()
            ))),
        }
    }

    async fn exchange(&self, conn: &Connection, (version, request): &(u16, Request)) -> Result<Response> {
        let (mut send, recv) = conn.open_bi().await?;
        let frame = frame_bytes(&ArmRequest { version: *version, request: request.clone() })?;
        send.write_all(&frame).await.map_err(|e| crate::link::map_write(e, conn))?;
        let _ = send.finish();
        let mut reader = FrameReader::new(recv);
        let answer: ArmResponse = reader.expect_frame().await?;
        // The answer's end nearly always comes in its packet; waiting for a late one would
        // hold the program back, so a stream whose end is not there yet is stopped instead.
        reader.read_end_if_arrived();
        match answer {
            ArmResponse::Ok(response) => Ok(response),
            ArmResponse::Err(e) => Err(e.into()),
        }
    }

    /// The live connection's QUIC statistics (datagrams and frames each way), if connected.
    pub async fn stats(&self) -> Option<quinn::ConnectionStats> {
        self.link.lock().await.as_ref().map(|(_, conn)| conn.stats())
    }

    /// Closes the connection without waiting for it to drain (after a request that ended the
    /// session: there is no lease left to start).
    pub async fn close_now(&self) {
        if let Some((_, conn)) = self.link.lock().await.take() {
            conn.close(0u32.into(), b"finished");
        }
    }

    /// Closes the connection now (the manager starts the lease clock at once).
    pub async fn close(&self) {
        if let Some((endpoint, conn)) = self.link.lock().await.take() {
            conn.close(0u32.into(), b"finished");
            let _ = tokio::time::timeout(std::time::Duration::from_millis(100), endpoint.wait_idle()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_addresses_reads_as_the_first_and_its_alternates() {
        let (first, others) = parse_addresses("10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000").unwrap();
        assert_eq!(first, "10.0.0.1:7000".parse::<SocketAddr>().unwrap());
        assert_eq!(others.len(), 2);
        assert_eq!(parse_addresses("[::1]:7000").unwrap().1, Vec::<SocketAddr>::new());
        for bad in ["", " , ", "10.0.0.1", "10.0.0.1:7000,host:7000"] {
            let err = parse_addresses(bad).unwrap_err();
            assert!(matches!(err, Error::Setup(_)), "{bad:?}: {err}");
        }
    }
}
