//! Recycled buffers for the bytes a bulk copy hands to quinn.
//!
//! quinn sends only buffers it owns, so the sender of a bulk copy fills pieces: the client
//! copies the caller's slice into them, the backend reads device memory into them. Fresh
//! allocations cost more than the copy itself: glibc maps large ones anew and trims its heap as
//! pieces are freed, so every piece page-faults and has its pages zeroed (on a 1 GiB copy, about a
//! sixth of the sender's CPU; see "Profile" in BENCHMARKS.md). A piece's buffer comes back here
//! when quinn drops it, up to [`KEPT`] buffers for the whole process, and stays initialized, so
//! that the next fill neither faults nor zeroes.

use std::sync::Mutex;

use bytes::Bytes;

/// Bytes per piece, at most.
pub const PIECE: usize = 1 << 20;

/// Pieces smaller than this are plain allocations: small ones come from the heap cheaply, and a
/// recycled buffer would hold a whole `PIECE` for a few bytes.
const SMALLEST_RECYCLED: usize = 64 << 10;

/// Buffers kept for reuse, process-wide (16 MiB).
const KEPT: usize = 16;

/// Free buffers, each `PIECE` bytes long and initialized.
static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A filled buffer on loan to quinn: its first `len` bytes. The buffer keeps its full length,
/// so that it goes back to the pool as it is, with nothing to zero.
struct Piece {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < KEPT {
            free.push(std::mem::take(&mut self.buf));
        }
    }
}

/// Whether a piece of `len` bytes goes in a recycled buffer.
fn recycled(len: usize) -> bool {
    (SMALLEST_RECYCLED..=PIECE).contains(&len)
}

/// A piece of `len` bytes that `fill` writes, in a recycled buffer when `len` is between 64 KiB
/// and [`PIECE`]. `fill` gets initialized bytes: possibly an earlier piece's, which it must
/// overwrite entirely.
pub fn filled<E>(len: usize, fill: impl FnOnce(&mut [u8]) -> Result<(), E>) -> Result<Bytes, E> {
    let mut blank = Blank::new(len);
    fill(blank.bytes_mut())?;
    Ok(blank.into_bytes())
}

/// A piece being filled, possibly asynchronously (a bulk lane reads into it): `len` initialized
/// bytes, in a recycled buffer under the same rule as [`filled`]. Dropped unfilled, its buffer
/// goes back to the pool too.
#[derive(Debug)]
pub struct Blank {
    buf: Vec<u8>,
    len: usize,
}

impl Blank {
    /// A piece of `len` bytes to fill entirely: they may be an earlier piece's.
    pub fn new(len: usize) -> Self {
        if !recycled(len) {
            return Self { buf: vec![0; len], len };
        }
        let recycled = FREE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Self { buf: recycled.unwrap_or_else(|| vec![0; PIECE]), len }
    }

    /// The bytes to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    /// The filled piece.
    pub fn into_bytes(mut self) -> Bytes {
        let buf = std::mem::take(&mut self.buf);
        if recycled(self.len) {
            Bytes::from_owner(Piece { buf, len: self.len })
        } else {
            buf.into()
        }
    }
}

impl Drop for Blank {
    fn drop(&mut self) {
        if self.buf.len() == PIECE {
            drop(Piece { buf: std::mem::take(&mut self.buf), len: 0 });
        }
    }
}

/// A copy of `data`, in a recycled buffer when it is between 64 KiB and [`PIECE`] bytes.
pub fn copy_of(data: &[u8]) -> Bytes {
    if !recycled(data.len()) {
        return Bytes::copy_from_slice(data);
    }
    filled(data.len(), |buf| {
        buf.copy_from_slice(data);
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap_or_else(|never| match never {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_piece_holds_only_its_new_bytes() {
        drop(copy_of(&vec![1; PIECE]));
        // Most likely the same buffer again: nothing of the first copy may show.
        let second = copy_of(&vec![9; SMALLEST_RECYCLED]);
        assert!(second.len() == SMALLEST_RECYCLED && second.iter().all(|&b| b == 9));
        drop(second);
        assert!(FREE.lock().unwrap().iter().all(|b| b.len() == PIECE));
        // Small and large pieces are plain allocations, with the right bytes too.
        assert_eq!(&copy_of(&[7; 10])[..], &[7; 10]);
        assert_eq!(copy_of(&vec![5; PIECE + 1]).len(), PIECE + 1);
    }

    #[test]
    fn a_failed_fill_gives_its_error() {
        assert_eq!(filled(8, |_| Err("device gone")), Err("device gone"));
    }
}
