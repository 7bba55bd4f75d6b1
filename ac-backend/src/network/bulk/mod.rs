//! Bulk copies: one QUIC stream per copy (or per stripe of a copy), or one copy after another on
//! a bulk lane (TLS over TCP, see `ac_proto::lane`); header then raw bytes either way.
//!
//! Pipelined (the default), the copy streams: each piece quinn hands us (at most `chunk_bytes`,
//! no copy) is written to device memory as soon as it arrives, while quinn's connection task
//! goes on receiving the next pieces into the stream's receive window. Device to host mirrors
//! it: a chunk is read from the device while quinn transmits the previous ones from its send
//! buffer. The network and the device copies overlap, and the bytes held per copy are bounded by
//! the QUIC windows plus one chunk, whatever the copy's size.
//!
//! Unpipelined (store-and-forward, what a remote-GPU protocol without pipelining does, kept as
//! the benchmark's baseline), the whole copy is staged in host memory first and then written to
//! the device in one call; device to host reads it all before sending. Time is network plus
//! device copy instead of the larger of the two, and memory grows with the copy: up to the
//! session's payload budget (`inline_budget_mib`), beyond which such a copy is refused.

use std::future::Future;
use std::sync::Arc;

use ac_proto::backend::{close, BulkHeader, Direction, ErrorKind, Reply, Response, WireError};
use ac_proto::frame::{frame_bytes, FrameReader, Source};
use ac_proto::lane::{LaneStream, LaneTls};
use ac_proto::ProtoError;
use bytes::{Bytes, BytesMut};
use quinn::{RecvStream, SendStream};
use tokio::io::AsyncWriteExt;

use crate::device::{Download, Feed, Upload};
use crate::session::{Allocation, Session};

/// What carries a copy: a QUIC bulk stream or a lane. They differ in what a refusal or a
/// failure does to them.
trait Carrier: Send {
    /// Where the header and the host-to-device payload come from.
    type Incoming: Source + Send;

    /// The incoming side.
    fn reader(&mut self) -> &mut FrameReader<Self::Incoming>;

    /// Sends reply frames.
    fn put(&mut self, bytes: Bytes) -> impl Future<Output = Result<(), ProtoError>> + Send;

    /// Sends the next `len` bytes of `download`. The outer error is the carrier's, the inner
    /// one the device's.
    fn put_download(
        &mut self,
        download: &mut dyn Download,
        len: usize,
    ) -> impl Future<Output = Result<Result<(), WireError>, ProtoError>> + Send;

    /// Reads the copy's host-to-device payload, handing each piece to `sink` with its offset in
    /// the copy; `received` counts what was read.
    fn receive(
        &mut self,
        session: &Session,
        header: &BulkHeader,
        received: &mut u64,
        sink: impl FnMut(u64, &[u8]) -> Result<(), WireError> + Send,
    ) -> impl Future<Output = Result<(), WireError>> + Send {
        receive(session, header, self.reader(), received, sink)
    }

    /// Reads the copy's host-to-device payload into `upload`, a piece at a time; `received`
    /// counts what was read.
    fn receive_upload(
        &mut self,
        session: &Session,
        header: &BulkHeader,
        received: &mut u64,
        upload: &mut dyn Upload,
    ) -> impl Future<Output = Result<(), WireError>> + Send {
        self.receive(session, header, received, |at, piece| upload.push(at, piece))
    }

    /// A host-to-device copy is refused with `left` of its payload bytes not read.
    fn refuse_rest(&mut self, left: u64) -> impl Future<Output = Result<(), ProtoError>> + Send;

    /// A device-to-host copy cannot send the bytes its header promised.
    fn abort(&mut self) -> Result<(), ProtoError>;

    /// The copy is over: everything put is on its way.
    fn finish(&mut self) -> impl Future<Output = Result<(), ProtoError>> + Send;
}

/// One QUIC bidirectional stream per copy.
struct QuicCopy {
    send: SendStream,
    reader: FrameReader<RecvStream>,
}

impl Carrier for QuicCopy {
    type Incoming = RecvStream;

    fn reader(&mut self) -> &mut FrameReader<RecvStream> {
        &mut self.reader
    }

    async fn put(&mut self, bytes: Bytes) -> Result<(), ProtoError> {
        Ok(self.send.write_chunk(bytes).await?)
    }

    /// The device's piece goes to quinn as it is (no copy).
    async fn put_download(
        &mut self,
        download: &mut dyn Download,
        len: usize,
    ) -> Result<Result<(), WireError>, ProtoError> {
        match download.next(len) {
            Ok(chunk) => self.put(chunk).await.map(Ok),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Stopping the stream fails the client's writes at once: nothing more is sent.
    async fn refuse_rest(&mut self, _left: u64) -> Result<(), ProtoError> {
        let _ = self.reader.stream_mut().stop(close::COPY_REFUSED.into());
        Ok(())
    }

    /// The stream is reset and the client reports the copy as failed.
    fn abort(&mut self) -> Result<(), ProtoError> {
        let _ = self.send.reset(close::COPY_REFUSED.into());
        Ok(())
    }

    async fn finish(&mut self) -> Result<(), ProtoError> {
        let _ = self.send.finish();
        Ok(())
    }
}

/// A bulk lane: copies one after another on one TLS stream.
struct Lane {
    reader: FrameReader<LaneStream<LaneTls>>,
}

impl Lane {
    /// The lane's TCP state, when debug logs would show it.
    fn tcp_info(&self) -> Option<ac_proto::lane::TcpInfo> {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return None;
        }
        ac_proto::lane::TcpInfo::of(self.reader.stream().0.tcp()).ok()
    }

    /// Hands `sink` the copy's payload bytes the frame reader already holds, each with its
    /// offset in the copy; `received` counts them before `sink` takes them.
    fn drain_buffered(
        &mut self,
        header: &BulkHeader,
        received: &mut u64,
        mut sink: impl FnMut(u64, &[u8]) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        while *received < header.len {
            let Some(piece) = self.reader.take_buffered((header.len - *received) as usize) else { break };
            let at = *received;
            *received += piece.len() as u64;
            sink(at, &piece)?;
        }
        Ok(())
    }

    /// Reads the rest of the copy's payload into the rooms `upload` lends (a staging buffer's
    /// free part), opening full records straight into them (`LaneTls::read_exact_plain`).
    async fn receive_in_rooms(
        &mut self,
        header: &BulkHeader,
        received: &mut u64,
        upload: &mut dyn Upload,
    ) -> Result<(), WireError> {
        while *received < header.len {
            let most = usize::try_from(header.len - *received).unwrap_or(usize::MAX);
            let room = upload.room(*received, most)?;
            let len = room.len();
            let read = self.reader.stream_mut().0.read_exact_plain(room).await;
            read.map_err(|e| interrupted(e, *received, header))?;
            *received += len as u64;
            upload.commit(len)?;
        }
        Ok(())
    }

    /// Reads the rest of the copy's payload into device memory that `upload` lends where it
    /// lies (a CPU device's, under its lock), opening full records straight into it
    /// (`LaneTls::read_placed`): the plaintext is written once, by the cipher.
    async fn receive_placed(
        &mut self,
        header: &BulkHeader,
        received: &mut u64,
        upload: &mut dyn Upload,
    ) -> Result<(), WireError> {
        let start = *received;
        let read = self.reader.stream_mut().0.read_placed(header.len - start, |at, n, fill| {
            // As in `receive_upload`: counted once taken off the lane.
            let mut taken = false;
            let placed = upload.fill_with(start + at, n, &mut |memory| {
                fill(memory);
                taken = true;
            });
            *received += if taken { n as u64 } else { 0 };
            placed
        });
        read.await.unwrap_or_else(|e| Err(interrupted(e, *received, header)))
    }
}

/// How much of a refused copy's payload a lane reads (and drops) at a time.
const DRAIN_PIECE: u64 = 256 << 10;

impl Carrier for Lane {
    type Incoming = LaneStream<LaneTls>;

    fn reader(&mut self) -> &mut FrameReader<LaneStream<LaneTls>> {
        &mut self.reader
    }

    async fn put(&mut self, bytes: Bytes) -> Result<(), ProtoError> {
        Ok(self.reader.stream_mut().0.write_all(&bytes).await?)
    }

    /// Each record's plaintext goes to the device from where it was opened: what the frame
    /// reader holds first, then straight from the lane's records.
    async fn receive(
        &mut self,
        _session: &Session,
        header: &BulkHeader,
        received: &mut u64,
        mut sink: impl FnMut(u64, &[u8]) -> Result<(), WireError> + Send,
    ) -> Result<(), WireError> {
        self.drain_buffered(header, received, &mut sink)?;
        let left = header.len - *received;
        let read = self.reader.stream_mut().0.read_with(left, |piece| {
            let at = *received;
            *received += piece.len() as u64;
            sink(at, piece)
        });
        read.await.unwrap_or_else(|e| Err(interrupted(e, *received, header)))
    }

    /// Where the device has rooms (a staging buffer's free part), or lends its memory (a CPU
    /// device), full records are opened from the lane's read buffer straight into them
    /// (`LaneTls::read_exact_plain`, `read_placed`): no copy between the socket's and the
    /// device's buffers. What the frame reader holds, and other devices, go through `receive`.
    async fn receive_upload(
        &mut self,
        session: &Session,
        header: &BulkHeader,
        received: &mut u64,
        upload: &mut dyn Upload,
    ) -> Result<(), WireError> {
        // `received` counts bytes taken off the lane before the device takes them: a refusal
        // after a device failure drains only what the client has still to send.
        self.drain_buffered(header, received, |at, piece| upload.push(at, piece))?;
        match upload.feed() {
            Feed::Rooms => self.receive_in_rooms(header, received, upload).await,
            Feed::InPlace => self.receive_placed(header, received, upload).await,
            Feed::Pieces => self.receive(session, header, received, |at, piece| upload.push(at, piece)).await,
        }
    }

    /// The device hands its bytes where they lie, and the lane seals them from there into its
    /// records.
    async fn put_download(
        &mut self,
        download: &mut dyn Download,
        len: usize,
    ) -> Result<Result<(), WireError>, ProtoError> {
        self.reader.stream_mut().0.write_from(len, |n, take| download.next_with(n, take)).await
    }

    /// The client sends the whole payload before it reads the reply: the lane reads it to the
    /// end, so that the next copy's header is where the client puts it.
    async fn refuse_rest(&mut self, mut left: u64) -> Result<(), ProtoError> {
        // After a record that failed to open nothing is read in step: the lane ends unanswered.
        self.reader.stream().0.ensure_readable()?;
        while left > 0 {
            let piece = self.reader.next_chunk(left.min(DRAIN_PIECE) as usize).await?;
            left -= piece.ok_or(ProtoError::UnexpectedEnd)?.len() as u64;
        }
        Ok(())
    }

    /// The header promised bytes that will not come: only closing the lane says so.
    fn abort(&mut self) -> Result<(), ProtoError> {
        Err(ProtoError::Io(std::io::Error::other("device read failed during a copy: lane closed")))
    }

    async fn finish(&mut self) -> Result<(), ProtoError> {
        Ok(self.reader.stream_mut().0.flush().await?)
    }
}

/// Serves one bulk stream to completion. Errors of the copy go to the client on the stream;
/// returns `Err` only for a protocol violation that must close the connection.
pub async fn serve_stream(session: Arc<Session>, send: SendStream, reader: FrameReader) -> Result<(), ProtoError> {
    let mut stream = QuicCopy { send, reader };
    let header: BulkHeader = stream.reader.expect_frame().await?;
    copy(&session, header, &mut stream).await
}

/// Serves a lane whose hello was read by `reader`, one copy after another, until the client
/// closes it (`Ok`) or breaks it (`Err`: the lane is closed).
pub async fn serve_lane(session: Arc<Session>, reader: FrameReader<LaneStream<LaneTls>>) -> Result<(), ProtoError> {
    let mut lane = Lane { reader };
    while let Some(header) = lane.reader.read_frame::<BulkHeader>().await? {
        let (direction, len) = (header.direction, header.len);
        let before = lane.tcp_info();
        let start = std::time::Instant::now();
        copy(&session, header, &mut lane).await?;
        if let (Some(before), Some(after)) = (before, lane.tcp_info()) {
            log_lane_copy(direction, len, start.elapsed(), &after.since(&before));
        }
    }
    Ok(())
}

/// Why a lane's copy ran at its rate, at debug level: for a device-to-host copy, the time TCP
/// spent limited by the program's receive window or by the backend filling the socket, and
/// the congestion control's state at the end.
fn log_lane_copy(direction: Direction, len: u64, took: std::time::Duration, tcp: &ac_proto::lane::TcpInfo) {
    tracing::debug!(
        ?direction,
        len,
        ms = took.as_secs_f64() * 1e3,
        busy_ms = tcp.busy_us as f64 / 1e3,
        window_limited_ms = tcp.rwnd_limited_us as f64 / 1e3,
        sender_limited_ms = tcp.sndbuf_limited_us as f64 / 1e3,
        retransmitted = tcp.bytes_retrans,
        cwnd = tcp.cwnd,
        rtt_us = tcp.rtt_us,
        min_rtt_us = tcp.min_rtt_us,
        pacing_mbit = tcp.pacing_rate * 8 / 1_000_000,
        delivery_mbit = tcp.delivery_rate * 8 / 1_000_000,
        peer_window = tcp.peer_window,
        "lane copy"
    );
}

/// Refuses an unpipelined copy larger than the session's payload budget (it would be staged
/// whole in memory).
fn staging_fits(session: &Session, header: &BulkHeader, alloc: Arc<Allocation>) -> Result<Arc<Allocation>, WireError> {
    if header.pipelined || header.len <= session.budget() {
        return Ok(alloc);
    }
    Err(WireError::new(
        ErrorKind::InvalidArgument,
        format!(
            "an unpipelined copy of {} bytes exceeds the session's payload budget of {} bytes; pipeline it",
            header.len,
            session.budget()
        ),
    ))
}

/// Runs one copy on `carrier`, whose header was read.
async fn copy(session: &Session, header: BulkHeader, carrier: &mut impl Carrier) -> Result<(), ProtoError> {
    tracing::debug!(session = session.id.0, dir = ?header.direction, len = header.len, after = header.after, "bulk copy");
    let checked = match session.resolve(header.ptr, header.len).and_then(|alloc| staging_fits(session, &header, alloc))
    {
        // A synchronous copy: after the work queued before its position (see `fence`).
        Ok(alloc) => session.fences.wait(header.after).await.map(|()| alloc),
        Err(e) => Err(e),
    };
    let alloc = match checked {
        Ok(alloc) => alloc,
        Err(e) => {
            if header.direction == Direction::HostToDevice {
                carrier.refuse_rest(header.len).await?;
            }
            return reply(session, carrier, Response::Error(e)).await;
        }
    };
    // Timed from its fence: the copy's own time, not the work it waited for.
    let start = std::time::Instant::now();
    let copied = |ok: bool| {
        if ok {
            session.metrics.copied(header.direction, header.len, Some(start.elapsed()));
        }
    };
    // An unpipelined copy holds all its bytes in memory at once: they count against the
    // session's payload budget until the copy is done.
    let _staged = if header.pipelined { None } else { Some(session.reserve(header.len).await) };
    match header.direction {
        Direction::HostToDevice => {
            let mut received = 0;
            let result = if header.pipelined {
                receive_streaming(session, &alloc, &header, carrier, &mut received).await
            } else {
                receive_staged(session, &alloc, &header, carrier, &mut received).await
            };
            release(alloc);
            let response = match result {
                Ok(()) => Response::Ok,
                Err(e) => {
                    carrier.refuse_rest(header.len - received).await?;
                    Response::Error(e)
                }
            };
            copied(matches!(response, Response::Ok));
            reply(session, carrier, response).await
        }
        Direction::DeviceToHost => {
            carrier.put(frame_bytes(&Reply { id: 0, response: Response::Data { len: header.len } })?).await?;
            let sent = if header.pipelined {
                send_streaming(session, &alloc, &header, carrier).await?
            } else {
                send_staged(session, &alloc, &header, carrier).await?
            };
            release(alloc);
            if let Err(error) = sent {
                tracing::warn!(%error, "device read failed during a copy");
                session.metrics.answered(&Response::Error(error));
                return carrier.abort();
            }
            carrier.finish().await?;
            copied(true);
            Ok(())
        }
    }
}

/// Lets go of a copy's allocation before the client can learn that the copy is done. A program
/// that frees the buffer and allocates again at once must find the memory returned: were the
/// copy still holding it, the free would leave it allocated until the copy's task ended (the
/// `threads` C test ran out of device memory that way on a loaded machine).
fn release(alloc: Arc<Allocation>) {
    drop(alloc);
}

async fn reply(session: &Session, carrier: &mut impl Carrier, response: Response) -> Result<(), ProtoError> {
    session.metrics.answered(&response);
    carrier.put(frame_bytes(&Reply { id: 0, response })?).await?;
    carrier.finish().await
}

fn ended_early(received: u64, header: &BulkHeader) -> WireError {
    WireError::new(ErrorKind::InvalidArgument, format!("copy ended after {received} of {} bytes", header.len))
}

/// What a lane's failure while reading a copy's payload tells the copy.
fn interrupted(e: ProtoError, received: u64, header: &BulkHeader) -> WireError {
    match e {
        ProtoError::UnexpectedEnd => ended_early(received, header),
        e => WireError::new(ErrorKind::Internal, format!("copy interrupted: {e}")),
    }
}

/// Reads the next piece of payload; fails when the stream ends before `header.len` bytes.
async fn next_piece<S: Source + Send>(
    reader: &mut FrameReader<S>,
    received: u64,
    header: &BulkHeader,
    max: usize,
) -> Result<Bytes, WireError> {
    match reader.next_chunk(max).await {
        Ok(Some(piece)) => Ok(piece),
        Ok(None) => Err(ended_early(received, header)),
        Err(e) => Err(WireError::new(ErrorKind::Internal, format!("copy interrupted: {e}"))),
    }
}

/// Receives the copy's payload piece by piece, handing each to `sink` with its offset in the
/// copy; `received` counts what was read.
async fn receive<S: Source + Send>(
    session: &Session,
    header: &BulkHeader,
    reader: &mut FrameReader<S>,
    received: &mut u64,
    mut sink: impl FnMut(u64, &[u8]) -> Result<(), WireError>,
) -> Result<(), WireError> {
    while *received < header.len {
        let max = (header.len - *received).min(session.copy.chunk_bytes as u64) as usize;
        let piece = next_piece(reader, *received, header, max).await?;
        let at = *received;
        *received += piece.len() as u64;
        sink(at, &piece)?;
    }
    Ok(())
}

async fn receive_streaming(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    carrier: &mut impl Carrier,
    received: &mut u64,
) -> Result<(), WireError> {
    let mut upload = session.context.upload(alloc.mem, header.ptr.offset, header.len)?;
    carrier.receive_upload(session, header, received, &mut *upload).await?;
    upload.finish()
}

/// Writes `data` at `offset` of `alloc` in one piece (a synchronous inline write).
pub fn write_whole(session: &Session, alloc: &Allocation, offset: u64, data: &[u8]) -> Result<(), WireError> {
    let mut upload = session.context.upload(alloc.mem, offset, data.len() as u64)?;
    upload.push(0, data)?;
    upload.finish()
}

/// Reads `len` bytes at `offset` of `alloc` in one piece (a synchronous inline read).
pub fn read_whole(session: &Session, alloc: &Allocation, offset: u64, len: u64) -> Result<Bytes, WireError> {
    session.context.download(alloc.mem, offset, len).and_then(|mut d| d.next(len as usize))
}

async fn receive_staged(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    carrier: &mut impl Carrier,
    received: &mut u64,
) -> Result<(), WireError> {
    let mut staging = BytesMut::with_capacity(header.len as usize);
    carrier
        .receive(session, header, received, |_, piece| {
            staging.extend_from_slice(piece);
            Ok(())
        })
        .await?;
    write_whole(session, alloc, header.ptr.offset, &staging)
}

/// Sends the copy's bytes chunk by chunk as the device reads them. The outer error is the
/// carrier's, the inner one the device's.
async fn send_streaming(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    carrier: &mut impl Carrier,
) -> Result<Result<(), WireError>, ProtoError> {
    let mut download = match session.context.download(alloc.mem, header.ptr.offset, header.len) {
        Ok(download) => download,
        Err(e) => return Ok(Err(e)),
    };
    let mut sent = 0u64;
    while sent < header.len {
        let len = (header.len - sent).min(session.copy.chunk_bytes as u64) as usize;
        // The chunk waits for the client's reading: it counts against the session's budget, so
        // that many copies nobody reads cannot fill the host.
        let _held = session.reserve(len as u64).await;
        if let Err(e) = carrier.put_download(&mut *download, len).await? {
            return Ok(Err(e));
        }
        sent += len as u64;
    }
    Ok(Ok(()))
}

async fn send_staged(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    carrier: &mut impl Carrier,
) -> Result<Result<(), WireError>, ProtoError> {
    match read_whole(session, alloc, header.ptr.offset, header.len) {
        Ok(all) => carrier.put(all).await.map(Ok),
        Err(e) => Ok(Err(e)),
    }
}

#[cfg(test)]
mod tests;
