//! Linking on the device's JIT linker (protocol 21): the inputs arrive as the request's payload,
//! are linked off the async threads, and the image leaves as the reply's payload.

use ac_proto::backend::jit_link::{payload_len, with_bytes, MAX_BYTES, MAX_INPUTS};
use ac_proto::backend::{ErrorKind, JitOption, LinkInput, Reply, Response, WireError};
use ac_proto::frame::{frame_bytes, FrameReader};
use bytes::Bytes;

use super::{error, Closing, Control, Halt, Outcome};
use crate::device::{DeviceResult, Linked};

impl Control {
    /// Reads a link's inputs and links them; the reply (the image, or why not) comes later.
    pub(super) async fn link(
        &mut self,
        reader: &mut FrameReader,
        inputs: Vec<LinkInput>,
        options: Vec<JitOption>,
        id: u64,
    ) -> Result<Outcome, Halt> {
        let Some(len) = payload_len(&inputs) else {
            return Err(Halt::Close(Closing::protocol("a link whose inputs announce more than 2^64 bytes")));
        };
        let (payload, permit) = self.read_inline(reader, len).await?;
        if id == 0 {
            return Ok(Outcome::Now(error(ErrorKind::InvalidArgument, "a link needs a request id to answer")));
        }
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            let why = format!("a link of {} inputs: it takes 1 to {MAX_INPUTS}", inputs.len());
            return Ok(Outcome::Now(error(ErrorKind::InvalidArgument, why)));
        }
        let (context, replies, metrics) =
            (self.session.context.clone(), self.replies.clone(), self.session.metrics.clone());
        tokio::spawn(async move {
            let linked = tokio::task::spawn_blocking(move || {
                let inputs = with_bytes(&inputs, &payload).expect("the payload read is the inputs' bytes");
                context.link(&inputs, &options)
            })
            .await
            .unwrap_or_else(|e| Err(WireError::new(ErrorKind::Internal, format!("link panicked: {e}"))))
            .and_then(within_a_reply);
            drop(permit);
            match linked {
                Ok(linked) => {
                    let response = Response::Linked { len: linked.image.len() as u64, info_log: linked.info_log };
                    let frame = frame_bytes(&Reply { id, response }).expect("reply encodes");
                    replies.send_with_payload(frame, Bytes::from(linked.image)).await;
                }
                Err(e) => {
                    let response = Response::Error(e);
                    metrics.answered(&response);
                    replies.send_frame(&Reply { id, response }).await;
                }
            }
        });
        Ok(Outcome::Later)
    }
}

// A link the SDK lets go is one the control stream takes inline (checked as it builds).
const _: () = assert!(MAX_BYTES <= super::MAX_INLINE);

/// `linked`, if its image fits a reply's payload (the SDK reads at most [`MAX_BYTES`]).
fn within_a_reply(linked: Linked) -> DeviceResult<Linked> {
    match linked.image.len() as u64 {
        len if len > MAX_BYTES => Err(WireError::new(
            ErrorKind::InvalidArgument,
            format!("the linked image of {len} bytes is past the {MAX_BYTES} a reply carries"),
        )),
        _ => Ok(linked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_past_a_replys_payload_is_refused() {
        let image = vec![0u8; MAX_BYTES as usize + 1];
        let refused = within_a_reply(Linked { image, info_log: String::new() }).unwrap_err();
        assert!(refused.message.contains("past the 67108864 a reply carries"), "{}", refused.message);
        assert!(within_a_reply(Linked { image: vec![0; MAX_BYTES as usize], info_log: String::new() }).is_ok());
    }
}
