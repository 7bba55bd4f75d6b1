//! The bulk path driven directly: a copy's header and payload from memory, its replies
//! back to memory, on a CPU device's session; the fences answered by the test, as the
//! control loop would.

use std::sync::Arc;

use ac_proto::backend::{BufferId, DevicePtr};

use super::*;
use crate::config::CopySettings;
use crate::device::{CpuDevice, Device};
use crate::metrics::Metrics;
use crate::session::fence::{Fence, Fences};
use crate::session::{Limits, Registry};

/// What the client sent, handed over in pieces of at most 1000 bytes.
struct Sent(Bytes);

impl Source for Sent {
    async fn read_some(&mut self, max: usize) -> Result<Option<Bytes>, ProtoError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let n = max.min(1000).min(self.0.len());
        Ok(Some(self.0.split_to(n)))
    }
}

/// A carrier in memory: what the backend put back, and how much of a refused payload it
/// was told to drain.
struct Memory {
    reader: FrameReader<Sent>,
    put: Vec<u8>,
    refused: Option<u64>,
}

impl Carrier for Memory {
    type Incoming = Sent;

    fn reader(&mut self) -> &mut FrameReader<Sent> {
        &mut self.reader
    }

    async fn put(&mut self, bytes: Bytes) -> Result<(), ProtoError> {
        self.put.extend_from_slice(&bytes);
        Ok(())
    }

    async fn put_download(
        &mut self,
        download: &mut dyn Download,
        len: usize,
    ) -> Result<Result<(), WireError>, ProtoError> {
        Ok(download.next(len).map(|piece| self.put.extend_from_slice(&piece)))
    }

    async fn refuse_rest(&mut self, left: u64) -> Result<(), ProtoError> {
        self.refused = Some(left);
        Ok(())
    }

    fn abort(&mut self) -> Result<(), ProtoError> {
        Err(ProtoError::UnexpectedEnd)
    }

    async fn finish(&mut self) -> Result<(), ProtoError> {
        Ok(())
    }
}

/// A session on a 1 MiB CPU device holding one buffer of `len` bytes; every fence it
/// asks for is admitted with `pending` (the control loop's pending error).
fn session_with_buffer(len: u64, pending: Option<WireError>) -> (Arc<Session>, BufferId) {
    let device = Arc::new(CpuDevice::new(0, 1 << 20));
    let context = device.open_context().unwrap();
    let (fences, mut asked) = Fences::channel();
    tokio::spawn(async move {
        while let Some(request) = asked.recv().await {
            let _ = request.admitted.send(Fence { pending: pending.clone(), barriers: Vec::new() });
        }
    });
    let limits = Limits { budget: 16 << 20, quota: None };
    let registry = Registry::default();
    let metrics = Arc::new(Metrics::default());
    let (session, _rejoins) =
        registry.open(context, CopySettings::default(), (None, 0, device), fences, limits, metrics);
    let buffer = session.alloc(len).unwrap();
    (session, buffer)
}

/// Runs one copy: `header`, then `payload`; returns the carrier afterwards.
async fn run(session: &Session, header: BulkHeader, payload: &[u8]) -> Memory {
    let mut sent = frame_bytes(&header).unwrap().to_vec();
    sent.extend_from_slice(payload);
    let mut carrier = Memory { reader: FrameReader::new(Sent(Bytes::from(sent))), put: Vec::new(), refused: None };
    let header: BulkHeader = carrier.reader.expect_frame().await.unwrap();
    copy(session, header, &mut carrier).await.unwrap();
    carrier
}

/// The reply frame at the start of what the backend put back, and the bytes after it.
async fn reply_of(put: &[u8]) -> (Response, Vec<u8>) {
    let mut reader = FrameReader::new(Sent(Bytes::copy_from_slice(put)));
    let reply: Reply = reader.expect_frame().await.unwrap();
    let mut rest = Vec::new();
    while let Some(piece) = reader.next_chunk(1 << 20).await.unwrap() {
        rest.extend_from_slice(&piece);
    }
    (reply.response, rest)
}

fn header(direction: Direction, buffer: BufferId, offset: u64, len: u64, pipelined: bool) -> BulkHeader {
    BulkHeader { direction, ptr: DevicePtr { buffer, offset }, len, pipelined, after: 1 }
}

fn device_bytes(session: &Session, buffer: BufferId, len: u64) -> Vec<u8> {
    let alloc = session.resolve(DevicePtr { buffer, offset: 0 }, len).unwrap();
    let mut out = vec![0; len as usize];
    session.context.read(alloc.mem, 0, &mut out, crate::device::DeviceStream(0)).unwrap();
    out
}

#[tokio::test]
async fn a_written_copy_lands_where_its_header_says_pipelined_or_not() {
    for pipelined in [true, false] {
        let (session, buffer) = session_with_buffer(10_000, None);
        let payload: Vec<u8> = (0..5_000u32).map(|i| (i % 251) as u8).collect();
        let carrier = run(&session, header(Direction::HostToDevice, buffer, 3_000, 5_000, pipelined), &payload).await;
        assert_eq!(reply_of(&carrier.put).await.0, Response::Ok);
        let memory = device_bytes(&session, buffer, 10_000);
        assert_eq!(&memory[3_000..8_000], &payload[..], "pipelined: {pipelined}");
        assert!(memory[..3_000].iter().chain(&memory[8_000..]).all(|&b| b == 0), "nothing else written");
    }
}

#[tokio::test]
async fn a_copy_past_its_buffer_is_refused_its_payload_drained_and_nothing_written() {
    let (session, buffer) = session_with_buffer(4_096, None);
    let carrier = run(&session, header(Direction::HostToDevice, buffer, 4_000, 200, true), &[7; 200]).await;
    let (response, _) = reply_of(&carrier.put).await;
    assert!(matches!(response, Response::Error(ref e) if e.kind == ErrorKind::OutOfBounds), "{response:?}");
    assert_eq!(carrier.refused, Some(200), "the client's payload is drained, not left on the carrier");
    assert!(device_bytes(&session, buffer, 4_096).iter().all(|&b| b == 0));
}

#[tokio::test]
async fn a_copy_behind_a_failed_launch_answers_that_error_instead_of_copying() {
    let pending = WireError::new(ErrorKind::Device, "the launch before failed");
    let (session, buffer) = session_with_buffer(1_000, Some(pending.clone()));
    let carrier = run(&session, header(Direction::HostToDevice, buffer, 0, 1_000, true), &[9; 1_000]).await;
    assert_eq!(reply_of(&carrier.put).await.0, Response::Error(pending));
    assert!(device_bytes(&session, buffer, 1_000).iter().all(|&b| b == 0), "nothing copied");
}

#[tokio::test]
async fn a_read_copy_sends_its_reply_then_exactly_its_bytes() {
    let (session, buffer) = session_with_buffer(100_000, None);
    let written: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let carrier = run(&session, header(Direction::HostToDevice, buffer, 0, 100_000, true), &written).await;
    assert_eq!(reply_of(&carrier.put).await.0, Response::Ok);
    let carrier = run(&session, header(Direction::DeviceToHost, buffer, 10, 90_000, true), &[]).await;
    let (response, bytes) = reply_of(&carrier.put).await;
    assert_eq!(response, Response::Data { len: 90_000 });
    assert_eq!(bytes, &written[10..90_010]);
}
