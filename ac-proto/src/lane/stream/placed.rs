//! Reads that open a copy's records from the read buffer straight to where their plaintext
//! belongs: the caller's buffer ([`LaneTls::read_exact_plain`]), or memory lent only for a
//! moment ([`LaneTls::read_placed`]), such as a CPU device's, behind a lock that no wait for
//! the socket may hold.
//!
//! Why from the read buffer, not straight off the socket: stop 43 read full records with one
//! vectored read into their place and opened them there. The kernel's copy then wrote the cold
//! destination, and the cipher read and wrote it again; now the kernel writes the read buffer,
//! which stays in cache, and the cipher reads it there and writes the destination once. Between
//! two hosts, device-to-host copies into a program moved 3-11% more with 7% less of its CPU,
//! and host-to-device copies into a CUDA device's pinned buffers 6-11% more (`BENCHMARKS.md`,
//! stop 45).

use super::LaneTls;
use crate::lane::record::{Opened, Tag, FULL_HEADER, FULL_RECORD, HEADER, MAX_PLAIN};
use crate::ProtoError;

/// What a reader's place is filled by ([`LaneTls::read_placed`]): it writes every byte of the
/// memory it is lent.
pub type Fill<'a> = dyn FnMut(&mut [u8]) + 'a;

impl LaneTls {
    /// Fills `out` with the next plaintext (the socket's low-water mark as for
    /// [`LaneTls::read_with`]); an error if the stream ends first. Full records are opened
    /// straight into `out`, as for [`LaneTls::read_placed`].
    pub async fn read_exact_plain(&mut self, out: &mut [u8]) -> Result<(), ProtoError> {
        let read = self.read_placed(out.len() as u64, |at, n, fill| {
            fill(&mut out[at as usize..at as usize + n]);
            Ok::<_, std::convert::Infallible>(())
        });
        match read.await? {
            Ok(()) => Ok(()),
            Err(never) => match never {},
        }
    }

    /// Reads `len` bytes of plaintext into memory that `place` lends for a moment:
    /// `place(at, n, fill)` calls `fill` once with the `n` bytes of memory where plaintext
    /// bytes `at..at + n` belong, or fails without calling it. `Ok(Err(_))` when `place`
    /// fails: the bytes placed before are read, the ones it was offered are not unless it
    /// called `fill` (then they are read, and where they went is up to `place`). `Err(_)`: the
    /// lane's error; after a record that failed to open, every later read fails too.
    ///
    /// Full records that lie whole in the read buffer are opened from there straight into
    /// their place, so the plaintext is written once, by the cipher. Each record's encrypted
    /// content type follows its plaintext and is opened with it: into the first byte of the
    /// next record's place, which that record's opening then writes. The last record of a
    /// place has no byte after it, so it opens in the buffer and is copied, as are records that
    /// are not full and plaintext already opened (as [`LaneTls::read_with`] hands them).
    ///
    /// `place` is called only while records are buffered, never across a wait for the socket:
    /// a CPU device lends its memory under a lock on that range, which no one may hold while
    /// the network is slow. A read dropped while it waits leaves the stream at a record's
    /// start, the bytes placed before read.
    pub async fn read_placed<E>(
        &mut self,
        len: u64,
        mut place: impl FnMut(u64, usize, &mut Fill<'_>) -> Result<(), E>,
    ) -> Result<Result<(), E>, ProtoError> {
        self.ensure_readable()?;
        let mut at = 0;
        while at < len {
            let left = len - at;
            if !self.plain.is_empty() {
                let n = (self.plain.len() as u64).min(left) as usize;
                let piece = &self.inbuf[self.plain.start..self.plain.start + n];
                let mut filled = false;
                let placed = place(at, n, &mut |dst| {
                    dst.copy_from_slice(piece);
                    filled = true;
                });
                if filled {
                    self.plain.start += n;
                    at += n as u64;
                }
                match placed {
                    Err(e) => return Ok(Err(e)),
                    Ok(()) if !filled => return Err(unfilled()),
                    Ok(()) => continue,
                }
            }
            if self.ended {
                return Err(ProtoError::UnexpectedEnd);
            }
            let records = self.full_records_buffered(left / MAX_PLAIN as u64);
            if records > 0 {
                let n = records * MAX_PLAIN;
                let mut opened = None;
                let placed = place(at, n, &mut |dst| {
                    if opened.is_none() {
                        opened = Some(self.open_buffered_into(dst));
                    }
                });
                let Some(opened) = opened else {
                    return placed.map_or_else(|e| Ok(Err(e)), |()| Err(unfilled()));
                };
                opened?;
                at += n as u64;
                if let Err(e) = placed {
                    return Ok(Err(e));
                }
                continue;
            }
            // No whole full record at the buffer's start: a copy's last record, or a peer's
            // short one, opens in the buffer; a record not all there is read on.
            match self.open_buffered()? {
                Some(Opened::Data(range)) => self.plain = range,
                Some(Opened::Closed) => return Err(ProtoError::UnexpectedEnd),
                None => {
                    if std::future::poll_fn(|cx| self.poll_fill(cx, left)).await? == 0 {
                        self.socket_ended()?;
                        return Err(ProtoError::UnexpectedEnd);
                    }
                }
            }
        }
        // As at the end of `read_with`.
        let _ = self.set_low_water(0);
        Ok(Ok(()))
    }

    /// How many full records, at most `most`, lie whole at the read buffer's start, one after
    /// another.
    fn full_records_buffered(&self, most: u64) -> usize {
        let buffered = &self.inbuf[self.start..self.end];
        buffered
            .chunks_exact(FULL_RECORD)
            .take(usize::try_from(most).unwrap_or(usize::MAX))
            .take_while(|record| record[..HEADER] == FULL_HEADER)
            .count()
    }

    /// Opens the full records at the read buffer's start into `dst`, one record's plaintext
    /// after another (see [`LaneTls::read_placed`]).
    fn open_buffered_into(&mut self, dst: &mut [u8]) -> Result<(), ProtoError> {
        let opened = self.open_run_into(dst);
        self.failed = opened.is_err();
        opened
    }

    /// As [`LaneTls::open_buffered_into`], without marking the lane failed.
    fn open_run_into(&mut self, dst: &mut [u8]) -> Result<(), ProtoError> {
        let records = dst.len() / MAX_PLAIN;
        debug_assert!(
            records > 0 && dst.len().is_multiple_of(MAX_PLAIN) && records <= self.full_records_buffered(u64::MAX)
        );
        for i in 0..records {
            let at = self.start;
            self.start += FULL_RECORD;
            let (body, tag) = self.inbuf[at + HEADER..at + FULL_RECORD].split_at_mut(MAX_PLAIN + 1);
            let tag: &Tag = (&*tag).try_into().expect("a tag's length");
            if i + 1 < records {
                self.opener.open_full_into(body, tag, &mut dst[i * MAX_PLAIN..=(i + 1) * MAX_PLAIN])?;
                self.opened_in_place += 1;
            } else {
                self.opener.open_full(body, tag)?;
                dst[i * MAX_PLAIN..].copy_from_slice(&body[..MAX_PLAIN]);
            }
        }
        Ok(())
    }
}

/// The error of a `place` that neither filled its memory nor refused it: its caller's bug.
fn unfilled() -> ProtoError {
    ProtoError::Io(std::io::Error::other("a reader's place was neither filled nor refused"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{full_records, pair, pattern};
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads `len` bytes with [`LaneTls::read_placed`] into `into` from `from` on, lending
    /// whatever place the lane asks for; the places lent.
    async fn read_placed_into(lane: &mut LaneTls, into: &mut [u8], from: usize, len: usize) -> usize {
        let mut places = 0;
        let read = lane.read_placed(len as u64, |at, n, fill| {
            places += 1;
            fill(&mut into[from + at as usize..from + at as usize + n]);
            Ok::<_, ()>(())
        });
        read.await.unwrap().unwrap();
        places
    }

    #[tokio::test]
    async fn full_records_buffered_go_into_one_place_all_but_the_last_opened_there() {
        let (mut client, mut server) = pair("placed-buffered").await;
        // Five full records (record `i` filled with `i`) as the server's socket read them.
        let wire = full_records(&mut client, 5);
        server.inbuf[..wire.len()].copy_from_slice(&wire);
        (server.start, server.end) = (0, wire.len());
        let mut got = vec![0xee; 5 * MAX_PLAIN + 1];
        let places = read_placed_into(&mut server, &mut got, 0, 5 * MAX_PLAIN).await;
        assert_eq!(places, 1, "five records buffered, one place");
        assert_eq!(server.opened_in_place, 4, "all but the last opened into place");
        for (i, record) in got[..5 * MAX_PLAIN].chunks(MAX_PLAIN).enumerate() {
            assert!(record.iter().all(|&b| b == i as u8), "record {i} differs");
        }
        assert_eq!(got[5 * MAX_PLAIN], 0xee, "a byte past the place was written");
    }

    #[tokio::test]
    async fn a_read_dropped_while_it_waits_leaves_the_rest_to_the_next() {
        let (mut client, mut server) = pair("placed-dropped").await;
        // Three full records (record `i` filled with `i`); the server has read the first and
        // part of the second.
        let wire = full_records(&mut client, 3);
        let (read, rest) = wire.split_at(FULL_RECORD + 100);
        server.inbuf[..read.len()].copy_from_slice(read);
        (server.start, server.end) = (0, read.len());
        let mut got = vec![0xee; 3 * MAX_PLAIN];
        let read = read_placed_into(&mut server, &mut got, 0, 3 * MAX_PLAIN);
        let waited = tokio::time::timeout(Duration::from_millis(200), read).await;
        assert!(waited.is_err(), "the read ended without the bytes it waited for");
        assert!(got[..MAX_PLAIN].iter().all(|&b| b == 0), "the first record was not placed");
        // The rest comes; the next read takes it from the second record on.
        client.tcp.write_all(rest).await.unwrap();
        let mut later = vec![0u8; 2 * MAX_PLAIN];
        server.read_exact_plain(&mut later).await.unwrap();
        assert!(later[..MAX_PLAIN].iter().all(|&b| b == 1) && later[MAX_PLAIN..].iter().all(|&b| b == 2));
    }

    #[tokio::test]
    async fn records_of_any_length_arrive_whole_in_their_places() {
        let (mut client, mut server) = pair("placed").await;
        // Copies of sizes around a record and around a read buffer's worth, one large one, and
        // pieces that are not whole records (each write seals its own: full and short mixed).
        let sizes = [MAX_PLAIN, MAX_PLAIN + 1, 2 * MAX_PLAIN, 3 * MAX_PLAIN - 1, 40 * MAX_PLAIN + 7, 5 << 20];
        let data = pattern(sizes.iter().sum::<usize>() + (3 << 20), 3);
        let pieces = [3 * MAX_PLAIN + 5, 100, MAX_PLAIN, 40 * MAX_PLAIN - 1, 1];
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            let mut at = 0;
            for &len in &sizes {
                client.write_all(&sent[at..at + len]).await.unwrap();
                client.flush().await.unwrap();
                at += len;
            }
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
        let mut at = 0;
        for len in sizes.into_iter().chain([data.len() - sizes.iter().sum::<usize>()]) {
            read_placed_into(&mut server, &mut got, at, len).await;
            at += len;
        }
        assert!(got == data, "the bytes differ");
        drop(writer.await.unwrap());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// Whatever records the writer makes (pieces of any size, each write sealing its own
        /// records: full ones and short ones in any order) and however the reader cuts its
        /// reads (under a record, over one, over a read buffer's worth), the
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
    async fn a_place_refused_leaves_its_records_to_the_next_read() {
        let (mut client, mut server) = pair("placed-refused").await;
        // A short record, then full ones: the first place is the short one's plaintext.
        let data = pattern(100 + 8 * MAX_PLAIN, 9);
        client.write_all(&data[..100]).await.unwrap();
        client.flush().await.unwrap();
        client.write_all(&data[100..]).await.unwrap();
        client.flush().await.unwrap();
        // The first place is filled, the next refused (a device's memory freed meanwhile).
        let mut got = vec![0u8; data.len()];
        let mut places = Vec::new();
        let read = server.read_placed(data.len() as u64, |at, n, fill| {
            places.push((at, n));
            if places.len() > 1 {
                return Err("refused");
            }
            fill(&mut got[at as usize..at as usize + n]);
            Ok(())
        });
        assert_eq!(read.await.unwrap(), Err("refused"));
        assert_eq!(places[0], (0, 100), "the short record's place");
        assert_eq!(places.len(), 2, "places lent");
        // What was refused is read on, in order, by any read.
        server.read_exact(&mut got[100..]).await.unwrap();
        assert!(got == data, "the bytes differ");
    }

    #[tokio::test]
    async fn a_byte_altered_fails_the_read_and_an_early_end_is_an_error() {
        let (mut client, mut server) = pair("placed-altered").await;
        // Three full records, a byte of the second's ciphertext flipped: however the reads cut
        // them, the second fails to open.
        let mut wire = full_records(&mut client, 3);
        wire[FULL_RECORD + HEADER + 3] ^= 1;
        client.tcp.write_all(&wire).await.unwrap();
        let mut got = vec![0u8; 3 * MAX_PLAIN];
        let read = server.read_placed(got.len() as u64, |at, n, fill| {
            fill(&mut got[at as usize..at as usize + n]);
            Ok::<_, ()>(())
        });
        let error = tokio::time::timeout(Duration::from_secs(20), read).await.expect("the read hung").unwrap_err();
        assert!(matches!(&error, ProtoError::Malformed(m) if m.contains("authentication")), "{error}");
        // The third record is sound, but the lane reads no more: a TLS stream ends at the first
        // record that fails.
        let after = server.read_exact_plain(&mut [0u8; 10]).await.unwrap_err();
        assert!(matches!(&after, ProtoError::Malformed(m) if m.contains("reads no more")), "{after}");

        // The stream ends inside a record: an error, not a short read.
        let (mut client, mut server) = pair("placed-end").await;
        let record = full_records(&mut client, 1);
        client.tcp.write_all(&record[..record.len() - 4]).await.unwrap();
        client.tcp.shutdown().await.unwrap();
        let mut got = vec![0u8; 2 * MAX_PLAIN];
        let read = server.read_placed(got.len() as u64, |at, n, fill| {
            fill(&mut got[at as usize..at as usize + n]);
            Ok::<_, ()>(())
        });
        let ended = tokio::time::timeout(Duration::from_secs(20), read).await.expect("the read hung");
        // As `read_with` says it.
        let inside = matches!(&ended, Err(ProtoError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof);
        assert!(inside, "{ended:?}");
    }
}
