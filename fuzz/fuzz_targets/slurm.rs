//! The manager's parsers of Slurm's and munge's output (`arm-server/src/slurm.rs`): `squeue
//! --json`, `scontrol show lic -o`, `scontrol show job -o` (the job's line and its
//! `Licenses=`), and `unmunge`'s report. Asserts: no panic, including in what the manager
//! computes from a license's figures (`free`, `overdrawn`), and that a pending job listed
//! wants licenses of the pool.
#![no_main]

use arm_server::slurm;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else { return };
    let text = String::from_utf8_lossy(bytes);
    match which % 5 {
        0 => {
            if let Ok(jobs) = slurm::parse_jobs(&text, "ac") {
                let priorities: Vec<u64> = jobs.pending.iter().map(|j| j.priority).collect();
                assert!(priorities.windows(2).all(|w| w[0] >= w[1]), "pending jobs by priority");
            }
        }
        1 => {
            if let Some(lic) = slurm::parse_license_use(&text) {
                assert!(lic.free() <= lic.total);
                let _ = lic.overdrawn();
            }
        }
        2 => {
            let (job, shown) = text.split_once('\n').unwrap_or(("7", &text));
            if let Some(found) = slurm::parse_job(shown, job) {
                assert!(!found.target.is_empty() || job.is_empty());
            }
        }
        3 => {
            for (name, _) in slurm::parse_job_licenses(&text) {
                assert_ne!(name, "(null)");
            }
        }
        _ => drop(slurm::parse_unmunge(&text)),
    }
});
