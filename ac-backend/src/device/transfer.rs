//! Bulk copies in pieces: how a device takes an upload's bytes ([`Feed`]), the [`Upload`] and
//! [`Download`] a bulk copy drives, and the direct ones of devices whose copies are synchronous.

use ac_proto::backend::{ErrorKind, WireError};
use ac_proto::pieces;
use bytes::Bytes;

use super::{Context, DeviceMem, DeviceResult, DeviceStream};

/// How an upload takes the bytes of its copy: the device says so once ([`Upload::feed`]), and
/// a carrier that can do better than pieces feeds it that way alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// Pieces of plaintext, wherever the carrier has them ([`Upload::push`]).
    Pieces,
    /// Host memory the device lends for the next bytes, a staging buffer's free part
    /// ([`Upload::room`], then [`Upload::commit`]): a carrier opens its records straight there.
    Rooms,
    /// Device memory itself, under a lock ([`Upload::fill_with`]): a carrier opens its records
    /// straight into it (a CPU device).
    InPlace,
}

/// A host-to-device bulk copy in progress. Pieces come in order; a device with asynchronous
/// copies moves piece n to the device while the network delivers piece n+1.
pub trait Upload: Send {
    /// How this copy takes its bytes. Whatever it says, [`Upload::push`] works too: a carrier
    /// with only pieces (a QUIC stream) pushes them.
    fn feed(&self) -> Feed {
        Feed::Pieces
    }
    /// Copies `data`, which lands `at` bytes from the copy's start.
    fn push(&mut self, at: u64, data: &[u8]) -> DeviceResult<()>;
    /// [`Feed::Rooms`]: host memory for the next bytes of the copy, landing `at` bytes from its
    /// start, at most `max` of them. The caller fills all of it and calls [`Upload::commit`]
    /// with its length before anything else; a room given up unfilled ends the copy (it is
    /// dropped, never finished).
    fn room(&mut self, _at: u64, _max: usize) -> DeviceResult<&mut [u8]> {
        Err(not_fed_so("rooms"))
    }
    /// [`Feed::Rooms`]: the room [`Upload::room`] gave, `len` bytes, is filled: the device takes
    /// it as a piece.
    fn commit(&mut self, _len: usize) -> DeviceResult<()> {
        Err(not_fed_so("rooms"))
    }
    /// [`Feed::InPlace`]: lends `fill` the device memory of the next `len` bytes of the copy,
    /// landing `at` bytes from its start, to write all of them (under a lock: `fill` must not
    /// wait). `fill` is not called if the copy cannot take the bytes.
    fn fill_with(&mut self, _at: u64, _len: usize, _fill: &mut dyn FnMut(&mut [u8])) -> DeviceResult<()> {
        Err(not_fed_so("place"))
    }
    /// Waits until every piece is in device memory.
    fn finish(self: Box<Self>) -> DeviceResult<()>;
}

/// A carrier fed an upload another way than its [`Upload::feed`] said: a bug of the carrier.
fn not_fed_so(way: &str) -> WireError {
    WireError::new(ErrorKind::Internal, format!("this upload is not fed by {way}: see Upload::feed"))
}

/// A device-to-host bulk copy in progress. A device with asynchronous copies reads the next
/// pieces from the device while the network sends this one.
pub trait Download: Send {
    /// The next `len` bytes of the copy.
    fn next(&mut self, len: usize) -> DeviceResult<Bytes>;

    /// The next `out.len()` bytes of the copy, into `out` (a session worker's shared slot),
    /// gathered from what [`Download::next_with`] hands over. Devices that can read straight
    /// into host memory override it. The defaults go `next_into`, `next_with`, `next`: a `next`
    /// that calls `next_into` needs a `next_with` of its own (as the session worker's has).
    fn next_into(&mut self, out: &mut [u8]) -> DeviceResult<()> {
        gather_next(self, out)
    }

    /// Hands the next `len` bytes of the copy to `take`, in one slice or several in order (a
    /// bulk lane seals a slice from where it lies: `LaneTls::write_from`). Devices that hold
    /// the bytes in host memory override it to hand them without a copy.
    fn next_with(&mut self, len: usize, take: &mut dyn FnMut(&[u8])) -> DeviceResult<()> {
        take(&self.next(len)?);
        Ok(())
    }
}

/// An upload that writes each piece as it comes (devices whose writes are synchronous and
/// ignore streams: a bulk copy is ordered after nothing).
pub(super) struct DirectUpload<'a, C: ?Sized> {
    pub(super) context: &'a C,
    pub(super) dst: DeviceMem,
    pub(super) offset: u64,
    pub(super) len: u64,
}

impl<C: Context + ?Sized> Upload for DirectUpload<'_, C> {
    fn feed(&self) -> Feed {
        if self.context.writes_in_place() {
            Feed::InPlace
        } else {
            Feed::Pieces
        }
    }

    fn push(&mut self, at: u64, data: &[u8]) -> DeviceResult<()> {
        check_piece(at, data.len(), self.len)?;
        self.context.write(self.dst, self.offset + at, data, DeviceStream(0))
    }

    fn fill_with(&mut self, at: u64, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> DeviceResult<()> {
        check_piece(at, len, self.len)?;
        self.context.write_with(self.dst, self.offset + at, len, DeviceStream(0), fill)
    }

    fn finish(self: Box<Self>) -> DeviceResult<()> {
        Ok(())
    }
}

/// A download that reads each piece when asked.
pub(super) struct DirectDownload<'a, C: ?Sized> {
    pub(super) context: &'a C,
    pub(super) src: DeviceMem,
    pub(super) offset: u64,
    pub(super) len: u64,
}

impl<C: Context + ?Sized> Download for DirectDownload<'_, C> {
    fn next(&mut self, len: usize) -> DeviceResult<Bytes> {
        let len = (len as u64).min(self.len) as usize;
        // A recycled buffer: no page faults, no zeroing (see `ac_proto::pieces`).
        pieces::filled(len, |buf| self.next_into(buf))
    }

    fn next_into(&mut self, out: &mut [u8]) -> DeviceResult<()> {
        check_piece(0, out.len(), self.len)?;
        self.context.read(self.src, self.offset, out, DeviceStream(0))?;
        self.advance(out.len());
        Ok(())
    }

    fn next_with(&mut self, len: usize, take: &mut dyn FnMut(&[u8])) -> DeviceResult<()> {
        check_piece(0, len, self.len)?;
        self.context.read_with(self.src, self.offset, len, DeviceStream(0), take)?;
        self.advance(len);
        Ok(())
    }
}

impl<C: ?Sized> DirectDownload<'_, C> {
    /// Moves past `n` bytes handed out.
    fn advance(&mut self, n: usize) {
        self.offset += n as u64;
        self.len -= n as u64;
    }
}

/// Fills `out` with the next bytes of `download`, gathered from the slices it hands over.
pub fn gather_next(download: &mut (impl Download + ?Sized), out: &mut [u8]) -> DeviceResult<()> {
    let mut at = 0;
    download.next_with(out.len(), &mut |bytes| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    })
}

/// Checks that a piece of `n` bytes at `at` lies inside a copy of `len` bytes.
pub fn check_piece(at: u64, n: usize, len: u64) -> DeviceResult<()> {
    if at.checked_add(n as u64).is_none_or(|end| end > len) {
        return Err(WireError::new(
            ac_proto::backend::ErrorKind::OutOfBounds,
            format!("piece of {n} bytes at {at} outside a copy of {len} bytes"),
        ));
    }
    Ok(())
}
