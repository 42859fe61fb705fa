//! The canary watch: the verdict's arithmetic, and a failing canary
//! making the watch ask its control for an abort, once.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use toolmesh::pb::ToolSpec;
use toolmesh::rollout::Share;
use toolmesh::{Instance, ToolDef, ToolEntry};

fn counts(calls: u64, errors: u64) -> Counts {
    Counts { calls, errors }
}

/// The canary is judged only past `min_calls`, against the stable rate
/// (0 without calls), by more than the margin.
#[test]
fn verdicts() {
    let guard = Guard {
        max_error_margin: 0.05,
        min_calls: 20,
        window: Duration::from_secs(60),
    };
    assert_eq!(
        verdict(counts(19, 19), counts(0, 0), &guard),
        None,
        "too few calls"
    );
    assert_eq!(
        verdict(counts(20, 1), counts(100, 0), &guard),
        None,
        "5 points is not more"
    );
    assert_eq!(
        verdict(counts(20, 3), counts(100, 10), &guard),
        None,
        "15% vs 10%"
    );
    let reason = verdict(counts(20, 4), counts(0, 0), &guard).unwrap();
    assert!(
        reason.contains("20.0% (4 of 20 calls failed)") && reason.contains("5.0-point margin"),
        "{reason}"
    );
    assert!(counts_as_error(ErrorCode::DeadlineExceeded));
    assert!(!counts_as_error(ErrorCode::ToolError));
    assert!(!counts_as_error(ErrorCode::InvalidArguments));
}

#[derive(Debug, Default)]
struct Asked(AtomicUsize, Mutex<Vec<String>>);

#[tonic::async_trait]
impl RolloutControl for Arc<Asked> {
    async fn abort(
        &self,
        tool: &str,
        canary: &semver::Version,
        reason: String,
    ) -> Result<(), crate::AbortError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1
            .lock()
            .unwrap()
            .push(format!("{tool}@{canary}: {reason}"));
        Ok(())
    }
}

fn snapshot(state: RolloutState) -> Snapshot {
    let def = ToolDef::new(ToolSpec {
        name: "kb".into(),
        version: "1.0.0".into(),
        description: "Searches.".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        ..ToolSpec::default()
    })
    .unwrap();
    let mut b = Snapshot::empty("e").next();
    b.put(ToolEntry {
        def: Arc::new(def),
        instances: Arc::from(Vec::<Instance>::new()),
        disabled: None,
    });
    b.put_rollout(Rollout {
        tool: "kb".into(),
        canary: semver::Version::new(2, 0, 0),
        share: Share::from_basis_points(5000).unwrap(),
        tenants: vec![],
        principals: vec![],
        state,
        reason: String::new(),
        changed_by: "alice".into(),
        automatic: false,
        guard: Guard {
            min_calls: 5,
            ..Guard::default()
        },
        started_at_ms: 1,
        changed_at_ms: 1,
    });
    b.finish()
}

/// Five failing canary calls against healthy stable ones ask for one
/// abort; tools without an active rollout are not counted.
#[tokio::test]
async fn a_failing_canary_is_reported_once() {
    let asked = Arc::new(Asked::default());
    let watch = CanaryWatch::new(Some(Arc::new(asked.clone())));
    let active = snapshot(RolloutState::Active);
    let (v1, v2) = (semver::Version::new(1, 0, 0), semver::Version::new(2, 0, 0));
    for _ in 0..10 {
        watch.record(&active, "kb", &v1, ErrorCode::Unspecified);
    }
    for _ in 0..8 {
        watch.record(&active, "kb", &v2, ErrorCode::Unavailable);
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(asked.0.load(Ordering::SeqCst), 1, "asked once");
    let said = asked.1.lock().unwrap()[0].clone();
    assert!(
        said.starts_with("kb@2.0.0: canary kb@2.0.0 failed: its error rate was 100.0% (5 of 5"),
        "{said}"
    );
    let aborted = snapshot(RolloutState::Aborted);
    watch.record(&aborted, "kb", &v2, ErrorCode::Unavailable);
    assert!(
        watch.tools.lock().unwrap().contains_key("kb"),
        "kept while the rollout exists"
    );
    let empty = Snapshot::empty("e");
    watch.record(&empty, "kb", &v2, ErrorCode::Unavailable);
    assert_eq!(asked.0.load(Ordering::SeqCst), 1);
}
