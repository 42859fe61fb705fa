//! Values quoted in messages a model reads: whole when short, else cut to
//! about [`MAX_QUOTED_CHARS`] characters with the size of the whole.

use serde_json::Value;

/// Longest quote of a value, in characters, before it is cut.
pub const MAX_QUOTED_CHARS: usize = 100;

/// `value` as JSON for a message: whole when it is at most
/// [`MAX_QUOTED_CHARS`] characters, else its start and its size, e.g.
/// `"reset reset …" (120,000 characters)`, `[1, 2, …] (5,000 items)` or
/// `{"a": 1, …} (300 keys)`.
pub fn quote(value: &Value) -> String {
    match value {
        Value::String(text) => quote_str(text),
        Value::Array(items) => cut_json(value, items.len(), "item"),
        Value::Object(members) => cut_json(value, members.len(), "key"),
        other => cut_json(other, 0, ""),
    }
}

/// `text` as a JSON string, cut as [`quote`] cuts one (escapes count
/// towards the limit, so control characters cannot stretch it).
pub fn quote_str(text: &str) -> String {
    let whole = Value::from(text).to_string();
    if whole.chars().count() <= MAX_QUOTED_CHARS {
        return whole;
    }
    let mut quoted = String::from("\"");
    for c in text.chars() {
        let escaped = Value::from(c.to_string()).to_string();
        let escaped = &escaped[1..escaped.len() - 1];
        if quoted.len() + escaped.len() > MAX_QUOTED_CHARS - 2 {
            break;
        }
        quoted.push_str(escaped);
    }
    format!(
        "{quoted} …\" ({} characters)",
        thousands(text.chars().count())
    )
}

/// A path (a JSON Pointer), cut in its middle when long, so that both the
/// top and the failing leaf stay in view.
pub fn cut_path(path: &str) -> String {
    let chars = path.chars().count();
    if chars <= MAX_QUOTED_CHARS {
        return path.to_owned();
    }
    let half = MAX_QUOTED_CHARS / 2;
    let head: String = path.chars().take(half).collect();
    let tail: String = path.chars().skip(chars - half).collect();
    format!("{head}…{tail}")
}

/// The compact JSON of `value`, cut after [`MAX_QUOTED_CHARS`] characters
/// with `count` `unit`s named (nothing named for a scalar).
fn cut_json(value: &Value, count: usize, unit: &str) -> String {
    let text = value.to_string();
    if text.chars().count() <= MAX_QUOTED_CHARS {
        return text;
    }
    let start: String = text.chars().take(MAX_QUOTED_CHARS).collect();
    match unit {
        "" => format!("{start}… ({} characters)", thousands(text.chars().count())),
        unit => {
            let plural = if count == 1 { "" } else { "s" };
            format!("{start} … ({} {unit}{plural})", thousands(count))
        }
    }
}

/// `n` with a comma every three digits: 120,000.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn short_values_are_whole() {
        assert_eq!(quote(&json!("soon")), r#""soon""#);
        assert_eq!(quote(&json!([1, 2])), "[1,2]");
        assert_eq!(quote(&json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(quote(&json!(12.5)), "12.5");
        assert_eq!(cut_path("/a/b"), "/a/b");
    }

    #[test]
    fn long_values_are_cut_with_their_size() {
        let long = "reset ".repeat(20_000);
        let quoted = quote(&json!(long));
        assert!(quoted.starts_with("\"reset reset "), "{quoted}");
        assert!(quoted.ends_with(" …\" (120,000 characters)"), "{quoted}");
        assert!(quoted.chars().count() < MAX_QUOTED_CHARS + 40, "{quoted}");

        let items: Vec<u32> = (0..5_000).collect();
        let quoted = quote(&json!(items));
        assert!(quoted.starts_with("[0,1,2,"), "{quoted}");
        assert!(quoted.ends_with(" … (5,000 items)"), "{quoted}");

        let members: serde_json::Map<String, Value> =
            (0..300).map(|i| (format!("k{i}"), json!(i))).collect();
        let quoted = quote(&Value::Object(members));
        assert!(quoted.ends_with(" … (300 keys)"), "{quoted}");
        assert!(quoted.chars().count() < MAX_QUOTED_CHARS + 40, "{quoted}");
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let quoted = quote_str(&"é".repeat(1_000));
        assert!(quoted.ends_with(" …\" (1,000 characters)"), "{quoted}");
        let controls = quote_str(&"\u{1}".repeat(1_000));
        assert!(
            controls.chars().count() < MAX_QUOTED_CHARS + 40,
            "{controls}"
        );
        let path = format!("/{}", "ü".repeat(500));
        let cut = cut_path(&path);
        assert!(cut.contains('…') && cut.chars().count() <= MAX_QUOTED_CHARS + 1);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
