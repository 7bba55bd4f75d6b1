//! A lane's TLS stream: rustls's handshake, then the lane's own record layer ([`super::record`])
//! over the TCP socket, with large reads and writes.
//!
//! The handshake and the first record: rustls runs the handshake and hands over the traffic
//! secrets. Anything the peer sent after its Finished that rustls read with it would be lost with
//! rustls's buffers, so the server speaks first: once its handshake is done it sends one empty
//! record ("ready"), and the client sends nothing before that record has arrived. The client's
//! rustls cannot hold it either: the server sends it only after the client's Finished, which the
//! client sends last. It costs one round trip when a lane is dialed, not per copy.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use rustls::pki_types::ServerName;
use rustls::ExtractedSecrets;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::record::{Opened, Opener, Sealer, CLOSE_RECORD, HEADER, MAX_PLAIN, MAX_RECORD};
use crate::ProtoError;

mod placed;

pub use placed::Fill;

/// How much one read from a lane's socket may bring (a few dozen records).
pub const READ_BUFFER: usize = 512 << 10;
/// How many sealed bytes a lane gathers before it writes them to the socket in one call (or
/// fewer, on a flush).
pub const WRITE_BUFFER: usize = 512 << 10;
/// How many bytes a lane's socket gathers before it wakes a reader that knows at least that many
/// are coming (`SO_RCVLOWAT`; see [`LaneTls::read_with`]).
pub const LOW_WATER: usize = 256 << 10;

/// A lane's TLS 1.3 stream over TCP. Reads open records in place in one buffer and copy their
/// plaintext once, to the caller, or open full records from that buffer to where the caller
/// wants their plaintext ([`LaneTls::read_exact_plain`], [`LaneTls::read_placed`]); writes seal
/// into one buffer sent in large writes.
#[derive(Debug)]
pub struct LaneTls {
    tcp: TcpStream,
    sealer: Sealer,
    opener: Opener,
    /// Bytes read from the socket: `inbuf[start..end]` is not yet opened.
    inbuf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Opened plaintext in `inbuf` not yet read.
    plain: std::ops::Range<usize>,
    /// The peer's stream ended (close_notify, or the socket's end between records).
    ended: bool,
    /// The socket's `SO_RCVLOWAT` as last set (the kernel's default is 1).
    low_water: usize,
    /// Sealed records, `out[sent..filled]` not yet written to the socket.
    out: Box<[u8]>,
    filled: usize,
    sent: usize,
    closing: bool,
    /// Records opened straight to where the caller wanted their plaintext
    /// ([`LaneTls::read_placed`]).
    opened_in_place: u64,
    /// A record failed to open: every later read fails. TLS ends a connection at the first
    /// record that fails (RFC 8446, section 5.2), and a reader would otherwise go on at the next
    /// record while its caller counted the failed one's bytes as read or as not (a copy's
    /// refusal then drains the wrong number of bytes, and the lane falls out of step).
    failed: bool,
}

/// Dials a lane's TLS over `tcp` as a client of `name`: the handshake (the server's certificate
/// verified by `connector`'s configuration, which must allow secret extraction), then the
/// server's ready record.
pub async fn connect(
    tcp: TcpStream,
    connector: &TlsConnector,
    name: ServerName<'static>,
) -> Result<LaneTls, ProtoError> {
    let (tcp, connection) = connector.connect(name, tcp).await?.into_inner();
    let mut lane = LaneTls::new(tcp, connection.dangerous_extract_secrets()?)?;
    match lane.next_record(0).await? {
        Some(Opened::Data(range)) if range.is_empty() => Ok(lane),
        _ => Err(ProtoError::Malformed("the lane's first record was not its ready record".into())),
    }
}

/// Accepts a lane's TLS over `tcp`: the handshake (with `acceptor`'s configuration, which must
/// send no tickets and allow secret extraction), then the ready record.
pub async fn accept(tcp: TcpStream, acceptor: &TlsAcceptor) -> Result<LaneTls, ProtoError> {
    let (tcp, connection) = acceptor.accept(tcp).await?.into_inner();
    let mut lane = LaneTls::new(tcp, connection.dangerous_extract_secrets()?)?;
    lane.filled += lane.sealer.seal_from(&[], &mut lane.out)?;
    std::future::poll_fn(|cx| lane.poll_send_out(cx)).await?;
    Ok(lane)
}

/// What a copy's source hands its bytes to, in order ([`LaneTls::write_from`]).
pub type Take<'a> = dyn FnMut(&[u8]) + 'a;

impl LaneTls {
    fn new(tcp: TcpStream, secrets: ExtractedSecrets) -> Result<Self, ProtoError> {
        Ok(Self {
            tcp,
            sealer: Sealer::new(secrets.tx)?,
            opener: Opener::new(secrets.rx)?,
            inbuf: vec![0; READ_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            plain: 0..0,
            ended: false,
            low_water: 1,
            out: vec![0; WRITE_BUFFER + MAX_RECORD].into_boxed_slice(),
            filled: 0,
            sent: 0,
            closing: false,
            opened_in_place: 0,
            failed: false,
        })
    }

    /// The TCP socket under the lane (to look at, not to read or write).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Whether `bytes` more can go each way on this lane's keys: a copy that would cross the
    /// record limit is sent on a fresh lane instead.
    pub fn fits(&self, bytes: u64) -> bool {
        // A copy's bytes, its header and reply, and records cut short by the chunks it is sent in.
        let records = bytes / MAX_PLAIN as u64 + bytes / (64 << 10) + 16;
        self.sealer.records_left() > records && self.opener.records_left() > records
    }

    /// Reads `len` bytes of plaintext, handing each piece to `sink` where it was opened (no
    /// copy in between); [`ProtoError::UnexpectedEnd`] if the stream ends first. `Ok(Err(_))`
    /// when `sink` fails: the pieces it was given, that one included, are read.
    ///
    /// Since `len` bytes are known to be coming, the socket wakes the reader only once
    /// [`LOW_WATER`] bytes are there (or all that are still to come, if fewer), not at every
    /// segment: each wake-up costs the sender a cross-CPU wake in the kernel (16.6% of a
    /// loopback backend's CPU while it sent a copy) and the reader a pass through its runtime's
    /// I/O driver (`BENCHMARKS.md`, "Issue 25, stop 35").
    ///
    /// While more than one record's worth is coming, a reader that finds the socket empty puts
    /// it back in quick-ack mode before it waits. A lane's ends take turns (a request, then a
    /// copy, then a reply), which the kernel takes for an interactive connection: it gives up
    /// quick acks and holds back acknowledgements to ride on the next reply, but on a copy's
    /// bytes nothing rides back. Between hosts the first device-to-host copy of a lane ran at
    /// 0.76-0.83 of the later ones (`BENCHMARKS.md`, "Issue 25, stop 37"). Asking at every read
    /// cost 6% on loopback, asking once per copy did not help; asking before each wait costs
    /// nothing measurable.
    pub async fn read_with<E>(
        &mut self,
        len: u64,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Result<(), E>, ProtoError> {
        let mut left = len;
        while left > 0 {
            if !self.plain.is_empty() {
                let n = (self.plain.len() as u64).min(left) as usize;
                let piece = self.plain.start..self.plain.start + n;
                self.plain.start += n;
                left -= n as u64;
                if let Err(e) = sink(&self.inbuf[piece]) {
                    return Ok(Err(e));
                }
                continue;
            }
            if self.ended {
                return Err(ProtoError::UnexpectedEnd);
            }
            match self.next_record(left).await? {
                Some(Opened::Data(range)) => self.plain = range,
                Some(Opened::Closed) | None => return Err(ProtoError::UnexpectedEnd),
            }
        }
        // An idle lane's socket reports any byte again (the lanes' watch looks at idle lanes);
        // if this fails, the next read sets it before it waits.
        let _ = self.set_low_water(0);
        Ok(Ok(()))
    }

    /// Writes `len` bytes that `next` hands over, a record's worth at a time: `next(n, take)`
    /// gives the next `n` bytes to `take`, in one slice or several in order. One slice is
    /// sealed from where it lies (a device's bytes in host memory are read once, by the cipher);
    /// several are gathered into the record, then sealed there. `Ok(Err(_))` when `next` fails:
    /// the records it handed before are in the write buffer, that piece is not unless it was
    /// already sealed (each sealed record has taken its sequence number). Handing more or fewer
    /// bytes than asked is an error of the lane.
    pub async fn write_from<E>(
        &mut self,
        len: usize,
        mut next: impl FnMut(usize, &mut Take<'_>) -> Result<(), E>,
    ) -> Result<Result<(), E>, ProtoError> {
        let mut done = 0;
        while done < len {
            if self.filled >= WRITE_BUFFER {
                std::future::poll_fn(|cx| self.poll_send_out(cx)).await?;
            }
            let piece = (len - done).min(MAX_PLAIN);
            if let Err(e) = self.seal_next(piece, &mut next)? {
                return Ok(Err(e));
            }
            done += piece;
        }
        Ok(Ok(()))
    }

    /// Seals one record of the `len` bytes that `next` hands over, behind what is waiting to
    /// be sent (room for one record is always there: see [`AsyncWrite::poll_write`]).
    fn seal_next<E>(
        &mut self,
        len: usize,
        next: impl FnOnce(usize, &mut Take<'_>) -> Result<(), E>,
    ) -> Result<Result<(), E>, ProtoError> {
        let (record, sealer) = (&mut self.out[self.filled..], &mut self.sealer);
        let (mut got, mut sealed) = (0, None);
        let handed = next(len, &mut |slice: &[u8]| {
            if got == 0 && slice.len() == len {
                sealed = Some(sealer.seal_from(slice, record));
            } else if got + slice.len() <= len {
                record[HEADER + got..HEADER + got + slice.len()].copy_from_slice(slice);
            }
            got += slice.len();
        });
        // A record sealed stays in the write buffer whatever follows: it took a sequence number.
        let was_sealed = sealed.is_some();
        if let Some(sealed) = sealed {
            self.filled += sealed?;
        }
        if let Err(e) = handed {
            return Ok(Err(e));
        }
        if got != len {
            return Err(ProtoError::Malformed(format!("a copy's source handed {got} bytes for a record of {len}")));
        }
        if !was_sealed {
            self.filled += self.sealer.seal_in_place(len, &mut self.out[self.filled..])?;
        }
        Ok(Ok(()))
    }

    /// Opens the next complete record in the buffer, if there is one; a close_notify ends the
    /// stream.
    fn open_buffered(&mut self) -> Result<Option<Opened>, ProtoError> {
        self.ensure_readable()?;
        let Some(len) = Opener::record_len(&self.inbuf[self.start..self.end])? else { return Ok(None) };
        let at = self.start;
        self.start += len;
        let opened = self.opener.open(&mut self.inbuf[at..at + len]);
        self.failed = opened.is_err();
        Ok(Some(match opened? {
            Opened::Data(range) => Opened::Data(at + range.start..at + range.end),
            Opened::Closed => {
                self.ended = true;
                Opened::Closed
            }
        }))
    }

    /// Fails once a record has failed to open: the lane reads no more (a copy's refusal, which
    /// reads the rest of its payload to keep the lane in step, cannot).
    pub fn ensure_readable(&self) -> Result<(), ProtoError> {
        if self.failed {
            return Err(ProtoError::Malformed("a record of this lane failed to open: it reads no more".into()));
        }
        Ok(())
    }

    /// Reads more bytes from the socket behind those not yet opened; `Ok(0)` at its end. Called
    /// only when no whole record is buffered. `coming`: plaintext bytes the peer is known to be
    /// sending, buffered ones included (0: unknown).
    fn poll_fill(&mut self, cx: &mut Context<'_>, coming: u64) -> Poll<io::Result<usize>> {
        // The partial record (less than one) moves to the front, so that the read may fill the
        // whole buffer: a reader that opens records into place then takes many at once, and
        // copies only the last of them (`read_placed`).
        self.inbuf.copy_within(self.start..self.end, 0);
        (self.start, self.end) = (0, self.end - self.start);
        self.set_low_water(coming)?;
        let mut room = ReadBuf::new(&mut self.inbuf[self.end..]);
        let polled = Pin::new(&mut self.tcp).poll_read(cx, &mut room);
        if polled.is_pending() && coming > MAX_PLAIN as u64 {
            // The reader is about to wait (see `read_with`). A failure only costs delayed acks.
            let _ = socket2::SockRef::from(&self.tcp).set_tcp_quickack(true);
        }
        ready!(polled)?;
        let n = room.filled().len();
        self.end += n;
        Poll::Ready(Ok(n))
    }

    /// Sets the socket's low-water mark for `coming` plaintext bytes still to be read: never
    /// more than the bytes still to arrive (a reader waiting for bytes that never come would
    /// hang), so the bytes already buffered count as plaintext; 1 (any byte) when nothing is
    /// known. Records add to their plaintext, so at least this many do arrive.
    fn set_low_water(&mut self, coming: u64) -> io::Result<()> {
        let buffered = (self.end - self.start) as u64;
        let mark = coming.saturating_sub(buffered).clamp(1, LOW_WATER as u64) as usize;
        if mark == self.low_water {
            return Ok(());
        }
        match set_receive_low_water(&self.tcp, mark) {
            Ok(()) => self.low_water = mark,
            // A mark that could not be raised only costs wake-ups; one that could not be
            // lowered could leave the reader waiting, so that fails the read.
            Err(e) if mark < self.low_water => return Err(e),
            Err(_) => {}
        }
        Ok(())
    }

    /// The next record, read from the socket as needed (`coming`: as for
    /// [`LaneTls::poll_fill`]); `None` when the socket ended between records.
    async fn next_record(&mut self, coming: u64) -> Result<Option<Opened>, ProtoError> {
        loop {
            if let Some(opened) = self.open_buffered()? {
                return Ok(Some(opened));
            }
            if std::future::poll_fn(|cx| self.poll_fill(cx, coming)).await? == 0 {
                return self.socket_ended().map(|()| None).map_err(ProtoError::from);
            }
        }
    }

    /// The socket ended: fine between records (a lane's frames say where a copy ends), not
    /// inside one.
    fn socket_ended(&mut self) -> io::Result<()> {
        self.ended = true;
        if self.start == self.end {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the lane ended inside a TLS record"))
        }
    }

    /// Writes the sealed bytes not yet written.
    fn poll_send_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.filled {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.out[self.sent..self.filled]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        (self.filled, self.sent) = (0, 0);
        Poll::Ready(Ok(()))
    }
}

/// Sets `SO_RCVLOWAT` on `tcp`: the socket reports itself readable once `bytes` are there (or
/// at its end, or when the kernel runs short of receive memory). `socket2` has no setter for it.
#[allow(unsafe_code)]
fn set_receive_low_water(tcp: &TcpStream, bytes: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the descriptor is `tcp`'s, open for the call; the option's value is a c_int that
    // outlives the call, and its length is given.
    let done = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn io_error(e: ProtoError) -> io::Error {
    match e {
        ProtoError::Io(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

impl AsyncRead for LaneTls {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.plain.is_empty() {
                let n = this.plain.len().min(buf.remaining());
                buf.put_slice(&this.inbuf[this.plain.start..this.plain.start + n]);
                this.plain.start += n;
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            match this.open_buffered().map_err(io_error)? {
                Some(Opened::Data(range)) => this.plain = range,
                Some(Opened::Closed) => {}
                None => {
                    if ready!(this.poll_fill(cx, 0))? == 0 {
                        this.socket_ended()?;
                    }
                }
            }
        }
    }
}

impl AsyncWrite for LaneTls {
    /// Seals records from `data` straight into the write buffer (no copy before sealing) until
    /// it holds [`WRITE_BUFFER`] bytes (so one more record always fits behind them); they go to
    /// the socket when it is full or flushed.
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.filled >= WRITE_BUFFER {
            ready!(this.poll_send_out(cx))?;
        }
        let mut taken = 0;
        while taken < data.len() && this.filled < WRITE_BUFFER {
            let piece = &data[taken..data.len().min(taken + MAX_PLAIN)];
            this.filled += this.sealer.seal_from(piece, &mut this.out[this.filled..]).map_err(io_error)?;
            taken += piece.len();
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send_out(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    /// Sends close_notify, then ends the socket's sending side.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.closing {
            if this.filled + CLOSE_RECORD > this.out.len() {
                ready!(this.poll_send_out(cx))?;
            }
            this.filled += this.sealer.seal_close(&mut this.out[this.filled..]).map_err(io_error)?;
            this.closing = true;
        }
        ready!(this.poll_send_out(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
pub(super) mod tests;
