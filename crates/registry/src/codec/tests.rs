//! The stored layouts: what is written now, what the previous version
//! wrote (read back as it was), and values that hold neither.

use super::*;
use std::time::Duration;
use toolmesh::rollout::{Guard, RolloutState, Share};

fn exec_record() -> ExecRecord {
    ExecRecord {
        owner: "team-a".into(),
        service: "kb".into(),
        endpoint: "127.0.0.1:9001".into(),
        execute_token: "t0k".into(),
        ttl_ms: 10_000,
        tools: vec!["ab12".into(), "cd34".into()],
    }
}

fn health_record(healthy: bool) -> HealthRecord {
    HealthRecord {
        lease: 7,
        healthy,
        reason: "NOT_SERVING".into(),
    }
}

fn rollout() -> Rollout {
    Rollout {
        tool: "search_kb".into(),
        canary: semver::Version::new(2, 0, 0),
        share: Share::from_basis_points(750).unwrap(),
        tenants: vec!["acme".into()],
        principals: vec![],
        state: RolloutState::Aborted,
        reason: "errors".into(),
        changed_by: "alice".into(),
        automatic: true,
        guard: Guard {
            max_error_margin: 0.1,
            min_calls: 7,
            window: Duration::from_secs(30),
        },
        started_at_ms: 1,
        changed_at_ms: 2,
    }
}

/// The bytes the previous version wrote for each record (`serde_json::to_vec`
/// of its JSON records), and what they hold.
const LEGACY_EXEC: &str = r#"{"owner":"team-a","service":"kb","endpoint":"127.0.0.1:9001","execute_token":"t0k","ttl_ms":10000,"tools":["ab12","cd34"]}"#;
const LEGACY_HEALTH: &str = r#"{"lease":7,"healthy":false,"reason":"NOT_SERVING"}"#;
pub(crate) const LEGACY_ROLLOUT: &str = r#"{"tool":"search_kb","canary":"2.0.0","basis_points":750,"tenants":["acme"],"principals":[],"state":"aborted","reason":"errors","changed_by":"alice","automatic":true,"max_error_margin":0.1,"min_calls":7,"window_ms":30000,"started_at_ms":1,"changed_at_ms":2}"#;

/// Records written by the previous version (JSON documents) load as they
/// were, older ones without later fields too, whitespace before them or not.
#[test]
fn the_previous_json_layout_is_read() {
    assert_eq!(
        decode::<ExecRecord>(LEGACY_EXEC.as_bytes()).unwrap(),
        exec_record()
    );
    let before_tokens = r#"{"owner":"","service":"kb","endpoint":"e:1","ttl_ms":5,"tools":[]}"#;
    let read = decode::<ExecRecord>(before_tokens.as_bytes()).unwrap();
    assert_eq!(read.execute_token, "");
    assert_eq!(
        decode::<HealthRecord>(LEGACY_HEALTH.as_bytes()).unwrap(),
        health_record(false)
    );
    assert_eq!(
        decode::<Rollout>(LEGACY_ROLLOUT.as_bytes()).unwrap(),
        rollout()
    );
    let pretty = format!("\n  {LEGACY_ROLLOUT}");
    assert_eq!(decode::<Rollout>(pretty.as_bytes()).unwrap(), rollout());
    for state in ["active", "promoted", "aborted"] {
        let json = LEGACY_ROLLOUT.replace("\"aborted\"", &format!("\"{state}\""));
        let read = decode::<Rollout>(json.as_bytes()).unwrap();
        assert_eq!(read.state.name(), state);
    }
}

/// Every write is the version byte then protobuf (never JSON), and reads
/// back as the record written; a record read from JSON is written anew in
/// protobuf and still reads the same.
#[test]
fn writes_are_versioned_protobuf_and_round_trip() {
    fn round_trip<R: StoredRecord + PartialEq + std::fmt::Debug>(record: R) {
        let value = encode(&record);
        assert_eq!(value[0], PROTOBUF, "{record:?}");
        assert!(serde_json::from_slice::<serde_json::Value>(&value).is_err());
        assert_eq!(decode::<R>(&value).unwrap(), record);
    }
    round_trip(exec_record());
    round_trip(ExecRecord {
        owner: String::new(),
        execute_token: String::new(),
        tools: vec![],
        ..exec_record()
    });
    round_trip(health_record(true));
    round_trip(health_record(false));
    round_trip(rollout());
    round_trip(decode::<Rollout>(LEGACY_ROLLOUT.as_bytes()).unwrap());
    round_trip(decode::<ExecRecord>(LEGACY_EXEC.as_bytes()).unwrap());
}

/// A value that is neither protobuf of the current layout nor JSON of the
/// previous one is refused, saying what it was to be and what is wrong.
#[test]
fn unreadable_values_are_refused_clearly() {
    let unknown_state = {
        let mut message = health_record(true).to_message();
        message.state = 0;
        [&[PROTOBUF][..], &message.encode_to_vec()].concat()
    };
    let cases: [(&[u8], &str); 7] = [
        (b"", "stored health verdict is empty"),
        (b"\x02abc", "starts with byte 0x02"),
        (b"garbage", "starts with byte 0x67"),
        (b"\x01\xff\xff\xff", "not valid protobuf"),
        (b"{not json", "not valid JSON of the previous layout"),
        (
            br#"{"lease":"seven"}"#,
            "not valid JSON of the previous layout",
        ),
        (&unknown_state, "health state 0 is not one this build knows"),
    ];
    for (value, expected) in cases {
        let error = decode::<HealthRecord>(value).unwrap_err().to_string();
        assert!(error.contains("health verdict"), "{value:?}: {error}");
        assert!(error.contains(expected), "{value:?}: {error}");
    }
    let bad_state = LEGACY_ROLLOUT.replace("\"aborted\"", "\"paused\"");
    let error = decode::<Rollout>(bad_state.as_bytes()).unwrap_err();
    assert!(error.to_string().contains("paused"), "{error}");
    let bad_canary = LEGACY_ROLLOUT.replace("\"2.0.0\"", "\"two\"");
    let error = decode::<Rollout>(bad_canary.as_bytes()).unwrap_err();
    assert!(
        error.to_string().contains("rollout cannot be used") && error.to_string().contains("two"),
        "{error}"
    );
    let mut wire = rollout().to_pb();
    wire.state = 42;
    let value = [&[PROTOBUF][..], &wire.encode_to_vec()].concat();
    let error = decode::<Rollout>(&value).unwrap_err();
    assert!(error.to_string().contains("state 42"), "{error}");
}
