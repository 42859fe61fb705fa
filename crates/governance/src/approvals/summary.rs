//! What an approver reads: every argument of the call, one per line, sensitive ones redacted.

use serde_json::Value;
use std::fmt::Write as _;
use toolmesh::Principal;
use toolmesh_audit::redact;

/// Longest value shown, in characters of its JSON text; longer ones are cut
/// and their full length is given. Fields are never left out.
pub const MAX_VALUE_CHARS: usize = 200;
/// Longest argument name shown, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// Hex digits of the arguments' SHA-256 shown.
const DIGEST_CHARS: usize = 12;

/// The summary an approver decides on: the tool (`name@version`), who asks
/// for which tenant, the arguments' digest, then every top-level argument
/// on its own line as JSON, with `"x-sensitive": true` values (as resolved
/// by [`redact`]) replaced. Long values are cut; no field is dropped, so a
/// long `memo` cannot push the payee out of sight. Names and values are
/// JSON-escaped, so an argument cannot forge a line of its own.
pub fn approval_summary(
    tool: &str,
    who: &Principal,
    input_schema: &Value,
    arguments: &Value,
    digest: &str,
) -> String {
    let digest: String = digest.chars().take(DIGEST_CHARS).collect();
    let mut out = format!(
        "{tool} for {} (tenant {}), arguments sha256 {digest}:",
        who.name, who.tenant
    );
    match redact(input_schema, arguments) {
        Value::Object(fields) if fields.is_empty() => out.push_str(" no arguments"),
        Value::Object(fields) => {
            for (name, value) in &fields {
                let _ = write!(out, "\n  {} = {}", shown_name(name), shown_value(value));
            }
        }
        other => {
            let _ = write!(out, " {}", shown_value(&other));
        }
    }
    out
}

/// A plain name as is; anything else as a JSON string; cut when long.
fn shown_name(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let text = if plain {
        name.to_owned()
    } else {
        Value::String(name.to_owned()).to_string()
    };
    cut(&text, MAX_NAME_CHARS)
}

fn shown_value(value: &Value) -> String {
    cut(&value.to_string(), MAX_VALUE_CHARS)
}

/// `text`, or its first `max - 1` characters, `…` and the full length.
fn cut(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{head}… ({count} characters)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolmesh_testkit::principal;

    /// A 430-character memo no longer hides the payee: every field is
    /// shown, long values are cut, sensitive ones redacted.
    #[test]
    fn every_field_is_shown() {
        let schema = json!({"properties": {"pin": {"x-sensitive": true}}});
        let arguments =
            json!({"memo": "m".repeat(430), "payee": "mallory", "amount": 10, "pin": "1234"});
        let text = approval_summary(
            "pay@1.0.0",
            &principal("agent-bot", "acme", &[]),
            &schema,
            &arguments,
            &"ab".repeat(32),
        );
        assert!(
            text.starts_with(
                "pay@1.0.0 for agent-bot (tenant acme), arguments sha256 abababababab:"
            ),
            "{text}"
        );
        assert!(text.contains("\n  payee = \"mallory\""), "{text}");
        assert!(text.contains("\n  amount = 10"), "{text}");
        assert!(text.contains("\n  pin = \"[REDACTED]\""), "{text}");
        assert!(!text.contains("1234"), "{text}");
        assert!(text.contains("… (432 characters)"), "{text}");
        assert!(!text.contains(&"m".repeat(MAX_VALUE_CHARS)), "{text}");
    }

    /// However many fields, none is dropped; names cannot forge lines.
    #[test]
    fn no_field_is_dropped() {
        let mut arguments = serde_json::Map::new();
        for i in 0..500 {
            arguments.insert(format!("f{i:03}"), json!("v".repeat(300)));
        }
        arguments.insert("x\n  to = \"safe\"".into(), json!("attacker"));
        let text = approval_summary(
            "t@1.0.0",
            &principal("agent-bot", "acme", &[]),
            &json!({}),
            &Value::Object(arguments),
            "d",
        );
        assert_eq!(text.lines().count(), 502, "{text}");
        for i in 0..500 {
            assert!(text.contains(&format!("\n  f{i:03} = ")), "f{i:03}");
        }
        assert!(
            text.contains(r#""x\n  to = \"safe\"" = "attacker""#),
            "{text}"
        );
        assert!(
            approval_summary(
                "t@1",
                &principal("agent-bot", "acme", &[]),
                &json!({}),
                &json!({}),
                ""
            )
            .ends_with(": no arguments")
        );
    }
}
