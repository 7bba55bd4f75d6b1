//! What the tests of the replicated store share: a machine like the manager's in miniature.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use arm_raft::network::{PeerLink, Peers};
use arm_raft::Machine;
use openraft::network::RaftNetworkFactory;
use openraft::BasicNode;

/// A machine like the manager's in miniature: accelerators and their holders. `take A J` gives
/// `A` to `J` if it is free; `free A` frees it.
#[derive(Default, Debug, PartialEq)]
pub struct Pool {
    pub holders: BTreeMap<String, String>,
}

impl Machine for Pool {
    fn apply(&mut self, op: &[u8]) -> Result<Vec<u8>, String> {
        let op = String::from_utf8_lossy(op);
        let words: Vec<&str> = op.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["take", acc, job] if !self.holders.contains_key(*acc) => {
                self.holders.insert(acc.to_string(), job.to_string());
                "granted".to_string()
            }
            ["take", acc, _] => format!("{acc} is held by {}", self.holders[*acc]),
            ["free", acc] => self.holders.remove(*acc).map_or("not held".into(), |_| "freed".into()),
            _ => "malformed".into(),
        };
        Ok(answer.into_bytes())
    }

    fn save(&self) -> Result<Vec<u8>, String> {
        Ok(self.holders.iter().map(|(a, j)| format!("{a}={j}\n")).collect::<String>().into_bytes())
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        let text = String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?;
        let holders = text
            .lines()
            .map(|l| l.split_once('=').map(|(a, j)| (a.to_string(), j.to_string())).ok_or(format!("bad line {l}")))
            .collect::<Result<_, _>>()?;
        self.holders = holders;
        Ok(())
    }
}

/// A Raft client to replica `target` at `addr` presenting the client certificate `name` of the
/// cluster's CA in `tls` (`{name}.pem`, `{name}.key`), as the replica it was issued to would.
pub async fn link_as(tls: &Path, name: &str, target: u64, addr: SocketAddr) -> PeerLink {
    let roots = ac_proto::tls::load_roots(&tls.join("ca.pem")).unwrap();
    let identity =
        ac_proto::tls::load_identity(&tls.join(format!("{name}.pem")), &tls.join(format!("{name}.key"))).unwrap();
    let crypto = ac_proto::tls::client_crypto_with_identity(roots, arm_raft::network::ALPN, Some(identity)).unwrap();
    let tuning = ac_proto::transport::Tuning::default();
    let endpoint = ac_proto::transport::client_endpoint(addr, None, &tuning).unwrap();
    let mut peers = Peers::new(endpoint, Arc::new(crypto), tuning);
    peers.new_client(target, &BasicNode::new(addr.to_string())).await
}
