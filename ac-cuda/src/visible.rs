//! `CUDA_VISIBLE_DEVICES`: which of the job's accelerators on this node the process sees, and
//! in which order, as NVIDIA's driver reads the variable. Launchers pin one rank a GPU this
//! way (`CUDA_VISIBLE_DEVICES=$LOCAL_RANK`, Slurm's `--gpus-per-task`); the shim opens sessions
//! only on the accelerators named, so a rank holds nothing on its neighbours' (a device in
//! exclusive mode serves one session).
//!
//! The rules are the driver's: a comma-separated list of indexes into the job's accelerators
//! (the order `AC_Init` gives them) or UUIDs (`GPU-` and the device's UUID, or a prefix of it
//! naming one device); the list ends at the first entry that names no device (an index out of
//! range, an unknown or ambiguous UUID, a device named twice, a MIG instance, anything else),
//! and what came before stays visible. Unset, every accelerator is visible; set to a list whose
//! first entry names none, no device is.

use crate::uuid::{of as uuid_of, text as uuid_text};

/// The variable's name.
pub const VARIABLE: &str = "CUDA_VISIBLE_DEVICES";

/// The accelerators the process sees: indexes into `ids` (the job's accelerators on this node,
/// by id), in the order `spec` names them; none named is an error saying so.
pub fn select(spec: &str, ids: &[String]) -> Result<Vec<usize>, String> {
    let uuids: Vec<String> = ids.iter().map(|id| uuid_text(&uuid_of(id)).to_ascii_lowercase()).collect();
    let mut seen = Vec::new();
    for entry in spec.split(',').map(str::trim) {
        match device_named(entry, &uuids) {
            Some(index) if !seen.contains(&index) => seen.push(index),
            _ => break,
        }
    }
    if seen.is_empty() {
        return Err(format!(
            "{VARIABLE}={spec} names none of the job's {} accelerator(s) on this node (indexes 0 to {}, or GPU-<uuid>)",
            ids.len(),
            ids.len().saturating_sub(1)
        ));
    }
    Ok(seen)
}

/// The device one entry names: an index, or a UUID or a prefix of one that a single device has.
fn device_named(entry: &str, uuids: &[String]) -> Option<usize> {
    if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
        return entry.parse::<usize>().ok().filter(|&i| i < uuids.len());
    }
    let wanted = entry.to_ascii_lowercase();
    if !wanted.starts_with("gpu-") || wanted.len() <= "gpu-".len() {
        return None;
    }
    let mut matching = uuids.iter().enumerate().filter(|(_, u)| u.starts_with(&wanted));
    match (matching.next(), matching.next()) {
        (Some((index, _)), None) => Some(index),
        _ => None,
    }
}

/// The selection the environment asks for: `None` when the variable is unset (every
/// accelerator, in order).
pub fn from_env() -> Option<String> {
    std::env::var(VARIABLE).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        ["gpu1/0", "gpu1/1", "gpu2/0"].map(String::from).to_vec()
    }

    fn uuid(i: usize) -> String {
        uuid_text(&uuid_of(&ids()[i]))
    }

    #[test]
    fn indexes_pick_and_order_the_accelerators() {
        assert_eq!(select("1", &ids()), Ok(vec![1]));
        assert_eq!(select("2,0", &ids()), Ok(vec![2, 0]));
        assert_eq!(select(" 0 , 1 ", &ids()), Ok(vec![0, 1]));
    }

    #[test]
    fn the_list_ends_at_the_first_entry_that_names_no_device() {
        assert_eq!(select("0,-1,1", &ids()), Ok(vec![0]));
        assert_eq!(select("1,7,0", &ids()), Ok(vec![1]));
        assert_eq!(select("1,1,0", &ids()), Ok(vec![1]), "a device named twice");
        assert_eq!(select("0,MIG-abc,1", &ids()), Ok(vec![0]));
        assert_eq!(select("0,,1", &ids()), Ok(vec![0]));
    }

    #[test]
    fn uuids_and_unique_prefixes_name_devices() {
        assert_eq!(select(&uuid(2), &ids()), Ok(vec![2]));
        assert_eq!(select(&uuid(1).to_ascii_uppercase(), &ids()), Ok(vec![1]));
        let prefix = &uuid(0)[..12];
        assert_eq!(select(&format!("{prefix},0"), &ids()), Ok(vec![0]), "named twice: the second ends the list");
        assert!(select("GPU-", &ids()).is_err(), "a prefix of every device names none");
        assert!(select("GPU-ffffffff-0000", &ids()).is_err());
    }

    #[test]
    fn a_list_naming_no_device_says_so() {
        for spec in ["", "3", "-1", "none", "MIG-1"] {
            let why = select(spec, &ids()).unwrap_err();
            assert!(why.contains("names none of the job's 3 accelerator(s)"), "{spec}: {why}");
        }
    }
}
