//! `armctl accounting`: accelerator time per user, group or job, from the store's records and
//! the core's open intervals; and the purge of records past their retention.

use std::time::Duration;

use ac_proto::arm::{ArmErrorKind, Response, UsageBy};

use super::{err, Answer, Arm};
use crate::core::accounting::summarize;
use crate::model::Usage;

/// Milliseconds since the Unix epoch: the accounting clock (the core's `now` is its seconds).
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// How often records past their retention are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

impl Arm {
    /// The rows of `[since, until)` (default: everything, up to now), by `by`.
    #[tracing::instrument(skip(self))]
    pub(super) async fn accounting(&self, since: Option<u64>, until: Option<u64>, by: UsageBy) -> Answer {
        let internal = |e: crate::ArmServerError| err(ArmErrorKind::Internal, e.to_string());
        let now_ms = unix_now_ms();
        let (since, until) = (since.unwrap_or(0), until.unwrap_or(now_ms));
        if since >= until {
            return Err(err(
                ArmErrorKind::Invalid,
                format!("an empty window: since {since} ms is not before until {until} ms"),
            ));
        }
        // The open intervals as of now, and everything closed before them made durable: an
        // interval closed meanwhile is then in the store as well, and counted once, as a record.
        let (mut open, queued): (Vec<Usage>, u64) = {
            let core = self.core.lock().expect("core poisoned");
            let queued = self.last_queued();
            (core.usage().values().filter(|u| u.start_ms < until).cloned().collect(), queued)
        };
        self.commit_through(queued).await.map_err(internal)?;
        let mut closed = self.store.usage_since(since).map_err(internal)?;
        closed.retain(|u| u.start_ms < until);
        open.retain(|o| !closed.iter().any(|c| c.accelerator == o.accelerator && c.start_ms == o.start_ms));
        let rows = summarize(closed.iter().chain(&open), by, since, until, now_ms);
        Ok(Response::Accounting { since_ms: since, until_ms: until, rows })
    }
}

/// Purges the accounting records past `accounting_retention_s` (0: kept forever), at start and
/// then hourly: the store holds a bounded window of records.
pub async fn purge_loop(arm: std::sync::Arc<Arm>) {
    let retention_ms = arm.config.accounting_retention_s.saturating_mul(1000);
    if retention_ms == 0 {
        return;
    }
    let mut tick = tokio::time::interval(PURGE_EVERY);
    loop {
        tick.tick().await;
        match arm.store.purge_usage(unix_now_ms().saturating_sub(retention_ms)) {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "accounting records past their retention purged"),
            Err(e) => tracing::warn!(error = %e, "purging old accounting records failed"),
        }
    }
}
