//! Copies on the control stream: inline writes and reads (payload after the envelope),
//! synchronous ones behind their fence, and stream-ordered device copies and memsets.

use ac_proto::backend::{DevicePtr, Direction, ErrorKind, Reply, Response, StreamId};
use ac_proto::frame::{frame_bytes, FrameReader};

use super::{closing_for, counted_copy, error, Closing, Control, Halt, Outcome, MAX_INLINE};
use crate::device::stream_workers::StreamOp;
use crate::network::bulk;

impl Control {
    /// Reads an inline payload under the session's budget, so that queued asynchronous writes
    /// cannot hold more than the budget in memory (read replies waiting to leave share it).
    pub(super) async fn read_inline(
        &mut self,
        reader: &mut FrameReader,
        len: u64,
    ) -> Result<(bytes::Bytes, tokio::sync::OwnedSemaphorePermit), Halt> {
        if len > MAX_INLINE {
            return Err(Halt::Close(Closing::protocol(format!(
                "inline payload of {len} bytes exceeds the limit of {MAX_INLINE}; use a bulk copy"
            ))));
        }
        // The payload may take a while to arrive, and the budget to free up.
        let permit = self.reserve_inline(len).await;
        let data =
            reader.read_exact_raw(len as usize).await.map_err(|e| closing_for(e).map_or(Halt::Lost, Halt::Close))?;
        Ok((data, permit))
    }

    /// Takes `len` bytes of the session's payload budget, once the operations staged so far
    /// are on their streams (they may be what holds the budget).
    pub(super) async fn reserve_inline(&mut self, len: u64) -> tokio::sync::OwnedSemaphorePermit {
        self.hand_over_staged().await;
        self.session.reserve(len).await
    }

    pub(super) async fn enqueue_write(
        &mut self,
        dst: DevicePtr,
        (data, budget): (bytes::Bytes, tokio::sync::OwnedSemaphorePermit),
        stream: StreamId,
    ) -> Response {
        match self.session.resolve(dst, data.len() as u64) {
            Ok(alloc) => {
                // Counted as it is queued: the stream's worker reports its failure, if any.
                self.session.metrics.copied(Direction::HostToDevice, data.len() as u64, None);
                self.enqueue_on(stream, StreamOp::Write { dst: alloc, offset: dst.offset, data, _budget: budget }).await
            }
            Err(e) => Response::Error(e),
        }
    }

    /// A synchronous write: behind a fence at this position, then straight to device memory,
    /// off the control loop.
    pub(super) async fn write_sync(
        &mut self,
        dst: DevicePtr,
        (data, budget): (bytes::Bytes, tokio::sync::OwnedSemaphorePermit),
        id: u64,
    ) -> Outcome {
        if id == 0 {
            return Outcome::Now(error(ErrorKind::InvalidArgument, "a synchronous write needs a request id"));
        }
        let alloc = match self.session.resolve(dst, data.len() as u64) {
            Ok(alloc) => alloc,
            Err(e) => return Outcome::Now(Response::Error(e)),
        };
        let (fence, session, replies) = (self.fence().await, self.session.clone(), self.replies.clone());
        tokio::spawn(async move {
            let metrics = session.metrics.clone();
            let len = data.len() as u64;
            let written = match fence.passed().await {
                Ok(()) => {
                    let write = move || bulk::write_whole(&session, &alloc, dst.offset, &data);
                    counted_copy(&metrics, Direction::HostToDevice, len, write).await
                }
                Err(e) => Err(e),
            };
            drop(budget);
            let response = written.map_or_else(Response::Error, |()| Response::Ok);
            metrics.answered(&response);
            replies.send_frame(&Reply { id, response }).await;
        });
        Outcome::Later
    }

    /// A synchronous read: behind a fence at this position, answered off the control loop.
    pub(super) async fn read_sync(&mut self, src: DevicePtr, len: u64, id: u64) -> Outcome {
        if id == 0 {
            return Outcome::Now(error(ErrorKind::InvalidArgument, "a read needs a request id to answer"));
        }
        if len > MAX_INLINE {
            return Outcome::Now(error(
                ErrorKind::InvalidArgument,
                format!("read of {len} bytes: use a bulk copy above {MAX_INLINE}"),
            ));
        }
        let alloc = match self.session.resolve(src, len) {
            Ok(alloc) => alloc,
            Err(e) => return Outcome::Now(Response::Error(e)),
        };
        // The data waits in memory until the client takes it: a client that asks and never
        // reads must stall its own session, not fill the host's memory.
        let budget = self.reserve_inline(len).await;
        let (fence, session, replies) = (self.fence().await, self.session.clone(), self.replies.clone());
        tokio::spawn(async move {
            let metrics = session.metrics.clone();
            let read = match fence.passed().await {
                Ok(()) => {
                    let read = move || bulk::read_whole(&session, &alloc, src.offset, len);
                    counted_copy(&metrics, Direction::DeviceToHost, len, read).await
                }
                Err(e) => Err(e),
            };
            match read {
                Ok(data) => {
                    let frame = frame_bytes(&Reply { id, response: Response::Data { len } }).expect("reply encodes");
                    replies.send_with_payload(frame, data).await;
                }
                Err(e) => {
                    let response = Response::Error(e);
                    metrics.answered(&response);
                    replies.send_frame(&Reply { id, response }).await;
                }
            }
            drop(budget);
        });
        Outcome::Later
    }

    pub(super) async fn enqueue_copy(
        &mut self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamId,
    ) -> Response {
        match self.session.resolve(dst, len).and_then(|d| Ok((d, self.session.resolve(src, len)?))) {
            Ok((dst_alloc, src_alloc)) => {
                let op = StreamOp::Copy {
                    dst: dst_alloc,
                    dst_offset: dst.offset,
                    src: src_alloc,
                    src_offset: src.offset,
                    len,
                };
                self.enqueue_on(stream, op).await
            }
            Err(e) => Response::Error(e),
        }
    }

    pub(super) async fn enqueue_memset(&mut self, dst: DevicePtr, len: u64, value: u8, stream: StreamId) -> Response {
        match self.session.resolve(dst, len) {
            Ok(alloc) => self.enqueue_on(stream, StreamOp::Memset { dst: alloc, offset: dst.offset, len, value }).await,
            Err(e) => Response::Error(e),
        }
    }
}
