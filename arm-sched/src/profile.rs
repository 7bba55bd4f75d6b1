//! The availability profile: how many units are free at each future instant, as a step
//! function. Planning is count-based: which units a job gets is decided only when it starts.

use crate::Time;

/// A step function of free units. `steps[i] = (t, free)` means `free` units are free from `t`
/// until the next step's time; the last step lasts forever.
///
/// Invariant: times strictly increase, and the first step is the profile's origin ("now").
/// Counts are signed so that a reservation that overbooks (a host went down under a planned
/// job) shows as a negative count rather than wrapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    steps: Vec<(Time, i64)>,
}

impl Profile {
    /// A profile starting at `now` with `free_now` units free, and `releases` (time, units)
    /// coming back later. Releases at or before `now` count as free now.
    pub fn new(now: Time, free_now: u32, releases: impl IntoIterator<Item = (Time, u32)>) -> Self {
        let mut releases: Vec<(Time, u32)> = releases.into_iter().filter(|(_, n)| *n > 0).collect();
        releases.sort_unstable();
        let mut free = i64::from(free_now);
        let mut steps = vec![(now, free)];
        for (t, n) in releases {
            free += i64::from(n);
            let last = steps.last_mut().expect("never empty");
            if t <= last.0 {
                last.1 = free;
            } else {
                steps.push((t, free));
            }
        }
        Self { steps }
    }

    /// The origin.
    pub fn origin(&self) -> Time {
        self.steps[0].0
    }

    /// Units free at the origin.
    pub fn free_now(&self) -> i64 {
        self.steps[0].1
    }

    /// The most units ever free (at the end of time, when everything known is released).
    pub fn free_eventually(&self) -> i64 {
        self.steps.iter().map(|s| s.1).max().unwrap_or(0)
    }

    /// The index of the step that covers `t`.
    fn step_at(&self, t: Time) -> usize {
        self.steps.partition_point(|s| s.0 <= t).saturating_sub(1)
    }

    /// The earliest start, not before `from`, at which `size` units stay free for `duration`;
    /// `None` if that never happens.
    pub fn earliest(&self, size: u32, duration: Time, from: Time) -> Option<Time> {
        let size = i64::from(size);
        let mut candidate: Option<Time> = None;
        for i in self.step_at(from)..self.steps.len() {
            let (t, free) = self.steps[i];
            if free < size {
                candidate = None;
                continue;
            }
            let start = *candidate.get_or_insert(t.max(from));
            let Some(&(next, _)) = self.steps.get(i + 1) else { return Some(start) };
            if next >= start.saturating_add(duration) {
                return Some(start);
            }
        }
        None
    }

    /// The fewest units free at any instant of `[start, end)`.
    pub fn min_free(&self, start: Time, end: Time) -> i64 {
        let first = self.step_at(start);
        self.steps[first..].iter().take_while(|s| s.0 < end || s.0 <= start).map(|s| s.1).min().unwrap_or(0)
    }

    /// Whether `size` units are free for all of `[start, start + duration)`.
    pub fn fits_at(&self, start: Time, size: u32, duration: Time) -> bool {
        self.min_free(start, start.saturating_add(duration)) >= i64::from(size)
    }

    /// Ensures a step begins exactly at `t` (at or after the origin) and returns its index.
    fn split(&mut self, t: Time) -> usize {
        let i = self.step_at(t);
        if self.steps[i].0 == t {
            return i;
        }
        self.steps.insert(i + 1, (t, self.steps[i].1));
        i + 1
    }

    /// Takes `size` units over `[start, end)` (`end` may be [`Time::MAX`]: forever).
    pub fn reserve(&mut self, start: Time, end: Time, size: u32) {
        self.add(start, end, -i64::from(size));
    }

    /// Gives `size` units back over `[start, end)`.
    pub fn release(&mut self, start: Time, end: Time, size: u32) {
        self.add(start, end, i64::from(size));
    }

    fn add(&mut self, start: Time, end: Time, delta: i64) {
        let start = start.max(self.origin());
        if end <= start || delta == 0 {
            return;
        }
        let first = self.split(start);
        let last = if end == Time::MAX { self.steps.len() } else { self.split(end) };
        for step in &mut self.steps[first..last] {
            step.1 += delta;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_finds_the_first_window_long_enough() {
        // 2 free now, +2 at 10, +4 at 30.
        let p = Profile::new(0, 2, [(10, 2), (30, 4)]);
        assert_eq!(p.earliest(2, 100, 0), Some(0));
        assert_eq!(p.earliest(3, 5, 0), Some(10));
        assert_eq!(p.earliest(8, 5, 0), Some(30));
        assert_eq!(p.earliest(9, 5, 0), None);
        assert_eq!(p.earliest(3, 5, 12), Some(12));
    }

    #[test]
    fn reservations_carve_holes_that_later_jobs_go_around() {
        let mut p = Profile::new(0, 4, [(100, 4)]);
        p.reserve(10, 50, 4);
        assert_eq!(p.earliest(1, 20, 0), Some(50), "a 20 s job does not fit in [0,10)");
        assert_eq!(p.earliest(1, 10, 0), Some(0));
        assert_eq!(p.min_free(0, 100), 0);
        assert!(p.fits_at(50, 4, 1000));
        p.release(10, 50, 4);
        assert_eq!(p.min_free(0, 100), 4);
        p.reserve(20, Time::MAX, 8);
        assert_eq!(p.free_eventually(), 4);
        assert_eq!(p.earliest(1, 1, 20), None);
    }
}
