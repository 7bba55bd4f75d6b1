//! Membership changes of a replicated manager (`armctl cluster add`, `remove`, `replace`),
//! answered by the leader, and what follows from the membership: where each member serves
//! clients, and which keys backends are registered with.
//!
//! Raft's membership (openraft's, each node its Raft address) says who votes; each member's
//! client address and signing key travel through the replicated log as member records
//! (`store::MemberRecord`), written before the member is added, so every replica, a new one
//! included, knows them. The founding members' records are committed by the cluster's first
//! leader from its configuration (`record_founders`); until then a replica's configuration
//! gives them.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use ac_proto::arm::{ArmError, ArmErrorKind, NewReplica, Request, Response, CAUGHT_UP_LAG};
use arm_raft::ReplicationError;

use super::super::{err, Answer, Arm};
use super::Replication;
use crate::store::{Change, MemberRecord};
use crate::ArmServerError;

impl Replication {
    /// Replica `id`'s client address and key: its replicated record (the newer word: an
    /// admin's), else its entry in this replica's configuration.
    fn member(&self, id: u64) -> Option<MemberRecord> {
        let recorded = self.members.read().expect("members poisoned").get(&id).cloned();
        recorded.or_else(|| self.config.members.iter().find(|m| m.id == id).map(configured_record))
    }

    /// The ids of Raft's latest membership, learners included.
    fn member_ids(&self) -> BTreeSet<u64> {
        self.replica.status().members.iter().map(|(id, _, _)| *id).collect()
    }

    /// Where replica `id` serves programs and admins, if known.
    pub(super) fn api_of(&self, id: u64) -> Option<SocketAddr> {
        self.member(id).map(|m| m.api)
    }

    /// The keys backends are registered with: every member's of Raft's membership (the latest,
    /// committed or not), learners included, this replica's own always. Learners too, so that
    /// a replica is trusted before it can be elected: were the set the voters' alone, a
    /// leader that died between making a new replica a voter and registering its backends
    /// again would leave them refusing that replica, should it be elected. Once a replacement
    /// is done no learner is left, and the set is the voters'.
    ///
    /// This replica's own key is `mine`, its signer's, whatever a record says: a backend
    /// refuses a set without the registering replica's key, and would refuse every host.
    fn registration_set(&self, mine: [u8; 32]) -> Vec<[u8; 32]> {
        let ids = self.member_ids();
        let key = |id: u64| crate::keys::parse_public_key(&self.member(id)?.key);
        let others = ids.into_iter().filter(|id| *id != self.config.id).filter_map(key);
        std::iter::once(mine).chain(others).collect()
    }

    /// Whether learner `id` is at most [`CAUGHT_UP_LAG`] entries behind this leader's log.
    fn caught_up(&self, id: u64) -> bool {
        let status = self.replica.status();
        let matched = status.matched.get(&id).copied().flatten();
        matched.is_some_and(|matched| status.last_log.unwrap_or(0).saturating_sub(matched) <= CAUGHT_UP_LAG)
    }
}

/// The record a member's entry in this replica's configuration gives.
fn configured_record(entry: &crate::config::Member) -> MemberRecord {
    MemberRecord { api: entry.api, key: entry.key.trim().to_string() }
}

/// A membership operation's failure, as the admin is told it.
fn refused(replication: &Replication, e: ReplicationError) -> ArmError {
    match e {
        ReplicationError::NotLeader { .. } => replication.not_leader(),
        e => err(ArmErrorKind::Conflict, format!("the membership change was refused: {e}")),
    }
}

/// How long the leader waits for a new replica to say who it is.
const CONFIRM_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the replica at `new.api` who it is before it becomes a member: its keys (`ManagerKey`,
/// which anyone may ask) must name `new.key` (a joining replica names its own with the
/// founders'), no member may sign with that key already, and its id (`ClusterStatus`, asked
/// with this replica's certificate) must be `new.id`. A key mistyped or copied from another
/// replica would otherwise be recorded, and every backend would refuse that replica's
/// capabilities once it leads; a wrong id would make the leader count the replica at that
/// address as a member it is not.
async fn confirm_new_replica(replication: &Replication, new: &NewReplica) -> Result<(), ArmError> {
    let invalid = |why: String| err(ArmErrorKind::Invalid, format!("replica {} at {}: {why}", new.id, new.api));
    let key = new.key.trim().to_ascii_lowercase();
    let members = replication.replica.status().members;
    if let Some((id, _, _)) =
        members.iter().find(|(id, _, _)| replication.member(*id).is_some_and(|m| m.key.eq_ignore_ascii_case(&key)))
    {
        return Err(invalid(format!("replica {id} signs with that key already: each replica has a key of its own")));
    }
    let asked = async {
        let mut options = ac_frontend::arm::ArmOptions::new(new.api, replication.ca_cert.clone());
        options.identity = Some(replication.identity.clone());
        let client = ac_frontend::arm::ArmClient::connect(options).await?;
        let keys = client.request(Request::ManagerKey).await;
        let status = client.request(Request::ClusterStatus).await;
        client.close().await;
        Ok::<_, ac_frontend::Error>((keys?, status))
    };
    let start_it = "start it (`join = true`, docs/admin.md) before adding it";
    let (keys, status) = match tokio::time::timeout(CONFIRM_WITHIN, asked).await {
        Ok(Ok(answers)) => answers,
        Ok(Err(e)) => return Err(invalid(format!("{e}: {start_it}"))),
        Err(_) => return Err(invalid(format!("no answer within {CONFIRM_WITHIN:?}: {start_it}"))),
    };
    let status = status.map_err(|e| {
        invalid(format!(
            "it did not say who it is ({e}): it must run this release, which answers `cluster status` to a \
             replica's certificate, and not list this replica's `replica.pem` in its `revoked-certs`"
        ))
    })?;
    match status {
        Response::Cluster(status) if status.replica == new.id => {}
        Response::Cluster(status) => {
            return Err(invalid(format!(
                "it is replica {} (the `id` in its `[replication]` configuration), not {}",
                status.replica, new.id
            )))
        }
        other => return Err(invalid(format!("it answered {other:?} when asked who it is"))),
    }
    let Response::ManagerKey(named) = keys else {
        return Err(invalid(format!("it answered {keys:?} when asked its key")));
    };
    if !named.split(',').any(|k| k.trim().eq_ignore_ascii_case(&key)) {
        return Err(invalid(format!(
            "it does not sign with the key given ({key}): `arm-server --signing-key` on it prints its key"
        )));
    }
    Ok(())
}

/// A new replica's record, its key checked.
fn record_of(new: &NewReplica) -> Result<MemberRecord, ArmError> {
    if crate::keys::parse_public_key(&new.key).is_none() {
        let why = format!("replica {}: key must be 64 hex digits (`arm-server --signing-key` on it prints it)", new.id);
        return Err(err(ArmErrorKind::Invalid, why));
    }
    Ok(MemberRecord { api: new.api, key: new.key.trim().to_string() })
}

impl Arm {
    /// This replica, or the refusal of a membership request to a single manager.
    fn replicated(&self) -> Result<&Replication, ArmError> {
        self.replication.as_ref().ok_or_else(|| {
            err(
                ArmErrorKind::Invalid,
                "this resource manager is not replicated (no [replication] in its configuration)",
            )
        })
    }

    /// Makes the current members' keys the set backends are registered with; when it changed
    /// and `relink` (this replica led and its links run), they register every backend again
    /// with it (a backend takes a new set from a replica of the one it trusts). Called by the
    /// leadership loop, and by the membership requests so that they answer once it is done.
    pub(in crate::server) fn follow_membership(&self, relink: bool) {
        let Some(replication) = self.replication.as_ref() else { return };
        if !self.keys.set_cluster(replication.registration_set(self.keys.signer.public_key())) || !relink {
            return;
        }
        // Under the core lock, under which a step-down stops the links (`step_down`): a
        // membership request that ends just as this replica steps down does not start links on
        // a replica that no longer leads.
        let core = self.core.lock().expect("core poisoned");
        if !replication.runs_links() {
            return;
        }
        tracing::info!(keys = self.keys.pinned(), "the members changed: registering the backends again");
        for host in core.hosts().values() {
            self.links.start(host);
        }
    }

    /// Commits member records through the replicated log (the committer's turn taken: they are
    /// no change of the core, so nothing is rolled back should they fail).
    async fn record_members(&self, changes: &[Change]) -> Result<(), ArmError> {
        let replication = self.replicated()?;
        let _committer = self.committing.lock().await;
        replication.commit(changes).await.map_err(|e| match e {
            ArmServerError::NotLeader(_) => replication.not_leader(),
            e => err(ArmErrorKind::Internal, e.to_string()),
        })
    }

    /// Makes `new` a learner, once (its record first, so that every replica knows its address
    /// and key before it is a member). A member already is left as it is when the request names
    /// it as it is (the request asked again), and refused otherwise: add and replace bring in a
    /// new replica, they never change a member's key or addresses (a wrong key recorded for a
    /// member would have every backend refuse it once it leads).
    async fn ensure_learner(&self, new: &NewReplica) -> Result<(), ArmError> {
        let replication = self.replicated()?;
        let record = record_of(new)?;
        let members = replication.replica.status().members;
        if let Some((_, raft, _)) = members.iter().find(|(id, _, _)| *id == new.id) {
            if *raft == new.raft.to_string() && replication.member(new.id).as_ref() == Some(&record) {
                return Ok(());
            }
            let why = format!(
                "replica {} is a member already, at {raft} with another key or client address: add and replace \
                 bring in a new replica under a new id",
                new.id
            );
            return Err(err(ArmErrorKind::Conflict, why));
        }
        confirm_new_replica(replication, new).await?;
        self.record_members(&[record.change(new.id).map_err(|e| err(ArmErrorKind::Internal, e.to_string()))?]).await?;
        if !members.iter().any(|(id, _, _)| *id == new.id) {
            replication.replica.propose_learner(new.id, new.raft).await.map_err(|e| refused(replication, e))?;
            tracing::info!(id = new.id, raft = %new.raft, "replica added as a learner");
        }
        self.follow_membership(true);
        Ok(())
    }

    /// As a new leader: commits a record for each founding member (in this replica's
    /// configuration, still a member, and without one), so that from then on every replica
    /// takes the members' addresses and keys from the log, not from a configuration of its own
    /// that may differ. Once recorded (the first leader of a cluster does it) this commits
    /// nothing.
    pub(in crate::server) async fn record_founders(&self) -> Result<(), ArmError> {
        let replication = self.replicated()?;
        let members = replication.member_ids();
        let changes: Vec<Change> = {
            let recorded = replication.members.read().expect("members poisoned");
            let founders =
                replication.config.members.iter().filter(|m| members.contains(&m.id) && !recorded.contains_key(&m.id));
            founders
                .map(|m| configured_record(m).change(m.id))
                .collect::<Result<_, _>>()
                .map_err(|e| err(ArmErrorKind::Internal, e.to_string()))?
        };
        if changes.is_empty() {
            return Ok(());
        }
        self.record_members(&changes).await?;
        tracing::info!(members = changes.len(), "the founding members' records committed");
        Ok(())
    }

    /// `armctl cluster add`: `new` a learner; the status shows how far it is behind.
    #[tracing::instrument(skip(self, new), fields(id = new.id, raft = %new.raft))]
    pub(in crate::server) async fn cluster_add(&self, new: NewReplica) -> Answer {
        self.ensure_learner(&new).await?;
        self.cluster_status()
    }

    /// `armctl cluster replace`: `new` a learner, and once it has caught up, a voter in `old`'s
    /// place (one membership change: joint consensus); `old`'s record dropped. Asked again
    /// once done, it changes nothing.
    #[tracing::instrument(skip(self, new), fields(new = new.id))]
    pub(in crate::server) async fn cluster_replace(&self, old: u64, new: NewReplica) -> Answer {
        let replication = self.replicated()?;
        let mut voters = replication.replica.voters();
        if voters.contains(&new.id) && !voters.contains(&old) {
            return self.cluster_status();
        }
        if !voters.contains(&old) {
            return Err(err(ArmErrorKind::NotFound, format!("replica {old} is not a voter")));
        }
        if voters.contains(&new.id) {
            // Replacing one voter by another would only take `old` out: one voter fewer.
            let why = format!("replica {} votes already: replace puts a new replica in {old}'s place", new.id);
            return Err(err(ArmErrorKind::Conflict, why));
        }
        if old == replication.config.id {
            return Err(err(ArmErrorKind::Invalid, leader_stays(old)));
        }
        self.ensure_learner(&new).await?;
        if replication.caught_up(new.id) {
            voters.remove(&old);
            voters.insert(new.id);
            replication.replica.change_membership(voters).await.map_err(|e| refused(replication, e))?;
            tracing::info!(old, new = new.id, "replica replaced");
            self.record_members(&[MemberRecord::deletion(old)]).await?;
            self.follow_membership(true);
        }
        self.cluster_status()
    }

    /// `armctl cluster remove`: learner `id` leaves the cluster (one an `add` left behind).
    /// A voter is replaced, never removed: taking one out leaves one voter fewer (two of three
    /// tolerate no failure), with no way to add one back, and while another voter is down the
    /// change itself could never commit (joint consensus needs a majority of the remaining
    /// voters: both of two).
    #[tracing::instrument(skip(self))]
    pub(in crate::server) async fn cluster_remove(&self, id: u64) -> Answer {
        let replication = self.replicated()?;
        let members = replication.replica.status().members;
        let Some((_, _, voter)) = members.iter().find(|(member, _, _)| *member == id) else {
            return Err(err(ArmErrorKind::NotFound, format!("replica {id} is not a member")));
        };
        if *voter {
            let why = format!(
                "replica {id} votes: a voter is replaced (`armctl cluster replace --old {id} --new ...`), not removed"
            );
            return Err(err(ArmErrorKind::Invalid, why));
        }
        if id == replication.config.id {
            return Err(err(ArmErrorKind::Invalid, leader_stays(id)));
        }
        replication.replica.remove_member(id).await.map_err(|e| refused(replication, e))?;
        tracing::info!(id, "replica removed");
        self.record_members(&[MemberRecord::deletion(id)]).await?;
        self.follow_membership(true);
        self.cluster_status()
    }
}

/// Why the leader does not remove itself: it would step down in the middle of the request.
fn leader_stays(id: u64) -> String {
    format!(
        "replica {id} leads: a leader does not remove itself. Stop it (the others elect another leader), then ask \
         again"
    )
}
