//! Reads whose plaintext goes to memory lent only for a moment ([`LaneTls::read_placed`]): a
//! CPU device's memory, behind a lock that no wait for the socket may hold.

use super::LaneTls;
use crate::lane::record::{Opened, Tag, FULL_HEADER, FULL_RECORD, HEADER, MAX_PLAIN};
use crate::ProtoError;

/// What a reader's place is filled by ([`LaneTls::read_placed`]): it writes every byte of the
/// memory it is lent.
pub type Fill<'a> = dyn FnMut(&mut [u8]) + 'a;

impl LaneTls {
    /// Reads `len` bytes of plaintext into memory that `place` lends for a moment:
    /// `place(at, n, fill)` calls `fill` once with the `n` bytes of memory where plaintext
    /// bytes `at..at + n` belong, or fails without calling it. `Ok(Err(_))` when `place`
    /// fails: the bytes placed before are read, the ones it was offered are not unless it
    /// called `fill` (then they are read, and where they went is up to `place`).
    ///
    /// Full records that lie whole in the read buffer are opened from there straight into
    /// their place, so the plaintext is written once, by the cipher. Each record's encrypted
    /// content type follows its plaintext and is opened with it: into the first byte of the
    /// next record's place, which that record's opening then writes. The last record of a
    /// place has no byte after it, so it opens in the buffer and is copied, as are records that
    /// are not full and plaintext already opened (as [`LaneTls::read_with`] hands them).
    ///
    /// Why not read the records straight into the place, as [`LaneTls::read_exact_plain`]
    /// does: that holds the place across waits for the socket. A CPU device's memory is
    /// behind the allocation's lock, which no one may hold while the network is slow.
    pub async fn read_placed<E>(
        &mut self,
        len: u64,
        mut place: impl FnMut(u64, usize, &mut Fill<'_>) -> Result<(), E>,
    ) -> Result<Result<(), E>, ProtoError> {
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
                if let Err(e) = placed {
                    return Ok(Err(e));
                }
                continue;
            }
            if self.ended {
                return Err(ProtoError::UnexpectedEnd);
            }
            let records = self.full_records_buffered(left / MAX_PLAIN as u64);
            if records > 0 {
                let n = records * MAX_PLAIN;
                let mut opened = None;
                let placed = place(at, n, &mut |dst| opened = Some(self.open_buffered_into(dst)));
                if let Some(opened) = opened {
                    opened?;
                    at += n as u64;
                }
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
                    if std::future::poll_fn(|cx| self.poll_fill(cx, left, usize::MAX)).await? == 0 {
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
        self.check_in_step()?;
        let records = dst.len() / MAX_PLAIN;
        debug_assert!(records > 0 && dst.len().is_multiple_of(MAX_PLAIN) && records <= self.full_records_buffered(u64::MAX));
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

#[cfg(test)]
mod tests {
    use super::super::tests::{full_records, pair, pattern};
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads `len` bytes with [`LaneTls::read_placed`] into `into` from `from` on, in places
    /// of at most `most` bytes (as a device lends whatever the lane asks; the cut tests pieces
    /// that end inside a record's plaintext); the places lent.
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
