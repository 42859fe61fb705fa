//! WatchTools: a caller's view of the tools sent whole once, then as the net
//! change of each look (O(changed names) for a new snapshot; the whole view
//! again after a policy reload or an ejection).

use crate::call::resolve;
use crate::{Dispatcher, list};
use futures_util::Stream;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use toolmesh::pb::{ToolFormat, ToolsChange};
use toolmesh::{Principal, Snapshot, ToolEntry};

/// Tools per message of the initial view: 1,000 definitions of a few KiB
/// each stay far below the 8 MiB a message may carry.
pub const WATCH_CHUNK: usize = 1_000;

/// Ejections end on their own, with no signal: while one is in force or
/// has just ended, the whole view is looked at again this often (as tool
/// health does).
const EJECTION_RECHECK: Duration = Duration::from_secs(1);

/// One tool as the caller was last sent it.
#[derive(Debug, Clone)]
struct Shown {
    /// The version listed.
    entry: Arc<ToolEntry>,
    /// The input schema the caller's grant narrows it to, if it does.
    narrowed: Option<Value>,
}

impl Shown {
    /// Whether the caller would see `other` exactly as this (another
    /// snapshot's entry with the same definition is the same to it).
    fn same_as(&self, other: &Shown) -> bool {
        let (mine, theirs) = (&self.entry.def, &other.entry.def);
        (Arc::ptr_eq(mine, theirs) || mine.spec() == theirs.spec())
            && self.narrowed == other.narrowed
    }
}

/// What wakes a watch that has sent everything it had.
enum Wake {
    /// A snapshot, a policy or an ejection changed: look at what changed.
    Changed,
    /// An ejection may have ended: look at the whole view.
    Recheck,
    /// The watch is over: the server is stopping, or nothing can change
    /// any more (the dispatcher stopped following).
    Ended,
}

/// One caller's watch of its view of the tools. Holds what it last sent
/// (the caller's view, sharing the snapshot's entries) and nothing
/// queued: a caller that reads slowly gets, when it reads again, the net
/// change against what it last received.
#[derive(Debug)]
pub struct ToolsWatch {
    dispatcher: Dispatcher,
    who: Principal,
    /// The agent session: an anonymous caller's rollout assignment is its.
    session: String,
    format: ToolFormat,
    /// The caller's view as last sent, by name.
    sent: BTreeMap<Arc<str>, Shown>,
    /// The names of the initial view not sent yet.
    unsent: VecDeque<Arc<str>>,
    /// Whether the initial view has been sent whole.
    synced: bool,
    /// The snapshot `sent` was worked out from.
    seen: Arc<Snapshot>,
    /// The policy generation and ejection count `sent` reflects.
    seen_policy: u64,
    seen_ejections: u64,
    installed: watch::Receiver<u64>,
    reloads: watch::Receiver<u64>,
    ejections: watch::Receiver<u64>,
}

impl ToolsWatch {
    /// The watch of `who`'s view in `session`, its initial view worked out.
    pub(crate) fn new(
        dispatcher: Dispatcher,
        who: Principal,
        session: &str,
        format: ToolFormat,
    ) -> Self {
        let mut installed = dispatcher.installed.clone();
        installed.borrow_and_update();
        let mut reloads = dispatcher.governance().policy.reloads();
        let mut ejections = dispatcher.pipeline.attempts.ejections.subscribe();
        let seen_policy = *reloads.borrow_and_update();
        let seen_ejections = *ejections.borrow_and_update();
        let seen = dispatcher.current_snapshot();
        let mut watch = ToolsWatch {
            seen_policy,
            seen_ejections,
            dispatcher,
            who,
            session: session.to_owned(),
            format,
            sent: BTreeMap::new(),
            unsent: VecDeque::new(),
            synced: false,
            seen: seen.clone(),
            installed,
            reloads,
            ejections,
        };
        let names = seen.names().map(Arc::from).collect();
        let (changed, _) = watch.look_at(&seen, names);
        watch.unsent = changed.into_iter().map(|e| e.0).collect();
        watch
    }

    /// The watch without its initial view, for a caller that has it
    /// already (the MCP door lists on its own and waits only for changes).
    pub fn changes_only(mut self) -> Self {
        self.unsent.clear();
        self.synced = true;
        self
    }

    /// The watch's messages as a stream, each worked out when it is asked
    /// for (so nothing queues for a reader that is slow).
    pub fn into_stream(self) -> impl Stream<Item = ToolsChange> + Send + 'static {
        futures_util::stream::unfold(self, |mut watch| async move {
            let change = watch.next().await?;
            Some((change, watch))
        })
    }

    /// The next message for the caller: the next part of its initial view,
    /// else the next change of its view, waiting for one. None once the
    /// watch is over ([`Dispatcher::end_watches`], or nothing can change
    /// any more).
    pub async fn next(&mut self) -> Option<ToolsChange> {
        if self.dispatcher.watches_ended.is_cancelled() {
            return None;
        }
        if !self.synced {
            return Some(self.initial_part());
        }
        let mut whole = false;
        loop {
            if let Some(change) = self.look(whole) {
                return Some(change);
            }
            whole = match self.wake().await {
                Wake::Changed => false,
                Wake::Recheck => true,
                Wake::Ended => return None,
            };
        }
    }

    /// The next at most [`WATCH_CHUNK`] tools of the initial view; the
    /// last part says the caller is synced.
    fn initial_part(&mut self) -> ToolsChange {
        let take = self.unsent.len().min(WATCH_CHUNK);
        let names: Vec<Arc<str>> = self.unsent.drain(..take).collect();
        let shown: Vec<(Arc<str>, Shown)> = names
            .into_iter()
            .filter_map(|name| self.sent.get(&name).map(|s| (name, s.clone())))
            .collect();
        self.synced = self.unsent.is_empty();
        self.message(&shown, Vec::new())
    }

    /// The change of the caller's view since it was last sent, if any:
    /// the names a new snapshot touched, or (`whole`, after a policy
    /// reload or an ejection) every name.
    fn look(&mut self, whole: bool) -> Option<ToolsChange> {
        self.installed.borrow_and_update();
        let policy = *self.reloads.borrow_and_update();
        let ejections = *self.ejections.borrow_and_update();
        let whole = whole || policy != self.seen_policy || ejections != self.seen_ejections;
        let current = self.dispatcher.current_snapshot();
        if !whole && Arc::ptr_eq(&current, &self.seen) {
            return None;
        }
        let names: BTreeSet<Arc<str>> = if whole {
            current
                .names()
                .map(Arc::from)
                .chain(self.sent.keys().cloned())
                .collect()
        } else {
            touched(&current, &self.seen)
        };
        self.seen_policy = policy;
        self.seen_ejections = ejections;
        let (changed, removed) = self.look_at(&current, names);
        self.seen = current;
        if changed.is_empty() && removed.is_empty() {
            return None;
        }
        Some(self.message(&changed, removed))
    }

    /// Works out how the caller sees each of `names` in `snapshot`,
    /// records it as sent, and answers those that changed and the names
    /// that left the view, both sorted.
    fn look_at(
        &mut self,
        snapshot: &Snapshot,
        names: BTreeSet<Arc<str>>,
    ) -> (Vec<(Arc<str>, Shown)>, Vec<String>) {
        let policy = self.dispatcher.governance().policy();
        let caller = resolve::caller(&self.who, &self.session);
        let exposed = resolve::exposed_in(snapshot, snapshot);
        let keep = self.dispatcher.listable(&self.who, &policy, None);
        let (mut changed, mut removed) = (Vec::new(), Vec::new());
        for name in names {
            let now = list::listed(snapshot, &name, &caller, &exposed, &keep).map(|entry| Shown {
                narrowed: list::narrowed(&policy, &self.who, entry),
                entry: entry.clone(),
            });
            match (now, self.sent.get(&name)) {
                (Some(now), Some(before)) if now.same_as(before) => {}
                (Some(now), _) => {
                    self.sent.insert(name.clone(), now.clone());
                    changed.push((name, now));
                }
                (None, Some(_)) => {
                    self.sent.remove(&name);
                    removed.push(name.to_string());
                }
                (None, None) => {}
            }
        }
        (changed, removed)
    }

    /// The message carrying `shown` (as ListTools renders them in the
    /// watch's format) and `removed`.
    fn message(&self, shown: &[(Arc<str>, Shown)], removed: Vec<String>) -> ToolsChange {
        let entries: Vec<&Arc<ToolEntry>> = shown.iter().map(|(_, s)| &s.entry).collect();
        let narrowed: Vec<Option<Value>> = shown.iter().map(|(_, s)| s.narrowed.clone()).collect();
        let rendered = list::render_narrowed(
            self.seen.version(),
            &entries,
            &narrowed,
            (self.format, false),
        );
        ToolsChange {
            snapshot_version: self.seen.version(),
            tools: rendered.tools,
            formatted: rendered.formatted,
            removed,
            synced: self.synced,
        }
    }

    /// Waits for something that may change the caller's view.
    async fn wake(&mut self) -> Wake {
        let pool = &self.dispatcher.pipeline.attempts.pool;
        let recheck = pool.ejections_recent(EJECTION_RECHECK * 2);
        tokio::select! {
            () = self.dispatcher.watches_ended.cancelled() => Wake::Ended,
            Ok(()) = self.installed.changed() => Wake::Changed,
            Ok(()) = self.reloads.changed() => Wake::Changed,
            Ok(()) = self.ejections.changed() => Wake::Changed,
            () = tokio::time::sleep(EJECTION_RECHECK), if recheck => Wake::Recheck,
            else => Wake::Ended,
        }
    }
}

/// The names whose listing may differ between `older` and `current`:
/// those whose entries changed (a diff over shared structure: O(changes))
/// and those whose rollout changed.
fn touched(current: &Snapshot, older: &Snapshot) -> BTreeSet<Arc<str>> {
    let mut names: BTreeSet<Arc<str>> = current.changed_names(older).into_iter().collect();
    let rollout_changed = |name: &str| match (current.rollout(name), older.rollout(name)) {
        (Some(now), Some(before)) => !Arc::ptr_eq(now, before),
        (now, before) => now.is_some() || before.is_some(),
    };
    for rollout in current.rollouts().chain(older.rollouts()) {
        if rollout_changed(&rollout.tool) {
            names.insert(Arc::from(rollout.tool.as_str()));
        }
    }
    names
}
