//! The driver's error log (CUDA 12.9's "Error Log Management"): each reason the shim gives for
//! a failed call, which it also says on stderr (`ac-cuda: ...`), is a log message in NVIDIA's
//! form, `[time][thread][CUDA][E][entry point] message`. Messages are kept in a buffer of the
//! driver's size (25,600 bytes; the oldest go first), handed at once to the callbacks the
//! program registered (the CUDA 13 runtime registers one at its start), and read from an
//! iterator ([`crate::logs`]'s entry points). With `CUDA_LOG_FILE` set to `stdout` or a path,
//! each message is also written there as it is made (`stderr` already has the shim's own line).
//! The remote driver's own log does not travel: what it refused reaches the log as the shim's
//! reason.
//!
//! The time is UTC, hours to milliseconds. A callback that makes a failing call is not called
//! again for that call's message (it would never end); the message is still kept. This module
//! uses nothing else of the crate: every error's report ([`crate::error`]) writes to it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CString};
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
/// Bytes of messages kept (the driver's documented buffer size).
const CAPACITY: usize = 25_600;

/// `CUlogLevel`: `CU_LOG_LEVEL_ERROR`, `CU_LOG_LEVEL_WARNING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub enum Level {
    /// A call failed.
    Error = 0,
    /// Something the program should know of.
    Warning = 1,
}

/// Messages kept, each with its number (what an iterator holds: the next message's).
#[derive(Debug, Default)]
struct Log {
    messages: VecDeque<(u32, String)>,
    /// Bytes of the messages kept, a newline each.
    bytes: usize,
    /// The next message's number.
    next: u32,
    /// Messages let go to keep within [`CAPACITY`], ever.
    dropped: u64,
}

/// What a dump wrote: the text (each message ending in a newline) and the iterator after it.
#[derive(Debug, PartialEq)]
pub struct Dump {
    /// The messages, each ending in a newline.
    pub text: String,
    /// The iterator after them.
    pub next: u32,
}

impl Log {
    /// Keeps `line`, letting the oldest messages go past [`CAPACITY`].
    fn push(&mut self, line: String) {
        self.bytes += line.len() + 1;
        self.messages.push_back((self.next, line));
        self.next = self.next.wrapping_add(1);
        while self.bytes > CAPACITY && self.messages.len() > 1 {
            let (_, gone) = self.messages.pop_front().expect("more than one");
            self.bytes -= gone.len() + 1;
            self.dropped += 1;
        }
    }

    /// The messages from number `from` (every one ever made when `None`), and how many of
    /// those asked for are gone. An iterator past the newest message asks for none.
    fn since(&self, from: Option<u32>) -> (Vec<&str>, u64) {
        // The kept messages are numbered up to `next` - 1 without a gap; numbers wrap, so the
        // count asked for is the distance back from `next`.
        let kept = self.messages.len() as u64;
        let made = kept + self.dropped;
        let asked = from.map_or(made, |from| u64::from(self.next.wrapping_sub(from)));
        let asked = if asked > made { 0 } else { asked };
        let skip = kept.saturating_sub(asked) as usize;
        (self.messages.iter().skip(skip).map(|(_, m)| m.as_str()).collect(), asked.saturating_sub(kept))
    }

    /// The messages from `from` as fit in `room` bytes (their newlines included): all of them,
    /// or a line saying how many were left out and then the most recent that fit. `None`: not
    /// even one fits.
    fn dump(&self, from: Option<u32>, room: usize) -> Option<Dump> {
        let (messages, lost) = self.since(from);
        let next = self.next;
        let whole: usize = messages.iter().map(|m| m.len() + 1).sum();
        if lost == 0 && whole <= room {
            return Some(Dump { text: messages.iter().map(|m| format!("{m}\n")).collect(), next });
        }
        // From the newest back, as many as fit after the note of what was left out.
        let mut fitting = 0;
        let mut used = 0;
        for m in messages.iter().rev() {
            let note = left_out(lost as usize + messages.len() - fitting - 1).len() + 1;
            if note + used + m.len() + 1 > room {
                break;
            }
            used += m.len() + 1;
            fitting += 1;
        }
        if fitting == 0 && !messages.is_empty() || left_out(lost as usize).len() + 1 > room {
            return None;
        }
        let mut text = format!("{}\n", left_out(lost as usize + messages.len() - fitting));
        for m in &messages[messages.len() - fitting..] {
            text.push_str(m);
            text.push('\n');
        }
        (text.len() <= room).then_some(Dump { text, next })
    }
}

/// The note heading a dump that holds fewer messages than were asked for.
fn left_out(count: usize) -> String {
    format!("[ac-cuda] {count} earlier log messages were left out (overwritten, or no room for them)")
}

fn log() -> &'static Mutex<Log> {
    static LOG: OnceLock<Mutex<Log>> = OnceLock::new();
    LOG.get_or_init(Mutex::default)
}

/// `CUlogsCallback`.
pub type CallbackFn = unsafe extern "C" fn(*mut c_void, Level, *mut c_char, usize);

/// A callback registered for the log: the function and its user data.
#[derive(Debug, Clone, Copy)]
struct Callback {
    function: CallbackFn,
    data: usize,
}

/// The callbacks registered, by handle (never reused: 1, 2, ...).
#[derive(Debug, Default)]
struct Callbacks {
    next: usize,
    live: Vec<(usize, Callback)>,
}

fn callbacks() -> &'static Mutex<Callbacks> {
    static CALLBACKS: OnceLock<Mutex<Callbacks>> = OnceLock::new();
    CALLBACKS.get_or_init(Mutex::default)
}

/// Registers `function` with its `data`: its handle.
pub fn register(function: CallbackFn, data: *mut c_void) -> usize {
    let mut all = callbacks().lock().unwrap_or_else(|p| p.into_inner());
    all.next += 1;
    let handle = all.next;
    all.live.push((handle, Callback { function, data: data as usize }));
    handle
}

/// Unregisters the callback of `handle`; whether there was one.
pub fn unregister(handle: usize) -> bool {
    let mut all = callbacks().lock().unwrap_or_else(|p| p.into_inner());
    let before = all.live.len();
    all.live.retain(|(h, _)| *h != handle);
    all.live.len() < before
}

/// The iterator of the next message.
pub fn current() -> u32 {
    log().lock().unwrap_or_else(|p| p.into_inner()).next
}

/// The messages from iterator `from` (every one kept when `None`) that fit in `room` bytes:
/// [`Log::dump`].
pub fn dump(from: Option<u32>, room: usize) -> Option<Dump> {
    log().lock().unwrap_or_else(|p| p.into_inner()).dump(from, room)
}

thread_local! {
    /// Set while this thread runs the callbacks.
    static CALLING_BACK: Cell<bool> = const { Cell::new(false) };
}

/// Logs `message` about a call of `entry`: kept, written where `CUDA_LOG_FILE` says, and
/// handed to each callback.
pub fn record(level: Level, entry: &str, message: &str) {
    if !is_driver_entry(entry) {
        return;
    }
    let line = format_line(level, entry, message);
    log().lock().unwrap_or_else(|p| p.into_inner()).push(line.clone());
    write_to_log_file(&line);
    if CALLING_BACK.with(|c| c.replace(true)) {
        return;
    }
    let registered: Vec<Callback> =
        callbacks().lock().unwrap_or_else(|p| p.into_inner()).live.iter().map(|(_, c)| *c).collect();
    for callback in registered {
        let text = CString::new(line.replace('\0', " ")).expect("NULs replaced");
        let len = text.as_bytes().len();
        let raw = text.into_raw();
        // SAFETY: the program registered `function` for exactly this call; the message is a
        // NUL-terminated copy it may write to, freed once the callback returns.
        unsafe {
            (callback.function)(callback.data as *mut c_void, level, raw, len);
            drop(CString::from_raw(raw));
        }
    }
    CALLING_BACK.with(|c| c.set(false));
}

/// Whether `entry` is the driver's (`cuXxx`), not cuBLAS's, cuFFT's or NVML's, whose messages
/// are not the driver's log's.
fn is_driver_entry(entry: &str) -> bool {
    entry.strip_prefix("cu").and_then(|rest| rest.bytes().next()).is_some_and(|b| b.is_ascii_uppercase())
}

/// `message` in NVIDIA's form: `[HH:MM:SS.mmm][thread][CUDA][E][entry] message`.
fn format_line(level: Level, entry: &str, message: &str) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, ms) = (now.as_secs() % 86_400, now.subsec_millis());
    // SAFETY: the gettid system call has no preconditions (glibc's wrapper needs 2.30).
    let thread = unsafe { libc::syscall(libc::SYS_gettid) };
    let severity = if level == Level::Error { 'E' } else { 'W' };
    format!(
        "[{:02}:{:02}:{:02}.{ms:03}][{thread}][CUDA][{severity}][{entry}] {message}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Appends `line` to `CUDA_LOG_FILE`'s file, or stdout; nothing for `stderr` (the shim's own
/// line is there) or when unset.
fn write_to_log_file(line: &str) {
    let Some(target) = std::env::var_os("CUDA_LOG_FILE") else { return };
    match target.to_str() {
        Some("stderr") => {}
        // Not `println!`, which panics when stdout is closed: no message may end the program.
        Some("stdout") => {
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
        _ => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(&target);
            if let Ok(mut file) = file {
                let _ = writeln!(file, "{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(lines: &[&str]) -> Log {
        let mut log = Log::default();
        for l in lines {
            log.push(l.to_string());
        }
        log
    }

    #[test]
    fn a_dump_gives_the_messages_from_the_iterator_each_on_its_line() {
        let log = log_of(&["one", "two", "three"]);
        assert_eq!(log.dump(None, 100), Some(Dump { text: "one\ntwo\nthree\n".into(), next: 3 }));
        assert_eq!(log.dump(Some(1), 100), Some(Dump { text: "two\nthree\n".into(), next: 3 }));
        assert_eq!(log.dump(Some(3), 100), Some(Dump { text: String::new(), next: 3 }), "nothing new: empty");
        assert_eq!(log.dump(None, 14).unwrap().text, "one\ntwo\nthree\n", "exactly room");
    }

    #[test]
    fn a_small_buffer_gets_a_note_and_the_newest_messages_that_fit_or_nothing() {
        let [one, two, three] = ["one", "two", "three"].map(|m| format!("{m:-<100}"));
        let log = log_of(&[&one, &two, &three]);
        let note = left_out(1);
        let dump = log.dump(None, note.len() + 1 + 202).unwrap();
        assert_eq!(dump.text, format!("{note}\n{two}\n{three}\n"));
        assert_eq!(dump.next, 3, "the iterator goes past what was left out");
        assert_eq!(log.dump(None, 150), None, "not even the newest fits with the note");
    }

    #[test]
    fn the_oldest_messages_go_past_the_capacity_and_a_dump_says_so() {
        let mut log = Log::default();
        let line = "x".repeat(99); // 100 bytes with its newline
        for _ in 0..CAPACITY / 100 + 5 {
            log.push(line.clone());
        }
        assert!(log.bytes <= CAPACITY);
        assert_eq!(log.messages.len(), CAPACITY / 100);
        let dump = log.dump(Some(0), usize::MAX).unwrap();
        assert!(dump.text.starts_with(&format!("{}\n", left_out(5))), "{}", &dump.text[..120]);
        assert_eq!(dump.text.lines().count(), CAPACITY / 100 + 1);
        assert_eq!(dump.next, (CAPACITY / 100 + 5) as u32);
    }

    #[test]
    fn a_dump_of_every_message_says_what_was_overwritten_and_an_iterator_ahead_gets_nothing() {
        let mut log = Log::default();
        let line = "x".repeat(CAPACITY / 2);
        for _ in 0..3 {
            log.push(line.clone());
        }
        assert_eq!(log.messages.len(), 1);
        let all = log.dump(None, usize::MAX).unwrap();
        assert!(all.text.starts_with(&format!("{}\n", left_out(2))), "the two overwritten are said");
        assert_eq!(log.dump(Some(log.next + 5), usize::MAX).unwrap().text, "", "an iterator past the newest");
        let empty = Log { dropped: 1, ..Log::default() };
        assert_eq!(empty.dump(None, 10), None, "no room for the note of what was overwritten");
    }

    #[test]
    fn another_librarys_message_is_not_the_drivers() {
        let before = current();
        record(Level::Error, "cublasSgemm_v2", "not supported");
        assert_eq!(current(), before);
        record(Level::Warning, "cuMemAlloc", "kept");
        assert_eq!(current(), before.wrapping_add(1));
    }

    #[test]
    fn only_the_drivers_entry_points_are_logged() {
        assert!(is_driver_entry("cuLaunchKernel") && is_driver_entry("cuLogsDumpToMemory"));
        assert!(!is_driver_entry("cublasSgemm_v2") && !is_driver_entry("cufftExecC2C"));
        assert!(!is_driver_entry("nvmlDeviceGetCount_v2") && !is_driver_entry("cu"));
    }

    #[test]
    fn a_line_is_in_nvidias_form() {
        let line = format_line(Level::Error, "cuLogsDumpToMemory", "buffer cannot be NULL");
        let (time, rest) = line.split_once(']').unwrap();
        assert_eq!(time.len(), "[22:21:32.099".len(), "{line}");
        assert!(rest.ends_with("][CUDA][E][cuLogsDumpToMemory] buffer cannot be NULL"), "{line}");
        assert!(format_line(Level::Warning, "x", "y").contains("[CUDA][W][x] y"));
    }
}
