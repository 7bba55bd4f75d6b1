//! Reads whose records go straight to where the caller wants their plaintext
//! ([`LaneTls::read_exact_plain`]): the kernel's copy out of the socket is the only one.

use std::io;
use std::task::{ready, Context, Poll};

use tokio::net::TcpStream;

use super::{LaneTls, DIRECT_RECORDS};
use crate::lane::record::{Opened, Tag, FULL_HEADER, FULL_RECORD, HEADER, MAX_PLAIN, OVERHEAD};
use crate::ProtoError;

impl LaneTls {
    /// Fills `out` with the next plaintext (the socket's low-water mark as for
    /// [`LaneTls::read_with`]); an error if the stream ends first.
    ///
    /// Full records are read straight into `out`, each record's plaintext where it belongs and
    /// its header and tag apart, and opened there ([`LaneTls::read_direct`]): the kernel's copy
    /// out of the socket is the only one. Plaintext already opened, records already buffered,
    /// and the last record of `out` go through the read buffer, as for `read_with`.
    pub async fn read_exact_plain(&mut self, out: &mut [u8]) -> Result<(), ProtoError> {
        let mut at = 0;
        while at < out.len() {
            if !self.plain.is_empty() {
                let n = self.plain.len().min(out.len() - at);
                out[at..at + n].copy_from_slice(&self.inbuf[self.plain.start..self.plain.start + n]);
                self.plain.start += n;
                at += n;
                continue;
            }
            if self.ended {
                return Err(ProtoError::UnexpectedEnd);
            }
            let left = out.len() - at;
            if self.start == self.end && left > MAX_PLAIN {
                at += self.read_direct(&mut out[at..]).await?;
                continue;
            }
            match self.next_record(left as u64, true).await? {
                Some(Opened::Data(range)) => self.plain = range,
                Some(Opened::Closed) | None => return Err(ProtoError::UnexpectedEnd),
            }
        }
        // As at the end of `read_with`.
        let _ = self.set_low_water(0);
        Ok(())
    }

    /// Reads up to [`DIRECT_RECORDS`] full records whose plaintext fits `out` with a byte to
    /// spare, each into place (`out[i * MAX_PLAIN..]`), and opens them there; the plaintext
    /// bytes placed. The read buffer must be empty (the stream at a record's start).
    ///
    /// Why the byte to spare: a record's encrypted content type follows its plaintext, and is
    /// opened with it. It is read apart, with the tag; to open record `i`, it is put in the
    /// first byte of record `i + 1`'s place for the call, and that byte put back after.
    ///
    /// A header that is not a full record's (a copy cut into chunks that are not whole records,
    /// or a peer's own choice) stops it: the bytes read from that record on are gathered back
    /// into the read buffer, in stream order, and read from there. So records of any length
    /// read the same, and only full ones skip the copy. One thing reads differently: a record
    /// of full length with padding after its content type (TLS 1.3 allows it; no sealer here
    /// makes one) is refused, since its plaintext would not fill its place.
    ///
    /// Stopped halfway (an error, or the future dropped), the bytes read are lost: the lane
    /// then refuses every later read (`torn`); the SDK drops such a lane anyway.
    async fn read_direct(&mut self, out: &mut [u8]) -> Result<usize, ProtoError> {
        debug_assert!(self.start == self.end && out.len() > MAX_PLAIN);
        self.check_in_step()?;
        (self.start, self.end) = (0, 0);
        self.torn = true;
        let records = ((out.len() - 1) / MAX_PLAIN).min(DIRECT_RECORDS);
        let mut layout =
            Layout { heads: [[0; HEADER]; DIRECT_RECORDS], tails: [[0; OVERHEAD]; DIRECT_RECORDS], records };
        let (mut got, mut opened) = (0, 0);
        while opened < records {
            let coming = (records * FULL_RECORD - got) as u64;
            let n = std::future::poll_fn(|cx| self.poll_read_vectored(cx, &mut layout, out, got, coming)).await?;
            if n == 0 {
                self.ended = true;
                return Err(ProtoError::UnexpectedEnd);
            }
            got += n;
            while opened < records && got >= opened * FULL_RECORD + HEADER {
                if layout.heads[opened] != FULL_HEADER {
                    self.end = layout.gather(out, opened * FULL_RECORD..got, &mut self.inbuf);
                    self.torn = false;
                    return Ok(opened * MAX_PLAIN);
                }
                if got < (opened + 1) * FULL_RECORD {
                    break;
                }
                self.open_in_out(out, opened, &layout.tails[opened])?;
                opened += 1;
            }
        }
        self.torn = false;
        Ok(records * MAX_PLAIN)
    }

    /// Opens full record `i` read into `out` (see [`LaneTls::read_direct`]).
    fn open_in_out(&mut self, out: &mut [u8], i: usize, tail: &[u8; OVERHEAD]) -> Result<(), ProtoError> {
        let body = &mut out[i * MAX_PLAIN..=(i + 1) * MAX_PLAIN];
        let next = body[MAX_PLAIN];
        body[MAX_PLAIN] = tail[0];
        let tag: &Tag = tail[1..].try_into().expect("a tag's length");
        let opened = self.opener.open_full(body, tag);
        body[MAX_PLAIN] = next;
        self.opened_in_place += u64::from(opened.is_ok());
        opened
    }

    /// Reads from the socket into the layout's parts from raw byte `got` on (see
    /// [`LaneTls::read_direct`]); `coming`: raw bytes the peer is known to be sending.
    fn poll_read_vectored(
        &mut self,
        cx: &mut Context<'_>,
        layout: &mut Layout,
        out: &mut [u8],
        got: usize,
        coming: u64,
    ) -> Poll<io::Result<usize>> {
        self.set_low_water(coming)?;
        loop {
            ready!(self.tcp.poll_read_ready(cx))?;
            let mut parts = layout.parts(out, got);
            let want: usize = parts.iter().map(|part| part.len()).sum();
            let mut short = None;
            let read = self.tcp.try_io(tokio::io::Interest::READABLE, || {
                let n = read_vectored(&self.tcp, &mut parts)?;
                if n > 0 && n < want {
                    // A short read drained the socket: as tokio's own reads do, the readiness
                    // is cleared (by `WouldBlock`), so the next read waits for the low-water
                    // mark instead of taking what trickles in.
                    short = Some(n);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            match (read, short) {
                (Err(e), Some(n)) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Ready(Ok(n)),
                (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => {
                    if coming > MAX_PLAIN as u64 {
                        // As in `poll_fill`: the reader is about to wait for a copy's bytes.
                        let _ = socket2::SockRef::from(&self.tcp).set_tcp_quickack(true);
                    }
                }
                (done, _) => return Poll::Ready(done),
            }
        }
    }
}

/// Where the raw bytes of a direct read go, in stream order: for each record, its header to
/// `heads`, its plaintext's bytes to their place in the caller's buffer, its content type byte
/// and tag to `tails`.
struct Layout {
    heads: [[u8; HEADER]; DIRECT_RECORDS],
    tails: [[u8; OVERHEAD]; DIRECT_RECORDS],
    records: usize,
}

impl Layout {
    /// The parts still to fill once `got` raw bytes are in, for one vectored read.
    fn parts<'a>(&'a mut self, out: &'a mut [u8], got: usize) -> Vec<io::IoSliceMut<'a>> {
        let mut skip = got;
        let records = self.heads.iter_mut().zip(out.chunks_mut(MAX_PLAIN)).zip(self.tails.iter_mut());
        let mut parts = Vec::with_capacity(3 * self.records);
        for ((head, plain), tail) in records.take(self.records) {
            for part in [&mut head[..], plain, &mut tail[..]] {
                if skip >= part.len() {
                    skip -= part.len();
                } else {
                    parts.push(io::IoSliceMut::new(&mut part[skip..]));
                    skip = 0;
                }
            }
        }
        parts
    }

    /// Copies raw bytes `range` (from a record's start) into `to` from its start, in stream
    /// order; their count.
    fn gather(&self, out: &[u8], range: std::ops::Range<usize>, to: &mut [u8]) -> usize {
        let first = range.start / FULL_RECORD;
        let mut left = range.len();
        let mut at = 0;
        for i in first..self.records {
            for part in [&self.heads[i][..], &out[i * MAX_PLAIN..(i + 1) * MAX_PLAIN], &self.tails[i][..]] {
                let n = part.len().min(left);
                to[at..at + n].copy_from_slice(&part[..n]);
                (at, left) = (at + n, left - n);
            }
        }
        at
    }
}

/// `readv(2)` from `tcp` into `parts`: the bytes read (0 at the stream's end).
#[allow(unsafe_code)]
fn read_vectored(tcp: &TcpStream, parts: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let count = libc::c_int::try_from(parts.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` on Unix (std guarantees it); each one
    // points into a live buffer that the call may write, borrowed mutably for the call; the
    // descriptor is `tcp`'s, open for the call.
    let n = unsafe { libc::readv(tcp.as_raw_fd(), parts.as_mut_ptr().cast::<libc::iovec>(), count) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{full_records, pair, pattern};
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn full_records_are_read_straight_into_place_and_the_last_through_the_buffer() {
        let (mut client, mut server) = pair("direct").await;
        // Sizes around a record and around a direct read's most records, then a large copy.
        let sizes = [MAX_PLAIN + 1, 2 * MAX_PLAIN, 2 * MAX_PLAIN + 1, DIRECT_RECORDS * MAX_PLAIN + 1, 5 << 20];
        let sent: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &len)| pattern(len, i as u8)).collect();
        let copies = sent.clone();
        let writer = tokio::spawn(async move {
            for copy in &copies {
                client.write_all(copy).await.unwrap();
                client.flush().await.unwrap();
            }
            client
        });
        let mut before = 0;
        for (copy, &len) in sent.iter().zip(&sizes) {
            let mut got = vec![0u8; len];
            server.read_exact_plain(&mut got).await.unwrap();
            assert!(got == *copy, "a copy of {len} bytes differs");
            // Each copy starts at a record's start, so all its records but the last are full.
            let full = ((len - 1) / MAX_PLAIN) as u64;
            assert_eq!(server.opened_in_place - before, full, "records opened in place, copy of {len}");
            before = server.opened_in_place;
        }
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn records_that_are_not_full_are_gathered_back_and_read_the_same() {
        let (mut client, mut server) = pair("gather").await;
        // Written in pieces that are not whole records (each write seals its own records), as a
        // copy cut into chunks of another size would be: full records and short ones mixed.
        let data = pattern(3 << 20, 7);
        let pieces = [3 * MAX_PLAIN + 5, 100, MAX_PLAIN, 40 * MAX_PLAIN - 1, 1];
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            let mut at = 0;
            for &piece in pieces.iter().cycle() {
                let end = (at + piece).min(sent.len());
                client.write_all(&sent[at..end]).await.unwrap();
                at = end;
                if at == sent.len() {
                    break;
                }
            }
            client.flush().await.unwrap();
            client
        });
        let mut got = vec![0u8; data.len()];
        server.read_exact_plain(&mut got).await.unwrap();
        assert!(got == data, "the bytes differ");
        assert!(server.opened_in_place > 0, "no full record was read in place");
        drop(writer.await.unwrap());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Whatever records the writer makes (pieces of any size, each write sealing its own
        /// records: full ones and short ones in any order) and however the reader cuts its
        /// reads (under a record, through the read buffer; over one, straight into place), the
        /// reader gets every byte, in order.
        #[test]
        fn any_records_read_in_any_cuts_arrive_in_order(
            pieces in proptest::collection::vec(1usize..3 * MAX_PLAIN, 1..40),
            cuts in proptest::collection::vec(1usize..40 * MAX_PLAIN, 1..12),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let (mut client, mut server) = pair("any-records").await;
                let data = pattern(pieces.iter().sum(), 5);
                let sent = data.clone();
                let writer = tokio::spawn(async move {
                    let mut at = 0;
                    for piece in pieces {
                        client.write_all(&sent[at..at + piece]).await.unwrap();
                        at += piece;
                    }
                    client.flush().await.unwrap();
                    client
                });
                let mut got = Vec::with_capacity(data.len());
                for cut in cuts.iter().cycle() {
                    let mut buf = vec![0u8; (*cut).min(data.len() - got.len())];
                    server.read_exact_plain(&mut buf).await.unwrap();
                    got.extend_from_slice(&buf);
                    if got.len() == data.len() {
                        break;
                    }
                }
                assert!(got == data, "the bytes differ");
                drop(writer.await.unwrap());
            });
        }
    }

    #[tokio::test]
    async fn a_byte_altered_in_a_record_read_in_place_fails_the_read_and_an_early_end_is_an_error() {
        let (mut client, mut server) = pair("direct-altered").await;
        // Two full records sealed by the client, a byte of the second's plaintext flipped.
        let wire = full_records(&mut client, 2);
        let mut altered = wire.clone();
        altered[FULL_RECORD + HEADER + 3] ^= 1;
        client.tcp.write_all(&altered).await.unwrap();
        let mut got = vec![0u8; 2 * MAX_PLAIN + 1];
        let error = server.read_exact_plain(&mut got).await.unwrap_err();
        assert!(matches!(&error, ProtoError::Malformed(m) if m.contains("authentication")), "{error}");
        assert_eq!(server.opened_in_place, 1, "the first record opened");
        // What the failed read had taken from the socket is lost: the lane reads no more.
        let after = server.read_exact_plain(&mut [0u8; 10]).await.unwrap_err();
        assert!(matches!(&after, ProtoError::Malformed(m) if m.contains("stopped inside")), "{after}");

        // A direct read given up halfway (its future dropped while it waits for bytes that
        // will not come) leaves the lane refusing reads too.
        let (mut client, mut server) = pair("direct-dropped").await;
        let wire = full_records(&mut client, 2);
        client.tcp.write_all(&wire[..FULL_RECORD + 100]).await.unwrap();
        let mut got = vec![0u8; 4 * MAX_PLAIN];
        let waited = tokio::time::timeout(Duration::from_millis(200), server.read_exact_plain(&mut got)).await;
        assert!(waited.is_err(), "the read ended without the bytes it waited for");
        let after = server.read_exact_plain(&mut [0u8; 10]).await.unwrap_err();
        assert!(matches!(&after, ProtoError::Malformed(m) if m.contains("stopped inside")), "{after}");
        drop(client);

        // The stream ends inside a direct read: an error, not a short read.
        let (mut client, mut server) = pair("direct-end").await;
        let record = full_records(&mut client, 1);
        client.tcp.write_all(&record[..record.len() - 4]).await.unwrap();
        client.tcp.shutdown().await.unwrap();
        let mut got = vec![0u8; 4 * MAX_PLAIN];
        let read = server.read_exact_plain(&mut got);
        let ended = tokio::time::timeout(Duration::from_secs(20), read).await.expect("the read hung");
        assert!(matches!(ended, Err(ProtoError::UnexpectedEnd)), "{ended:?}");
    }
}
