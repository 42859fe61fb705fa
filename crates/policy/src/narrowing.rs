//! Per-caller argument limits: a grant narrows a tool's input schema for the callers it covers.
//!
//! A narrowing is a set of extra bounds on top-level properties (`minimum`,
//! `maximum`, `enum`, `max_length`). It is applied as an intersection with
//! the tool's own schema: a bound looser than the tool's own is kept out,
//! so a narrowing can restrict what a caller may send and never widen it.

use serde_json::{Map, Value};
use std::fmt::Write as _;
use toolmesh::schema::{Violation, Violations};

/// Bounds one grant puts on one property of one tool.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldLimit {
    /// The top-level property of the arguments.
    pub property: String,
    /// Smallest number allowed.
    pub minimum: Option<f64>,
    /// Largest number allowed.
    pub maximum: Option<f64>,
    /// The only values allowed.
    pub one_of: Option<Vec<Value>>,
    /// Longest string allowed, in characters.
    pub max_length: Option<u64>,
}

/// What one grant narrows in one tool's input schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Narrowing {
    /// The grant that narrows (named in refusals and `explain`).
    pub grant: String,
    /// The bounds, one per property, in property order.
    pub fields: Vec<FieldLimit>,
}

impl Narrowing {
    /// `schema` with these bounds intersected into its properties: the
    /// schema this caller sees and is held to. A bound that is looser than
    /// the tool's own, or a property the schema does not declare, changes
    /// nothing (see [`Narrowing::notes`]).
    pub fn apply(&self, schema: &Value) -> Value {
        let mut narrowed = schema.clone();
        let Some(properties) = narrowed
            .get_mut("properties")
            .and_then(Value::as_object_mut)
        else {
            return narrowed;
        };
        for field in &self.fields {
            if let Some(Value::Object(property)) = properties.get_mut(&field.property) {
                field.intersect(property);
            }
        }
        narrowed
    }

    /// What the narrowing does to `schema`, one line per property, for
    /// `explain`; a bound with no effect says why.
    pub fn notes(&self, schema: &Value) -> Vec<String> {
        let properties = schema.get("properties").and_then(Value::as_object);
        self.fields
            .iter()
            .map(|field| {
                let declared = properties.and_then(|p| p.get(&field.property));
                let mut line = format!("{}: {}", field.property, field.describe());
                match declared {
                    None => line.push_str(" (the tool's schema does not declare it: no effect)"),
                    Some(own) => {
                        let mut narrowed = own.as_object().cloned().unwrap_or_default();
                        field.intersect(&mut narrowed);
                        if Some(&Value::Object(narrowed)) == Some(own) {
                            line.push_str(" (the tool's own bounds are as tight: no effect)");
                        }
                    }
                }
                line
            })
            .collect()
    }

    /// Whether `arguments` keep within these bounds; every property out of
    /// bounds is named with what the grant allows.
    pub fn check(&self, arguments: &Value) -> Result<(), Violations> {
        let violations: Vec<Violation> = self
            .fields
            .iter()
            .filter_map(|field| {
                let value = arguments.get(&field.property)?;
                let message = field.violation(value)?;
                Some(Violation {
                    path: format!("/{}", pointer_escape(&field.property)),
                    message,
                })
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Violations(violations))
        }
    }
}

impl FieldLimit {
    /// The bounds as `explain` shows them, e.g. `maximum 100, enum ["low"]`.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        let mut part = |s: String| {
            if !text.is_empty() {
                text.push_str(", ");
            }
            text.push_str(&s);
        };
        if let Some(min) = self.minimum {
            part(format!("minimum {min}"));
        }
        if let Some(max) = self.maximum {
            part(format!("maximum {max}"));
        }
        if let Some(values) = &self.one_of {
            part(format!("enum {}", Value::Array(values.clone())));
        }
        if let Some(len) = self.max_length {
            part(format!("max_length {len}"));
        }
        text
    }

    /// Tightens one property schema by these bounds (never loosens it).
    fn intersect(&self, property: &mut Map<String, Value>) {
        let tighter = |own: Option<f64>, ours: f64, pick: fn(f64, f64) -> f64| {
            own.map_or(ours, |own| pick(own, ours))
        };
        if let Some(max) = self.maximum {
            let own = property.get("maximum").and_then(Value::as_f64);
            property.insert("maximum".into(), number(tighter(own, max, f64::min)));
        }
        if let Some(min) = self.minimum {
            let own = property.get("minimum").and_then(Value::as_f64);
            property.insert("minimum".into(), number(tighter(own, min, f64::max)));
        }
        if let Some(len) = self.max_length {
            let own = property.get("maxLength").and_then(Value::as_u64);
            property.insert("maxLength".into(), own.map_or(len, |o| o.min(len)).into());
        }
        if let Some(values) = &self.one_of {
            let kept: Vec<Value> = match property.get("enum").and_then(Value::as_array) {
                Some(own) => values.iter().filter(|v| own.contains(v)).cloned().collect(),
                None => values.clone(),
            };
            property.insert("enum".into(), Value::Array(kept));
        }
    }

    /// Why `value` is out of these bounds, if it is.
    fn violation(&self, value: &Value) -> Option<String> {
        let mut why = String::new();
        if let Some(n) = value.as_f64() {
            if let Some(max) = self.maximum.filter(|max| n > *max) {
                let _ = write!(
                    why,
                    "{value} is above the maximum of {max} your grant allows"
                );
            } else if let Some(min) = self.minimum.filter(|min| n < *min) {
                let _ = write!(
                    why,
                    "{value} is below the minimum of {min} your grant allows"
                );
            }
        }
        if let (Some(len), Some(text)) = (self.max_length, value.as_str())
            && text.chars().count() as u64 > len
        {
            let _ = write!(why, "is longer than the {len} characters your grant allows");
        }
        if let Some(values) = &self.one_of
            && !values.contains(value)
        {
            let allowed = Value::Array(values.clone());
            let _ = write!(
                why,
                "{value} is not one your grant allows: use one of {allowed}"
            );
        }
        (!why.is_empty()).then_some(why)
    }
}

/// A JSON number for `n`: an integer when it is one, so `100` stays `100`.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

/// A property name as one JSON Pointer token.
fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn narrowing() -> Narrowing {
        Narrowing {
            grant: "agents".into(),
            fields: vec![
                FieldLimit {
                    property: "cents".into(),
                    minimum: None,
                    maximum: Some(100.0),
                    one_of: None,
                    max_length: None,
                },
                FieldLimit {
                    property: "priority".into(),
                    minimum: None,
                    maximum: None,
                    one_of: Some(vec![json!("low"), json!("normal"), json!("bogus")]),
                    max_length: None,
                },
            ],
        }
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "cents": {"type": "integer", "minimum": 1},
                "priority": {"enum": ["low", "normal", "high"]}
            }
        })
    }

    /// The narrowed schema intersects: the maximum is added, the enum keeps
    /// only values the tool itself accepts, so nothing is ever widened.
    #[test]
    fn apply_intersects() {
        let narrowed = narrowing().apply(&schema());
        assert_eq!(narrowed["properties"]["cents"]["maximum"], json!(100));
        assert_eq!(narrowed["properties"]["cents"]["minimum"], json!(1));
        assert_eq!(
            narrowed["properties"]["priority"]["enum"],
            json!(["low", "normal"])
        );
        let tight = json!({"properties": {"cents": {"maximum": 50}}});
        assert_eq!(
            narrowing().apply(&tight)["properties"]["cents"]["maximum"],
            json!(50),
            "a looser bound than the tool's own does not widen it"
        );
        assert!(narrowing().notes(&tight)[0].contains("no effect"));
        assert!(narrowing().notes(&tight)[1].contains("does not declare"));
    }

    /// Arguments out of the grant's bounds are named with what is allowed.
    #[test]
    fn check_names_each_field() {
        let n = narrowing();
        assert!(n.check(&json!({"cents": 100, "priority": "low"})).is_ok());
        assert!(
            n.check(&json!({})).is_ok(),
            "absent fields are the schema's business"
        );
        let refused = n
            .check(&json!({"cents": 150, "priority": "high"}))
            .unwrap_err();
        let text = refused.to_string();
        assert!(
            text.contains("at /cents: 150 is above the maximum of 100"),
            "{text}"
        );
        assert!(text.contains("at /priority: \"high\" is not one"), "{text}");
    }

    /// A string longer than `max_length` is refused; pointer tokens escape.
    #[test]
    fn max_length_and_escaping() {
        let n = Narrowing {
            grant: "g".into(),
            fields: vec![FieldLimit {
                property: "a/b".into(),
                minimum: Some(0.0),
                maximum: None,
                one_of: None,
                max_length: Some(3),
            }],
        };
        let refused = n.check(&json!({"a/b": "abcd"})).unwrap_err();
        assert_eq!(refused.0[0].path, "/a~1b");
        assert!(n.check(&json!({"a/b": "abc"})).is_ok());
    }
}
