//! The shared records of a `serve` node's own dispatcher: its registry's, without a gRPC hop (governance's rules run in the dispatcher either way).

use std::time::Duration;
use toolmesh::pb;
use toolmesh_governance::{RecordStore, RecordsError};
use toolmesh_registry::{RegistryError, SharedRecordsService};

/// The registry's shared records, in this process.
pub(crate) struct RegistryRecords(pub(crate) SharedRecordsService);

/// A store error as the dispatcher reads it: the status the registry's
/// gRPC edge would answer with, so both paths say the same.
fn refused(error: RegistryError) -> RecordsError {
    tonic::Status::from(error).into()
}

#[tonic::async_trait]
impl RecordStore for RegistryRecords {
    async fn list(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<pb::SharedRecord>, RecordsError> {
        self.0.list(prefix, keys_only).await.map_err(refused)
    }

    async fn compare_and_put(
        &self,
        record: pb::SharedRecord,
        ttl: Duration,
    ) -> Result<bool, RecordsError> {
        self.0.compare_and_put(record, ttl).await.map_err(refused)
    }

    async fn delete(&self, key: &str) -> Result<(), RecordsError> {
        self.0.delete(key).await.map_err(refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;
    use toolmesh::pb::{Precondition, ToolSpec};
    use toolmesh_governance::approvals::{
        ApprovalCall, Approve, Consume, List, Request, StoredApprovals,
    };
    use toolmesh_governance::sessions::Sessions;
    use toolmesh_governance::{ApprovalError, Declared, SessionLimits};
    use toolmesh_policy::ApprovalSettings;
    use toolmesh_registry::{Registry, RegistryConfig};
    use toolmesh_testkit::principal;

    /// `edit` needs `read` of the same path first.
    fn needs_read() -> Vec<Precondition> {
        vec![Precondition {
            tool: "read".into(),
            same_argument: "path".into(),
        }]
    }

    fn sessions() -> Sessions {
        let registry = Registry::new(RegistryConfig::default());
        let book = RegistryRecords(SharedRecordsService::new(registry));
        let limits = SessionLimits {
            facts_per_session: 3,
            sessions_per_caller: 2,
            ..SessionLimits::default()
        };
        Sessions::new(Arc::new(book), limits)
    }

    /// Session `session` reads path `n`.
    async fn read(sessions: &Sessions, session: u32, n: u32) {
        let edit = ToolSpec {
            name: "edit".into(),
            preconditions: needs_read(),
            ..ToolSpec::default()
        };
        let declared = Declared::from_specs([&edit]);
        let path = json!({ "path": n });
        sessions
            .record(
                &principal("bot", "acme", &[]),
                &format!("s{session}"),
                "read",
                &path,
                &declared,
            )
            .await
            .expect("recorded");
    }

    /// Whether session `session` may edit path `n` (it read it).
    async fn holds(sessions: &Sessions, session: u32, n: u32) -> bool {
        let path = json!({ "path": n });
        sessions
            .check(
                &principal("bot", "acme", &[]),
                &format!("s{session}"),
                "edit",
                &needs_read(),
                &path,
            )
            .await
            .is_ok()
    }

    /// A recorded fact is held by its session only; a session keeps its
    /// newest facts and a caller its newest sessions, in the registry's
    /// shared records.
    #[tokio::test]
    async fn record_check_and_caps() {
        let sessions = sessions();
        assert!(!holds(&sessions, 1, 1).await);
        read(&sessions, 1, 1).await;
        assert!(holds(&sessions, 1, 1).await);
        assert!(!holds(&sessions, 2, 1).await);
        for n in [2, 3, 4] {
            read(&sessions, 1, n).await;
        }
        assert!(
            !holds(&sessions, 1, 1).await,
            "the oldest fact goes at the cap"
        );
        for n in [2, 3, 4] {
            assert!(holds(&sessions, 1, n).await);
        }
        read(&sessions, 2, 7).await;
        read(&sessions, 3, 8).await;
        assert!(
            !holds(&sessions, 1, 2).await,
            "the least recently written session goes at the caller's cap"
        );
        assert!(holds(&sessions, 3, 8).await);
    }

    /// Two dispatchers' books over one registry: a ticket requested through
    /// one is approved through the other, and of two racing uses exactly
    /// one wins.
    #[tokio::test]
    async fn approvals_shared_and_used_once() {
        let registry = Registry::new(RegistryConfig::default());
        let book = |registry: &Registry| {
            StoredApprovals::new(Arc::new(RegistryRecords(SharedRecordsService::new(
                registry.clone(),
            ))))
        };
        let (first, second) = (book(&registry), book(&registry));
        let settings = ApprovalSettings::default();
        let approver = principal("alice", "acme", &["approver"]);
        let call = ApprovalCall {
            tool: "wipe",
            version: "1.0.0",
            args_sha256: "d",
        };
        let request = Request {
            call,
            summary: "wipe it",
        };
        let asked = first
            .call(request, &principal("bot", "acme", &[]), &settings)
            .await
            .unwrap();
        let id = asked.id.clone();
        let listed = second.call(List, &approver, &settings).await.unwrap();
        assert_eq!(listed.len(), 1);
        second
            .call(Approve { id: &id }, &approver, &settings)
            .await
            .unwrap();
        let use_it = Consume { id: &id, call };
        let bot = principal("bot", "acme", &[]);
        let (a, b) = tokio::join!(
            first.call(use_it, &bot, &settings),
            second.call(use_it, &bot, &settings),
        );
        let outcomes = [a, b];
        assert_eq!(
            outcomes.iter().filter(|o| o.is_ok()).count(),
            1,
            "{outcomes:?}"
        );
        assert!(
            outcomes
                .iter()
                .any(|o| matches!(o, Err(ApprovalError::Used { .. }))),
            "{outcomes:?}"
        );
    }
}
