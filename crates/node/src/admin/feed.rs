//! The admin page's change feed: what each new snapshot changed (instances
//! that came, went or changed health; tools disabled or enabled; rollouts
//! started, changed, promoted or aborted), when, and who did it when known.

use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use toolmesh::Snapshot;
use toolmesh::rollout::{Rollout, RolloutState};

/// Changes kept.
const KEPT: usize = 40;
/// Switches heard of whose snapshot has not been seen yet, kept at most.
const PENDING: usize = 64;

/// One change, as the page and its JSON show it.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeView {
    /// When it happened (a rollout decision) or was seen, RFC 3339 in UTC.
    pub at: String,
    /// The same as Unix milliseconds.
    pub at_ms: u64,
    /// The first snapshot that shows it.
    pub snapshot_version: u64,
    /// What changed.
    pub what: String,
    /// Who did it, when known.
    pub by: Option<String>,
}

/// A tool switched off or on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Switch {
    tool: String,
    disabled: bool,
}

/// One change found between two snapshots.
#[derive(Debug, Clone)]
struct Change {
    at: SystemTime,
    snapshot_version: u64,
    what: String,
    by: Option<String>,
    /// Set for a tool switched off or on, whose author the registry tells
    /// apart from the snapshot.
    switch: Option<Switch>,
}

/// Who switched a tool, heard before a snapshot showed it.
#[derive(Debug)]
struct Heard {
    switch: Switch,
    version: u64,
    by: String,
}

#[derive(Debug, Default)]
struct Kept {
    /// Newest first.
    changes: VecDeque<Change>,
    pending: VecDeque<Heard>,
    /// The newest snapshot version compared.
    seen: u64,
}

/// The feed: filled by [`follow`] from the snapshots, told who switched
/// tools by the node's decision journal (whichever comes first).
#[derive(Debug, Default)]
pub(crate) struct Feed(Mutex<Kept>);

impl Feed {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The changes kept, newest first.
    pub(crate) fn recent(&self) -> Vec<ChangeView> {
        self.kept()
            .changes
            .iter()
            .map(|c| {
                let at = c.at.max(UNIX_EPOCH);
                ChangeView {
                    at: toolmesh_audit::rfc3339(at),
                    at_ms: at
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    snapshot_version: c.snapshot_version,
                    what: c.what.clone(),
                    by: c.by.clone(),
                }
            })
            .collect()
    }

    /// `by` disabled (or enabled) `tool` in snapshot `version`: names the
    /// author on the change that shows it, now or once it is seen.
    pub(crate) fn heard_switch(&self, tool: &str, disabled: bool, by: &str, version: u64) {
        let switch = Switch {
            tool: tool.to_owned(),
            disabled,
        };
        let mut kept = self.kept();
        // The oldest change at or after `version`: the first snapshot seen
        // that holds the switch.
        let shown = kept.changes.iter_mut().rev().find(|c| {
            c.snapshot_version >= version && c.by.is_none() && c.switch.as_ref() == Some(&switch)
        });
        if let Some(change) = shown {
            change.by = Some(by.to_owned());
        } else if version > kept.seen {
            if kept.pending.len() >= PENDING {
                kept.pending.pop_front();
            }
            kept.pending.push_back(Heard {
                switch,
                version,
                by: by.to_owned(),
            });
        }
    }

    /// Keeps what snapshot `version` changed.
    fn record(&self, version: u64, found: Vec<Change>) {
        let mut kept = self.kept();
        for mut change in found {
            if let Some(switch) = &change.switch
                && let Some(at) = kept
                    .pending
                    .iter()
                    .position(|h| h.version <= version && h.switch == *switch)
                && let Some(heard) = kept.pending.remove(at)
            {
                change.by = Some(heard.by);
            }
            kept.changes.push_front(change);
        }
        kept.changes.truncate(KEPT);
        kept.seen = kept.seen.max(version);
        // A switch heard of for a snapshot already compared, that showed no
        // change (the tool was already in that state), names nothing.
        kept.pending.retain(|h| h.version > version);
    }
}

/// Records, for every new snapshot `snapshots` delivers, what changed.
pub(crate) async fn follow(mut snapshots: watch::Receiver<Arc<Snapshot>>, feed: Arc<Feed>) {
    let mut before = snapshots.borrow_and_update().clone();
    while snapshots.changed().await.is_ok() {
        let after = snapshots.borrow_and_update().clone();
        feed.record(after.version(), changes(&before, &after, SystemTime::now()));
        before = after;
    }
}

/// What changed from `before` to `after`, seen at `now`.
fn changes(before: &Snapshot, after: &Snapshot, now: SystemTime) -> Vec<Change> {
    let version = after.version();
    let change = |what: String| Change {
        at: now,
        snapshot_version: version,
        what,
        by: None,
        switch: None,
    };
    let mut found = Vec::new();
    let (was, is) = (instances_of(before), instances_of(after));
    for ((tool, executor), healthy) in &is {
        match was.get(&(tool.clone(), executor.clone())) {
            None => found.push(change(format!("{tool} on {executor} registered"))),
            Some(then) if then != healthy => {
                let now = if *healthy { "healthy" } else { "unhealthy" };
                found.push(change(format!("{tool} on {executor} {now}")));
            }
            Some(_) => {}
        }
    }
    for (tool, executor) in was.keys() {
        if !is.contains_key(&(tool.clone(), executor.clone())) {
            found.push(change(format!("{tool} on {executor} gone")));
        }
    }
    let (was, is) = (switches_of(before), switches_of(after));
    for (tool, reason) in &is {
        let Some(then) = was.get(tool) else {
            continue;
        };
        if then == reason {
            continue;
        }
        let what = match reason {
            Some(reason) => format!("{tool} disabled: {reason}"),
            None => format!("{tool} enabled"),
        };
        found.push(Change {
            switch: Some(Switch {
                tool: tool.clone(),
                disabled: reason.is_some(),
            }),
            ..change(what)
        });
    }
    for rollout in after.rollouts() {
        let then = before.rollout(&rollout.tool);
        if let Some(what) = rollout_change(then.map(|r| &**r), rollout) {
            let by = Some(rollout.changed_by.clone()).filter(|b| !b.is_empty());
            let at = UNIX_EPOCH + Duration::from_millis(rollout.changed_at_ms);
            found.push(Change {
                at: if rollout.changed_at_ms > 0 { at } else { now },
                by,
                ..change(what)
            });
        }
    }
    found
}

/// Each executor's health per tool version.
fn instances_of(snapshot: &Snapshot) -> BTreeMap<(String, String), bool> {
    snapshot
        .entries()
        .flat_map(|e| {
            let label = e.def.label();
            e.instances
                .iter()
                .map(move |i| ((label.clone(), i.executor_id.to_string()), i.healthy))
        })
        .collect()
}

/// Each tool name's switch: the operator's reason while it is disabled.
fn switches_of(snapshot: &Snapshot) -> BTreeMap<String, Option<String>> {
    snapshot
        .entries()
        .map(|e| {
            (
                e.def.name().to_owned(),
                e.disabled.as_deref().map(str::to_owned),
            )
        })
        .collect()
}

/// What became of a tool's rollout, when anything did.
fn rollout_change(then: Option<&Rollout>, now: &Rollout) -> Option<String> {
    let label = now.canary_label();
    let same = then.filter(|t| t.canary == now.canary && t.started_at_ms == now.started_at_ms);
    if let Some(then) = same
        && then.state == now.state
        && then.share == now.share
    {
        return None;
    }
    Some(match now.state {
        RolloutState::Active if same.is_some() => {
            format!("rollout of {label} set to {}", now.share)
        }
        RolloutState::Active => format!("rollout of {label} started at {}", now.share),
        RolloutState::Promoted => format!("rollout of {label} promoted"),
        RolloutState::Aborted if now.automatic => {
            format!("rollout of {label} aborted automatically: {}", now.reason)
        }
        RolloutState::Aborted => format!("rollout of {label} aborted: {}", now.reason),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switched(tool: &str, disabled: bool, version: u64) -> Change {
        Change {
            at: UNIX_EPOCH,
            snapshot_version: version,
            what: format!("{tool} switched"),
            by: None,
            switch: Some(Switch {
                tool: tool.to_owned(),
                disabled,
            }),
        }
    }

    /// The author of a switch lands on the change that shows it, whether
    /// the registry tells it before or after the snapshot is compared; a
    /// switch that changed nothing names nothing.
    #[test]
    fn authors_find_their_change_in_either_order() {
        let feed = Feed::default();
        // The snapshot first (v3 covers the switch made in v2), then who.
        feed.record(3, vec![switched("a", true, 3)]);
        feed.heard_switch("a", true, "ops", 2);
        // Who first, then the snapshot.
        feed.heard_switch("b", false, "alice", 5);
        feed.record(4, vec![switched("b", true, 4)]);
        feed.record(5, vec![switched("b", false, 5)]);
        // Heard for a snapshot already compared that showed nothing.
        feed.heard_switch("c", true, "mallory", 4);
        feed.record(6, vec![switched("c", true, 6)]);
        let by: Vec<(String, Option<String>)> =
            feed.recent().into_iter().map(|c| (c.what, c.by)).collect();
        assert_eq!(
            by,
            vec![
                ("c switched".to_owned(), None),
                ("b switched".to_owned(), Some("alice".to_owned())),
                ("b switched".to_owned(), None),
                ("a switched".to_owned(), Some("ops".to_owned())),
            ]
        );
        let first = &feed.recent()[3];
        assert_eq!(first.at, "1970-01-01T00:00:00.000Z");
        assert_eq!(first.snapshot_version, 3);
    }

    /// The feed keeps the newest [`KEPT`] changes and at most [`PENDING`]
    /// unseen authors.
    #[test]
    fn stays_bounded() {
        let feed = Feed::default();
        for v in 1..=KEPT as u64 + 10 {
            feed.record(v, vec![switched("a", true, v)]);
        }
        for v in 0..PENDING as u64 + 10 {
            feed.heard_switch("z", true, "ops", 1_000 + v);
        }
        assert_eq!(feed.recent().len(), KEPT);
        assert_eq!(feed.recent()[0].snapshot_version, KEPT as u64 + 10);
        assert_eq!(feed.kept().pending.len(), PENDING);
    }

    fn rollout(state: RolloutState, percent: u32) -> Rollout {
        Rollout {
            tool: "t".into(),
            canary: semver::Version::new(2, 0, 0),
            share: toolmesh::rollout::Share::from_basis_points(percent * 100).unwrap(),
            tenants: vec![],
            principals: vec![],
            state,
            reason: "too many errors".into(),
            changed_by: "ops".into(),
            automatic: false,
            guard: toolmesh::rollout::Guard::from_pb(None),
            started_at_ms: 1,
            changed_at_ms: 2,
        }
    }

    /// Rollouts read as what an operator did to them.
    #[test]
    fn rollout_changes_read_as_decisions() {
        let active = rollout(RolloutState::Active, 25);
        assert_eq!(
            rollout_change(None, &active).unwrap(),
            "rollout of t@2.0.0 started at 25%"
        );
        assert_eq!(rollout_change(Some(&active), &active), None);
        assert_eq!(
            rollout_change(Some(&active), &rollout(RolloutState::Active, 50)).unwrap(),
            "rollout of t@2.0.0 set to 50%"
        );
        assert_eq!(
            rollout_change(Some(&active), &rollout(RolloutState::Promoted, 25)).unwrap(),
            "rollout of t@2.0.0 promoted"
        );
        let mut automatic = rollout(RolloutState::Aborted, 25);
        assert_eq!(
            rollout_change(Some(&active), &automatic).unwrap(),
            "rollout of t@2.0.0 aborted: too many errors"
        );
        automatic.automatic = true;
        assert!(
            rollout_change(Some(&active), &automatic)
                .unwrap()
                .contains("aborted automatically")
        );
        let mut again = rollout(RolloutState::Active, 10);
        again.started_at_ms = 5;
        assert_eq!(
            rollout_change(Some(&automatic), &again).unwrap(),
            "rollout of t@2.0.0 started at 10%"
        );
    }
}
