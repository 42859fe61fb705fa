//! The keys of the policy's `[[issuers]]` in health: `toolmesh.v1.Issuers` is NOT_SERVING while an issuer holds no keys, and each change is logged with the issuer and why.

use std::time::Duration;
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh_governance::Identity;
use toolmesh_identity::issuers::KeyStatus;
use toolmesh_transport::ISSUERS_HEALTH_SERVICE;

/// How often the keys' standing is looked at.
const EVERY: Duration = Duration::from_secs(1);

/// What health says of the issuers, and what the log last said of each.
#[derive(Default, PartialEq, Eq)]
struct Seen {
    /// Issuers without keys.
    without: Vec<String>,
    /// Issuers serving stale keys.
    stale: Vec<String>,
}

impl Seen {
    fn of(status: &[KeyStatus]) -> Seen {
        let named = |keep: fn(&KeyStatus) -> bool| {
            status
                .iter()
                .filter(|s| keep(s))
                .map(|s| s.issuer.clone())
                .collect()
        };
        Seen {
            without: named(|s| s.keys == 0),
            stale: named(|s| s.keys > 0 && s.stale),
        }
    }
}

/// Reports the issuers' keys on `health` until the process ends.
pub(crate) async fn report(identity: Identity, health: HealthReporter) {
    let mut seen: Option<Seen> = None;
    loop {
        let status = identity.issuer_status();
        let now = Seen::of(&status);
        if seen.as_ref() != Some(&now) {
            log_change(seen.as_ref(), &now, &status);
            let serving = if now.without.is_empty() {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            health
                .set_service_status(ISSUERS_HEALTH_SERVICE, serving)
                .await;
            seen = Some(now);
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// One line per issuer whose keys went missing, went stale, or came back.
fn log_change(before: Option<&Seen>, now: &Seen, status: &[KeyStatus]) {
    let why = |issuer: &str| {
        status
            .iter()
            .find(|s| s.issuer == issuer)
            .and_then(|s| s.last_error.clone())
            .unwrap_or_else(|| "not fetched yet".to_owned())
    };
    let was = |list: fn(&Seen) -> &Vec<String>, issuer: &String| {
        before.is_some_and(|b| list(b).contains(issuer))
    };
    for issuer in &now.without {
        if !was(|s| &s.without, issuer) && before.is_some() {
            tracing::warn!(%issuer, reason = %why(issuer), "an issuer holds no keys: its callers' tokens are refused");
        }
    }
    for issuer in &now.stale {
        if !was(|s| &s.stale, issuer) {
            tracing::warn!(%issuer, reason = %why(issuer), "an issuer's keys cannot be fetched: the last good ones serve until max_stale_secs");
        }
    }
    if let Some(before) = before {
        for issuer in before.without.iter().chain(&before.stale) {
            if !now.without.contains(issuer) && !now.stale.contains(issuer) {
                tracing::info!(%issuer, "an issuer's keys are fetched again");
            }
        }
    }
}
