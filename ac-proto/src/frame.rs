//! Framing on QUIC streams.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of one encoded message.
//! A message may announce a raw payload; its bytes follow the frame directly and never pass
//! through the codec. [`FrameReader`] parses frames and payloads out of a stream;
//! [`spawn_writer`] runs a task that coalesces queued frames into few large writes, which is what
//! lets a client push hundreds of thousands of small asynchronous calls per second.

use bytes::{Buf, Bytes, BytesMut};
use quinn::{RecvStream, SendStream};
use serde::{de::DeserializeOwned, Serialize};
use tokio::sync::mpsc;

use crate::codec::{self, MAX_FRAME};
use crate::ProtoError;

/// Appends one frame holding `msg` to `out`.
pub fn encode_frame<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    codec::encode_into(msg, out)?;
    let len = u32::try_from(out.len() - start - 4).map_err(|_| ProtoError::FrameTooLarge {
        len: (out.len() - start - 4) as u64,
        limit: MAX_FRAME as u64,
    })?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// One frame holding `msg`, ready to queue on a writer.
pub fn frame_bytes<T: Serialize>(msg: &T) -> Result<Bytes, ProtoError> {
    let mut out = Vec::with_capacity(64);
    encode_frame(msg, &mut out)?;
    Ok(out.into())
}

/// Reads frames and raw payloads from one QUIC receive stream.
#[derive(Debug)]
pub struct FrameReader {
    stream: RecvStream,
    buf: BytesMut,
}

/// How much one read from the stream asks for.
const READ_CHUNK: usize = 256 * 1024;

impl FrameReader {
    /// Wraps a receive stream.
    pub fn new(stream: RecvStream) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
        }
    }

    /// The underlying stream, e.g. to `stop` it with an error code.
    pub fn stream_mut(&mut self) -> &mut RecvStream {
        &mut self.stream
    }

    /// Reads more bytes into the buffer; `false` at the end of the stream.
    async fn fill(&mut self) -> Result<bool, ProtoError> {
        match self.stream.read_chunk(READ_CHUNK, true).await? {
            Some(chunk) => {
                self.buf.extend_from_slice(&chunk.bytes);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Reads exactly `n` bytes into the buffer unless the stream ends first.
    pub async fn read_exact_raw(&mut self, n: usize) -> Result<Bytes, ProtoError> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Err(ProtoError::UnexpectedEnd);
            }
        }
        Ok(self.buf.split_to(n).freeze())
    }

    /// Parses a frame already in the buffer, without reading.
    pub fn buffered_frame<T: DeserializeOwned>(&mut self) -> Option<Result<T, ProtoError>> {
        if self.buf.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_FRAME {
            return Some(Err(ProtoError::FrameTooLarge {
                len: len as u64,
                limit: MAX_FRAME as u64,
            }));
        }
        if self.buf.len() < 4 + len {
            return None;
        }
        self.buf.advance(4);
        let body = self.buf.split_to(len);
        Some(codec::decode(&body))
    }

    /// Reads the next frame; `Ok(None)` when the stream ends cleanly between frames.
    pub async fn read_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ProtoError> {
        loop {
            if let Some(frame) = self.buffered_frame() {
                return frame.map(Some);
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ProtoError::UnexpectedEnd)
                };
            }
        }
    }

    /// Reads the next frame, treating the end of the stream as an error.
    pub async fn expect_frame<T: DeserializeOwned>(&mut self) -> Result<T, ProtoError> {
        self.read_frame().await?.ok_or(ProtoError::UnexpectedEnd)
    }

    /// The next piece of raw payload, at most `max` bytes, without copying when the buffer is
    /// empty. `None` at the end of the stream.
    pub async fn next_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        if !self.buf.is_empty() {
            let n = self.buf.len().min(max);
            return Ok(Some(self.buf.split_to(n).freeze()));
        }
        Ok(self.stream.read_chunk(max, true).await?.map(|c| c.bytes))
    }

    /// Fills `out` with raw payload bytes.
    pub async fn read_payload_into(&mut self, out: &mut [u8]) -> Result<(), ProtoError> {
        let mut filled = 0;
        while filled < out.len() {
            let chunk = self
                .next_chunk(out.len() - filled)
                .await?
                .ok_or(ProtoError::UnexpectedEnd)?;
            out[filled..filled + chunk.len()].copy_from_slice(&chunk);
            filled += chunk.len();
        }
        Ok(())
    }
}

/// Items smaller than this are copied into one batch buffer; larger ones are sent as they are.
const COALESCE_BELOW: usize = 16 * 1024;
/// A batch is written once it holds this many bytes.
const BATCH_BYTES: usize = 256 * 1024;

/// Queues byte strings for a [`spawn_writer`] task. Cloning shares the same stream.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<(Bytes, Bytes)>,
}

impl WriterHandle {
    /// Queues bytes (one or more whole frames) to be written in order.
    pub async fn send(&self, bytes: Bytes) -> Result<(), ProtoError> {
        self.send_with_payload(bytes, Bytes::new()).await
    }

    /// Queues a frame and the raw payload it announces; nothing queued by another handle can
    /// come between the two.
    pub async fn send_with_payload(&self, frame: Bytes, payload: Bytes) -> Result<(), ProtoError> {
        self.tx
            .send((frame, payload))
            .await
            .map_err(|_| ProtoError::UnexpectedEnd)
    }

    /// Queues bytes without waiting; fails when the queue is full or the writer has stopped.
    pub fn try_send(&self, bytes: Bytes) -> Result<(), ProtoError> {
        self.tx
            .try_send((bytes, Bytes::new()))
            .map_err(|_| ProtoError::UnexpectedEnd)
    }

    /// Queues bytes from a thread outside the async runtime.
    pub fn blocking_send(&self, bytes: Bytes) -> Result<(), ProtoError> {
        self.tx
            .blocking_send((bytes, Bytes::new()))
            .map_err(|_| ProtoError::UnexpectedEnd)
    }

    /// Encodes `msg` as a frame and queues it.
    pub async fn send_frame<T: Serialize>(&self, msg: &T) -> Result<(), ProtoError> {
        self.send(frame_bytes(msg)?).await
    }
}

/// Starts a task that writes everything queued on the returned handle to `stream`, coalescing
/// whatever is queued at the moment into one write. The task ends, finishing the stream, when
/// every handle is dropped, and stops at the first write error.
pub fn spawn_writer(mut stream: SendStream, queue_depth: usize) -> WriterHandle {
    let (tx, mut rx) = mpsc::channel::<(Bytes, Bytes)>(queue_depth);
    tokio::spawn(async move {
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut small = BytesMut::new();
        while let Some(first) = rx.recv().await {
            let mut item = Some(first);
            let mut batched = 0usize;
            while let Some((frame, payload)) = item.take() {
                for bytes in [frame, payload] {
                    batched += bytes.len();
                    if bytes.len() < COALESCE_BELOW {
                        small.extend_from_slice(&bytes);
                    } else {
                        if !small.is_empty() {
                            chunks.push(small.split().freeze());
                        }
                        chunks.push(bytes);
                    }
                }
                if batched < BATCH_BYTES {
                    item = rx.try_recv().ok();
                }
            }
            if !small.is_empty() {
                chunks.push(small.split().freeze());
            }
            if let Err(e) = stream.write_all_chunks(&mut chunks).await {
                tracing::debug!(error = %e, "frame writer stopped");
                return;
            }
            chunks.clear();
        }
        let _ = stream.finish();
    });
    WriterHandle { tx }
}
