//! Raft between replicas over QUIC: openraft's `RaftNetwork` (the caller's side) and the server
//! that answers it. One RPC per bidirectional stream, a request frame out and its answer back,
//! on a connection per peer kept across RPCs. Only replicas speak it: the server refuses a
//! connection whose client presents no certificate of the cluster's CA issued to a replica
//! (mutual TLS), one the manager revoked, or one of a replica that left the cluster (asked
//! again at every RPC), and a replica speaks for itself only: an RPC whose vote names another
//! node than the certificate's (`replica-N`) closes the connection.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::ProtoError;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{AnyError, BasicNode, Membership, Raft};
use quinn::{Connection, Endpoint};
use serde::{Deserialize, Serialize};

use crate::ArmRaft;

/// The ALPN of Raft between replicas.
pub const ALPN: &[u8] = b"arm-raft/1";

/// A Raft RPC, as one replica sends it to another.
#[derive(Debug, Serialize, Deserialize)]
enum PeerRequest {
    Append(AppendEntriesRequest<ArmRaft>),
    Vote(VoteRequest<u64>),
    Snapshot(InstallSnapshotRequest<ArmRaft>),
}

/// The answer to a [`PeerRequest`].
#[derive(Debug, Serialize, Deserialize)]
enum PeerResponse {
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    Snapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
}

/// Answers the Raft RPCs of the other replicas on `endpoint`, until it is closed; returns once
/// every connection's task has ended (nothing of it holds the socket any more).
pub async fn serve(endpoint: Endpoint, raft: Raft<ArmRaft>, revoked: Revoked, departed: Departed) {
    let mut connections = tokio::task::JoinSet::new();
    while let Some(incoming) = endpoint.accept().await {
        connections.spawn(serve_connection(incoming, raft.clone(), (revoked.clone(), departed.clone())));
        // Ended connections (refused ones too) are not kept until the endpoint closes.
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

/// Which certificates (DER) the manager revoked before they expire: its `revoked-certs`, read
/// as it stands at each question, so that a revocation takes effect without a restart.
#[derive(Clone)]
pub struct Revoked(pub Arc<IsRevoked>);

/// Whether the certificate (DER) is revoked.
pub type IsRevoked = dyn Fn(&[u8]) -> bool + Send + Sync;

impl Revoked {
    /// No certificate is revoked.
    pub fn none() -> Self {
        Self(Arc::new(|_| false))
    }
}

impl std::fmt::Debug for Revoked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Revoked(..)")
    }
}

/// The peer's certificate, which the TLS handshake checked against the cluster's CA.
fn peer_certificate(conn: &quinn::Connection) -> Option<rustls_pki_types::CertificateDer<'static>> {
    let identity = conn.peer_identity()?;
    let chain = identity.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>().ok()?;
    chain.into_iter().next()
}

/// Whether a certificate was issued to a replica: organisational unit `replica`. The same CA
/// issues admins' and batch systems' certificates, which must not speak Raft.
fn issued_to_a_replica(der: &[u8]) -> bool {
    let Ok((_, leaf)) = x509_parser::parse_x509_certificate(der) else { return false };
    let is_replica = leaf.subject().iter_organizational_unit().any(|unit| unit.as_str() == Ok(REPLICA_UNIT));
    is_replica
}

/// The node id a replica's certificate was issued to: its common name, `replica-N`.
fn certified_node(der: &[u8]) -> Option<u64> {
    let (_, leaf) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = leaf.subject().iter_common_name().next()?.as_str().ok()?;
    name.strip_prefix("replica-")?.parse().ok()
}

/// Why a connection may not speak Raft, if it may not; else the node its certificate names.
fn refusal(conn: &quinn::Connection, revoked: &Revoked, departed: &Departed) -> Result<u64, &'static [u8]> {
    let Some(der) = peer_certificate(conn) else { return Err(b"replicas only") };
    if !issued_to_a_replica(&der) {
        return Err(b"replicas only");
    }
    if (revoked.0)(&der) {
        return Err(b"certificate revoked");
    }
    let node = certified_node(&der).ok_or(b"replicas only".as_slice())?;
    if departed.contains(node) {
        return Err(b"not a member of the cluster");
    }
    Ok(node)
}

/// The replicas this one saw leave the cluster while it runs: voters or learners of a
/// membership it applied (committed), none of a later one. Only these are refused: a replica it
/// never heard of may be a member it has not learned of yet (it was down while that one was
/// added, and it leads now or asks for its vote), and a membership logged but not committed may
/// yet be undone. Kept in memory: after a restart the removals the log still holds are applied
/// again, older ones (in the snapshot) are not known, and `revoked-certs` covers them.
#[derive(Clone, Debug, Default)]
pub struct Departed(Arc<std::sync::Mutex<BTreeSet<u64>>>);

impl Departed {
    /// Whether replica `node` left the cluster.
    pub fn contains(&self, node: u64) -> bool {
        self.0.lock().expect("departed poisoned").contains(&node)
    }

    /// Follows a membership applied after `before`: its members are members (again), the others
    /// of `before` left.
    pub(crate) fn follow(&self, before: &Membership<u64, BasicNode>, after: &Membership<u64, BasicNode>) {
        let members: BTreeSet<u64> = after.nodes().map(|(id, _)| *id).collect();
        let mut departed = self.0.lock().expect("departed poisoned");
        departed.extend(before.nodes().map(|(id, _)| *id).filter(|id| !members.contains(id)));
        departed.retain(|id| !members.contains(id));
    }
}

/// The node an RPC says it comes from: the leader that sends entries or a snapshot, the
/// candidate that asks for a vote.
fn sender(request: &PeerRequest) -> Option<u64> {
    let vote = match request {
        PeerRequest::Append(rpc) => &rpc.vote,
        PeerRequest::Vote(rpc) => &rpc.vote,
        PeerRequest::Snapshot(rpc) => &rpc.vote,
    };
    vote.leader_id().voted_for()
}

/// The organisational unit of a replica's client certificate.
pub const REPLICA_UNIT: &str = "replica";

/// Answers the RPCs of one replica's connection, each stream in a task of its own.
async fn serve_connection(incoming: quinn::Incoming, raft: Raft<ArmRaft>, (revoked, departed): (Revoked, Departed)) {
    let Ok(conn) = incoming.await else { return };
    // Mutual TLS: only a replica (a certificate of the cluster's CA, issued to a replica, not
    // revoked, not of a replica that left) may speak Raft. Asked again at each RPC: a
    // certificate revoked, or a replica removed, while its connection is open is refused from
    // then on.
    let refused = |conn: &quinn::Connection| {
        refusal(conn, &revoked, &departed).map_err(|reason| {
            tracing::info!(peer = %conn.remote_address(), reason = %String::from_utf8_lossy(reason), "Raft peer refused");
            conn.close(1u32.into(), reason);
        })
    };
    let Ok(node) = refused(&conn) else { return };
    let mut streams = tokio::task::JoinSet::new();
    while let Ok((send, recv)) = conn.accept_bi().await {
        if refused(&conn).is_err() {
            break;
        }
        streams.spawn(answer(raft.clone(), (conn.clone(), node), send, recv));
        while streams.try_join_next().is_some() {}
    }
    streams.shutdown().await;
}

/// Answers one RPC of `node`'s connection `conn`.
async fn answer(
    raft: Raft<ArmRaft>,
    (conn, node): (quinn::Connection, u64),
    mut send: quinn::SendStream,
    recv: quinn::RecvStream,
) {
    let mut reader = FrameReader::new(recv);
    let request: PeerRequest = match reader.expect_frame().await {
        Ok(request) => request,
        // Only a replica's certificate gets this far: one whose RPCs cannot be decoded (a
        // version apart, or this decoder wrong) stalls replication, and an operator must see
        // why (stop 80: a decoder's limit refused appends within the frame limit).
        Err(e @ (ProtoError::Malformed(_) | ProtoError::FrameTooLarge { .. })) => {
            tracing::warn!(peer = %conn.remote_address(), node, error = %e, "a Raft RPC that cannot be read: not answered");
            return;
        }
        // Cut off: the sender gave up in the middle (its RPC timed out) or the connection broke.
        Err(e) => {
            tracing::debug!(peer = %conn.remote_address(), node, error = %e, "a Raft RPC cut off");
            return;
        }
    };
    if let Some(claimed) = sender(&request).filter(|claimed| *claimed != node) {
        tracing::warn!(peer = %conn.remote_address(), node, claimed, "Raft peer refused: it spoke for another replica");
        conn.close(2u32.into(), b"a replica speaks for itself only");
        return;
    }
    let response = match request {
        PeerRequest::Append(rpc) => PeerResponse::Append(raft.append_entries(rpc).await),
        PeerRequest::Vote(rpc) => PeerResponse::Vote(raft.vote(rpc).await),
        PeerRequest::Snapshot(rpc) => PeerResponse::Snapshot(raft.install_snapshot(rpc).await),
    };
    if let Ok(frame) = frame_bytes(&response) {
        let _ = send.write_all(&frame).await;
        let _ = send.finish();
        let _ = send.stopped().await;
    }
}

/// How this replica reaches the others: openraft's network factory.
#[derive(Clone)]
pub struct Peers {
    endpoint: Endpoint,
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    tuning: ac_proto::transport::Tuning,
}

impl Peers {
    /// Peers reached from `endpoint` with `crypto` (the cluster's CA and this replica's
    /// certificate).
    pub fn new(
        endpoint: Endpoint,
        crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
        tuning: ac_proto::transport::Tuning,
    ) -> Self {
        Self { endpoint, crypto, tuning }
    }
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for PeerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLink").field("target", &self.target).field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl RaftNetworkFactory<ArmRaft> for Peers {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerLink {
        PeerLink { target, addr: node.addr.parse().ok(), peers: self.clone(), conn: None }
    }
}

/// The link to one other replica.
pub struct PeerLink {
    target: u64,
    addr: Option<SocketAddr>,
    peers: Peers,
    conn: Option<Connection>,
}

/// Why an RPC got no answer: the peer could not be reached, or the exchange broke.
enum Failed {
    Unreachable(AnyError),
    Network(AnyError),
}

impl PeerLink {
    /// The live connection, dialled again when the last one ended.
    async fn connection(&mut self) -> Result<Connection, Failed> {
        if let Some(conn) = self.conn.as_ref().filter(|c| c.close_reason().is_none()) {
            return Ok(conn.clone());
        }
        let addr =
            self.addr.ok_or_else(|| Failed::Unreachable(AnyError::error("the peer's address is not an IP:port")))?;
        let mut config = quinn::ClientConfig::new(self.peers.crypto.clone());
        config.transport_config(Arc::new(self.peers.tuning.transport_config()));
        let connecting = self
            .peers
            .endpoint
            .connect_with(config, addr, &addr.ip().to_string())
            .map_err(|e| Failed::Unreachable(AnyError::error(e.to_string())))?;
        let conn = connecting.await.map_err(|e| Failed::Unreachable(AnyError::error(e.to_string())))?;
        self.conn = Some(conn.clone());
        Ok(conn)
    }

    /// Sends `request` and reads its answer, within `ttl`.
    async fn send(&mut self, request: &PeerRequest, ttl: std::time::Duration) -> Result<PeerResponse, Failed> {
        let frame = frame_bytes(request).map_err(|e| Failed::Network(AnyError::error(e.to_string())))?;
        self.call(frame, ttl).await
    }

    /// Sends a request's `frame` and reads its answer, within `ttl`.
    async fn call(&mut self, frame: bytes::Bytes, ttl: std::time::Duration) -> Result<PeerResponse, Failed> {
        let exchange = async {
            let conn = self.connection().await?;
            // The peer's reason, when it closed the connection (a refusal), says more than the
            // read that failed.
            let network = |e: &dyn std::fmt::Display| {
                let why = conn.close_reason().map_or_else(|| e.to_string(), |reason| reason.to_string());
                Failed::Network(AnyError::error(why))
            };
            let (mut send, recv) = conn.open_bi().await.map_err(|e| network(&e))?;
            send.write_all(&frame).await.map_err(|e| network(&e))?;
            let _ = send.finish();
            FrameReader::new(recv).expect_frame::<PeerResponse>().await.map_err(|e| network(&e))
        };
        match tokio::time::timeout(ttl, exchange).await {
            Ok(Err(failed)) => {
                // A broken exchange may be a dead connection: dialled again next time.
                self.conn = None;
                Err(failed)
            }
            Ok(answer) => answer,
            Err(_) => Err(Failed::Network(AnyError::error(format!("no answer within {ttl:?}")))),
        }
    }

    /// An RPC failure as openraft's error of kind `E`.
    fn rpc_error<E: std::error::Error>(&self, failed: Failed) -> RPCError<u64, BasicNode, E> {
        match failed {
            Failed::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            Failed::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }

    /// The answer of an RPC as openraft wants it: `expected` takes it out of the reply (none
    /// for a reply of the wrong kind); the peer's own error is a remote error.
    fn unwrap<T, E: std::error::Error>(
        &self,
        answer: Result<PeerResponse, Failed>,
        expected: impl FnOnce(PeerResponse) -> Option<Result<T, E>>,
    ) -> Result<T, RPCError<u64, BasicNode, E>> {
        match answer.map(expected) {
            Ok(Some(answer)) => answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(None) => Err(RPCError::Network(NetworkError::new(&AnyError::error("a reply of the wrong kind")))),
            Err(failed) => Err(self.rpc_error(failed)),
        }
    }
}

/// How many of an append's `entries`, which encoded to `len` bytes, should fit in one frame:
/// in proportion, with a tenth to spare for entries larger than the average. Halving instead
/// took three tries (each encoding megabytes) when a new leader sent a follower the group
/// commits of a thousand programs (docs/benchmarks/replication.md, stop 70).
fn entries_that_fit(entries: u64, len: usize) -> u64 {
    let fitting = entries as u128 * (ac_proto::codec::MAX_FRAME as u128 * 9 / 10) / len.max(1) as u128;
    (fitting as u64).clamp(1, entries.saturating_sub(1).max(1))
}

impl RaftNetwork<ArmRaft> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<ArmRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let entries = rpc.entries.len() as u64;
        let answer = match frame_bytes(&PeerRequest::Append(rpc)) {
            Ok(frame) if frame.len() <= ac_proto::codec::MAX_FRAME + 4 => self.call(frame, option.hard_ttl()).await,
            // Over the protocol's frame limit (the peer would refuse it unread), or not encoded:
            // openraft is asked to send as many entries as should fit (half when the size is
            // unknown), and keeps to that for a few appends.
            unsent if entries > 1 => {
                let hint = unsent.map_or(entries / 2, |frame| entries_that_fit(entries, frame.len()));
                return Err(RPCError::PayloadTooLarge(openraft::error::PayloadTooLarge::new_entries_hint(hint)));
            }
            Ok(frame) => Err(Failed::Network(AnyError::error(format!(
                "one entry of {} bytes, over the frame limit of {}",
                frame.len(),
                ac_proto::codec::MAX_FRAME
            )))),
            Err(e) => Err(Failed::Network(AnyError::error(e.to_string()))),
        };
        self.unwrap(answer, |r| match r {
            PeerResponse::Append(answer) => Some(answer),
            _ => None,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<ArmRaft>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        let answer = self.send(&PeerRequest::Snapshot(rpc), option.hard_ttl()).await;
        self.unwrap(answer, |r| match r {
            PeerResponse::Snapshot(answer) => Some(answer),
            _ => None,
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let answer = self.send(&PeerRequest::Vote(rpc), option.hard_ttl()).await;
        self.unwrap(answer, |r| match r {
            PeerResponse::Vote(answer) => Some(answer),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ac_proto::codec::MAX_FRAME;

    /// Entries of even size sent as many as fit in one frame, in one try.
    #[test]
    fn an_append_over_the_limit_is_cut_to_what_fits() {
        let hint = entries_that_fit(64, 2 * MAX_FRAME);
        assert_eq!(hint, 28, "64 entries of 32 KiB: 28 fill nine tenths of a frame");
        assert!(hint * (2 * MAX_FRAME as u64 / 64) <= MAX_FRAME as u64);
    }

    /// An append whose frame is within the limit, as the leader sends it, is read by the
    /// follower. bincode's decoder counts what it reads at its size in memory (a log index
    /// written in two bytes counts eight), so 64 entries that filled the frame counted more
    /// than the limit: the follower dropped the append unread ("stream ended unexpectedly" at
    /// the leader), each time openraft sent the same entries again, and replication to it
    /// stopped (docs/benchmarks/replication.md, stop 80).
    #[test]
    fn an_append_that_fills_the_frame_is_read() {
        use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
        let append = |op_len: usize| {
            let entries = (0..64)
                .map(|i| Entry::<ArmRaft> {
                    log_id: LogId::new(CommittedLeaderId::new(3, 1), 2_000 + i),
                    payload: EntryPayload::Normal(crate::Command {
                        id: format!("1-17f3a2b4c5d6e7f8-{i}"),
                        op: vec![7; op_len],
                        term: Some(3),
                    }),
                })
                .collect();
            let prev_log_id = Some(LogId::new(CommittedLeaderId::new(3, 1), 1_999));
            let rpc =
                AppendEntriesRequest { vote: Vote::new_committed(3, 1), prev_log_id, entries, leader_commit: None };
            frame_bytes(&PeerRequest::Append(rpc)).expect("encoded")
        };
        // The largest ops that still fit: what `append_entries` sends as it is.
        let mut op_len = MAX_FRAME / 64;
        let frame = loop {
            let frame = append(op_len);
            if frame.len() <= MAX_FRAME + 4 {
                break frame;
            }
            op_len -= (frame.len() - MAX_FRAME - 4).div_ceil(64);
        };
        assert!(frame.len() > MAX_FRAME - 64, "the frame is full: {} bytes", frame.len());
        match ac_proto::codec::decode::<PeerRequest>(&frame[4..]) {
            Ok(PeerRequest::Append(rpc)) => assert_eq!(rpc.entries.len(), 64),
            other => panic!("the follower read {other:?}"),
        }
    }

    /// However large the entries, the next try sends fewer, and at least one.
    #[test]
    fn the_hint_always_shrinks_and_never_reaches_zero() {
        assert_eq!(entries_that_fit(2, 100 * MAX_FRAME), 1);
        assert_eq!(entries_that_fit(64, MAX_FRAME + 5), 57);
        assert_eq!(entries_that_fit(10, MAX_FRAME / 2), 9, "never the same count again");
        assert_eq!(entries_that_fit(1, 0), 1);
    }
}
