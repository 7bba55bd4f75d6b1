//! MPI programs (feature `mpi`): one session per rank, and collective `AC_Init`, `AC_Get`,
//! `AC_Free` and `AC_Finalize` over a communicator.
//!
//! The communicator is anything that implements [`Communicator`]: the few collectives these
//! functions need. With feature `rsmpi`, every rsmpi communicator does; libac implements it
//! over the program's own MPI, found at run time, so that the library needs no one MPI's
//! `libmpi.so` (programs without MPI run with any MPI, or none, installed).
//!
//! Every function here is collective: every rank of the communicator calls it, with its own
//! arguments, and every rank gets the same outcome (all ranks succeed, or all fail with the same
//! error). MPI must be initialized (by the program, or by `mpi::initialize`); when ranks call
//! these functions from several threads, MPI needs `MPI_THREAD_MULTIPLE` (or serialized calls).
//!
//! - [`Session::init_on`]: each rank opens its own session. Ranks on one node share the node's
//!   static accelerators, each through handles (connections) of its own. Without a batch system
//!   (the ad-hoc default) rank 0 creates the job and the others join it; its ranks must then run
//!   on one node.
//! - [`Session::get_on`]: one request to the manager for the whole communicator, all or
//!   nothing, one set id; each rank asks for its own count and gets handles to its own share.
//! - [`Session::free_on`]: releases such a set once every rank has let go of it.
//!
//! A rank that dies in the middle leaves the others with an MPI error (or the MPI runtime ends
//! the job); what the dead rank held is released by the manager when its session's lease runs
//! out, and a collective set when the session of rank 0 ends.

use ac_proto::arm::{Grant, JobAuth};
use serde::{de::DeserializeOwned, Serialize};

use crate::blocking::{runtime, DynamicSet, Session};
use crate::{Error, Result, SessionOptions};

/// Node names travel in fixed slots of this many bytes.
const NODE_SLOT: usize = 256;

/// The collectives of an MPI communicator that the collective session calls use. Every rank
/// calls each method in the same order, as MPI requires; an `Err` fails the collective call
/// on this rank (MPI's default error handler aborts the program before one is returned).
pub trait Communicator {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> i32;
    /// How many ranks the communicator has.
    fn size(&self) -> i32;
    /// Returns once every rank has called it.
    fn barrier(&self) -> Result<()>;
    /// Replaces `bytes` with rank `root`'s (every rank passes the same length).
    fn broadcast(&self, root: i32, bytes: &mut [u8]) -> Result<()>;
    /// Fills `all` with every rank's `mine`, in rank order (every rank passes the same length;
    /// `all` is `size()` times as long).
    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()>;
    /// The least of every rank's `value`.
    fn all_reduce_min(&self, value: i32) -> Result<i32>;
}

/// rsmpi's communicators (their calls do not return MPI's error codes: they abort on errors).
#[cfg(feature = "rsmpi")]
impl<C: ::mpi::traits::Communicator> Communicator for C {
    fn rank(&self) -> i32 {
        ::mpi::traits::Communicator::rank(self)
    }

    fn size(&self) -> i32 {
        ::mpi::traits::Communicator::size(self)
    }

    fn barrier(&self) -> Result<()> {
        ::mpi::traits::CommunicatorCollectives::barrier(self);
        Ok(())
    }

    fn broadcast(&self, root: i32, bytes: &mut [u8]) -> Result<()> {
        use ::mpi::traits::Root;
        self.process_at_rank(root).broadcast_into(bytes);
        Ok(())
    }

    fn all_gather(&self, mine: &[u8], all: &mut [u8]) -> Result<()> {
        ::mpi::traits::CommunicatorCollectives::all_gather_into(self, mine, all);
        Ok(())
    }

    fn all_reduce_min(&self, value: i32) -> Result<i32> {
        let mut least = value;
        let min = ::mpi::collective::SystemOperation::min();
        ::mpi::traits::CommunicatorCollectives::all_reduce_into(self, &value, &mut least, min);
        Ok(least)
    }
}

impl Session {
    /// Collective `AC_Init`: a session for every rank of `comm`.
    pub fn init_on<C: Communicator + ?Sized>(comm: &C, options: SessionOptions) -> Result<Self> {
        let rt = runtime()?;
        let opened = match &options.job {
            // The job exists already: every rank presents its own credential.
            JobAuth::Credential { .. } | JobAuth::Munge { .. } | JobAuth::SameJob { .. } => {
                rt.block_on(crate::Session::init(options))
            }
            // Rank 0 creates the job; the others join it with its session's token.
            JobAuth::AdHoc { .. } => {
                let first = (comm.rank() == 0).then(|| rt.block_on(crate::Session::init(options.clone())));
                let token = first.as_ref().and_then(|s| s.as_ref().ok()).map(|s| s.token().to_string());
                let token: Option<String> = broadcast(comm, &token.ok_or(()))?.ok();
                match (first, token) {
                    (Some(first), _) => first,
                    (None, Some(token)) => {
                        let options = SessionOptions { job: JobAuth::SameJob { token }, ..options };
                        rt.block_on(crate::Session::init(options))
                    }
                    (None, None) => Err(Error::Setup("AC_Init failed on rank 0".into())),
                }
            }
        };
        let opened = agree(comm, opened, |session| {
            rt.block_on(session.finalize()).ok();
        })?;
        Ok(Self::wrap(rt, opened))
    }

    /// Collective `AC_Get`: `count` accelerators for this rank (0 is allowed), granted to all
    /// ranks together or to none. `None` when the manager rejects the request.
    pub fn get_on<C: Communicator + ?Sized>(&self, comm: &C, count: u32) -> Result<Option<DynamicSet>> {
        Ok(self.get_on_or_why(comm, count)?.ok())
    }

    /// [`Session::get_on`], saying why the manager rejected the request: its reason, after
    /// what each rank asked for (every rank gets the same).
    pub fn get_on_or_why<C: Communicator + ?Sized>(
        &self,
        comm: &C,
        count: u32,
    ) -> Result<std::result::Result<DynamicSet, String>> {
        let parts = gather_parts(comm, self.inner.node(), count)?;
        let decided = match comm.rank() {
            0 => Some(self.rt.block_on(self.inner.collective_grants(share_by_node(&parts))).map(|granted| {
                granted
                    .map(|(set, grants)| (set, split_by_rank(&parts, grants)))
                    .map_err(|reason| format!("{}: {reason}", asked(&parts)))
            })),
            _ => None,
        };
        type Decided = std::result::Result<(u64, Vec<Vec<Grant>>), String>;
        let decided = decided.unwrap_or_else(|| Ok(Err(String::new())));
        let decided: Result<Decided> = broadcast(comm, &decided)?;
        let (set, mut shares) = match decided? {
            Ok(granted) => granted,
            Err(reason) => return Ok(Err(reason)),
        };
        let mine = std::mem::take(&mut shares[comm.rank() as usize]);
        let connected = self.rt.block_on(self.inner.connect(set, &mine));
        // All or nothing: if a rank cannot reach its share, the set goes back whole.
        let connected = agree(comm, connected, |_| ());
        if connected.is_err() && comm.rank() == 0 {
            let empty = crate::DynamicSet { id: set, handles: Vec::new(), until: None };
            self.rt.block_on(self.inner.free(empty)).ok();
        }
        Ok(Ok(self.wrap_set(connected?)))
    }

    /// Collective `AC_Free` of a set obtained with [`Session::get_on`]: every rank's handles
    /// close, then the set is released.
    pub fn free_on<C: Communicator + ?Sized>(&self, comm: &C, set: DynamicSet) -> Result<()> {
        let id = set.id;
        let handles = set.inner.handles;
        self.rt.block_on(futures_util::future::join_all(handles.into_iter().map(|h| h.acc.close())));
        comm.barrier()?;
        let freed = (comm.rank() == 0)
            .then(|| self.rt.block_on(self.inner.free(crate::DynamicSet { id, handles: Vec::new(), until: None })));
        broadcast(comm, &freed.unwrap_or(Ok(())))?
    }

    /// Collective `AC_Finalize`: waits until every rank is done with the collective sets, then
    /// ends each rank's session.
    pub fn finalize_on<C: Communicator + ?Sized>(self, comm: &C) -> Result<()> {
        comm.barrier()?;
        let result = self.finalize();
        agree(comm, result, |_| ())
    }
}

/// Every rank's node and count, in rank order.
fn gather_parts<C: Communicator + ?Sized>(comm: &C, node: &str, count: u32) -> Result<Vec<(String, u32)>> {
    if node.len() > NODE_SLOT - 4 {
        return Err(Error::InvalidArgument(format!("node name longer than {} bytes", NODE_SLOT - 4)));
    }
    let mut slot = vec![0u8; NODE_SLOT];
    slot[..4].copy_from_slice(&count.to_le_bytes());
    slot[4..4 + node.len()].copy_from_slice(node.as_bytes());
    let mut all = vec![0u8; NODE_SLOT * comm.size() as usize];
    comm.all_gather(&slot, &mut all)?;
    Ok(all
        .chunks(NODE_SLOT)
        .map(|slot| {
            let count = u32::from_le_bytes(slot[..4].try_into().expect("4 bytes"));
            let name = &slot[4..];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            (String::from_utf8_lossy(&name[..end]).into_owned(), count)
        })
        .collect())
}

/// What the ranks asked for, for a rejection: `1 accelerator(s) for rank 0 on n1, 1 for rank 1
/// on n1 (2 in all)`.
fn asked(parts: &[(String, u32)]) -> String {
    let ranks: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(rank, (node, count))| match rank {
            0 => format!("{count} accelerator(s) for rank 0 on {node}"),
            _ => format!("{count} for rank {rank} on {node}"),
        })
        .collect();
    let total: u32 = parts.iter().map(|(_, count)| count).sum();
    format!("{} ({total} in all)", ranks.join(", "))
}

/// What the manager is asked for: the accelerators each node needs.
fn share_by_node(parts: &[(String, u32)]) -> Vec<(String, u32)> {
    let mut nodes: Vec<(String, u32)> = Vec::new();
    for (node, count) in parts.iter().filter(|(_, c)| *c > 0) {
        match nodes.iter_mut().find(|(n, _)| n == node) {
            Some((_, total)) => *total += count,
            None => nodes.push((node.clone(), *count)),
        }
    }
    nodes
}

/// Hands each rank `count` of the grants made for its node, in rank order.
fn split_by_rank(parts: &[(String, u32)], mut grants: Vec<Grant>) -> Vec<Vec<Grant>> {
    parts
        .iter()
        .map(|(node, count)| {
            let mut mine = Vec::new();
            while mine.len() < *count as usize {
                let Some(at) = grants.iter().position(|g| g.node == *node) else { break };
                mine.push(grants.remove(at));
            }
            mine
        })
        .collect()
}

/// Sends rank 0's `value` to every rank; every rank returns it.
fn broadcast<C: Communicator + ?Sized, T: Serialize + DeserializeOwned>(comm: &C, value: &T) -> Result<T> {
    broadcast_from(comm, 0, value)
}

/// Sends rank `root`'s `value` to every rank (its length first, then its bytes).
fn broadcast_from<C: Communicator + ?Sized, T: Serialize + DeserializeOwned>(
    comm: &C,
    root: i32,
    value: &T,
) -> Result<T> {
    let mut bytes = Vec::new();
    ac_proto::codec::encode_into(value, &mut bytes).map_err(|e| Error::Protocol(e.to_string()))?;
    let mut len = (bytes.len() as u64).to_le_bytes();
    comm.broadcast(root, &mut len)?;
    bytes.resize(u64::from_le_bytes(len) as usize, 0);
    comm.broadcast(root, &mut bytes)?;
    ac_proto::codec::decode(&bytes).map_err(|e| Error::Protocol(e.to_string()))
}

/// Makes an outcome collective: every rank gets the first rank's error if any rank failed
/// (`undo` lets a rank that succeeded give back what it got).
fn agree<C: Communicator + ?Sized, T>(comm: &C, outcome: Result<T>, undo: impl FnOnce(T)) -> Result<T> {
    let failed_at = if outcome.is_err() { comm.rank() } else { comm.size() };
    let first = match comm.all_reduce_min(failed_at) {
        Ok(first) => first,
        Err(e) => {
            if let Ok(value) = outcome {
                undo(value);
            }
            return Err(e);
        }
    };
    if first == comm.size() {
        return outcome;
    }
    let error = match outcome {
        Err(e) => e,
        Ok(value) => {
            undo(value);
            Error::Setup(format!("failed on rank {first}"))
        }
    };
    let error: Error = broadcast_from(comm, first, &error)?;
    Err(error)
}
