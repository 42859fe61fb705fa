//! Call arguments as JSON, refusing duplicate keys so that what is validated is what is sent.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt;

/// Why call arguments could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentsError {
    /// The text is not JSON.
    #[error(
        "arguments are not valid JSON ({0}); send one JSON object such as {{\"path\": \"a.txt\"}}"
    )]
    NotJson(String),
    /// An object names the same key twice: a reader could take either value.
    #[error(
        "arguments repeat the key {} in the object at {}; send each key once per object",
        super::quote_str(key),
        if path.is_empty() { "/".to_owned() } else { super::cut_path(path) }
    )]
    DuplicateKey {
        /// The repeated key.
        key: String,
        /// JSON Pointer to the object holding it (`""` is the whole document).
        path: String,
    },
}

/// Parses call arguments. Empty or whitespace-only text reads as `{}`; any
/// object at any depth that names a key twice is refused (serde_json alone
/// keeps the last value, while the raw text forwarded to an executor may be
/// read first-wins: the value checked must be the value used).
pub fn parse_arguments(text: &str) -> Result<Value, ArgumentsError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let duplicate = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = Node {
        path: &Path::Root,
        duplicate: &duplicate,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, duplicate.into_inner()) {
        (_, Some((key, path))) => Err(ArgumentsError::DuplicateKey { key, path }),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(ArgumentsError::NotJson(e.to_string())),
    }
}

/// Where a value sits, as a chain to its parent; rendered only on error.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    /// A JSON Pointer (RFC 6901): `/a/0/b~1c`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(parent, key) => {
                write!(f, "{parent}/{}", key.replace('~', "~0").replace('/', "~1"))
            }
            Path::Index(parent, i) => write!(f, "{parent}/{i}"),
        }
    }
}

/// Deserialises one value at `path`, noting the first duplicate key seen.
#[derive(Clone, Copy)]
struct Node<'p> {
    path: &'p Path<'p>,
    duplicate: &'p RefCell<Option<(String, String)>>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = Path::Index(self.path, items.len());
            let child = Node {
                path: &path,
                duplicate: self.duplicate,
            };
            match seq.next_element_seed(child)? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let path = self.path.to_string();
                let message = format!("duplicate key {key:?}");
                *self.duplicate.borrow_mut() = Some((key, path));
                return Err(de::Error::custom(message));
            }
            let path = Path::Key(self.path, &key);
            let value = map.next_value_seed(Node {
                path: &path,
                duplicate: self.duplicate,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A repeated key is refused at any depth, naming the key and the object's JSON Pointer.
    #[test]
    fn duplicate_keys_are_refused_with_their_path() {
        let cases = [
            (r#"{"amount":1000,"amount":1}"#, "amount", ""),
            (r#"{"a":{"to":"x","to":"y"}}"#, "to", "/a"),
            (r#"{"a":[1,{"k":1,"k":2}]}"#, "k", "/a/1"),
            (r#"{"a/b~c":{"x":1,"x":1}}"#, "x", "/a~1b~0c"),
            (r#"[{"x":{},"x":{}}]"#, "x", "/0"),
        ];
        for (text, key, path) in cases {
            let err = parse_arguments(text).unwrap_err();
            assert_eq!(
                err,
                ArgumentsError::DuplicateKey {
                    key: key.into(),
                    path: path.into()
                },
                "{text}"
            );
            assert!(err.to_string().contains("send each key once"), "{err}");
        }
        let root = parse_arguments(r#"{"to":1,"to":2}"#)
            .unwrap_err()
            .to_string();
        assert!(root.contains(r#"key "to" in the object at /;"#), "{root}");
    }

    /// Well-formed arguments read exactly as serde_json reads them; empty text is `{}`.
    #[test]
    fn reads_like_serde_json() {
        for text in [
            r#"{"a":1,"b":[true,null,-2,3.5,"s"],"c":{"d":{}},"e":18446744073709551615}"#,
            "[]",
            "\"x\"",
            " 7 ",
            r#"{"same":{"k":1},"other":{"k":1}}"#,
        ] {
            let expected: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parse_arguments(text).unwrap(), expected, "{text}");
        }
        assert_eq!(parse_arguments("").unwrap(), json!({}));
        assert_eq!(parse_arguments(" \n\t").unwrap(), json!({}));
    }

    /// Malformed text, trailing garbage and absurd nesting are errors, never a panic or a stack overflow.
    #[test]
    fn malformed_text_is_an_error() {
        let deep = "[".repeat(100_000);
        for text in ["{", "{\"a\":1} x", "{'a':1}", &deep] {
            let err = parse_arguments(text).unwrap_err();
            assert!(matches!(err, ArgumentsError::NotJson(_)), "{text}: {err}");
            assert!(err.to_string().contains("send one JSON object"), "{err}");
        }
    }
}
