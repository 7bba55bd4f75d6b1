//! Framing on QUIC streams and bulk lanes.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of one encoded message.
//! A message may announce a raw payload; its bytes follow the frame directly and never pass
//! through the codec. [`FrameReader`] parses frames and payloads out of a [`Source`]: a QUIC
//! receive stream, or a bulk lane ([`crate::lane`]); [`StreamWriter`] lets several tasks and
//! threads write whole frames to one stream.

use bytes::{Buf, Bytes, BytesMut};
use std::future::Future;
use std::sync::Arc;

use quinn::{RecvStream, SendStream};
use serde::{de::DeserializeOwned, Serialize};
use tokio::sync::Mutex;

use crate::codec::{self, MAX_FRAME};
use crate::ProtoError;

/// Appends one frame holding `msg` to `out`.
pub fn encode_frame<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    codec::encode_into(msg, out)?;
    let len = u32::try_from(out.len() - start - 4)
        .map_err(|_| ProtoError::FrameTooLarge { len: (out.len() - start - 4) as u64, limit: MAX_FRAME as u64 })?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// One frame holding `msg`, ready to queue on a writer.
pub fn frame_bytes<T: Serialize>(msg: &T) -> Result<Bytes, ProtoError> {
    let mut out = Vec::with_capacity(64);
    encode_frame(msg, &mut out)?;
    Ok(out.into())
}

/// `msgs` as consecutive frames in one buffer: a burst of messages goes out in one write.
pub fn frames_bytes<T: Serialize>(msgs: impl IntoIterator<Item = T>) -> Result<Bytes, ProtoError> {
    let mut out = Vec::new();
    for msg in msgs {
        encode_frame(&msg, &mut out)?;
    }
    Ok(out.into())
}

/// Writes a frame and the raw payload it announces (empty: none) to `stream`, without copying.
pub async fn write_with_payload(stream: &mut SendStream, frame: Bytes, payload: Bytes) -> Result<(), ProtoError> {
    if payload.is_empty() {
        stream.write_chunk(frame).await?;
    } else {
        stream.write_all_chunks(&mut [frame, payload]).await?;
    }
    Ok(())
}

/// Where a [`FrameReader`] reads bytes from.
pub trait Source {
    /// The next bytes, at least one and at most `max`, as soon as any are there; `None` at the
    /// end of the stream.
    fn read_some(&mut self, max: usize) -> impl Future<Output = Result<Option<Bytes>, ProtoError>> + Send;

    /// The next bytes of a raw payload of which at least `max` are still to come: a source may
    /// wait for all `max` to hand them over in one piece.
    fn read_payload(&mut self, max: usize) -> impl Future<Output = Result<Option<Bytes>, ProtoError>> + Send {
        self.read_some(max)
    }

    /// Fills `out` with the next bytes; an error if the stream ends first.
    fn read_into(&mut self, out: &mut [u8]) -> impl Future<Output = Result<(), ProtoError>> + Send
    where
        Self: Send,
    {
        async move {
            let mut filled = 0;
            while filled < out.len() {
                let chunk = self.read_payload(out.len() - filled).await?.ok_or(ProtoError::UnexpectedEnd)?;
                out[filled..filled + chunk.len()].copy_from_slice(&chunk);
                filled += chunk.len();
            }
            Ok(())
        }
    }
}

impl Source for RecvStream {
    async fn read_some(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        Ok(self.read_chunk(max, true).await?.map(|c| c.bytes))
    }
}

/// Reads frames and raw payloads from one QUIC receive stream (or another [`Source`]).
#[derive(Debug)]
pub struct FrameReader<S = RecvStream> {
    stream: S,
    buf: BytesMut,
}

/// How much one read from the stream asks for.
const READ_CHUNK: usize = 256 * 1024;

impl<S: Source + Send> FrameReader<S> {
    /// Wraps a receive stream.
    pub fn new(stream: S) -> Self {
        Self { stream, buf: BytesMut::new() }
    }

    /// The underlying stream, to look at.
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// The underlying stream, e.g. to `stop` it with an error code, or to write to a lane.
    pub fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// Reads more bytes into the buffer; `false` at the end of the stream.
    async fn fill(&mut self) -> Result<bool, ProtoError> {
        match self.stream.read_some(READ_CHUNK).await? {
            Some(chunk) => {
                self.buf.extend_from_slice(&chunk);
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

    /// Whether a whole frame (or a length no frame may have) is already buffered: the next read
    /// of a frame returns without waiting for the network.
    pub fn frame_buffered(&self) -> bool {
        match self.next_frame_len() {
            None => false,
            Some(Err(_)) => true,
            Some(Ok(len)) => self.buf.len() >= 4 + len,
        }
    }

    /// The length of the frame at the front of the buffer, once its header is buffered; an
    /// error for a length no frame may have.
    fn next_frame_len(&self) -> Option<Result<usize, ProtoError>> {
        let header = self.buf.get(..4)?;
        let len = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        Some(if len > MAX_FRAME {
            Err(ProtoError::FrameTooLarge { len: len as u64, limit: MAX_FRAME as u64 })
        } else {
            Ok(len)
        })
    }

    /// Reads the stream to its end, which must come next: a request or an answer that is the
    /// whole of its stream ends with this. quinn answers the drop of a stream whose end was
    /// never read with STOP_SENDING: a packet and an acknowledgement more each way per request
    /// (half of all datagrams under `ac-bench --only load`).
    pub async fn read_end(&mut self) -> Result<(), ProtoError> {
        if self.buf.is_empty() && !self.fill().await? {
            return Ok(());
        }
        Err(ProtoError::Malformed("bytes after the last frame of the stream".into()))
    }

    /// [`Self::read_end`] if the end has already arrived, without waiting; `true` when it had.
    pub fn read_end_if_arrived(&mut self) -> bool {
        let end = std::pin::pin!(self.read_end());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        matches!(end.poll(&mut cx), std::task::Poll::Ready(Ok(())))
    }

    /// Parses a frame already in the buffer, without reading.
    pub fn buffered_frame<T: DeserializeOwned>(&mut self) -> Option<Result<T, ProtoError>> {
        Some(self.buffered_body()?.and_then(|body| codec::decode(&body)))
    }

    /// Takes the body of a frame already in the buffer, without reading.
    fn buffered_body(&mut self) -> Option<Result<BytesMut, ProtoError>> {
        let len = match self.next_frame_len()? {
            Ok(len) => len,
            Err(e) => return Some(Err(e)),
        };
        if self.buf.len() < 4 + len {
            return None;
        }
        self.buf.advance(4);
        Some(Ok(self.buf.split_to(len)))
    }

    /// Reads the next frame's body undecoded (for a message whose form depends on the protocol
    /// version), treating the end of the stream as an error.
    pub async fn expect_frame_body(&mut self) -> Result<BytesMut, ProtoError> {
        loop {
            if let Some(body) = self.buffered_body() {
                return body;
            }
            if !self.fill().await? {
                return Err(ProtoError::UnexpectedEnd);
            }
        }
    }

    /// Reads the next frame; `Ok(None)` when the stream ends cleanly between frames.
    pub async fn read_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, ProtoError> {
        loop {
            if let Some(frame) = self.buffered_frame() {
                return frame.map(Some);
            }
            if !self.fill().await? {
                return if self.buf.is_empty() { Ok(None) } else { Err(ProtoError::UnexpectedEnd) };
            }
        }
    }

    /// Reads the next frame, treating the end of the stream as an error.
    pub async fn expect_frame<T: DeserializeOwned>(&mut self) -> Result<T, ProtoError> {
        self.read_frame().await?.ok_or(ProtoError::UnexpectedEnd)
    }

    /// Reads the next frame together with the raw payload it announces (`payload_len` says how
    /// long, at most `max_payload`). Nothing is consumed until both are buffered, so the call is
    /// cancel-safe: a caller that gives up leaves the stream intact for the next one.
    pub async fn read_frame_with_payload<T: DeserializeOwned>(
        &mut self,
        payload_len: impl Fn(&T) -> u64,
        max_payload: u64,
    ) -> Result<Option<(T, Bytes)>, ProtoError> {
        loop {
            if let Some(len) = self.next_frame_len() {
                let len = len?;
                if self.buf.len() >= 4 + len {
                    let msg: T = codec::decode(&self.buf[4..4 + len])?;
                    let extra = payload_len(&msg);
                    if extra > max_payload {
                        return Err(ProtoError::FrameTooLarge { len: extra, limit: max_payload });
                    }
                    if (self.buf.len() - 4 - len) as u64 >= extra {
                        self.buf.advance(4 + len);
                        return Ok(Some((msg, self.buf.split_to(extra as usize).freeze())));
                    }
                }
            }
            if !self.fill().await? {
                return if self.buf.is_empty() { Ok(None) } else { Err(ProtoError::UnexpectedEnd) };
            }
        }
    }

    /// The next piece of raw payload, at most `max` bytes, all of which the sender promised,
    /// without copying when the buffer is empty. `None` at the end of the stream.
    pub async fn next_chunk(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        if !self.buf.is_empty() {
            let n = self.buf.len().min(max);
            return Ok(Some(self.buf.split_to(n).freeze()));
        }
        self.stream.read_payload(max).await
    }

    /// Up to `max` raw payload bytes already read from the stream, if any.
    pub fn take_buffered(&mut self, max: usize) -> Option<Bytes> {
        let n = self.buf.len().min(max);
        (n > 0).then(|| self.buf.split_to(n).freeze())
    }

    /// Fills `out` with raw payload bytes: what is buffered, then straight from the stream.
    pub async fn read_payload_into(&mut self, out: &mut [u8]) -> Result<(), ProtoError> {
        let buffered = self.buf.len().min(out.len());
        out[..buffered].copy_from_slice(&self.buf.split_to(buffered));
        self.stream.read_into(&mut out[buffered..]).await
    }
}

/// The sending half of a stream shared by several writers. Each write goes straight into
/// quinn's send buffer under a lock, with no task in between: a hand-off to a writer task costs a
/// cross-thread wake-up per message, a visible share of a round trip on loopback. quinn's
/// connection task already packs many small writes into each datagram.
#[derive(Debug, Clone)]
pub struct StreamWriter {
    stream: Arc<Mutex<SendStream>>,
}

impl StreamWriter {
    /// Wraps a stream.
    pub fn new(stream: SendStream) -> Self {
        Self { stream: Arc::new(Mutex::new(stream)) }
    }

    /// Writes bytes (one or more whole frames).
    pub async fn send(&self, bytes: Bytes) -> Result<(), ProtoError> {
        self.stream.lock().await.write_chunk(bytes).await?;
        Ok(())
    }

    /// Writes a frame and the raw payload it announces; nothing from another writer can come
    /// between the two.
    pub async fn send_with_payload(&self, frame: Bytes, payload: Bytes) -> Result<(), ProtoError> {
        write_with_payload(&mut *self.stream.lock().await, frame, payload).await
    }

    /// Encodes `msg` as a frame and writes it.
    pub async fn send_frame<T: Serialize>(&self, msg: &T) -> Result<(), ProtoError> {
        self.send(frame_bytes(msg)?).await
    }
}
