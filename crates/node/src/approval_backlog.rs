//! The approval backlog as metrics: the tickets pending in the registry's
//! store (shared by every dispatcher), counted every few seconds, and how
//! long the oldest of them has waited for an approver.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;
use toolmesh::pb::{self, shared_record::Value};
use toolmesh_governance::approvals::PREFIX;
use toolmesh_governance::records::unix_ms;
use toolmesh_registry::SharedRecordsService;
use toolmesh_telemetry::MetricsRegistry;

/// How often the store's tickets are counted again.
const REFRESH: Duration = Duration::from_secs(5);

/// The last count.
#[derive(Debug, Default)]
struct Backlog {
    pending: AtomicI64,
    /// When the oldest pending ticket was requested (Unix ms; 0: none).
    oldest_requested_ms: AtomicU64,
}

/// Counts the pending tickets in `records` until `stop`, and exports the
/// count in `metrics`.
pub(crate) fn export(
    records: SharedRecordsService,
    metrics: &MetricsRegistry,
    stop: CancellationToken,
) {
    let backlog = Arc::new(Backlog::default());
    metrics.register_collector(Exported(backlog.clone()));
    tokio::spawn(stop.run_until_cancelled_owned(async move {
        loop {
            match records.list(PREFIX, false).await {
                Ok(records) => {
                    let tickets = records.into_iter().filter_map(|r| match r.value {
                        Some(Value::Ticket(ticket)) => Some(ticket),
                        _ => None,
                    });
                    let (pending, oldest) = tally(tickets, unix_ms(SystemTime::now()));
                    backlog.pending.store(pending, Ordering::Relaxed);
                    backlog
                        .oldest_requested_ms
                        .store(oldest.unwrap_or(0), Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::debug!(%error, "approval backlog not counted; keeping the last count");
                }
            }
            tokio::time::sleep(REFRESH).await;
        }
    }));
}

/// How many of `tickets` wait for an approver at `now_ms` (pending, not
/// expired), and when the oldest of them was requested.
fn tally(tickets: impl Iterator<Item = pb::ApprovalTicket>, now_ms: u64) -> (i64, Option<u64>) {
    tickets
        .filter(|t| t.state() == pb::ApprovalState::Pending && t.expires_at_ms > now_ms)
        .fold((0, None), |(count, oldest), t| {
            let oldest = Some(oldest.map_or(t.requested_at_ms, |o: u64| o.min(t.requested_at_ms)));
            (count + 1, oldest)
        })
}

/// The backlog as scraped.
#[derive(Debug)]
struct Exported(Arc<Backlog>);

impl Collector for Exported {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let pending = ConstGauge::new(self.0.pending.load(Ordering::Relaxed));
        let metric = encoder.encode_descriptor(
            "toolmesh_registry_approvals_pending",
            "Approval tickets waiting for an approver (counted every few seconds).",
            None,
            pending.metric_type(),
        )?;
        pending.encode(metric)?;
        let oldest = self.0.oldest_requested_ms.load(Ordering::Relaxed);
        let waited_ms = if oldest == 0 {
            0
        } else {
            unix_ms(SystemTime::now()).saturating_sub(oldest)
        };
        let waited = ConstGauge::new(waited_ms as f64 / 1000.0);
        let metric = encoder.encode_descriptor(
            "toolmesh_registry_approval_oldest_pending_seconds",
            "How long the oldest pending approval ticket has waited (0 when none waits).",
            None,
            waited.metric_type(),
        )?;
        waited.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh_governance::ApprovalState;
    use toolmesh_testkit::principal;

    fn ticket(
        id: &str,
        requested_at_ms: u64,
        expires_at_ms: u64,
        state: ApprovalState,
    ) -> pb::ApprovalTicket {
        let caller = principal("bot", "", &[]);
        let (state, decided_by) = match state {
            ApprovalState::Pending => (pb::ApprovalState::Pending, ""),
            ApprovalState::Approved { .. } => (pb::ApprovalState::Approved, "ann"),
            ApprovalState::Denied { .. } => (pb::ApprovalState::Denied, "ann"),
            ApprovalState::Used => (pb::ApprovalState::Used, ""),
        };
        pb::ApprovalTicket {
            id: id.into(),
            tool: "t".into(),
            version: "1.0.0".into(),
            arguments_sha256: "d".into(),
            caller: Some((&caller).into()),
            summary: String::new(),
            requested_at_ms,
            expires_at_ms,
            state: state as i32,
            decided_by: decided_by.into(),
            reason: String::new(),
        }
    }

    /// Only pending, unexpired tickets count; the oldest of them is named.
    #[test]
    fn only_live_pending_tickets_count() {
        let tickets = vec![
            ticket("a-1", 1_000, 9_000, ApprovalState::Pending),
            ticket("a-2", 500, 2_000, ApprovalState::Pending),
            ticket(
                "a-3",
                100,
                9_000,
                ApprovalState::Approved { by: "ann".into() },
            ),
            ticket("a-4", 3_000, 9_000, ApprovalState::Pending),
            ticket("a-5", 200, 9_000, ApprovalState::Used),
        ];
        assert_eq!(tally(tickets.into_iter(), 5_000), (2, Some(1_000)));
        assert_eq!(tally(std::iter::empty(), 5_000), (0, None));
    }
}
