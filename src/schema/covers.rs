//! Whether one JSON Schema accepts every value another accepts — checked
//! conservatively on the common structural keywords: "yes" is a proof for
//! the schemas it can read, anything it cannot prove is "no" with the
//! first reason, so a pairing built on it (a fallback standing in for a
//! tool) never accepts less than it promises.

use serde_json::{Map, Value};

/// Why one schema does not cover another: the first place found and what
/// differs there.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at {place}: {why}")]
pub struct NotCovered {
    /// A JSON Schema path such as `/properties/query`, or "the top level".
    pub place: String,
    /// What differs there.
    pub why: Difference,
}

/// What differs between the wider schema and the narrower one at a place.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Difference {
    /// The wider schema accepts nothing.
    #[error("nothing is accepted, the other accepts values")]
    AcceptsNothing,
    /// The narrower schema accepts anything.
    #[error("any value is accepted, the other is bounded")]
    AcceptsAnything,
    /// A keyword this check does not model differs.
    #[error("`{0}` differs and cannot be compared")]
    Opaque(&'static str),
    /// The wider schema's `pattern` is not the narrower's.
    #[error("`pattern` differs")]
    Pattern,
    /// A value the narrower enum lists has a type the wider refuses.
    #[error("value {value} is not of type {allowed:?}")]
    EnumType {
        /// The value.
        value: Value,
        /// The types the wider schema allows.
        allowed: Vec<String>,
    },
    /// The narrower schema allows any type.
    #[error("any type is accepted, the other allows only {0:?}")]
    AnyType(Vec<String>),
    /// The narrower schema allows a type the wider refuses.
    #[error("type {given:?} is not accepted (only {allowed:?})")]
    Type {
        /// The type.
        given: String,
        /// The types the wider schema allows.
        allowed: Vec<String>,
    },
    /// The wider schema lists values, the narrower does not.
    #[error("only {0} listed values are accepted")]
    Enumerated(usize),
    /// The narrower enum lists a value the wider does not.
    #[error("value {0} is not in the accepted enum")]
    NotInEnum(Value),
    /// A bound of the narrower schema is looser.
    #[error("`{key}` is {wider}, the other allows {narrower}")]
    Bound {
        /// The keyword, e.g. `maxLength`.
        key: &'static str,
        /// The wider schema's bound.
        wider: f64,
        /// The narrower schema's bound.
        narrower: f64,
    },
    /// The narrower schema lacks a bound the wider has.
    #[error("`{key}` is {wider}, the other has no such bound")]
    Unbounded {
        /// The keyword, e.g. `maxLength`.
        key: &'static str,
        /// The wider schema's bound.
        wider: f64,
    },
    /// The wider schema requires a property the narrower does not.
    #[error("{0:?} is required, the other does not require it")]
    Required(String),
}

/// `why` at `place`.
fn differs(place: &str, why: Difference) -> NotCovered {
    NotCovered {
        place: place.to_owned(),
        why,
    }
}

fn owned(types: &[&str]) -> Vec<String> {
    types.iter().map(|t| (*t).to_owned()).collect()
}

/// Keywords whose effect this check does not model: a schema using one of
/// them on the narrower side is compared only if the wider side has the
/// same keyword with the same value.
const OPAQUE: &[&str] = &[
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "dependentSchemas",
    "dependentRequired",
    "patternProperties",
    "propertyNames",
    "prefixItems",
    "contains",
    "uniqueItems",
    "multipleOf",
    "format",
    "const",
];

/// `Ok` when every value `narrower` accepts is accepted by `wider`; else
/// the first place where that cannot be shown, as a path and a reason.
pub fn covers(wider: &Value, narrower: &Value) -> Result<(), NotCovered> {
    check(wider, narrower, "")
}

fn check(wider: &Value, narrower: &Value, at: &str) -> Result<(), NotCovered> {
    let place = place_of(at);
    if narrower == &Value::Bool(false) {
        return Ok(());
    }
    let wider = match wider {
        Value::Bool(true) => return Ok(()),
        Value::Object(w) if w.is_empty() => return Ok(()),
        Value::Object(w) => w,
        _ => {
            return Err(differs(place, Difference::AcceptsNothing));
        }
    };
    let narrower = match narrower {
        Value::Object(n) => n,
        _ => {
            return Err(differs(place, Difference::AcceptsAnything));
        }
    };
    if wider == narrower {
        return Ok(());
    }
    for key in OPAQUE {
        if (wider.get(*key).is_some() || narrower.get(*key).is_some())
            && wider.get(*key) != narrower.get(*key)
        {
            return Err(differs(place, Difference::Opaque(key)));
        }
    }
    types(wider, narrower, place)?;
    enums(wider, narrower, place)?;
    bounds(wider, narrower, place)?;
    if wider.get("pattern").is_some() && wider.get("pattern") != narrower.get("pattern") {
        return Err(differs(place, Difference::Pattern));
    }
    objects(wider, narrower, at)?;
    match (wider.get("items"), narrower.get("items")) {
        (None, _) => Ok(()),
        (Some(w), Some(n)) => check(w, n, &format!("{at}/items")),
        (Some(w), None) => check(w, &Value::Bool(true), &format!("{at}/items")),
    }
}

/// The JSON types a schema allows (None: any).
fn type_set(schema: &Map<String, Value>) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => Some(Vec::new()),
    }
}

fn types(
    wider: &Map<String, Value>,
    narrower: &Map<String, Value>,
    place: &str,
) -> Result<(), NotCovered> {
    let Some(allowed) = type_set(wider) else {
        return Ok(());
    };
    let accepts = |t: &str| allowed.contains(&t) || (t == "integer" && allowed.contains(&"number"));
    if let Some(Value::Array(values)) = narrower.get("enum") {
        return match values.iter().find(|v| !accepts(json_type(v))) {
            None => Ok(()),
            Some(v) => Err(differs(
                place,
                Difference::EnumType {
                    value: v.clone(),
                    allowed: owned(&allowed),
                },
            )),
        };
    }
    match type_set(narrower) {
        None => Err(differs(place, Difference::AnyType(owned(&allowed)))),
        Some(given) => match given.into_iter().find(|t| !accepts(t)) {
            None => Ok(()),
            Some(t) => Err(differs(
                place,
                Difference::Type {
                    given: t.to_owned(),
                    allowed: owned(&allowed),
                },
            )),
        },
    }
}

/// The JSON Schema type name of `value`.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn enums(
    wider: &Map<String, Value>,
    narrower: &Map<String, Value>,
    place: &str,
) -> Result<(), NotCovered> {
    let Some(Value::Array(allowed)) = wider.get("enum") else {
        return Ok(());
    };
    let Some(Value::Array(given)) = narrower.get("enum") else {
        return Err(differs(place, Difference::Enumerated(allowed.len())));
    };
    match given.iter().find(|v| !allowed.contains(v)) {
        None => Ok(()),
        Some(v) => Err(differs(place, Difference::NotInEnum(v.clone()))),
    }
}

/// Lower bounds must not be higher, upper bounds not lower.
fn bounds(
    wider: &Map<String, Value>,
    narrower: &Map<String, Value>,
    place: &str,
) -> Result<(), NotCovered> {
    const LOWER: &[&str] = &[
        "minimum",
        "exclusiveMinimum",
        "minLength",
        "minItems",
        "minProperties",
    ];
    const UPPER: &[&str] = &[
        "maximum",
        "exclusiveMaximum",
        "maxLength",
        "maxItems",
        "maxProperties",
    ];
    for (keys, tighter) in [(LOWER, 1.0), (UPPER, -1.0)] {
        for key in keys {
            let Some(w) = wider.get(*key).and_then(Value::as_f64) else {
                continue;
            };
            match narrower.get(*key).and_then(Value::as_f64) {
                Some(n) if (w - n) * tighter <= 0.0 => {}
                Some(n) => {
                    let why = Difference::Bound {
                        key,
                        wider: w,
                        narrower: n,
                    };
                    return Err(differs(place, why));
                }
                None => {
                    let why = Difference::Unbounded { key, wider: w };
                    return Err(differs(place, why));
                }
            }
        }
    }
    Ok(())
}

/// Every property the narrower schema may carry is accepted, and every
/// property the wider one requires is required by the narrower.
fn objects(
    wider: &Map<String, Value>,
    narrower: &Map<String, Value>,
    at: &str,
) -> Result<(), NotCovered> {
    let empty = Map::new();
    let wider_props = wider
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let narrower_props = narrower
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let wider_extra = wider
        .get("additionalProperties")
        .unwrap_or(&Value::Bool(true));
    let narrower_extra = narrower
        .get("additionalProperties")
        .unwrap_or(&Value::Bool(true));
    let required = |s: &Map<String, Value>| -> Vec<String> {
        s.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let narrower_required = required(narrower);
    if let Some(missing) = required(wider)
        .into_iter()
        .find(|r| !narrower_required.contains(r))
    {
        return Err(differs(place_of(at), Difference::Required(missing)));
    }
    for (name, schema) in narrower_props {
        let path = format!("{at}/properties/{name}");
        check(wider_props.get(name).unwrap_or(wider_extra), schema, &path)?;
    }
    for (name, schema) in wider_props {
        if !narrower_props.contains_key(name) {
            // The narrower schema lets `name` through as an extra property.
            check(schema, narrower_extra, &format!("{at}/properties/{name}"))?;
        }
    }
    check(
        wider_extra,
        narrower_extra,
        &format!("{at}/additionalProperties"),
    )
}

fn place_of(at: &str) -> &str {
    if at.is_empty() { "the top level" } else { at }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn search(max: u64, extra: bool) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": max},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50}
            },
            "required": ["query"],
            "additionalProperties": extra
        })
    }

    /// A schema covers itself and anything tighter, never anything looser.
    #[test]
    fn tighter_is_covered_looser_is_not() {
        assert_eq!(covers(&search(200, false), &search(200, false)), Ok(()));
        assert_eq!(covers(&search(500, false), &search(200, false)), Ok(()));
        let looser = covers(&search(200, false), &search(500, false))
            .unwrap_err()
            .to_string();
        assert!(
            looser.contains("/properties/query") && looser.contains("maxLength"),
            "{looser}"
        );
        let extra = covers(&search(200, false), &search(200, true))
            .unwrap_err()
            .to_string();
        assert!(extra.contains("additionalProperties"), "{extra}");
        assert_eq!(covers(&json!({}), &search(200, true)), Ok(()));
    }

    /// Required fields, types and enums are compared; unknown keywords are
    /// refused unless both sides say the same.
    #[test]
    fn required_types_enums_and_opaque_keywords() {
        let mut strict = search(200, false);
        strict["required"] = json!(["query", "limit"]);
        let why = covers(&strict, &search(200, false))
            .unwrap_err()
            .to_string();
        assert!(why.contains("\"limit\" is required"), "{why}");
        let number = json!({"type": "number"});
        assert_eq!(covers(&number, &json!({"type": "integer"})), Ok(()));
        assert!(covers(&json!({"type": "integer"}), &number).is_err());
        let priority = json!({"enum": ["low", "normal", "high"]});
        assert_eq!(covers(&priority, &json!({"enum": ["low", "high"]})), Ok(()));
        assert!(covers(&json!({"enum": ["low"]}), &priority).is_err());
        let any_of = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        assert_eq!(covers(&any_of, &any_of), Ok(()));
        assert!(covers(&json!({"type": "string"}), &any_of).is_err());
    }
}
