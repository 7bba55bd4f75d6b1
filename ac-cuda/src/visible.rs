//! `CUDA_VISIBLE_DEVICES`: which of the job's accelerators on this node the process sees, and
//! in which order, as NVIDIA's driver reads the variable. Launchers pin one rank a GPU this
//! way (`CUDA_VISIBLE_DEVICES=$LOCAL_RANK`, Slurm's `--gpus-per-task`); the shim opens sessions
//! only on the accelerators named, so a rank holds nothing on its neighbours' (a device in
//! exclusive mode serves one session).
//!
//! The rules are the driver's, as PyTorch mirrors them (`torch.cuda._parse_visible_devices`,
//! which counts devices through NVML by them):
//! - a comma-separated list of indexes into the job's accelerators on the node (`AC_Init`'s
//!   order), each read as `strtoul` reads (`1gpu2` is `1`), or of UUIDs (`GPU-` and the
//!   device's UUID, or a prefix of it naming one device): the first entry says which;
//! - the list is read up to the first entry of another form (a negative or unreadable index, a
//!   UUID in a list of indexes, an index or a MIG instance in a list of UUIDs); an entry written
//!   twice there makes the whole list name none;
//! - of those, the devices named up to the first entry that names none (an index past the
//!   accelerators, an unknown or ambiguous UUID) are visible; two entries naming one device make
//!   the list name none.
//!
//! Unset, every accelerator is visible; naming none is an error. The indexes count the job's
//! accelerators of every kind, where NVIDIA's count GPUs: a job mixing CPU-emulated accelerators
//! with GPUs counts both.

use crate::uuid::{of as uuid_of, text as uuid_text};

/// The variable's name.
pub const VARIABLE: &str = "CUDA_VISIBLE_DEVICES";

/// The accelerators the process sees: indexes into `ids` (the job's accelerators on this node,
/// by id), in the order `spec` names them; none named is an error saying so.
pub fn select(spec: &str, ids: &[String]) -> Result<Vec<usize>, String> {
    let uuids: Vec<String> = ids.iter().map(|id| uuid_text(&uuid_of(id)).to_ascii_lowercase()).collect();
    let named = entries(spec).and_then(|entries| resolve(&entries, ids.len(), &uuids));
    match named {
        Some(devices) if !devices.is_empty() => Ok(devices),
        Some(_) => Err(format!(
            "{VARIABLE}={spec} names none of the job's {} accelerator(s) on this node (indexes 0 to {}, or GPU-<uuid>)",
            ids.len(),
            ids.len().saturating_sub(1)
        )),
        None => Err(format!("{VARIABLE}={spec} names a device twice, which makes it name none")),
    }
}

/// One entry of the list, read for its form alone.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// An index (`strtoul`'s reading of the entry).
    Index(usize),
    /// A UUID or a prefix of one (`GPU-...`, lower case).
    Uuid(String),
}

/// The entries up to the first that is no index (a list of indexes) or no `GPU-` UUID (a list
/// of UUIDs: the first entry says which); `None` if one is written twice, which makes the list
/// name none.
fn entries(spec: &str) -> Option<Vec<Entry>> {
    let by_uuid = spec.starts_with("GPU-");
    let mut entries = Vec::new();
    for text in spec.split(',').map(str::trim) {
        let entry = match by_uuid {
            true if text.starts_with("GPU-") => Entry::Uuid(text.to_ascii_lowercase()),
            true => break,
            false => match index_of(text) {
                Some(index) => Entry::Index(index),
                None => break,
            },
        };
        if entries.contains(&entry) {
            return None;
        }
        entries.push(entry);
    }
    Some(entries)
}

/// An index entry read as `strtoul` reads it (a sign, then the digits up to the first other
/// character); a negative one (but `-0`) or one without digits is none.
fn index_of(text: &str) -> Option<usize> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value: usize = rest[..rest.bytes().take_while(u8::is_ascii_digit).count()].parse().ok()?;
    (!negative || value == 0).then_some(value)
}

/// The devices the entries name, up to the first that names none (an index past the `count`
/// accelerators, a UUID no device or more than one has); `None` if two name one device.
fn resolve(entries: &[Entry], count: usize, uuids: &[String]) -> Option<Vec<usize>> {
    let mut devices = Vec::new();
    for entry in entries {
        let device = match entry {
            Entry::Index(index) => Some(*index).filter(|&i| i < count),
            Entry::Uuid(prefix) => device_of_uuid(prefix, uuids),
        };
        match device {
            Some(device) if devices.contains(&device) => return None,
            Some(device) => devices.push(device),
            None => break,
        }
    }
    Some(devices)
}

/// The device whose UUID `prefix` (lower case) is, or begins.
fn device_of_uuid(prefix: &str, uuids: &[String]) -> Option<usize> {
    if prefix.len() <= "gpu-".len() {
        return None;
    }
    let mut matching = uuids.iter().enumerate().filter(|(_, u)| u.starts_with(prefix));
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
        assert_eq!(select("1gpu2,+2,-0", &ids()), Ok(vec![1, 2, 0]), "read as strtoul reads");
    }

    #[test]
    fn the_list_ends_at_the_first_entry_that_names_no_device() {
        assert_eq!(select("0,-1,1", &ids()), Ok(vec![0]));
        assert_eq!(select("1,7,0", &ids()), Ok(vec![1]));
        assert_eq!(select("0,MIG-abc,1", &ids()), Ok(vec![0]));
        assert_eq!(select("0,,1", &ids()), Ok(vec![0]));
        assert_eq!(select("0,-,1", &ids()), Ok(vec![0]));
        assert_eq!(select(&format!("0,{}", uuid(1)), &ids()), Ok(vec![0]), "a UUID in a list of indexes");
        assert_eq!(select(&format!("{},1", uuid(2)), &ids()), Ok(vec![2]), "an index in a list of UUIDs");
    }

    #[test]
    fn a_device_named_twice_makes_the_list_name_none() {
        let why = select("1,0,1", &ids()).unwrap_err();
        assert!(why.contains("names a device twice"), "{why}");
        let prefix = &uuid(0)[..12];
        assert!(select(&format!("{prefix},{}", uuid(0)), &ids()).is_err(), "a prefix and the UUID it begins");
        // Written twice before the list's end, even past a device it does not name.
        assert!(select("0,5,0", &ids()).is_err());
        assert!(select(&format!("{},GPU-ffff,{}", uuid(0), uuid(0)), &ids()).is_err());
    }

    #[test]
    fn uuids_and_unique_prefixes_name_devices() {
        assert_eq!(select(&uuid(2), &ids()), Ok(vec![2]));
        assert_eq!(select(&format!("GPU-{}", &uuid(1)[4..].to_ascii_uppercase()), &ids()), Ok(vec![1]));
        assert_eq!(select(&format!("{},{}", &uuid(1)[..10], uuid(0)), &ids()), Ok(vec![1, 0]));
        assert!(select("GPU-", &ids()).is_err(), "a prefix of every device names none");
        assert!(select("GPU-ffffffff-0000", &ids()).is_err());
    }

    #[test]
    fn a_list_naming_no_device_says_so() {
        for spec in ["", "3", "-1", "none", "MIG-1", "gpu", "gpu-0"] {
            let why = select(spec, &ids()).unwrap_err();
            assert!(why.contains("names none of the job's 3 accelerator(s)"), "{spec}: {why}");
        }
    }
}
