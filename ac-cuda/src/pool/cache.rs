//! A memory pool's bookkeeping, with no I/O: the blocks it holds for reuse, and what it has
//! reserved and handed out (the attributes CUDA reports).
//!
//! A block freed on a stream may be handed out again on that stream at once: the stream's
//! order puts its new work after the work that used it. On any other stream it waits until the
//! free is known done ("settled": a synchronization of its stream or of the device that began
//! after the free; frees are numbered, so one made while a synchronization was under way is not
//! settled by it). That is
//! CUDA's rule with none of its optional reuse (event dependencies, opportunistic reuse), which
//! it permits but never requires.

/// Pool memory is handed out in multiples of this many bytes, so that blocks of nearby sizes
/// serve each other.
pub const GRANULE: u64 = 512;

/// The capacity a block for `bytes` bytes gets, or `None` past the address space.
pub fn capacity_for(bytes: u64) -> Option<u64> {
    bytes.checked_next_multiple_of(GRANULE)
}

/// One block the pool holds for reuse.
#[derive(Debug)]
struct Cached<B> {
    block: B,
    capacity: u64,
    /// The stream whose order its free is in; `None` once the free is known done.
    freed_on: Option<usize>,
    /// The free's number, in the order frees were made.
    freed_at: u64,
}

/// Blocks held for reuse and the pool's counters.
#[derive(Debug)]
pub struct Cache<B> {
    cached: Vec<Cached<B>>,
    /// Bytes of every block the pool has: handed out and held.
    reserved: u64,
    /// Bytes of the blocks handed out.
    used: u64,
    reserved_high: u64,
    used_high: u64,
}

impl<B> Default for Cache<B> {
    fn default() -> Self {
        Self { cached: Vec::new(), reserved: 0, used: 0, reserved_high: 0, used_high: 0 }
    }
}

/// The counters `CU_MEMPOOL_ATTR_{RESERVED,USED}_MEM_{CURRENT,HIGH}` report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Bytes the pool holds, handed out or not.
    pub reserved: u64,
    /// The most it held since the mark was last reset.
    pub reserved_high: u64,
    /// Bytes handed out.
    pub used: u64,
    /// The most handed out since the mark was last reset.
    pub used_high: u64,
}

impl<B> Cache<B> {
    /// The held block that `capacity` bytes on `stream` may reuse, handed out: one the stream
    /// may reach (settled, or freed on that stream), of at least `capacity` bytes and at most
    /// twice that (a larger one would waste more than it serves), the smallest such.
    pub fn take(&mut self, capacity: u64, stream: usize) -> Option<(B, u64)> {
        let fits = |c: &Cached<B>| {
            c.capacity >= capacity && c.capacity <= capacity.saturating_mul(2) && c.freed_on.is_none_or(|s| s == stream)
        };
        let (at, _) = self.cached.iter().enumerate().filter(|(_, c)| fits(c)).min_by_key(|(_, c)| c.capacity)?;
        let taken = self.cached.swap_remove(at);
        self.used += taken.capacity;
        self.used_high = self.used_high.max(self.used);
        Some((taken.block, taken.capacity))
    }

    /// A new block of `capacity` bytes joined the pool, handed out.
    pub fn grown(&mut self, capacity: u64) {
        self.reserved += capacity;
        self.used += capacity;
        self.reserved_high = self.reserved_high.max(self.reserved);
        self.used_high = self.used_high.max(self.used);
    }

    /// A handed-out block came back by free number `freed_at`, freed in `freed_on`'s order
    /// (`None`: its work is done).
    pub fn give_back(&mut self, block: B, capacity: u64, freed_on: Option<usize>, freed_at: u64) {
        self.used -= capacity;
        self.cached.push(Cached { block, capacity, freed_on, freed_at });
    }

    /// A handed-out block left the pool for good (freed back to the device).
    pub fn shrunk(&mut self, capacity: u64) {
        self.used -= capacity;
        self.reserved -= capacity;
    }

    /// The work of `stream` (`None`: of every stream) queued before free number `before` is
    /// known done: its frees numbered below that are settled.
    pub fn settle(&mut self, stream: Option<usize>, before: u64) {
        let covered = |c: &Cached<B>| (stream.is_none() || c.freed_on == stream) && c.freed_at < before;
        for c in self.cached.iter_mut().filter(|c| covered(c)) {
            c.freed_on = None;
        }
    }

    /// Held blocks to free back to the device, largest first, while the pool reserves more
    /// than `threshold` bytes (the release threshold at a synchronization).
    pub fn release_over(&mut self, threshold: u64) -> Vec<B> {
        self.release_while(|reserved, _| reserved > threshold)
    }

    /// Held blocks to free back to the device, largest first, that leave the pool at least
    /// `keep` bytes (`cuMemPoolTrimTo`).
    pub fn trim_to(&mut self, keep: u64) -> Vec<B> {
        self.release_while(|reserved, capacity| reserved - capacity >= keep)
    }

    /// Every held block (the device is out of memory, or the pool is destroyed).
    pub fn release_all(&mut self) -> Vec<B> {
        self.release_while(|_, _| true)
    }

    fn release_while(&mut self, mut release: impl FnMut(u64, u64) -> bool) -> Vec<B> {
        self.cached.sort_by_key(|c| std::cmp::Reverse(c.capacity));
        let mut kept = Vec::new();
        let mut released = Vec::new();
        for c in self.cached.drain(..) {
            if release(self.reserved, c.capacity) {
                self.reserved -= c.capacity;
                released.push(c.block);
            } else {
                kept.push(c);
            }
        }
        self.cached = kept;
        released
    }

    /// Whether the pool holds nothing and has handed nothing out.
    pub fn is_empty(&self) -> bool {
        self.reserved == 0
    }

    /// The pool's counters.
    pub fn counters(&self) -> Counters {
        Counters {
            reserved: self.reserved,
            reserved_high: self.reserved_high,
            used: self.used,
            used_high: self.used_high,
        }
    }

    /// Resets the high-water mark of reserved bytes to what is reserved now.
    pub fn reset_reserved_high(&mut self) {
        self.reserved_high = self.reserved;
    }

    /// Resets the high-water mark of bytes handed out to what is handed out now.
    pub fn reset_used_high(&mut self) {
        self.used_high = self.used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM_A: usize = 0x10;
    const STREAM_B: usize = 0x20;

    #[test]
    fn a_free_is_reused_at_once_on_its_stream_and_on_another_once_settled() {
        let mut cache = Cache::default();
        cache.grown(1024);
        cache.give_back("block", 1024, Some(STREAM_A), 1);
        assert!(cache.take(1024, STREAM_B).is_none(), "reused on a stream that may still be using it");
        assert_eq!(cache.take(1024, STREAM_A), Some(("block", 1024)));
        cache.give_back("block", 1024, Some(STREAM_A), 1);
        cache.settle(Some(STREAM_B), 2);
        assert!(cache.take(1024, STREAM_B).is_none(), "another stream's synchronization settled it");
        cache.settle(Some(STREAM_A), 1);
        assert!(cache.take(1024, STREAM_B).is_none(), "a synchronization begun before the free settled it");
        cache.settle(Some(STREAM_A), 2);
        assert_eq!(cache.take(1024, STREAM_B), Some(("block", 1024)));
    }

    #[test]
    fn the_smallest_block_that_fits_is_taken_and_none_over_twice_the_size() {
        let mut cache = Cache::default();
        for (block, capacity) in [("big", 8192), ("small", 512), ("middle", 2048), ("fit", 1536)] {
            cache.grown(capacity);
            cache.give_back(block, capacity, None, 0);
        }
        assert_eq!(cache.take(1024, STREAM_A), Some(("fit", 1536)));
        assert_eq!(cache.take(1024, STREAM_A), Some(("middle", 2048)));
        assert_eq!(cache.take(1024, STREAM_A), None, "an 8 KiB block handed out for 1 KiB");
        assert_eq!(cache.take(4096, STREAM_A), Some(("big", 8192)));
    }

    #[test]
    fn counters_follow_blocks_handed_out_and_back_and_high_marks_reset() {
        let mut cache = Cache::default();
        cache.grown(1024);
        cache.grown(4096);
        cache.give_back("a", 1024, None, 0);
        assert_eq!(cache.counters(), Counters { reserved: 5120, reserved_high: 5120, used: 4096, used_high: 5120 });
        cache.reset_used_high();
        assert_eq!(cache.counters().used_high, 4096);
        cache.shrunk(4096);
        cache.reset_reserved_high();
        assert_eq!(cache.counters(), Counters { reserved: 1024, reserved_high: 1024, used: 0, used_high: 4096 });
        assert!(!cache.is_empty());
        assert_eq!(cache.release_all(), vec!["a"]);
        assert!(cache.is_empty());
    }

    #[test]
    fn releases_keep_what_the_threshold_and_trim_ask_for() {
        let filled = || {
            let mut cache = Cache::default();
            for (block, capacity) in [("1k", 1024), ("4k", 4096), ("2k", 2048)] {
                cache.grown(capacity);
                cache.give_back(block, capacity, Some(STREAM_A), 0);
            }
            cache
        };
        // Over a threshold: the largest go until no more than it is held.
        let mut cache = filled();
        assert_eq!(cache.release_over(3100), vec!["4k"]);
        assert_eq!(cache.counters().reserved, 3072);
        assert_eq!(cache.release_over(3000), vec!["2k"], "3 KiB held over a threshold of 3000 bytes");
        cache.grown(2048);
        cache.give_back("2k", 2048, None, 0);
        assert_eq!(cache.release_over(u64::MAX), Vec::<&str>::new());
        assert_eq!(cache.release_over(0), vec!["2k", "1k"]);
        // A trim never goes under what it keeps.
        let mut cache = filled();
        assert_eq!(cache.trim_to(3000), vec!["4k"]);
        assert_eq!(cache.trim_to(2000), vec!["1k"], "the 2 KiB block would leave 1 KiB");
        assert_eq!(cache.counters().reserved, 2048);
        assert_eq!(cache.trim_to(0), vec!["2k"]);
    }

    #[test]
    fn capacities_are_whole_granules() {
        assert_eq!(capacity_for(1), Some(GRANULE));
        assert_eq!(capacity_for(GRANULE), Some(GRANULE));
        assert_eq!(capacity_for(GRANULE + 1), Some(2 * GRANULE));
        assert_eq!(capacity_for(u64::MAX), None);
    }
}
