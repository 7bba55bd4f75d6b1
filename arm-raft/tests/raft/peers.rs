//! Who may speak Raft to a replica: a replica's certificate of the cluster's CA, until the
//! manager revokes it (its `revoked-certs`), and from that moment on, even on a connection
//! opened before; and for the node it was issued to only.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{link_as, Pool};
use arm_raft::network::Revoked;
use arm_raft::{Replica, ReplicaOptions, ReplicaTls};
use openraft::network::{RPCOption, RaftNetwork};
use openraft::raft::VoteRequest;
use openraft::Vote;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_certificate_speaks_for_its_own_node_only_and_is_refused_once_revoked_even_on_an_open_connection() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    ac_proto::tls::ensure_self_signed(&tls, &["127.0.0.1".to_string()], &[]).unwrap();
    let (cert, key) =
        ac_proto::tls::issue_client(&tls, "replica-2", arm_raft::network::REPLICA_UNIT, 4_000_000_000).unwrap();
    std::fs::write(tls.join("replica.pem"), cert).unwrap();
    std::fs::write(tls.join("replica.key"), key).unwrap();
    let files = ReplicaTls {
        ca: tls.join("ca.pem"),
        server: (tls.join("cert.pem"), tls.join("key.pem")),
        client: (tls.join("replica.pem"), tls.join("replica.key")),
    };
    let addr: SocketAddr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut options = ReplicaOptions::new(1, addr, dir.path().join("replica-1.redb"), files);
    let revoked = Arc::new(AtomicBool::new(false));
    let asked = revoked.clone();
    options.revoked = Revoked(Arc::new(move |_der| asked.load(Ordering::SeqCst)));
    let replica = Replica::start(options, Pool::default()).await.unwrap();

    // Replica 2's side, with its own certificate (replica 1 knows no membership yet: it takes
    // any replica's word).
    let mut link = link_as(&tls, "replica", 1, addr).await;
    let ask = || VoteRequest::new(Vote::new(7, 2), None);
    let option = || RPCOption::new(Duration::from_secs(5));

    link.vote(ask(), option()).await.expect("a replica's certificate speaks Raft");
    // Replica 2's certificate asking a vote for node 3: refused, the connection closed.
    let posing = link.vote(VoteRequest::new(Vote::new(8, 3), None), option()).await.expect_err("posing as node 3");
    assert!(posing.to_string().contains("speaks for itself only"), "{posing}");
    link.vote(ask(), option()).await.expect("for itself again, on a new connection");
    revoked.store(true, Ordering::SeqCst);
    let refused = link.vote(ask(), option()).await.expect_err("revoked on the open connection");
    assert!(refused.to_string().contains("certificate revoked"), "{refused}");
    let refused = link.vote(ask(), option()).await.expect_err("revoked on a new connection");
    assert!(refused.to_string().contains("certificate revoked"), "{refused}");
    replica.shutdown().await;
}
