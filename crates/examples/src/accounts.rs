//! Executor `accounts`: `get_user_info` over fixture users and `get_current_time` in any UTC offset.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolmesh_executor::{CallCx, Executor, RiskLevel, Tool, ToolFailure, ToolInfo, ToolOutput};

/// The `accounts` executor.
pub fn executor() -> Executor {
    Executor::new("accounts")
        .tool(GetUserInfo)
        .tool(GetCurrentTime)
}

/// A user as the accounts service knows it.
#[derive(Debug, Clone, Serialize)]
struct User {
    user_id: &'static str,
    name: &'static str,
    email: &'static str,
    plan: &'static str,
    status: &'static str,
    created: &'static str,
}

const USERS: [User; 4] = [
    User {
        user_id: "u_1",
        name: "Ada Lovelace",
        email: "ada@example.com",
        plan: "enterprise",
        status: "active",
        created: "2021-03-14",
    },
    User {
        user_id: "u_2",
        name: "Grace Hopper",
        email: "grace@example.com",
        plan: "pro",
        status: "active",
        created: "2022-07-01",
    },
    User {
        user_id: "u_3",
        name: "Alan Turing",
        email: "alan@example.com",
        plan: "free",
        status: "suspended",
        created: "2023-01-23",
    },
    User {
        user_id: "u_4",
        name: "Katherine Johnson",
        email: "katherine@example.com",
        plan: "pro",
        status: "active",
        created: "2024-11-05",
    },
];

/// Arguments of `get_user_info`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetUserInfoArgs {
    /// The user's id: "u_" followed by digits, e.g. "u_1".
    #[schemars(regex(pattern = r"^u_[0-9]+$"))]
    user_id: String,
}

/// `get_user_info`.
struct GetUserInfo;

impl Tool for GetUserInfo {
    type Args = GetUserInfoArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "get_user_info",
            "1.0.0",
            "Look up one customer account by user id (\"u_\" followed by digits, e.g. \"u_1\"). \
             Returns name, email, plan (free, pro or enterprise), account status (active or \
             suspended) and sign-up date. Read-only; use it before answering questions about \
             a customer's account.",
        )
        .risk(RiskLevel::Low)
        .read_only(true)
        .idempotent(true)
        .owner("accounts-team")
        .tags(["accounts", "read-only"])
    }

    async fn call(&self, args: GetUserInfoArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let Some(user) = USERS.iter().find(|u| u.user_id == args.user_id) else {
            return Err(ToolFailure::new(format!(
                "user {} not found; known users look like u_1",
                args.user_id
            )));
        };
        let text = format!(
            "{}: {} <{}>, {} plan, account {}, customer since {}",
            user.user_id, user.name, user.email, user.plan, user.status, user.created
        );
        Ok(ToolOutput::text(text).with_data(user))
    }
}

/// Arguments of `get_current_time`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetCurrentTimeArgs {
    /// The UTC offset to express the time in, in minutes (-720 to 840; e.g. 60 for
    /// UTC+01:00, -300 for UTC-05:00). Omit for UTC.
    #[serde(default)]
    #[schemars(range(min = -720, max = 840))]
    utc_offset_minutes: Option<i32>,
}

/// `get_current_time`.
struct GetCurrentTime;

impl Tool for GetCurrentTime {
    type Args = GetCurrentTimeArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "get_current_time",
            "1.0.0",
            "The current date and time as an RFC 3339 timestamp (e.g. \
             2026-12-01T09:30:00+01:00), in UTC or at a given UTC offset in minutes. Use it \
             instead of guessing today's date.",
        )
        .risk(RiskLevel::Low)
        .read_only(true)
        .idempotent(true)
        .owner("accounts-team")
        .tags(["time", "read-only"])
    }

    async fn call(&self, args: GetCurrentTimeArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let offset = args.utc_offset_minutes.unwrap_or(0);
        if !(-720..=840).contains(&offset) {
            return Err(ToolFailure::new(format!(
                "utc_offset_minutes {offset} is out of range; use -720 to 840"
            )));
        }
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| ToolFailure::new("the executor's clock is before 1970").retryable())?
            .as_secs();
        let unix = i64::try_from(unix).unwrap_or(i64::MAX / 2);
        let time = rfc3339(unix, offset);
        Ok(
            ToolOutput::text(format!("The current time is {time}.")).with_data(serde_json::json!({
                "time": time,
                "unix_seconds": unix,
                "utc_offset_minutes": offset,
            })),
        )
    }
}

/// `unix` seconds (since 1970) as RFC 3339 at `offset_minutes` from UTC
/// (`Z` for 0).
pub(crate) fn rfc3339(unix: i64, offset_minutes: i32) -> String {
    let local = (unix + i64::from(offset_minutes) * 60).max(0);
    let utc = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(local as u64))
        .to_string();
    if offset_minutes == 0 {
        return utc;
    }
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let abs = offset_minutes.unsigned_abs();
    let stamp = utc.trim_end_matches('Z');
    format!("{stamp}{sign}{:02}:{:02}", abs / 60, abs % 60)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    /// Known instants format correctly, across a leap day and with offsets
    /// that change the date.
    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000, 0), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(1_700_000_000, 120), "2023-11-15T00:13:20+02:00");
        assert_eq!(rfc3339(1_700_000_000, -330), "2023-11-14T16:43:20-05:30");
        assert_eq!(rfc3339(4_102_444_800, 840), "2100-01-01T14:00:00+14:00");
    }
}
