//! A session's context limits (protocol 11's `SetLimit`, `cuCtxSetLimit`): set on the device
//! once the work queued before has finished, as the driver does, and the device memory each
//! reserves beyond its default counted against the session's quota, as its allocations are.

use ac_proto::backend::{ContextLimit, Response};

use super::{blocking, Control};

impl Control {
    pub(super) async fn set_limit(&mut self, limit: ContextLimit, value: u64) -> Response {
        self.drain_streams().await;
        let before = self.limits.get(&limit).copied();
        let context = self.session.context.clone();
        let limited = match blocking(move || context.set_limit(limit, value)).await {
            Ok(limited) => limited,
            Err(e) => return Response::Error(e),
        };
        let reserved_before = before.map_or(0, |b| b.reserved);
        match self.session.recharge(reserved_before, limited.reserved) {
            Ok(()) => {
                self.limits.insert(limit, limited);
                Response::Limit(limited.value)
            }
            Err(over_quota) => {
                // The device holds the new value: give it the one the session had back.
                let old = before.map_or(limit.default_value(), |b| b.value);
                let context = self.session.context.clone();
                if let Err(e) = blocking(move || context.set_limit(limit, old)).await {
                    // The device keeps the new reservation: the quota counts it, over or not.
                    tracing::warn!(error = %e, "cannot set a limit back after a refusal");
                    self.session.recharge_unchecked(reserved_before, limited.reserved);
                    self.limits.insert(limit, limited);
                }
                Response::Error(over_quota)
            }
        }
    }
}
