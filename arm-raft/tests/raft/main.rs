//! arm-raft's tests, one binary (each test binary links openraft, quinn and redb and
//! instantiates their generic code again): the redb store under openraft's storage suite
//! (`storage`), three replicas on loopback over real QUIC (`replicas`), and who may speak Raft
//! to a replica (`peers`).

mod common;
mod peers;
mod replicas;
mod storage;
