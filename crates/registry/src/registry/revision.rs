//! One read of the store's revision shared by every caller waiting for one: each joins a read that began after it asked, so a burst costs the store a read per round trip, not a read each.

use crate::error::RegistryError;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::watch;

/// Linearizable revision reads, shared.
///
/// A caller counts itself in, then either finds a read that began after it
/// asked already answered, or becomes the reader and reads for everyone
/// who asked before its read began; the others wait for the answer, all
/// woken at once. What a caller learns is therefore never older than a
/// read of its own would have been. A reader cancelled mid-read gives its
/// turn up and wakes the waiters, one of whom reads.
#[derive(Debug)]
pub(crate) struct SharedReads {
    /// How many callers have asked so far.
    asked: AtomicU64,
    /// Whether a read is under way.
    reading: AtomicBool,
    /// The newest read: how many askers it answers, and what it found.
    last: watch::Sender<Option<(u64, Result<i64, RegistryError>)>>,
    /// Reads made (for tests and metrics).
    reads: AtomicU64,
}

impl Default for SharedReads {
    fn default() -> Self {
        SharedReads {
            asked: AtomicU64::new(0),
            reading: AtomicBool::new(false),
            last: watch::Sender::new(None),
            reads: AtomicU64::new(0),
        }
    }
}

/// Gives the reader's turn up when dropped, read or not, and wakes those
/// waiting for it.
struct Turn<'a>(&'a SharedReads);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.reading.store(false, Ordering::SeqCst);
        self.0.last.send_modify(|_| {});
    }
}

impl SharedReads {
    /// The revision `read` gives, from a read that began after this call.
    pub(crate) async fn read<F, Fut>(&self, read: F) -> Result<i64, RegistryError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<i64, RegistryError>>,
    {
        let ticket = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let mut answers = self.last.subscribe();
        loop {
            if let Some((covers, answer)) = &*answers.borrow_and_update()
                && *covers >= ticket
            {
                return answer.clone();
            }
            if self
                .reading
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                break;
            }
            // Woken by the answer, or by a reader giving its turn up.
            let _ = answers.changed().await;
        }
        let turn = Turn(self);
        // Everyone counted by now asked before this read begins.
        let covers = self.asked.load(Ordering::SeqCst);
        self.reads.fetch_add(1, Ordering::Relaxed);
        let answer = read().await;
        self.last.send_replace(Some((covers, answer.clone())));
        drop(turn);
        answer
    }

    /// Reads made so far.
    #[cfg(test)]
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicI64;
    use std::time::Duration;

    /// A store whose revision moves on at every read, each read slow.
    #[derive(Default)]
    struct Store {
        revision: AtomicI64,
    }

    impl Store {
        async fn read(&self) -> Result<i64, RegistryError> {
            let started = self.revision.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(started)
        }
    }

    #[tokio::test]
    async fn a_burst_shares_reads_and_no_one_gets_a_read_older_than_its_call() {
        let reads = Arc::new(SharedReads::default());
        let store = Arc::new(Store::default());
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..200 {
            let (reads, store) = (Arc::clone(&reads), Arc::clone(&store));
            calls.spawn(async move {
                // The store's revision when this caller asked: its answer
                // must come from a read that began later.
                let before = store.revision.load(Ordering::SeqCst);
                let got = reads.read(|| store.read()).await.unwrap();
                assert!(
                    got > before,
                    "answered {got}, a read begun before the call ({before})"
                );
            });
            if calls.len() % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        while let Some(call) = calls.join_next().await {
            call.unwrap();
        }
        assert!(
            reads.reads() < 50,
            "{} reads for 200 callers: they were not shared",
            reads.reads()
        );
    }

    #[tokio::test]
    async fn a_failed_read_fails_its_joiners_and_the_next_caller_reads_again() {
        let reads = SharedReads::default();
        let failed = reads
            .read(|| async { Err(RegistryError::StoreUnavailable("no leader".into())) })
            .await;
        assert_eq!(
            failed,
            Err(RegistryError::StoreUnavailable("no leader".into()))
        );
        assert_eq!(reads.read(|| async { Ok(7) }).await, Ok(7));
        assert_eq!(reads.reads(), 2);
    }

    #[tokio::test]
    async fn a_cancelled_reader_leaves_the_turn_to_the_next() {
        let reads = Arc::new(SharedReads::default());
        let stuck = {
            let reads = Arc::clone(&reads);
            tokio::spawn(async move { reads.read(std::future::pending).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        stuck.abort();
        let answer = tokio::time::timeout(Duration::from_secs(30), reads.read(|| async { Ok(3) }))
            .await
            .expect("the turn was given up with the cancelled read");
        assert_eq!(answer, Ok(3));
    }
}
