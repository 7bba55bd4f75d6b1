//! What time alone changes, every 200 ms: a failed store tried again, leases and walltimes
//! running out, the scheduler's deadlines and reservations' starts, ended jobs purged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::commit::STORE_RETRY;
use super::Arm;

pub(super) async fn expire_loop(arm: Arc<Arm>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        // A replica that does not lead keeps no leases and decides nothing: the leader does.
        if !arm.serves() {
            continue;
        }
        // Health turns good again once space is back, without a change to commit.
        if arm.store.trouble().is_some_and(|t| t.last.elapsed().is_ok_and(|d| d >= STORE_RETRY)) {
            arm.retry_store().await;
        }
        let expired: Vec<String> = {
            let mut leases = arm.leases.lock().expect("leases poisoned");
            let now = Instant::now();
            let gone: Vec<String> =
                leases.deadline.iter().filter(|(_, d)| **d <= now).map(|(t, _)| t.clone()).collect();
            for token in &gone {
                leases.deadline.remove(token);
            }
            gone
        };
        for token in expired {
            tracing::info!("a program's lease ran out: releasing its dynamic accelerators");
            arm.metrics.lease_expired();
            let job = arm.batch_job_for_release(&token);
            let _ = arm.mutate(|core, now| core.finalize(&token, now)).await;
            arm.record_release(job).await;
        }
        let (grace, retention) = (arm.config.walltime_grace_s, arm.config.job_retention_s);
        let _ = arm
            .mutate(|core, now| {
                for job in core.expire_walltimes(now, grace) {
                    tracing::info!(job, "walltime passed: job ended");
                }
                // A pass only when time alone decides something: a deadline or a reservation's start.
                core.tick(now);
                core.revoke_due(now);
                let purged = core.purge_ended(now, retention);
                if purged > 0 {
                    tracing::info!(purged, "ended jobs past their retention purged");
                }
                Ok(())
            })
            .await;
        arm.shrink_lent_if_returned().await;
    }
}
