//! Bulk copies: one QUIC stream per copy (or per stripe of a copy), header then raw bytes.
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
//! device copy instead of the larger of the two, and memory grows with the copy.

use std::sync::Arc;

use ac_proto::backend::{close, BulkHeader, Direction, ErrorKind, Reply, Response, WireError};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::ProtoError;
use bytes::{Bytes, BytesMut};
use quinn::SendStream;

use crate::session::{Allocation, Session};

/// Serves one bulk stream to completion. Errors of the copy go to the client on the stream;
/// returns `Err` only for a protocol violation that must close the connection.
pub async fn serve(session: Arc<Session>, mut send: SendStream, mut reader: FrameReader) -> Result<(), ProtoError> {
    let header: BulkHeader = reader.expect_frame().await?;
    tracing::debug!(session = session.id.0, dir = ?header.direction, len = header.len, after = header.after, "bulk copy");
    let checked = match session.resolve(header.ptr, header.len) {
        // A synchronous copy: after the work queued before its position (see `fence`).
        Ok(alloc) => session.fences.wait(header.after).await.map(|()| alloc),
        Err(e) => Err(e),
    };
    let alloc = match checked {
        Ok(alloc) => alloc,
        Err(e) => {
            if header.direction == Direction::HostToDevice {
                let _ = reader.stream_mut().stop(close::COPY_REFUSED.into());
            }
            return reply(&mut send, Response::Error(e)).await;
        }
    };
    match header.direction {
        Direction::HostToDevice => {
            let result = if header.pipelined {
                receive_streaming(&session, &alloc, &header, &mut reader).await
            } else {
                receive_staged(&session, &alloc, &header, &mut reader).await
            };
            let response = match result {
                Ok(()) => Response::Ok,
                Err(e) => {
                    let _ = reader.stream_mut().stop(close::COPY_REFUSED.into());
                    Response::Error(e)
                }
            };
            reply(&mut send, response).await
        }
        Direction::DeviceToHost => {
            reply_header(&mut send, Response::Data { len: header.len }).await?;
            if header.pipelined {
                send_streaming(&session, &alloc, &header, &mut send).await?;
            } else {
                send_staged(&session, &alloc, &header, &mut send).await?;
            }
            let _ = send.finish();
            Ok(())
        }
    }
}

async fn reply_header(send: &mut SendStream, response: Response) -> Result<(), ProtoError> {
    send.write_chunk(frame_bytes(&Reply { id: 0, response })?).await?;
    Ok(())
}

async fn reply(send: &mut SendStream, response: Response) -> Result<(), ProtoError> {
    reply_header(send, response).await?;
    let _ = send.finish();
    Ok(())
}

fn ended_early(received: u64, header: &BulkHeader) -> WireError {
    WireError::new(ErrorKind::InvalidArgument, format!("copy ended after {received} of {} bytes", header.len))
}

/// Reads the next piece of payload; fails when the stream ends before `header.len` bytes.
async fn next_piece(
    reader: &mut FrameReader,
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

/// Receives the copy's payload piece by piece, handing each to `sink` with its offset in the copy.
async fn receive(
    session: &Session,
    header: &BulkHeader,
    reader: &mut FrameReader,
    mut sink: impl FnMut(u64, &[u8]) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let mut received = 0u64;
    while received < header.len {
        let max = (header.len - received).min(session.copy.chunk_bytes as u64) as usize;
        let piece = next_piece(reader, received, header, max).await?;
        sink(received, &piece)?;
        received += piece.len() as u64;
    }
    Ok(())
}

async fn receive_streaming(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    reader: &mut FrameReader,
) -> Result<(), WireError> {
    let mut upload = session.context.upload(alloc.mem, header.ptr.offset, header.len)?;
    receive(session, header, reader, |at, piece| upload.push(at, piece)).await?;
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
    reader: &mut FrameReader,
) -> Result<(), WireError> {
    let mut staging = BytesMut::with_capacity(header.len as usize);
    receive(session, header, reader, |_, piece| {
        staging.extend_from_slice(piece);
        Ok(())
    })
    .await?;
    write_whole(session, alloc, header.ptr.offset, &staging)
}

async fn send_streaming(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    send: &mut SendStream,
) -> Result<(), ProtoError> {
    let mut download = match session.context.download(alloc.mem, header.ptr.offset, header.len) {
        Ok(download) => download,
        Err(e) => return abort_send(send, e),
    };
    let mut sent = 0u64;
    while sent < header.len {
        let len = (header.len - sent).min(session.copy.chunk_bytes as u64) as usize;
        match download.next(len) {
            Ok(chunk) => send.write_chunk(chunk).await?,
            Err(e) => return abort_send(send, e),
        }
        sent += len as u64;
    }
    Ok(())
}

async fn send_staged(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    send: &mut SendStream,
) -> Result<(), ProtoError> {
    match read_whole(session, alloc, header.ptr.offset, header.len) {
        Ok(all) => Ok(send.write_chunk(all).await?),
        Err(e) => abort_send(send, e),
    }
}

/// A device failure in the middle of a device-to-host copy: the header already promised the
/// bytes, so the stream is reset and the client reports the copy as failed.
fn abort_send(send: &mut SendStream, error: WireError) -> Result<(), ProtoError> {
    tracing::warn!(%error, "device read failed during a copy");
    let _ = send.reset(close::COPY_REFUSED.into());
    Ok(())
}
