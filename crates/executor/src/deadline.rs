//! The budget of one call: the caller's `grpc-timeout` (read with `toolmesh::grpc::request_timeout`) against the tool's timeout.

use std::time::Duration;

/// The most a caller's deadline is answered early.
const EARLY_MAX: Duration = Duration::from_millis(20);

/// Why a call has the budget it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// The caller's deadline is the tighter one.
    Caller,
    /// The tool's own timeout is the tighter one.
    ToolTimeout,
}

/// How long a call may run: the smaller of the caller's timeout and the
/// tool's. The caller's is answered a little early (by a tenth, at most
/// 20 ms), so the DEADLINE_EXCEEDED result has time to travel back before
/// the caller's own deadline — a tonic client enforces `grpc-timeout`
/// locally, and so does tonic's server, and either would otherwise turn the
/// answer into a bare "Timeout expired" status instead of a result.
pub(crate) fn budget(caller: Option<Duration>, tool_timeout: Duration) -> (Duration, Bound) {
    match caller {
        Some(caller) => {
            let early = (caller / 10).min(EARLY_MAX);
            let caller = caller.saturating_sub(early);
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
    use toolmesh::grpc::request_timeout;

    /// The `grpc-timeout` values the executor honours, read from request
    /// metadata the way the Execute handler reads them: every unit, the
    /// 8-digit limit, and malformed values a hostile peer might send.
    #[test]
    fn grpc_timeout_parser_table() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("1H", Some(Duration::from_secs(3600))),
            ("2M", Some(Duration::from_secs(120))),
            ("3S", Some(Duration::from_secs(3))),
            ("250m", Some(Duration::from_millis(250))),
            ("750u", Some(Duration::from_micros(750))),
            ("5n", Some(Duration::from_nanos(5))),
            ("0m", Some(Duration::ZERO)),
            ("00000010S", Some(Duration::from_secs(10))),
            ("99999999H", Some(Duration::from_secs(99_999_999 * 3600))),
            ("123456789m", None),
            ("m", None),
            ("10", None),
            ("10s", None),
            ("10x", None),
            ("-1S", None),
            ("+1S", None),
            ("1.5S", None),
            ("1Sm", None),
        ];
        for (text, expected) in cases {
            let mut metadata = tonic::metadata::MetadataMap::new();
            metadata.insert("grpc-timeout", text.parse().expect("ASCII header value"));
            assert_eq!(request_timeout(&metadata), *expected, "{text:?}");
        }
        // Absent, empty and non-ASCII values read as "no deadline".
        let mut metadata = tonic::metadata::MetadataMap::new();
        assert_eq!(request_timeout(&metadata), None);
        metadata.insert("grpc-timeout", "".parse().expect("empty value"));
        assert_eq!(request_timeout(&metadata), None);
        let non_ascii =
            tonic::metadata::MetadataValue::try_from("1é".as_bytes()).expect("opaque bytes");
        metadata.insert("grpc-timeout", non_ascii);
        assert_eq!(request_timeout(&metadata), None);
    }

    /// The caller's timeout wins only when it is tighter, and is answered early.
    #[test]
    fn budget_takes_the_smaller() {
        let tool = Duration::from_secs(1);
        assert_eq!(budget(None, tool), (tool, Bound::ToolTimeout));
        assert_eq!(
            budget(Some(Duration::from_secs(5)), tool),
            (tool, Bound::ToolTimeout)
        );
        assert_eq!(
            budget(Some(Duration::from_millis(500)), tool),
            (Duration::from_millis(480), Bound::Caller)
        );
        assert_eq!(
            budget(Some(Duration::from_millis(100)), tool),
            (Duration::from_millis(90), Bound::Caller)
        );
        assert_eq!(
            budget(Some(Duration::ZERO), tool),
            (Duration::ZERO, Bound::Caller)
        );
    }
}
