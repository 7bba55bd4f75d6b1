//! A bulk copy's stripes: how a copy is split over its carriers (lanes or QUIC connections), and
//! how the stripes of a copy over lanes run at once.
//!
//! A lane seals (host to device) or opens (device to host) every byte of its stripe in the task
//! that polls it, at about one core's worth of AES-GCM. Joined in the caller's task, the stripes
//! of one copy would take turns on one thread: on a 16-core host, 1, 4 and 8 lanes all moved
//! 17-21 Gbit/s (`BENCHMARKS.md`, stop 42). So on a multi-thread runtime [`run_at_once`] gives
//! every stripe past the first a thread of its own, scoped to the copy (the stripes borrow the
//! caller's buffer). QUIC stripes need none of this: each connection's driver task already seals
//! on a worker of its own.

use std::future::Future;
use std::ops::Range;

use ac_proto::backend::{BulkHeader, DevicePtr, Direction};
use futures_util::future::{try_join_all, AbortHandle, Abortable};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::lane::{Lanes, Slot};
use crate::Result;

/// How copies travel. The defaults are the measured choices (see `BENCHMARKS.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    /// Copies up to this size go inline on the control stream; larger ones on bulk streams.
    pub inline_max: usize,
    /// A bulk copy is striped over the connections only when each stripe gets at least this.
    pub stripe_min: usize,
    /// Ask the backend to overlap network and device copies (off only for measurements).
    pub pipelined: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        Self { inline_max: 64 << 10, stripe_min: 8 << 20, pipelined: true }
    }
}

/// Splits `len` bytes over `count` carriers (lanes or connections), in 64 KiB-aligned contiguous
/// stripes of at least `options.stripe_min` unless there is only one. Each stripe comes with the
/// header of its bulk copy: `len` bytes at `ptr` in all, the copy following position `after`.
pub(crate) fn split(
    count: usize,
    direction: Direction,
    ptr: DevicePtr,
    len: usize,
    options: &CopyOptions,
    after: u64,
) -> Vec<(Range<usize>, BulkHeader)> {
    let n = count.min(len / options.stripe_min.max(1)).max(1);
    let per = len.div_ceil(n).next_multiple_of(64 << 10);
    (0..n)
        .map(|i| (i * per).min(len)..((i + 1) * per).min(len))
        .filter(|r| !r.is_empty())
        .map(|range| {
            let at = DevicePtr { buffer: ptr.buffer, offset: ptr.offset + range.start as u64 };
            let len = range.len() as u64;
            (range, BulkHeader { direction, ptr: at, len, pipelined: options.pipelined, after })
        })
        .collect()
}

/// The lane slots for a copy of `count` stripes, and whether they are claimed already: all of
/// them when no other copy of this program holds one, else each to be waited for by its stripe.
pub(crate) fn slots(lanes: &Lanes, count: usize) -> (Vec<Slot<'_>>, bool) {
    match lanes.claim(count) {
        Some(slots) => (slots, true),
        None => ((0..count).map(Slot::Index).collect(), false),
    }
}

/// Runs a copy's lane `stripes`: on threads of their own ([`run_at_once`]) when their slots
/// were `claimed` before, else joined in the caller's task.
///
/// Why only then: a copy on threads holds the caller's task until it ends, so it must wait for
/// nothing that another copy of that same task holds. A stripe that waits for its slot could wait
/// for a copy joined with it (`join!(small, large)`), which cannot go on while the task is held:
/// such copies take turns in the task instead.
pub(crate) async fn run<F>(stripes: Vec<F>, claimed: bool) -> Result<()>
where
    F: Future<Output = Result<()>> + Send,
{
    if claimed {
        run_at_once(stripes).await
    } else {
        try_join_all(stripes).await.map(drop)
    }
}

/// Runs `stripes` to the end, each on a thread of its own where the runtime allows it (a
/// multi-thread runtime: the caller's thread takes the first, scoped threads the others), else
/// joined in the caller's task. The first error ends the others, as a join would: a stripe
/// ended halfway drops its lane, never reusing it out of step.
///
/// While the stripes run, the caller's task holds its thread (`block_in_place`: the runtime
/// moves its other tasks to other workers), so futures joined with the copy in the same task,
/// or a timeout around it, wait for it to end.
async fn run_at_once<F>(stripes: Vec<F>) -> Result<()>
where
    F: Future<Output = Result<()>> + Send,
{
    let handle = Handle::current();
    if stripes.len() < 2 || handle.runtime_flavor() != RuntimeFlavor::MultiThread {
        return try_join_all(stripes).await.map(drop);
    }
    let (aborts, stripes): (Vec<AbortHandle>, Vec<Abortable<F>>) = stripes
        .into_iter()
        .map(|stripe| {
            let (abort, registration) = AbortHandle::new_pair();
            (abort, Abortable::new(stripe, registration))
        })
        .unzip();
    // `None`: ended by another stripe's error.
    let run = |stripe: Abortable<F>| {
        let outcome = handle.block_on(stripe).ok();
        if matches!(outcome, Some(Err(_))) {
            aborts.iter().for_each(AbortHandle::abort);
        }
        outcome
    };
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let mut stripes = stripes.into_iter();
            let first = stripes.next().expect("two stripes or more");
            let others: Vec<_> = stripes.map(|stripe| scope.spawn(|| run(stripe))).collect();
            let outcomes = std::iter::once(run(first))
                .chain(others.into_iter().map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
            // A stripe is ended by another only after that one's error: there is one to report.
            let mut outcomes: Vec<Result<()>> = outcomes.flatten().collect();
            outcomes.sort_by_key(Result::is_ok);
            outcomes.into_iter().next().unwrap_or(Ok(()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    fn threads_of(count: usize) -> (Arc<Mutex<Vec<ThreadId>>>, Vec<impl Future<Output = Result<()>> + Send>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stripes = (0..count)
            .map(|_| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(std::thread::current().id());
                    // Yield once, so that a stripe is polled more than once on its thread.
                    tokio::task::yield_now().await;
                    Ok(())
                }
            })
            .collect();
        (seen, stripes)
    }

    #[test]
    fn on_a_multi_thread_runtime_each_stripe_has_its_own_thread() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (seen, stripes) = threads_of(4);
        rt.block_on(run_at_once(stripes)).unwrap();
        let mut ids = seen.lock().unwrap().clone();
        ids.sort_by_key(|id| format!("{id:?}"));
        ids.dedup();
        assert_eq!(ids.len(), 4, "four stripes on four threads");
    }

    #[test]
    fn on_a_current_thread_runtime_stripes_share_the_task() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (seen, stripes) = threads_of(3);
        rt.block_on(run_at_once(stripes)).unwrap();
        let ids = seen.lock().unwrap().clone();
        assert_eq!(ids.len(), 3);
        assert!(ids.iter().all(|id| *id == std::thread::current().id()));
    }

    #[test]
    fn the_first_error_ends_the_other_stripes_and_is_the_one_reported() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let failing = |message: &'static str| {
            Box::pin(async move { Err(Error::Setup(message.into())) })
                as std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>
        };
        // A stripe that would never end unless ended: the copy returns, so it was.
        let stuck = || Box::pin(std::future::pending()) as std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>;
        for stripes in [vec![failing("lane broke"), stuck()], vec![stuck(), failing("lane broke"), stuck()]] {
            let outcome = rt.block_on(run_at_once(stripes));
            assert!(matches!(&outcome, Err(Error::Setup(m)) if m == "lane broke"), "{outcome:?}");
        }
    }

    #[test]
    fn a_copy_splits_into_aligned_stripes_that_cover_it() {
        let options = CopyOptions::default();
        let ptr = DevicePtr { buffer: ac_proto::backend::BufferId(7), offset: 4096 };
        let len = (64 << 20) + 12345;
        let stripes = split(4, Direction::HostToDevice, ptr, len, &options, 9);
        assert_eq!(stripes.len(), 4);
        let mut next = 0;
        for (range, header) in &stripes {
            assert_eq!(range.start, next);
            assert_eq!(header.ptr.offset, 4096 + range.start as u64);
            assert_eq!(header.len, range.len() as u64);
            assert_eq!(range.start % (64 << 10), 0);
            next = range.end;
        }
        assert_eq!(next, len);
        // Under twice the minimum stripe: one stripe.
        assert_eq!(split(4, Direction::DeviceToHost, ptr, options.stripe_min + 1, &options, 0).len(), 1);
    }
}
