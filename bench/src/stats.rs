//! Percentiles and medians of the bench's samples. Also compiled into `tests/smoke.rs`
//! (`#[path]`), where its unit tests run (as `holdings.rs`).

use std::time::Duration;

/// p50 and p99 of samples, in microseconds.
pub fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.50), at(0.99))
}

/// The middle value of `values`, or the mean of the two middle ones of an even count (the
/// upper one alone made the median of two ratios the better of them).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let half = values.len() / 2;
    if values.len().is_multiple_of(2) && half > 0 {
        (values[half - 1] + values[half]) / 2.0
    } else {
        values[half]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_its_middle_values() {
        assert_eq!(median(vec![0.5, 1.0]), 0.75, "the better of two ratios is no median");
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![5.0]), 5.0);
    }

    #[test]
    fn percentiles_are_read_from_the_sorted_samples_in_microseconds() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        assert_eq!(percentiles(samples), (51_000.0, 99_000.0));
    }
}
