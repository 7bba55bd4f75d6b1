//! `armctl accounting`: accelerator time per user, group or job, static and dynamic apart, in
//! the spirit of Slurm's `sreport`.

use ac_proto::arm::{Request, UsageBy, UsageRow};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// What `armctl accounting` takes.
#[derive(Debug, clap::Args)]
pub struct AccountingArgs {
    /// Start of the window (inclusive): RFC 3339 (`2026-11-24T08:00:00Z`), a date or a date and
    /// time without an offset (`2026-11-24`, `2026-11-24T08:00`: UTC), or Unix seconds. Default:
    /// the first record.
    #[arg(long, value_parser = parse_time)]
    since: Option<u64>,
    /// End of the window (exclusive), in the same forms. Default: now.
    #[arg(long, value_parser = parse_time)]
    until: Option<u64>,
    /// One row per user, group or job.
    #[arg(long, value_enum, default_value_t = By::User)]
    by: By,
}

/// The rows' key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// Per user.
    User,
    /// Per group (account).
    Group,
    /// Per job.
    Job,
}

impl AccountingArgs {
    /// The request.
    pub fn request(&self) -> Request {
        let by = match self.by {
            By::User => UsageBy::User,
            By::Group => UsageBy::Group,
            By::Job => UsageBy::Job,
        };
        Request::Accounting { since_ms: self.since, until_ms: self.until, by }
    }
}

/// A time on the command line, as Unix milliseconds.
pub fn parse_time(s: &str) -> Result<u64, String> {
    let refused = || {
        format!("`{s}` is not a time: give RFC 3339 (2026-11-24T08:00:00Z), a date (2026-11-24, UTC) or Unix seconds")
    };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().ok().and_then(|t| t.checked_mul(1000)).ok_or_else(refused);
    }
    // A date alone is its midnight; a time without an offset is UTC.
    let full = match s.len() {
        10 => format!("{s}T00:00:00Z"),
        16 => format!("{s}:00Z"),
        19 => format!("{s}Z"),
        _ => s.to_string(),
    };
    let at = OffsetDateTime::parse(&full, &Rfc3339).map_err(|_| refused())?;
    u64::try_from(at.unix_timestamp_nanos() / 1_000_000).map_err(|_| format!("`{s}` is before 1970"))
}

/// Unix milliseconds as RFC 3339 (UTC, whole seconds).
fn rfc3339(ms: u64) -> String {
    i64::try_from(ms / 1000)
        .ok()
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// The table: one row per key, accelerator-seconds static, dynamic and in all, and the total in
/// accelerator-hours; a last row adds them up.
pub fn print(since_ms: u64, until_ms: u64, rows: &[UsageRow]) {
    println!("Accelerator usage from {} to {}", rfc3339(since_ms), rfc3339(until_ms));
    println!(
        "{:<20} {:<12} {:<12} {:>14} {:>14} {:>14} {:>10}",
        "KEY", "USER", "GROUP", "STATIC ACC-S", "DYNAMIC ACC-S", "TOTAL ACC-S", "ACC-HOURS"
    );
    let line = |key: &str, user: &str, group: &str, s: u64, d: u64| {
        println!(
            "{:<20} {:<12} {:<12} {:>14.1} {:>14.1} {:>14.1} {:>10.3}",
            key,
            user,
            group,
            s as f64 / 1e3,
            d as f64 / 1e3,
            (s + d) as f64 / 1e3,
            (s + d) as f64 / 3.6e6
        );
    };
    for r in rows {
        line(&r.key, r.user.as_deref().unwrap_or("*"), r.group.as_deref().unwrap_or("*"), r.static_ms, r.dynamic_ms);
    }
    let (s, d) = rows.iter().fold((0, 0), |(s, d), r| (s + r.static_ms, d + r.dynamic_ms));
    line("TOTAL", "", "", s, d);
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times_parse_in_every_documented_form() {
        assert_eq!(parse_time("1700000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T23:13:20+01:00"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20.5Z"), Ok(1_700_000_000_500));
        assert_eq!(parse_time("2023-11-14T22:13:20"), Ok(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T22:13"), Ok(1_699_999_980_000));
        assert_eq!(parse_time("2023-11-14"), Ok(1_699_920_000_000));
        for bad in ["", "yesterday", "2023-13-01", "2023-11-14T25:00", "-5"] {
            let refused = parse_time(bad).unwrap_err();
            assert!(refused.contains("is not a time"), "{bad}: {refused}");
        }
    }
}
