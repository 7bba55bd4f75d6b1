//! Injected events: the text file `NVML_STANDIN_EVENTS` names, to which a test appends lines
//! `<uuid> xid <number>`, and the event sets that read it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use nvml_wrapper_sys::bindings::nvmlEventTypeXidCriticalError;

/// One line of the events file: a critical Xid on a GPU or MIG instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub uuid: String,
    pub xid: u64,
}

impl Injected {
    /// Parses `<uuid> xid <number>`; anything else is `None`.
    pub fn parse(line: &str) -> Option<Injected> {
        let mut words = line.split_whitespace();
        let (uuid, kind, number) = (words.next()?, words.next()?, words.next()?);
        if kind != "xid" || words.next().is_some() {
            return None;
        }
        Some(Injected { uuid: uuid.to_owned(), xid: number.parse().ok()? })
    }
}

/// One `nvmlEventSet_t`: where in the events file it has read to, and what is registered on it.
#[derive(Debug)]
pub struct EventSet {
    /// The byte after the last line this set has read.
    pub offset: u64,
    /// Registered devices by UUID, with their event masks.
    registered: HashMap<String, u64>,
}

impl EventSet {
    /// A set that sees only the lines appended from now on.
    pub fn new(events: Option<&Path>) -> EventSet {
        let offset = events.and_then(|path| std::fs::metadata(path).ok()).map_or(0, |meta| meta.len());
        EventSet { offset, registered: HashMap::new() }
    }

    /// Adds event types for a device, as repeated `nvmlDeviceRegisterEvents` calls do.
    pub fn register(&mut self, uuid: &str, mask: u64) {
        *self.registered.entry(uuid.to_owned()).or_default() |= mask;
    }

    /// Whether critical Xids of this device are wanted.
    pub fn wants_xid(&self, uuid: &str) -> bool {
        self.registered.get(uuid).is_some_and(|mask| mask & u64::from(nvmlEventTypeXidCriticalError) != 0)
    }
}

/// The complete lines after `offset`, each with the offset just after it. A line still being
/// written (no newline yet) waits for a later call; a file shorter than `offset` (truncated)
/// is read from its start again, and a missing file has no lines.
pub fn pending_lines(path: &Path, offset: &mut u64) -> Vec<(String, u64)> {
    let Ok(mut file) = File::open(path) else { return Vec::new() };
    let len = file.metadata().map_or(0, |meta| meta.len());
    if len < *offset {
        *offset = 0;
    }
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(*offset)).and_then(|_| file.read_to_end(&mut bytes)).is_err() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let mut end = *offset;
    for chunk in bytes.split_inclusive(|&b| b == b'\n') {
        if chunk.last() != Some(&b'\n') {
            break;
        }
        end += chunk.len() as u64;
        lines.push((String::from_utf8_lossy(chunk).trim().to_owned(), end));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_parse_as_uuid_xid_number() {
        let expected = Injected { uuid: "GPU-1".to_owned(), xid: 79 };
        assert_eq!(Injected::parse("GPU-1 xid 79"), Some(expected.clone()));
        assert_eq!(Injected::parse("  GPU-1   xid 79  "), Some(expected));
        assert_eq!(Injected::parse("GPU-1 xid"), None);
        assert_eq!(Injected::parse("GPU-1 ecc 79"), None);
        assert_eq!(Injected::parse("GPU-1 xid 79 extra"), None);
        assert_eq!(Injected::parse("GPU-1 xid -1"), None);
    }

    #[test]
    fn a_set_reads_only_complete_lines_appended_after_its_creation() {
        let path = crate::tests::temp_path("events.txt");
        std::fs::write(&path, "GPU-0 xid 48\n").unwrap();
        let mut set = EventSet::new(Some(&path));
        assert!(pending_lines(&path, &mut set.offset).is_empty(), "old lines are not replayed");

        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"GPU-1 xid 79\nGPU-1 xi").unwrap();
        let lines = pending_lines(&path, &mut set.offset);
        assert_eq!(lines, vec![("GPU-1 xid 79".to_owned(), 26)], "the partial line waits");
        set.offset = lines[0].1;
        file.write_all(b"d 13\n").unwrap();
        assert_eq!(pending_lines(&path, &mut set.offset), vec![("GPU-1 xid 13".to_owned(), 39)]);

        std::fs::write(&path, "GPU-2 xid 31\n").unwrap();
        set.offset = 39;
        assert_eq!(pending_lines(&path, &mut set.offset)[0].0, "GPU-2 xid 31", "a truncated file is read again");
        std::fs::remove_file(&path).unwrap();
        assert!(pending_lines(&path, &mut set.offset).is_empty());
    }

    #[test]
    fn registration_accumulates_masks_per_device() {
        let mut set = EventSet::new(None);
        assert_eq!(set.offset, 0);
        set.register("GPU-0", 1);
        assert!(!set.wants_xid("GPU-0"));
        set.register("GPU-0", u64::from(nvmlEventTypeXidCriticalError));
        assert!(set.wants_xid("GPU-0"));
        assert!(!set.wants_xid("GPU-1"));
    }
}
