//! Deadlines: the caller's `grpc-timeout` header and the budget of one call.

use std::time::Duration;

/// The deadline a caller sent in its `grpc-timeout` header, if any.
///
/// The header is an ASCII integer of at most 8 digits followed by a unit:
/// `H`ours, `M`inutes, `S`econds, `m`illiseconds, `u`/microseconds or
/// `n`anoseconds. Anything else reads as "no deadline".
pub fn request_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// Parses one `grpc-timeout` value (see [`request_timeout`]).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() || value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The most a caller's deadline is answered early.
const ANSWER_EARLY_MAX: Duration = Duration::from_millis(20);

/// Which limit bounds a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The caller's deadline is the tighter one.
    Caller,
    /// The tool's own timeout is the tighter one.
    ToolTimeout,
}

/// How long a call may run: the smaller of the caller's `grpc-timeout` and
/// the tool's timeout. The caller's deadline is answered a little early (a
/// tenth of it, at most 20 ms) so the DEADLINE_EXCEEDED result travels back
/// before the caller's own timer fires — tonic enforces `grpc-timeout` on
/// the client and on the server, and either would otherwise turn the answer
/// into a bare "Timeout expired" status. The dispatcher and the executor
/// SDK both budget with this.
pub fn call_budget(caller: Option<Duration>, tool_timeout: Duration) -> (Duration, Bound) {
    match caller {
        Some(caller) => {
            let caller = caller.saturating_sub((caller / 10).min(ANSWER_EARLY_MAX));
            if caller < tool_timeout {
                (caller, Bound::Caller)
            } else {
                (tool_timeout, Bound::ToolTimeout)
            }
        }
        None => (tool_timeout, Bound::ToolTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit of the grpc-timeout header parses; malformed values do not.
    #[test]
    fn grpc_timeout_table() {
        let ok = [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("7u", Duration::from_micros(7)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ];
        for (text, expected) in ok {
            assert_eq!(parse_grpc_timeout(text), Some(expected), "{text}");
        }
        assert_eq!(
            parse_grpc_timeout("00000010S"),
            Some(Duration::from_secs(10))
        );
        for text in [
            "",
            "m",
            "10",
            "10x",
            "10s",
            "-5m",
            "+1S",
            "1Sm",
            "123456789m",
            "1.5S",
            "1é",
        ] {
            assert_eq!(parse_grpc_timeout(text), None, "{text}");
        }
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(request_timeout(&metadata), None);
        metadata.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(request_timeout(&metadata), Some(Duration::from_millis(250)));
    }

    /// The caller's timeout wins only when it is tighter, and is answered early.
    #[test]
    fn budget_takes_the_smaller() {
        let tool = Duration::from_secs(1);
        assert_eq!(call_budget(None, tool), (tool, Bound::ToolTimeout));
        assert_eq!(
            call_budget(Some(Duration::from_secs(5)), tool),
            (tool, Bound::ToolTimeout)
        );
        assert_eq!(
            call_budget(Some(Duration::from_millis(500)), tool),
            (Duration::from_millis(480), Bound::Caller)
        );
        assert_eq!(
            call_budget(Some(Duration::from_millis(100)), tool),
            (Duration::from_millis(90), Bound::Caller)
        );
        assert_eq!(
            call_budget(Some(Duration::ZERO), tool),
            (Duration::ZERO, Bound::Caller)
        );
    }
}
