//! The end-to-end tests, one binary: real daemons, real QUIC, real Slurm, real `mpirun`, as
//! `scripts/test` runs them (nextest: each test in a process of its own). One module per
//! subject; select one with `cargo nextest run -p ac-tests -E 'test(/^network::/)'`.
//!
//! Why one binary: each test binary links every crate it uses and instantiates their generic
//! code again; 33 of them took most of a clean CI build. `gpu.rs` stays a binary of its own:
//! `scripts/gpu-check` builds and ships it alone to a GPU host.

#[path = "../gpu_cases/mod.rs"]
mod gpu_cases;
mod standin;

mod accounting;
mod arm;
mod arm_restart;
mod armctl;
mod builtin_docs;
mod c_abi;
mod compute;
mod cuda_blas_vectors;
mod cuda_calls;
mod cuda_frameworks;
mod cuda_ipc;
mod cuda_launches;
mod cuda_libraries;
mod cuda_ranks;
mod cuda_sensors;
mod cuda_shim;
mod device_contract;
mod device_link;
mod devices;
mod errors;
mod faults;
mod full_disk;
mod gpu_bringup;
mod gpu_health;
mod hostile;
mod lanes;
mod malleable;
mod metrics;
mod network;
mod operator;
mod ordering;
mod packages;
mod replicated;
mod resumption;
mod revocations;
mod scheduler_api;
mod scheduling;
mod served_devices;
mod session_ends;
mod slurm;
mod soak;
mod upgrade;
mod worker_path;
