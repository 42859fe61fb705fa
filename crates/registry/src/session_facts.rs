//! Session facts every dispatcher shares: one record per (caller, session)
//! in the store's shared records, holding the digests of the facts that
//! tools' preconditions need, written with a compare on its revision and
//! forgotten after an idle time; the oldest facts and sessions go first
//! when a session or a caller is at its cap.

use crate::error::RegistryError;
use crate::rollouts::now_ms;
use crate::shared::SharedRecord;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use toolmesh::pb;

/// Where sessions live among the shared records.
const PREFIX: &str = "session/";
/// How often a write is tried again after losing a race.
const MAX_RACES: usize = 8;
/// Defaults and ceilings of what a request may ask for.
const DEFAULT_IDLE: Duration = Duration::from_secs(3600);
const MAX_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);
const DEFAULT_CAP: usize = 1_000;
const MAX_CAP: usize = 10_000;
/// Facts one request may record or ask about.
const MAX_FACTS_PER_REQUEST: usize = 256;

/// What one session's record holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    /// Fact digests, oldest first.
    facts: Vec<String>,
    /// When a fact was last recorded (ms since the epoch).
    written_ms: u64,
}

/// A checked request.
struct Exchange {
    caller: String,
    key: String,
    record: Vec<String>,
    check: Vec<String>,
    idle: Duration,
    facts_per_session: usize,
    sessions_per_caller: usize,
}

/// Records the request's facts, then answers which of the facts it asks
/// about the session holds (the `Registry.SessionFacts` RPC, and the
/// dispatcher of a `serve` node in the same process).
pub async fn exchange(
    store: &dyn Store,
    request: pb::SessionFactsRequest,
) -> Result<pb::SessionFactsResponse, RegistryError> {
    let exchange = Exchange::parse(request)?;
    let stored = if exchange.record.is_empty() {
        read(store, &exchange.key).await?.1
    } else {
        record(store, &exchange).await?
    };
    let held = exchange
        .check
        .into_iter()
        .filter(|fact| stored.facts.contains(fact))
        .collect();
    Ok(pb::SessionFactsResponse { held })
}

impl Exchange {
    fn parse(request: pb::SessionFactsRequest) -> Result<Exchange, RegistryError> {
        let bad = |what: String| Err(RegistryError::BadSessionFacts(what));
        for (name, value) in [("caller", &request.caller), ("session", &request.session)] {
            if !is_digest(value) {
                return bad(format!("{name} is not a lowercase hex SHA-256 digest"));
            }
        }
        let facts = request.record.iter().chain(&request.check);
        if let Some(fact) = facts.clone().find(|f| !is_digest(f)) {
            return bad(format!(
                "fact {fact:?} is not a lowercase hex SHA-256 digest"
            ));
        }
        if facts.count() > MAX_FACTS_PER_REQUEST {
            return bad(format!(
                "a request records and asks about at most {MAX_FACTS_PER_REQUEST} facts"
            ));
        }
        let idle = match request.idle_ms {
            0 => DEFAULT_IDLE,
            ms => Duration::from_millis(ms.into()).min(MAX_IDLE),
        };
        Ok(Exchange {
            key: format!("{PREFIX}{}/{}", request.caller, request.session),
            caller: request.caller,
            record: request.record,
            check: request.check,
            idle,
            facts_per_session: cap(request.facts_per_session),
            sessions_per_caller: cap(request.sessions_per_caller),
        })
    }
}

fn cap(asked: u32) -> usize {
    match asked {
        0 => DEFAULT_CAP,
        n => (n as usize).min(MAX_CAP),
    }
}

fn is_digest(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The session's record and its revision (0 and empty when there is none
/// or it cannot be read: a damaged record is started afresh).
async fn read(store: &dyn Store, key: &str) -> Result<(i64, Stored), RegistryError> {
    let records = store.shared_records(key).await?;
    Ok(records
        .into_iter()
        .find(|r| r.key == key)
        .map_or((0, Stored::default()), |r| {
            (
                r.revision,
                serde_json::from_slice(&r.value).unwrap_or_default(),
            )
        }))
}

/// Adds the facts to the session (dropping its oldest beyond the cap) and
/// writes it back unless nothing changed and it was written recently;
/// runs again on the fresh record when another writer got there first.
async fn record(store: &dyn Store, exchange: &Exchange) -> Result<Stored, RegistryError> {
    for _ in 0..MAX_RACES {
        let (revision, mut stored) = read(store, &exchange.key).await?;
        let mut changed = false;
        for fact in &exchange.record {
            if !stored.facts.contains(fact) {
                stored.facts.push(fact.clone());
                changed = true;
            }
        }
        let excess = stored
            .facts
            .len()
            .saturating_sub(exchange.facts_per_session);
        stored.facts.drain(..excess);
        let now = now_ms();
        // Refresh an unchanged record once per half idle time, not per call.
        let fresh = now.saturating_sub(stored.written_ms) < (exchange.idle / 2).as_millis() as u64;
        if !changed && fresh {
            return Ok(stored);
        }
        if revision == 0 {
            make_room(store, exchange).await?;
        }
        stored.written_ms = now;
        let value = serde_json::to_vec(&stored)
            .map_err(|e| RegistryError::Internal(format!("session not encoded ({e})")))?;
        if store
            .put_shared(&exchange.key, value, revision, exchange.idle)
            .await?
        {
            return Ok(stored);
        }
    }
    Err(RegistryError::Contended("the session's facts"))
}

/// Before a caller opens one more session: forgets its least recently
/// written sessions until it has room for one.
async fn make_room(store: &dyn Store, exchange: &Exchange) -> Result<(), RegistryError> {
    let mut sessions: Vec<SharedRecord> = store
        .shared_keys(&format!("{PREFIX}{}/", exchange.caller))
        .await?;
    let over = (sessions.len() + 1).saturating_sub(exchange.sessions_per_caller);
    if over == 0 {
        return Ok(());
    }
    sessions.sort_by_key(|r| r.revision);
    for victim in sessions.iter().take(over) {
        store.delete_shared(&victim.key).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Registry, RegistryConfig};

    fn digest(n: u32) -> String {
        format!("{n:064x}")
    }

    fn request(session: u32, record: &[u32], check: &[u32]) -> pb::SessionFactsRequest {
        pb::SessionFactsRequest {
            caller: digest(9_999),
            session: digest(session),
            record: record.iter().map(|n| digest(*n)).collect(),
            check: check.iter().map(|n| digest(*n)).collect(),
            idle_ms: 0,
            facts_per_session: 3,
            sessions_per_caller: 2,
        }
    }

    async fn held(store: &dyn Store, request: pb::SessionFactsRequest) -> Vec<String> {
        exchange(store, request).await.expect("exchange").held
    }

    /// A recorded fact is held by its session only; a session keeps its
    /// newest facts and a caller its newest sessions.
    #[tokio::test]
    async fn record_check_and_caps() {
        let registry = Registry::new(RegistryConfig::default());
        let store: &dyn Store = &registry;
        assert!(held(store, request(1, &[], &[1])).await.is_empty());
        assert_eq!(held(store, request(1, &[1], &[1])).await, [digest(1)]);
        assert!(held(store, request(2, &[], &[1])).await.is_empty());
        held(store, request(1, &[2, 3, 4], &[])).await;
        assert_eq!(
            held(store, request(1, &[], &[1, 2, 3, 4])).await,
            [digest(2), digest(3), digest(4)],
            "the oldest fact goes at the cap"
        );
        held(store, request(2, &[7], &[])).await;
        held(store, request(3, &[8], &[])).await;
        assert!(
            held(store, request(1, &[], &[2])).await.is_empty(),
            "the least recently written session goes at the caller's cap"
        );
        assert_eq!(held(store, request(3, &[], &[8])).await, [digest(8)]);
    }

    /// What is not a digest is refused with what to send.
    #[tokio::test]
    async fn refuses_what_is_not_a_digest() {
        let registry = Registry::new(RegistryConfig::default());
        let mut bad = request(1, &[1], &[]);
        bad.record.push("read_file".into());
        let error = exchange(&registry, bad).await.unwrap_err();
        assert!(error.to_string().contains("not a lowercase hex"), "{error}");
        let status = tonic::Status::from(error);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
}
