//! Live policy reload: the current policy behind an `ArcSwap`, replaced on SIGHUP or when the file changes.
//!
//! A bad file never replaces a good policy: the old one stays in force and
//! the problem is logged with `tracing::error!` (and kept for
//! [`PolicyHandle::last_error`]). A call holds the `Arc<Policy>` it took
//! at its start, so a reload never changes the rules under a running call.

use arc_swap::ArcSwap;
use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};
use tokio::{sync::watch, task::JoinHandle, time::MissedTickBehavior};
use toolmesh_policy::{Policy, PolicyError};

/// How often the watcher looks at the file's modification time and length.
pub const POLL_EVERY: Duration = Duration::from_millis(500);

/// The policy in force, swappable without blocking readers.
#[derive(Debug)]
pub struct PolicyHandle {
    current: ArcSwap<Policy>,
    /// Counts the policies put in force; its receivers hear each reload.
    generation: watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

/// The task watching a policy file. Reloading stops when it is dropped.
#[must_use = "the policy file is watched only while the PolicyWatcher is kept"]
#[derive(Debug)]
pub struct PolicyWatcher {
    task: JoinHandle<()>,
}

impl Drop for PolicyWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PolicyHandle {
    /// A handle holding `policy` (generation 1).
    pub fn new(policy: Policy) -> Self {
        PolicyHandle {
            current: ArcSwap::from_pointee(policy),
            generation: watch::Sender::new(1),
            last_error: Mutex::new(None),
        }
    }

    /// Loads `path` and watches it: reloads on SIGHUP and whenever its
    /// modification time or length changes (checked every [`POLL_EVERY`]).
    /// Fails only if the first load fails. While a watcher runs, SIGHUP
    /// no longer terminates the process (Tokio installs a handler).
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn watch(
        path: impl Into<PathBuf>,
    ) -> Result<(Arc<PolicyHandle>, PolicyWatcher), PolicyError> {
        let path = path.into();
        let stamp = stamp_of(&path);
        let handle = Arc::new(PolicyHandle::new(Policy::load(&path)?));
        let watcher = PolicyWatcher {
            task: tokio::spawn(watch_loop(Arc::clone(&handle), path, stamp)),
        };
        Ok((handle, watcher))
    }

    /// Watches `path` for a handle that already holds a policy (for
    /// instance one loaded from that file). Same panics as [`watch`](Self::watch).
    pub fn spawn_watcher(self: &Arc<Self>, path: impl Into<PathBuf>) -> PolicyWatcher {
        let path = path.into();
        let stamp = stamp_of(&path);
        PolicyWatcher {
            task: tokio::spawn(watch_loop(Arc::clone(self), path, stamp)),
        }
    }

    /// The policy in force now. Keep the `Arc` for the whole call.
    pub fn current(&self) -> Arc<Policy> {
        self.current.load_full()
    }

    /// Puts `policy` in force.
    pub fn replace(&self, policy: Policy) {
        self.current.store(Arc::new(policy));
        self.generation.send_modify(|generation| *generation += 1);
        *self.errors() = None;
    }

    /// Loads `path` and puts it in force; on error the current policy stays
    /// and the error is returned (and kept for [`last_error`](Self::last_error)).
    pub fn reload_from(&self, path: &Path) -> Result<(), PolicyError> {
        match Policy::load(path) {
            Ok(policy) => {
                self.replace(policy);
                Ok(())
            }
            Err(e) => {
                *self.errors() = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// How many policies have been put in force (1 for the first).
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// The generation, changing with each policy put in force: what a
    /// caller's watch of its tools waits on (rather than looking again
    /// now and then).
    pub fn reloads(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The error of the last reload attempt, if it failed and nothing has replaced the policy since.
    pub fn last_error(&self) -> Option<String> {
        self.errors().clone()
    }

    fn errors(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_error.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Stamp = Option<(SystemTime, u64)>;

fn stamp_of(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

async fn watch_loop(handle: Arc<PolicyHandle>, path: PathBuf, mut stamp: Stamp) {
    #[cfg(unix)]
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; the policy reloads only when its file changes");
            None
        }
    };
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        #[cfg(unix)]
        let by_signal = tokio::select! {
            _ = tick.tick() => false,
            got = next_signal(&mut hangup) => {
                if !got {
                    hangup = None;
                    continue;
                }
                true
            }
        };
        #[cfg(not(unix))]
        let by_signal = {
            tick.tick().await;
            false
        };
        let now = stamp_of(&path);
        if !by_signal && now == stamp {
            continue;
        }
        let was = std::mem::replace(&mut stamp, now);
        if now.is_none() {
            if was.is_some() || by_signal {
                tracing::error!(
                    path = %path.display(),
                    "policy file is missing or unreadable; the previous policy stays in force"
                );
            }
            continue;
        }
        match handle.reload_from(&path) {
            Ok(()) => tracing::info!(
                path = %path.display(),
                generation = handle.generation(),
                trigger = if by_signal { "SIGHUP" } else { "file change" },
                "policy reloaded"
            ),
            Err(e) => tracing::error!(
                path = %path.display(),
                "policy not reloaded, the previous policy stays in force; fix the file and save it again: {e}"
            ),
        }
    }
}

/// Waits for the next SIGHUP; `false` when the signal stream ended (or there is none).
#[cfg(unix)]
async fn next_signal(signal: &mut Option<tokio::signal::unix::Signal>) -> bool {
    match signal {
        Some(s) => s.recv().await.is_some(),
        None => std::future::pending().await,
    }
}
