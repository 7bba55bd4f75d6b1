//! Device streams: work queued on one stream runs in order; different streams may overlap.

use ac_proto::backend::{Request, Response, StreamId};
use bytes::Bytes;

use crate::accelerator::{unexpected, Answer};
use crate::{Accelerator, Result};

/// A stream on an accelerator.
#[derive(Debug, Clone)]
pub struct Stream {
    acc: Accelerator,
    id: StreamId,
}

impl Accelerator {
    /// The session's default stream (always exists).
    pub fn default_stream(&self) -> Stream {
        Stream { acc: self.clone(), id: DEFAULT_STREAM }
    }

    /// Creates a stream.
    pub async fn create_stream(&self) -> Result<Stream> {
        match self.call(Request::StreamCreate, Bytes::new()).await? {
            Answer::Response(Response::Stream(id)) => Ok(Stream { acc: self.clone(), id }),
            other => Err(unexpected(other)),
        }
    }
}

impl Stream {
    /// The stream's id.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Waits for this stream's work; returns its first error since the last synchronize.
    pub async fn synchronize(&self) -> Result<()> {
        self.acc.call_ok(Request::Synchronize { stream: Some(self.id) }).await
    }

    /// Waits for the stream's work, then destroys it.
    pub async fn destroy(self) -> Result<()> {
        self.acc.call_ok(Request::StreamDestroy { stream: self.id }).await
    }
}

/// The default stream, for the buffer methods that take one.
pub(crate) const DEFAULT_STREAM: StreamId = StreamId(0);
