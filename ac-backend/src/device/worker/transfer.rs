//! The backend's side of a bulk copy through a worker: pieces of up to [`PIECE`] bytes, up to
//! [`IN_FLIGHT`] of them on their way at once (the network hands over pieces as small as a TLS
//! record; a round trip each would bound the copy). A piece lies in a slot of the copy's bay of
//! the shared region ([`super::shared`]) when the copy got one; otherwise it is a frame's
//! payload on the pipe.
//!
//! Both sides are called from async code (`network/bulk/`). Every wait here (for the answer of a
//! piece in flight, for a piece asked ahead, for room in the pipe to the worker) goes through
//! [`blocking`], once per piece, not per byte handed over: a copy that waits for a slow device
//! gives its Tokio worker thread's other tasks (other sessions' calls, the network) to another
//! thread first.

use std::collections::VecDeque;
use std::sync::mpsc::Receiver;

use ac_proto::backend::{ErrorKind, WireError};
use bytes::Bytes;

use super::shared::{Bay, IN_FLIGHT, PIECE};
use super::wire::{expect_done, Call, Shared};
use super::{wait, Answer, WorkerContext};
use crate::device::{blocking, DeviceResult, Download, Feed, Upload};

/// A free bay of `context`'s region, if it has one.
fn take_bay(context: &WorkerContext) -> Option<Bay> {
    context.bays.as_ref().and_then(|bays| bays.take())
}

/// Frees `bay` once `answers` have come: until then the worker may still read or write its
/// slots for a copy given up halfway, and another copy must not get them.
fn free_after(bay: Option<Bay>, answers: Vec<Receiver<Answer>>) {
    let Some(bay) = bay else { return };
    if answers.is_empty() {
        return;
    }
    // The answers come as the worker gets through the copy's calls, or all at once when it ends.
    let waited = std::thread::Builder::new().name("ac-worker-bay".into()).spawn(move || {
        for answer in answers {
            let _ = answer.recv();
        }
        drop(bay);
    });
    if let Err(e) = waited {
        // Without a thread to wait, the bay stays taken: the session's copies use the pipe.
        tracing::debug!("cannot free a bay of shared memory: {e}");
    }
}

/// A bulk upload: pieces that follow each other are gathered into one piece.
pub(super) struct WorkerUpload<'a> {
    context: &'a WorkerContext,
    transfer: u32,
    /// The slots the pieces go through, or none (the pipe).
    bay: Option<Bay>,
    /// The piece being gathered, when it goes through the pipe.
    piece: Vec<u8>,
    /// Pieces sent: the one being gathered is piece `sent` of the copy (which picks its slot).
    sent: u64,
    /// Bytes gathered, to land `gathered_at` bytes from the copy's start.
    gathered: usize,
    gathered_at: u64,
    in_flight: VecDeque<Receiver<Answer>>,
    finished: bool,
}

impl<'a> WorkerUpload<'a> {
    /// Upload `transfer`, which the worker has started, through a bay if one is free.
    pub(super) fn new(context: &'a WorkerContext, transfer: u32) -> Self {
        let bay = take_bay(context);
        let piece = if bay.is_some() { Vec::new() } else { Vec::with_capacity(PIECE) };
        Self {
            context,
            transfer,
            bay,
            piece,
            sent: 0,
            gathered: 0,
            gathered_at: 0,
            in_flight: VecDeque::new(),
            finished: false,
        }
    }

    /// Copies as much of `data` as the piece has room for behind what is gathered; how much.
    fn gather(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(PIECE - self.gathered);
        match self.slot_room(n) {
            Some(room) => room.copy_from_slice(&data[..n]),
            None => self.piece.extend_from_slice(&data[..n]),
        }
        n
    }

    /// The next `n` bytes of the slot of the piece being gathered (`n` fits it), or `None`
    /// when the copy goes through the pipe.
    fn slot_room(&mut self, n: usize) -> Option<&mut [u8]> {
        let bay = self.bay.as_ref()?;
        // SAFETY: the slot of the piece being gathered: the call of the piece before it in this
        // slot was answered before this piece's first byte (`send_gathered` keeps at most
        // IN_FLIGHT in flight, and a bay has one slot more), and no other slice of it lives
        // (the room borrows the upload until it is filled and committed).
        #[allow(unsafe_code)]
        let slot = unsafe { bay.slot(bay.slot_for(self.sent), self.gathered + n) };
        Some(&mut slot[self.gathered..])
    }

    /// Gathers from `at` on: what is gathered is sent first unless `at` follows it.
    fn gather_at(&mut self, at: u64) -> DeviceResult<()> {
        if at != self.gathered_at + self.gathered as u64 {
            self.send_gathered()?;
            self.gathered_at = at;
        }
        Ok(())
    }

    /// `n` more bytes are gathered: the piece is sent once full.
    fn add_gathered(&mut self, n: usize) -> DeviceResult<()> {
        self.gathered += n;
        if self.gathered == PIECE {
            self.send_gathered()?;
        }
        Ok(())
    }

    /// Sends what is gathered, waiting first for the oldest piece when enough are in flight.
    fn send_gathered(&mut self) -> DeviceResult<()> {
        if self.gathered == 0 {
            return Ok(());
        }
        blocking(|| self.send_piece())
    }

    /// [`Self::send_gathered`]'s work, which may wait.
    fn send_piece(&mut self) -> DeviceResult<()> {
        if self.in_flight.len() >= IN_FLIGHT {
            self.wait_oldest()?;
        }
        let (transfer, at) = (self.transfer, self.gathered_at);
        let shared = self.bay.as_ref().map(|bay| Shared { slot: bay.slot_for(self.sent), len: self.gathered as u32 });
        let answer = self.context.ask(&Call::UploadPiece { transfer, at, shared }, &self.piece)?;
        self.in_flight.push_back(answer);
        self.piece.clear();
        self.sent += 1;
        self.gathered_at += self.gathered as u64;
        self.gathered = 0;
        Ok(())
    }

    fn wait_oldest(&mut self) -> DeviceResult<()> {
        match self.in_flight.pop_front() {
            Some(answer) => wait(&answer).and_then(|(reply, _)| expect_done(reply)),
            None => Ok(()),
        }
    }
}

impl Upload for WorkerUpload<'_> {
    fn push(&mut self, at: u64, mut data: &[u8]) -> DeviceResult<()> {
        self.gather_at(at)?;
        while !data.is_empty() {
            let n = self.gather(data);
            data = &data[n..];
            self.add_gathered(n)?;
        }
        Ok(())
    }

    /// Rooms in the bay's slots; a copy through the pipe has none.
    fn feed(&self) -> Feed {
        if self.bay.is_some() {
            Feed::Rooms
        } else {
            Feed::Pieces
        }
    }

    /// The rest of the slot being gathered.
    fn room(&mut self, at: u64, max: usize) -> DeviceResult<&mut [u8]> {
        self.gather_at(at)?;
        let n = max.min(PIECE - self.gathered);
        self.slot_room(n).ok_or_else(|| WireError::new(ErrorKind::Internal, "a copy through the pipe has no rooms"))
    }

    fn commit(&mut self, len: usize) -> DeviceResult<()> {
        self.add_gathered(len)
    }

    fn finish(mut self: Box<Self>) -> DeviceResult<()> {
        blocking(|| {
            let mut first_error = self.send_gathered();
            while !self.in_flight.is_empty() {
                first_error = first_error.and(self.wait_oldest());
            }
            self.finished = true;
            first_error.and(self.context.call_done(&Call::UploadFinish { transfer: self.transfer }, &[]))
        })
    }
}

impl Drop for WorkerUpload<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.context.release(&Call::TransferEnd { transfer: self.transfer });
        }
        free_after(self.bay.take(), self.in_flight.drain(..).collect());
    }
}

/// A bulk download, read from the worker in pieces asked for ahead of the caller, and handed
/// out in whatever sizes the caller asks for.
pub(super) struct WorkerDownload<'a> {
    context: &'a WorkerContext,
    transfer: u32,
    /// The slots the pieces come through, or none (the pipe).
    bay: Option<Bay>,
    /// Bytes of the copy not yet asked of the worker.
    unasked: u64,
    /// Pieces asked for: the next one is piece `asked` of the copy (which picks its slot).
    asked: u64,
    /// Pieces asked for and not yet handed out: the answer, the slot and the length.
    ahead: VecDeque<(Receiver<Answer>, Option<u32>, usize)>,
    /// The piece being handed out.
    ready: Ready,
}

/// The piece a download is handing out.
enum Ready {
    /// Bytes that came through the pipe.
    Payload(Bytes),
    /// The bytes `at..end` of a slot.
    Slot { slot: u32, at: usize, end: usize },
}

impl<'a> WorkerDownload<'a> {
    /// Download `transfer` of `len` bytes, which the worker has started, through a bay if one
    /// is free.
    pub(super) fn new(context: &'a WorkerContext, transfer: u32, len: u64) -> Self {
        let bay = take_bay(context);
        let ready = Ready::Payload(Bytes::new());
        Self { context, transfer, bay, unasked: len, asked: 0, ahead: VecDeque::new(), ready }
    }

    /// Keeps [`IN_FLIGHT`] pieces asked for, while the copy has bytes left to ask.
    fn ask_ahead(&mut self) -> DeviceResult<()> {
        while self.ahead.len() < IN_FLIGHT && self.unasked > 0 {
            let len = self.unasked.min(PIECE as u64);
            let slot = self.bay.as_ref().map(|bay| bay.slot_for(self.asked));
            let answer = self.context.ask(&Call::DownloadNext { transfer: self.transfer, len, slot }, &[])?;
            self.ahead.push_back((answer, slot, len as usize));
            self.asked += 1;
            self.unasked -= len;
        }
        Ok(())
    }

    /// Makes sure some bytes are ready; waits (through [`blocking`]) only to ask for pieces or
    /// for one to come.
    fn receive(&mut self) -> DeviceResult<()> {
        let may_ask = self.ahead.len() < IN_FLIGHT && self.unasked > 0;
        if self.ready_len() > 0 && !may_ask {
            return Ok(());
        }
        blocking(|| self.receive_now())
    }

    /// [`Self::receive`]'s work, which may wait.
    fn receive_now(&mut self) -> DeviceResult<()> {
        self.ask_ahead()?;
        if self.ready_len() == 0 {
            let Some((answer, slot, len)) = self.ahead.pop_front() else {
                return Err(WireError::new(ErrorKind::OutOfBounds, "read past the end of the copy"));
            };
            let (reply, payload) = wait(&answer)?;
            expect_done(reply)?;
            self.ready = match slot {
                Some(slot) => Ready::Slot { slot, at: 0, end: len },
                None => Ready::Payload(Bytes::from(payload)),
            };
            // Asked only now: the slot of the piece handed out before this one is free again.
            self.ask_ahead()?;
        }
        Ok(())
    }

    fn ready_len(&self) -> usize {
        match &self.ready {
            Ready::Payload(bytes) => bytes.len(),
            Ready::Slot { at, end, .. } => end - at,
        }
    }

    /// Hands up to `most` ready bytes to `put`, where they lie; how many.
    fn hand_ready(&mut self, most: usize, put: &mut dyn FnMut(&[u8])) -> usize {
        let n = self.ready_len().min(most);
        match (&mut self.ready, &self.bay) {
            (Ready::Payload(bytes), _) => put(&bytes.split_to(n)),
            (Ready::Slot { slot, at, .. }, Some(bay)) => {
                // SAFETY: the slot's piece was answered, and the slot is asked again only after
                // this piece is handed out (`receive`); the slice ends here.
                #[allow(unsafe_code)]
                let piece = unsafe { bay.slot(*slot, *at + n) };
                put(&piece[*at..]);
                *at += n;
            }
            (Ready::Slot { .. }, None) => unreachable!("a slot is only ever ready through a bay"),
        }
        n
    }
}

impl Download for WorkerDownload<'_> {
    fn next(&mut self, len: usize) -> DeviceResult<Bytes> {
        self.receive()?;
        if let Ready::Payload(bytes) = &mut self.ready {
            if len <= bytes.len() {
                return Ok(bytes.split_to(len));
            }
        }
        let mut out = vec![0u8; len];
        self.next_into(&mut out)?;
        Ok(Bytes::from(out))
    }

    /// Straight out of the shared slots (or the pipe's payload), where a lane seals them.
    fn next_with(&mut self, len: usize, take: &mut dyn FnMut(&[u8])) -> DeviceResult<()> {
        let mut handed = 0;
        while handed < len {
            self.receive()?;
            handed += self.hand_ready(len - handed, take);
        }
        Ok(())
    }
}

impl Drop for WorkerDownload<'_> {
    fn drop(&mut self) {
        self.context.release(&Call::TransferEnd { transfer: self.transfer });
        free_after(self.bay.take(), self.ahead.drain(..).map(|(answer, ..)| answer).collect());
    }
}
