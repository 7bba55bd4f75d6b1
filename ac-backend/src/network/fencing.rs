//! The fence, on disk: per device, the highest capability id a session was opened with.
//!
//! A backend restarted by a crash or an upgrade must still refuse a capability older than one
//! it admitted before (a deposed leader's, or an earlier holder's), so a raised fence is
//! written, synced, before the session it admits opens. The file (`fenced` in the state
//! directory) is a log of `device id` lines, the highest per device in force; it is rewritten
//! with one line per device once it holds many more. A line torn by a crash was never
//! acknowledged (its session did not open), and it parses as nothing or as a lower id, which
//! the maximum ignores.
//!
//! The fence belongs to the registration: capability ids are the registered manager's, so a
//! backend registered afresh (its `arm.pub` removed, say for a manager whose state was reset)
//! starts with none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::durable::{append_durably, write_durably};

/// Lines the file may carry beyond one per device before it is rewritten.
const COMPACT_SLACK: usize = 1024;

/// The fence of every device, and its file.
#[derive(Debug)]
pub(super) struct Fencing {
    file: PathBuf,
    /// Device -> the highest capability id a session was opened with.
    highest: HashMap<u32, u64>,
    /// Lines in the file.
    lines: usize,
}

impl Fencing {
    /// The fence as `state_dir` keeps it (none if it keeps none).
    pub(super) fn load(state_dir: &Path) -> Self {
        let file = state_dir.join("fenced");
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let mut highest: HashMap<u32, u64> = HashMap::new();
        for (device, id) in text.lines().filter_map(parse_line) {
            let newest = highest.entry(device).or_insert(0);
            *newest = (*newest).max(id);
        }
        Self { file, highest, lines: text.lines().count() }
    }

    /// Admits capability `id` for `device` unless a higher one was admitted; a higher one is on
    /// disk before this returns. Blocks on the disk.
    pub(super) fn admit(&mut self, device: u32, id: u64) -> Result<(), String> {
        let newest = self.highest.get(&device).copied().unwrap_or(0);
        if id < newest {
            return Err(format!(
                "capability {id} was superseded by a newer grant of device {device} (capability {newest}): it was \
                 issued to an earlier holder, or by a manager replica that has since lost the lead"
            ));
        }
        if id > newest {
            self.raise(device, id).map_err(|e| format!("cannot record the fence of device {device}: {e}"))?;
        }
        Ok(())
    }

    /// Records `id` as `device`'s fence, on disk first.
    fn raise(&mut self, device: u32, id: u64) -> std::io::Result<()> {
        if self.lines + 1 > 2 * self.highest.len() + COMPACT_SLACK || !self.file.exists() {
            let mut fences = self.highest.clone();
            fences.insert(device, id);
            let text: String = fences.iter().map(|(device, id)| format!("{device} {id}\n")).collect();
            write_durably(&self.file, text.as_bytes())?;
            self.lines = fences.len();
        } else {
            // Each record starts on a line of its own, so a torn one never spoils the next.
            append_durably(&self.file, format!("\n{device} {id}").as_bytes())?;
            self.lines += 1;
        }
        self.highest.insert(device, id);
        Ok(())
    }

    /// Forgets every fence (a new registration: another manager's ids).
    pub(super) fn reset(&mut self) -> std::io::Result<()> {
        if let Err(e) = std::fs::remove_file(&self.file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e);
            }
        }
        self.highest.clear();
        self.lines = 0;
        Ok(())
    }
}

fn parse_line(line: &str) -> Option<(u32, u64)> {
    let (device, id) = line.split_once(' ')?;
    Some((device.parse().ok()?, id.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ac-fencing-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_fence_survives_a_restart_and_a_torn_line_lowers_nothing() {
        let dir = state_dir("restart");
        let mut fencing = Fencing::load(&dir);
        fencing.admit(0, 5).unwrap();
        fencing.admit(0, 9).unwrap();
        fencing.admit(1, 3).unwrap();
        // A crash in the middle of raising device 0's fence to 12345: "12" reached the disk.
        let file = dir.join("fenced");
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str("\n0 12");
        std::fs::write(&file, text).unwrap();
        let mut restarted = Fencing::load(&dir);
        let refused = restarted.admit(0, 7).unwrap_err();
        assert!(refused.contains("superseded") && refused.contains("capability 12"), "{refused}");
        restarted.admit(0, 12).unwrap();
        assert!(restarted.admit(1, 2).is_err(), "device 1's fence came back too");
        restarted.admit(1, 4).unwrap();
        let again = Fencing::load(&dir);
        assert_eq!((again.highest[&0], again.highest[&1]), (12, 4), "the line after the torn one counts");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_file_is_rewritten_with_a_line_per_device_once_it_grew() {
        let dir = state_dir("compact");
        let mut fencing = Fencing::load(&dir);
        for id in 1..=(COMPACT_SLACK as u64 + 10) {
            fencing.admit((id % 3) as u32, id).unwrap();
        }
        let lines = std::fs::read_to_string(dir.join("fenced")).unwrap().lines().filter(|l| !l.is_empty()).count();
        assert!(lines < COMPACT_SLACK, "{lines} lines");
        let again = Fencing::load(&dir);
        let top = COMPACT_SLACK as u64 + 10;
        assert_eq!(again.highest.values().max(), Some(&top));
        assert_eq!(again.highest.len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reset_forgets_every_fence_also_after_a_restart() {
        let dir = state_dir("reset");
        let mut fencing = Fencing::load(&dir);
        fencing.admit(0, 50).unwrap();
        fencing.reset().unwrap();
        fencing.admit(0, 2).unwrap();
        assert!(Fencing::load(&dir).admit(0, 1).is_err());
        Fencing::load(&dir).admit(0, 2).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
