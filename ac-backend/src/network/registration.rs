//! The resource manager's registration link: heartbeats and device states out, orders in
//! (revocations, stored before they are acknowledged; faults cleared; the hold time).

use std::sync::Arc;
use std::time::Duration;

use ac_proto::backend::{close, Heartbeat, Order, Reply, Report, Response, Revoke};
use ac_proto::frame::{frames_bytes, FrameReader, StreamWriter};
use futures_util::FutureExt;
use quinn::Connection;

use super::Shared;

/// The manager's next orders on a registration of protocol `version` (every one already
/// received, so that revocations are stored with one sync); `None` when the link ends.
async fn read_orders(reader: &mut FrameReader, version: u16) -> Option<Vec<Order>> {
    match version {
        ..=5 => {
            let first = reader.read_frame::<Revoke>().await.ok()??;
            let mut orders = vec![Order::Revoke(first)];
            while let Some(Ok(Some(more))) = reader.read_frame::<Revoke>().now_or_never() {
                orders.push(Order::Revoke(more));
            }
            Some(orders)
        }
        _ => {
            let first = reader.read_frame::<Order>().await.ok()??;
            let mut orders = vec![first];
            while let Some(Ok(Some(more))) = reader.read_frame::<Order>().now_or_never() {
                orders.push(more);
            }
            Some(orders)
        }
    }
}

/// Stores revocations, ends their sessions, and acknowledges them once on disk.
async fn store_revocations(shared: &Arc<Shared>, writer: &StreamWriter, batch: Vec<Revoke>) {
    let revokes: Vec<(u64, u64)> = batch.iter().map(|r| (r.capability, r.expires)).collect();
    let on_disk = shared.clone();
    let stored = tokio::task::spawn_blocking(move || on_disk.trust.revoke(&revokes))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
    for revoke in &batch {
        let ended = shared.registry.revoke(revoke.capability);
        tracing::info!(capability = revoke.capability, ended, "capability revoked");
    }
    match stored {
        // Acknowledged only once they survive a restart; otherwise the manager sends them again.
        // One write for the batch's acknowledgements: one packet where it fits.
        Ok(()) => {
            let acks = batch.iter().map(|r| Report::Revoked { capability: r.capability });
            let _ = writer.send(frames_bytes(acks).expect("encodes")).await;
        }
        Err(e) => tracing::error!(error = %e, "cannot store revocations; they hold until this process ends"),
    }
}

/// The resource manager's link: heartbeats out (with every device's state from protocol 6 on,
/// and at once when a device's health changes), revocations in, until either side goes away.
pub(super) async fn serve_registration(
    conn: Connection,
    shared: Arc<Shared>,
    send: quinn::SendStream,
    mut reader: FrameReader,
    version: u16,
) {
    let welcome = Reply { id: 0, response: Response::Devices(shared.device_infos()) };
    let writer = StreamWriter::new(send);
    if writer.send_frame(&welcome).await.is_err() {
        return;
    }
    let beat = {
        let (shared, writer) = (shared.clone(), writer.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(shared.config.heartbeat_ms));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = shared.changed.notified() => {}
                }
                // A GPU's free memory comes from NVML, which a failing GPU may keep waiting.
                let reported = shared.clone();
                let report = tokio::task::spawn_blocking(move || match version {
                    ..=5 => Report::Heartbeat(Heartbeat {
                        sessions: reported.registry.len() as u32,
                        devices: reported.device_infos(),
                    }),
                    _ => Report::Status(reported.status()),
                });
                let Ok(report) = report.await else { return };
                if writer.send_frame(&report).await.is_err() {
                    return;
                }
            }
        })
    };
    while let Some(orders) = read_orders(&mut reader, version).await {
        let mut batch = Vec::new();
        for order in orders {
            match order {
                Order::Revoke(revoke) => batch.push(revoke),
                Order::ClearFaults { index } => {
                    tracing::info!(device = index, "an admin cleared the device's faults");
                    if shared.board.lock().expect("board").clear_faults(index) {
                        shared.changed.notify_one();
                    }
                }
                Order::Hold { ms } => {
                    tracing::info!(
                        hold_ms = ms,
                        "sessions whose connection times out are held as long as the manager's lease"
                    );
                    shared.hold_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        if !batch.is_empty() {
            store_revocations(&shared, &writer, batch).await;
        }
    }
    beat.abort();
    conn.close(close::NORMAL.into(), b"registration ended");
}
