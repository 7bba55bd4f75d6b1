//! Bulk copies: one QUIC stream per copy (or per stripe of a copy), header then raw bytes.
//!
//! Host to device, pipelined: the network task gathers received chunks (no copy: they are the
//! `Bytes` quinn hands out) into batches of `chunk_bytes` and passes them through a queue of
//! `depth` batches to a blocking writer, so receiving batch n+1 overlaps writing batch n into
//! device memory. Device to host mirrors it: a blocking reader fills chunks ahead of the network
//! task. Unpipelined, the same task alternates between the two, which the benchmark uses as the
//! baseline. Either way the bytes held per copy stream are bounded by `chunk_bytes * (depth + 2)`
//! plus the QUIC window, not by the copy's size.

use std::sync::Arc;

use ac_proto::backend::{close, BulkHeader, Direction, ErrorKind, Reply, Response, WireError};
use ac_proto::frame::{frame_bytes, FrameReader};
use ac_proto::ProtoError;
use bytes::{Bytes, BytesMut};
use quinn::SendStream;
use tokio::sync::mpsc;

use crate::session::{Allocation, Session};

/// Serves one bulk stream to completion. Errors of the copy go to the client on the stream;
/// returns `Err` only for a protocol violation that must close the connection.
pub async fn serve(
    session: Arc<Session>,
    mut send: SendStream,
    mut reader: FrameReader,
) -> Result<(), ProtoError> {
    let header: BulkHeader = reader.expect_frame().await?;
    tracing::debug!(session = session.id.0, dir = ?header.direction, len = header.len, "bulk copy");
    let alloc = match session.resolve(header.ptr, header.len) {
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
                receive_pipelined(&session, &alloc, &header, &mut reader).await
            } else {
                receive_direct(&session, &alloc, &header, &mut reader).await
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
                send_pipelined(&session, alloc, &header, &mut send).await?;
            } else {
                send_direct(&session, &alloc, &header, &mut send).await?;
            }
            let _ = send.finish();
            Ok(())
        }
    }
}

async fn reply_header(send: &mut SendStream, response: Response) -> Result<(), ProtoError> {
    send.write_chunk(frame_bytes(&Reply { id: 0, response })?)
        .await?;
    Ok(())
}

async fn reply(send: &mut SendStream, response: Response) -> Result<(), ProtoError> {
    reply_header(send, response).await?;
    let _ = send.finish();
    Ok(())
}

fn ended_early(received: u64, header: &BulkHeader) -> WireError {
    WireError::new(
        ErrorKind::InvalidArgument,
        format!("copy ended after {received} of {} bytes", header.len),
    )
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
        Err(e) => Err(WireError::new(
            ErrorKind::Internal,
            format!("copy interrupted: {e}"),
        )),
    }
}

async fn receive_direct(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    reader: &mut FrameReader,
) -> Result<(), WireError> {
    let mut received = 0u64;
    while received < header.len {
        let max = (header.len - received).min(session.copy.chunk_bytes as u64) as usize;
        let piece = next_piece(reader, received, header, max).await?;
        session
            .device
            .write(alloc.mem, header.ptr.offset + received, &piece)?;
        received += piece.len() as u64;
    }
    Ok(())
}

async fn receive_pipelined(
    session: &Session,
    alloc: &Arc<Allocation>,
    header: &BulkHeader,
    reader: &mut FrameReader,
) -> Result<(), WireError> {
    let chunk = session.copy.chunk_bytes;
    let (tx, mut rx) = mpsc::channel::<(u64, Vec<Bytes>)>(session.copy.depth);
    let device = session.device.clone();
    let target = alloc.clone();
    let writer = tokio::task::spawn_blocking(move || -> Result<(), WireError> {
        while let Some((mut offset, pieces)) = rx.blocking_recv() {
            for piece in pieces {
                device.write(target.mem, offset, &piece)?;
                offset += piece.len() as u64;
            }
        }
        Ok(())
    });
    let mut received = 0u64;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batch_start = header.ptr.offset;
    let mut batch_len = 0usize;
    let mut network: Result<(), WireError> = Ok(());
    while received < header.len {
        let max = (header.len - received).min(chunk as u64) as usize;
        let piece = match next_piece(reader, received, header, max).await {
            Ok(piece) => piece,
            Err(e) => {
                network = Err(e);
                break;
            }
        };
        received += piece.len() as u64;
        batch_len += piece.len();
        batch.push(piece);
        if batch_len >= chunk || received == header.len {
            let full = std::mem::take(&mut batch);
            if tx.send((batch_start, full)).await.is_err() {
                break; // the writer failed; its error is reported below
            }
            batch_start += batch_len as u64;
            batch_len = 0;
        }
    }
    drop(tx);
    let written = writer.await.unwrap_or_else(|e| {
        Err(WireError::new(
            ErrorKind::Internal,
            format!("writer panicked: {e}"),
        ))
    });
    written.and(network)
}

fn read_chunk(
    session: &Session,
    alloc: &Allocation,
    offset: u64,
    len: usize,
) -> Result<Bytes, WireError> {
    let mut buf = BytesMut::zeroed(len);
    session.device.read(alloc.mem, offset, &mut buf)?;
    Ok(buf.freeze())
}

async fn send_direct(
    session: &Session,
    alloc: &Allocation,
    header: &BulkHeader,
    send: &mut SendStream,
) -> Result<(), ProtoError> {
    let mut sent = 0u64;
    while sent < header.len {
        let len = (header.len - sent).min(session.copy.chunk_bytes as u64) as usize;
        match read_chunk(session, alloc, header.ptr.offset + sent, len) {
            Ok(chunk) => send.write_chunk(chunk).await?,
            Err(e) => return abort_send(send, e),
        }
        sent += len as u64;
    }
    Ok(())
}

async fn send_pipelined(
    session: &Arc<Session>,
    alloc: Arc<Allocation>,
    header: &BulkHeader,
    send: &mut SendStream,
) -> Result<(), ProtoError> {
    let (tx, mut rx) = mpsc::channel::<Result<Bytes, WireError>>(session.copy.depth);
    let reader_session = session.clone();
    let (start, total, chunk) = (
        header.ptr.offset,
        header.len,
        session.copy.chunk_bytes as u64,
    );
    let reader = tokio::task::spawn_blocking(move || {
        let mut done = 0u64;
        while done < total {
            let len = (total - done).min(chunk) as usize;
            let next = read_chunk(&reader_session, &alloc, start + done, len);
            let failed = next.is_err();
            if tx.blocking_send(next).is_err() || failed {
                return;
            }
            done += len as u64;
        }
    });
    while let Some(next) = rx.recv().await {
        match next {
            Ok(chunk) => send.write_chunk(chunk).await?,
            Err(e) => return abort_send(send, e),
        }
    }
    let _ = reader.await;
    Ok(())
}

/// A device failure in the middle of a device-to-host copy: the header already promised the
/// bytes, so the stream is reset and the client reports the copy as failed.
fn abort_send(send: &mut SendStream, error: WireError) -> Result<(), ProtoError> {
    tracing::warn!(%error, "device read failed during a copy");
    let _ = send.reset(close::COPY_REFUSED.into());
    Ok(())
}
