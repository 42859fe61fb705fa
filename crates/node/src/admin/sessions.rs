//! Sessions of the admin page: a random 256-bit id in an `HttpOnly` cookie, mapped server-side to the principal, a CSRF token and an expiry.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use toolmesh::Principal;

/// The cookie that carries the session id.
pub(crate) const COOKIE: &str = "toolmesh_admin";
/// How long a login lasts.
pub(crate) const LIFETIME: Duration = Duration::from_secs(3600);
/// Sessions kept at most; past it the one closest to expiry goes.
const MAX_SESSIONS: usize = 1024;

/// One logged-in reader.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// Who logged in.
    pub(crate) principal: Principal,
    /// The token each form of this session must echo.
    pub(crate) csrf: String,
    expires: Instant,
    /// The policy generation at login: a reload logs everyone out, so a
    /// token taken out of the policy stops working at once.
    generation: u64,
}

/// The sessions of one admin listener.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes as 64 hex digits (from the thread's CSPRNG).
fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `a` and `b` are equal, taking the same time wherever they differ.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

impl Sessions {
    /// Opens a session for `principal` under policy `generation`; its id.
    pub(crate) fn open(&self, principal: Principal, generation: u64) -> String {
        let now = Instant::now();
        let id = random_hex();
        let session = Session {
            principal,
            csrf: random_hex(),
            expires: now + LIFETIME,
            generation,
        };
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, s| s.expires > now);
        }
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(id, _)| id.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(id.clone(), session);
        id
    }

    /// The live session `id` names under policy `generation`, if any.
    pub(crate) fn get(&self, id: &str, generation: u64) -> Option<Session> {
        let now = Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        match sessions.get(id) {
            Some(s) if s.expires > now && s.generation == generation => Some(s.clone()),
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends session `id`.
    pub(crate) fn close(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.lock().unwrap().len()
    }
}

/// The value of cookie `name` in `headers` (every `Cookie` header, any
/// order); garbage is skipped.
pub(crate) fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim())
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh_testkit::principal;

    /// Ids and CSRF tokens are 256-bit and distinct; a policy reload (new
    /// generation) ends a session; the table stays bounded.
    #[test]
    fn sessions_are_random_bounded_and_end_on_reload() {
        let sessions = Sessions::default();
        let a = sessions.open(principal("a", "t", &["operator"]), 1);
        let b = sessions.open(principal("b", "t", &["operator"]), 1);
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        let got = sessions.get(&a, 1).unwrap();
        assert_eq!(got.principal.name, "a");
        assert_ne!(got.csrf, sessions.get(&b, 1).unwrap().csrf);
        assert!(sessions.get(&a, 2).is_none(), "a reload ends the session");
        assert!(sessions.get(&a, 1).is_none(), "and it stays ended");
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.open(principal("c", "t", &["operator"]), 1);
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        sessions.close(&b);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }

    #[test]
    fn cookies_parse_past_garbage() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("cookie", "x; =; a=b".parse().unwrap());
        headers.append("cookie", "toolmesh_admin= id1 ; c=d".parse().unwrap());
        assert_eq!(cookie(&headers, COOKIE), Some("id1"));
        assert_eq!(cookie(&headers, "nope"), None);
    }
}
