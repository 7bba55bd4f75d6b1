//! What the kernel knows of a lane's TCP connection (`TCP_INFO`), for the logs: why a copy ran
//! at the rate it did (the peer's window, the send buffer, or the congestion control).
//!
//! `libc`'s `tcp_info` stops before the fields that say so (the kernel's "chrono" times,
//! Linux 4.10), so the struct is read as bytes at the offsets of `linux/tcp.h`, which only ever
//! grows at its end; a field the running kernel does not fill reads as absent.

use std::io;
use std::os::fd::AsRawFd;

/// A snapshot of one TCP connection's sending side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// The congestion window, segments.
    pub cwnd: u32,
    /// The smoothed round-trip time, µs.
    pub rtt_us: u32,
    /// The smallest round-trip time seen, µs.
    pub min_rtt_us: u32,
    /// The peer's receive window, bytes.
    pub peer_window: u32,
    /// The pacing rate the congestion control set, bytes per second.
    pub pacing_rate: u64,
    /// The last delivery-rate sample, bytes per second.
    pub delivery_rate: u64,
    /// Time spent with data in flight, µs (from when the connection started).
    pub busy_us: u64,
    /// Of that, time limited by the peer's receive window, µs.
    pub rwnd_limited_us: u64,
    /// Of that, time limited by the send buffer (the application not writing fast enough), µs.
    pub sndbuf_limited_us: u64,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
}

// Offsets in `struct tcp_info` (include/uapi/linux/tcp.h).
const RTT: usize = 68;
const CWND: usize = 80;
const PACING_RATE: usize = 104;
const MIN_RTT: usize = 148;
const DELIVERY_RATE: usize = 160;
const BUSY_TIME: usize = 168;
const RWND_LIMITED: usize = 176;
const SNDBUF_LIMITED: usize = 184;
const BYTES_SENT: usize = 200;
const BYTES_RETRANS: usize = 208;
const SND_WND: usize = 228;
const KNOWN: usize = 232;

impl TcpInfo {
    /// Reads `socket`'s; fields past what the kernel filled are 0.
    #[allow(unsafe_code)]
    pub fn of(socket: &impl AsRawFd) -> io::Result<Self> {
        let mut raw = [0u8; KNOWN];
        let mut len = KNOWN as libc::socklen_t;
        // SAFETY: the descriptor is open for the call; the kernel writes at most `len` bytes
        // into `raw` and says how many in `len`.
        let done = unsafe {
            libc::getsockopt(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, raw.as_mut_ptr().cast(), &mut len)
        };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self::parse(&raw[..(len as usize).min(KNOWN)]))
    }

    /// The fields of a `struct tcp_info` of `raw.len()` bytes.
    fn parse(raw: &[u8]) -> Self {
        let u32_at = |at: usize| raw.get(at..at + 4).map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
        let u64_at = |at: usize| raw.get(at..at + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
        Self {
            cwnd: u32_at(CWND),
            rtt_us: u32_at(RTT),
            min_rtt_us: u32_at(MIN_RTT),
            peer_window: u32_at(SND_WND),
            pacing_rate: u64_at(PACING_RATE),
            delivery_rate: u64_at(DELIVERY_RATE),
            busy_us: u64_at(BUSY_TIME),
            rwnd_limited_us: u64_at(RWND_LIMITED),
            sndbuf_limited_us: u64_at(SNDBUF_LIMITED),
            bytes_sent: u64_at(BYTES_SENT),
            bytes_retrans: u64_at(BYTES_RETRANS),
        }
    }

    /// What changed from `before` to `self`: the cumulative counters as differences, the
    /// gauges (window, RTT, rates) as they are now.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            busy_us: self.busy_us.saturating_sub(before.busy_us),
            rwnd_limited_us: self.rwnd_limited_us.saturating_sub(before.rwnd_limited_us),
            sndbuf_limited_us: self.sndbuf_limited_us.saturating_sub(before.sndbuf_limited_us),
            bytes_sent: self.bytes_sent.saturating_sub(before.bytes_sent),
            bytes_retrans: self.bytes_retrans.saturating_sub(before.bytes_retrans),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connected_socket_reports_the_bytes_it_sent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let before = TcpInfo::of(&sender).unwrap();
        std::io::Write::write_all(&mut sender, &[7u8; 100_000]).unwrap();
        let mut back = vec![0u8; 100_000];
        std::io::Read::read_exact(&mut receiver, &mut back).unwrap();
        let sent = TcpInfo::of(&sender).unwrap().since(&before);
        assert_eq!(sent.bytes_sent - sent.bytes_retrans, 100_000);
        assert!(sent.cwnd > 0, "{sent:?}");
    }

    #[test]
    fn a_short_struct_leaves_the_newer_fields_absent() {
        let mut raw = vec![0u8; BUSY_TIME];
        raw[CWND..CWND + 4].copy_from_slice(&10u32.to_ne_bytes());
        let info = TcpInfo::parse(&raw);
        assert_eq!((info.cwnd, info.busy_us, info.bytes_sent), (10, 0, 0));
    }
}
