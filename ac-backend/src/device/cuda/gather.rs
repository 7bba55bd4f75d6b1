//! The bookkeeping of a pipelined host-to-device copy, with no CUDA in it: which staging buffer
//! each piece goes into, when a buffer is full and its DMA is queued, and when a buffer must be
//! waited for before it is refilled. `staging::PinnedUpload` carries the steps out; the tests
//! here check them against a model of the buffers and the device memory.

/// One thing to do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Wait until the last DMA out of this buffer has completed: it is about to be refilled.
    Wait(usize),
    /// Copy `len` bytes of the piece, starting `from` bytes into it, into buffer `slot` at `into`.
    Fill {
        /// The buffer.
        slot: usize,
        /// Offset in the buffer.
        into: usize,
        /// Offset in the piece.
        from: usize,
        /// Bytes.
        len: usize,
    },
    /// Queue the DMA of the first `len` bytes of buffer `slot` to offset `at` of the copy.
    Dma {
        /// The buffer.
        slot: usize,
        /// Offset in the copy.
        at: u64,
        /// Bytes.
        len: usize,
    },
}

/// Gathers the pieces of one copy into a ring of `slots` buffers of `chunk` bytes.
#[derive(Debug, Clone)]
pub struct Gather {
    chunk: usize,
    slots: usize,
    /// Whether a buffer whose DMA was queued must be waited for before it is refilled (pinned
    /// buffers); a pageable buffer is staged by the driver during the call and reusable at once.
    wait_before_reuse: bool,
    current: usize,
    start: u64,
    filled: usize,
    open: bool,
    used: usize,
}

impl Gather {
    /// A ring of `slots` (at least 1) buffers of `chunk` bytes.
    pub fn new(chunk: usize, slots: usize, wait_before_reuse: bool) -> Self {
        assert!(chunk > 0 && slots > 0, "a copy needs at least one buffer");
        Self { chunk, slots, wait_before_reuse, current: 0, start: 0, filled: 0, open: false, used: 0 }
    }

    /// The steps for a piece of `len` bytes landing `at` bytes into the copy.
    pub fn push(&mut self, mut at: u64, len: usize, steps: &mut Vec<Step>) {
        let mut from = 0;
        while from < len {
            let (slot, into, n) = self.reserve(at, len - from, steps);
            steps.push(Step::Fill { slot, into, from, len: n });
            self.commit(n, steps);
            from += n;
            at += n as u64;
        }
    }

    /// Where the next bytes of a piece landing `at` bytes into the copy go, filled in place by
    /// the caller instead of copied from a piece: the steps to take first (the DMA of a buffer
    /// the piece does not continue, a wait before a buffer is refilled), then the buffer, the
    /// offset in it and how many bytes fit there, at most `max`. [`Gather::commit`] follows.
    pub fn reserve(&mut self, at: u64, max: usize, steps: &mut Vec<Step>) -> (usize, usize, usize) {
        if self.open && at != self.start + self.filled as u64 {
            self.flush(steps);
        }
        if !self.open {
            self.open_slot(at, steps);
        }
        (self.current, self.filled, (self.chunk - self.filled).min(max))
    }

    /// `len` bytes were put where [`Gather::reserve`] said: the DMA's step once the buffer is
    /// full.
    pub fn commit(&mut self, len: usize, steps: &mut Vec<Step>) {
        self.filled += len;
        if self.filled == self.chunk {
            self.flush(steps);
        }
    }

    /// The steps that end the copy: the DMA of a partly filled buffer.
    pub fn finish(&mut self, steps: &mut Vec<Step>) {
        self.flush(steps);
    }

    fn open_slot(&mut self, at: u64, steps: &mut Vec<Step>) {
        if self.used == self.slots {
            if self.wait_before_reuse {
                steps.push(Step::Wait(self.current));
            }
        } else {
            self.used += 1;
        }
        self.start = at;
        self.filled = 0;
        self.open = true;
    }

    fn flush(&mut self, steps: &mut Vec<Step>) {
        if self.open && self.filled > 0 {
            steps.push(Step::Dma { slot: self.current, at: self.start, len: self.filled });
            self.current = (self.current + 1) % self.slots;
        }
        self.open = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs pieces through a `Gather` against a model of the buffers and the device: a buffer
    /// with a DMA in flight must not be filled before a `Wait`, and every byte must land where
    /// it belongs. Returns the device memory and the DMAs queued.
    fn run(len: usize, chunk: usize, slots: usize, pieces: &[(u64, usize)]) -> (Vec<u8>, usize) {
        run_with(len, chunk, slots, pieces, None)
    }

    /// As [`run`]; with `rooms`, each piece is filled in place instead of pushed, through rooms
    /// of at most that many bytes (`reserve`, the bytes written into the buffer, `commit`).
    fn run_with(
        len: usize,
        chunk: usize,
        slots: usize,
        pieces: &[(u64, usize)],
        rooms: Option<usize>,
    ) -> (Vec<u8>, usize) {
        let source: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut model = Model {
            device: vec![0u8; len],
            buffers: vec![vec![0u8; chunk]; slots],
            in_flight: vec![false; slots],
            dmas: 0,
        };
        let mut gather = Gather::new(chunk, slots, true);
        let mut steps = Vec::new();
        for &(at, n) in pieces {
            let Some(most) = rooms else {
                gather.push(at, n, &mut steps);
                model.apply(&mut steps, &source[at as usize..at as usize + n]);
                continue;
            };
            let mut done = 0;
            while done < n {
                let (slot, into, room) = gather.reserve(at + done as u64, most.min(n - done), &mut steps);
                model.apply(&mut steps, &[]);
                assert!(room > 0, "an empty room");
                assert!(!model.in_flight[slot], "buffer {slot} handed out while its DMA may still read it");
                let from = at as usize + done;
                model.buffers[slot][into..into + room].copy_from_slice(&source[from..from + room]);
                gather.commit(room, &mut steps);
                model.apply(&mut steps, &[]);
                done += room;
            }
        }
        gather.finish(&mut steps);
        model.apply(&mut steps, &[]);
        (model.device, model.dmas)
    }

    /// The staging buffers and the device memory, as the steps change them.
    struct Model {
        device: Vec<u8>,
        buffers: Vec<Vec<u8>>,
        in_flight: Vec<bool>,
        dmas: usize,
    }

    impl Model {
        /// Carries `steps` out; `piece` is the data the fills copy from.
        fn apply(&mut self, steps: &mut Vec<Step>, piece: &[u8]) {
            for step in steps.drain(..) {
                match step {
                    Step::Wait(slot) => self.in_flight[slot] = false,
                    Step::Fill { slot, into, from, len: n } => {
                        assert!(!self.in_flight[slot], "buffer {slot} refilled while its DMA may still read it");
                        self.buffers[slot][into..into + n].copy_from_slice(&piece[from..from + n]);
                    }
                    Step::Dma { slot, at, len: n } => {
                        assert!(n <= self.buffers[slot].len());
                        self.device[at as usize..at as usize + n].copy_from_slice(&self.buffers[slot][..n]);
                        self.in_flight[slot] = true;
                        self.dmas += 1;
                    }
                }
            }
        }
    }

    fn in_order(len: usize, piece: usize) -> Vec<(u64, usize)> {
        (0..len).step_by(piece).map(|at| (at as u64, piece.min(len - at))).collect()
    }

    #[test]
    fn packet_sized_pieces_make_one_dma_per_full_buffer() {
        let len = 10 * 4096 + 100;
        let (device, dmas) = run(len, 4096, 3, &in_order(len, 1452));
        assert_eq!(device, (0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
        assert_eq!(dmas, 11, "ten full buffers and the rest");
    }

    #[test]
    fn pieces_larger_than_a_buffer_are_split() {
        let len = 50_000;
        let (device, dmas) = run(len, 4096, 2, &in_order(len, 20_000));
        assert_eq!(device, (0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
        assert_eq!(dmas, len.div_ceil(4096));
    }

    #[test]
    fn a_gap_flushes_the_buffer_and_every_byte_still_lands() {
        // Two stripes of one copy arriving out of order (each contiguous in itself).
        let len = 9000;
        let mut pieces = in_order(len, 1000);
        pieces.swap(2, 7);
        pieces.swap(3, 5);
        let (device, _) = run(len, 2048, 2, &pieces);
        assert_eq!(device, (0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
    }

    /// Pieces of the sizes `cuts`, one after the other from the copy's start, and their total.
    fn contiguous(cuts: &[usize]) -> (Vec<(u64, usize)>, usize) {
        let mut at = 0;
        let pieces = cuts
            .iter()
            .map(|&n| {
                at += n;
                ((at - n) as u64, n)
            })
            .collect();
        (pieces, at)
    }

    proptest::proptest! {
        /// Any buffer size, ring size and cut of the copy into contiguous pieces: every byte
        /// lands, no buffer is refilled under a DMA, no DMA exceeds a buffer.
        #[test]
        fn any_cut_of_any_copy_lands_whole(
            chunk in 1usize..64,
            slots in 1usize..5,
            cuts in proptest::collection::vec(0usize..150, 0..40),
        ) {
            let (pieces, at) = contiguous(&cuts);
            let (device, _) = run(at, chunk, slots, &pieces);
            proptest::prop_assert_eq!(device, (0..at).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
        }

        /// The same, with every piece filled in place through rooms of any size: as many DMAs
        /// as when pushed, every byte lands, no buffer is handed out under a DMA.
        #[test]
        fn any_cut_filled_in_place_lands_whole(
            chunk in 1usize..64,
            slots in 1usize..5,
            cuts in proptest::collection::vec(0usize..150, 0..40),
            room in 1usize..100,
        ) {
            let (pieces, at) = contiguous(&cuts);
            let (pushed, pushed_dmas) = run(at, chunk, slots, &pieces);
            let (device, dmas) = run_with(at, chunk, slots, &pieces, Some(room));
            proptest::prop_assert_eq!(&device, &pushed);
            proptest::prop_assert_eq!(device, (0..at).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
            proptest::prop_assert_eq!(dmas, pushed_dmas);
        }
    }

    #[test]
    fn a_single_pageable_buffer_never_waits() {
        let mut gather = Gather::new(100, 1, false);
        let mut steps = Vec::new();
        gather.push(0, 350, &mut steps);
        gather.finish(&mut steps);
        assert!(!steps.iter().any(|s| matches!(s, Step::Wait(_))));
        assert_eq!(steps.iter().filter(|s| matches!(s, Step::Dma { .. })).count(), 4);
    }
}
