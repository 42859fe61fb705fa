//! Whether one JSON Schema accepts every value another accepts — checked
//! conservatively on the common structural keywords: "yes" is a proof for
//! the schemas it can read, anything it cannot prove is "no" with the
//! first reason, so a pairing built on it (a fallback standing in for a
//! tool) never accepts less than it promises.

use serde_json::{Map, Value};

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
pub fn covers(wider: &Value, narrower: &Value) -> Result<(), String> {
    check(wider, narrower, "")
}

fn check(wider: &Value, narrower: &Value, at: &str) -> Result<(), String> {
    let place = if at.is_empty() { "the top level" } else { at };
    if narrower == &Value::Bool(false) {
        return Ok(());
    }
    let wider = match wider {
        Value::Bool(true) => return Ok(()),
        Value::Object(w) if w.is_empty() => return Ok(()),
        Value::Object(w) => w,
        _ => {
            return Err(format!(
                "at {place}: nothing is accepted, the other accepts values"
            ));
        }
    };
    let narrower = match narrower {
        Value::Object(n) => n,
        _ => {
            return Err(format!(
                "at {place}: any value is accepted, the other is bounded"
            ));
        }
    };
    if wider == narrower {
        return Ok(());
    }
    for key in OPAQUE {
        if (wider.get(*key).is_some() || narrower.get(*key).is_some())
            && wider.get(*key) != narrower.get(*key)
        {
            return Err(format!(
                "at {place}: `{key}` differs and cannot be compared"
            ));
        }
    }
    types(wider, narrower, place)?;
    enums(wider, narrower, place)?;
    bounds(wider, narrower, place)?;
    if wider.get("pattern").is_some() && wider.get("pattern") != narrower.get("pattern") {
        return Err(format!("at {place}: `pattern` differs"));
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
) -> Result<(), String> {
    let Some(allowed) = type_set(wider) else {
        return Ok(());
    };
    let accepts = |t: &str| allowed.contains(&t) || (t == "integer" && allowed.contains(&"number"));
    if let Some(Value::Array(values)) = narrower.get("enum") {
        return match values.iter().find(|v| !accepts(json_type(v))) {
            None => Ok(()),
            Some(v) => Err(format!("at {place}: value {v} is not of type {allowed:?}")),
        };
    }
    match type_set(narrower) {
        None => Err(format!(
            "at {place}: any type is accepted, the other allows only {allowed:?}"
        )),
        Some(given) => match given.into_iter().find(|t| !accepts(t)) {
            None => Ok(()),
            Some(t) => Err(format!(
                "at {place}: type {t:?} is not accepted (only {allowed:?})"
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
) -> Result<(), String> {
    let Some(Value::Array(allowed)) = wider.get("enum") else {
        return Ok(());
    };
    let Some(Value::Array(given)) = narrower.get("enum") else {
        return Err(format!(
            "at {place}: only {} listed values are accepted",
            allowed.len()
        ));
    };
    match given.iter().find(|v| !allowed.contains(v)) {
        None => Ok(()),
        Some(v) => Err(format!("at {place}: value {v} is not in the accepted enum")),
    }
}

/// Lower bounds must not be higher, upper bounds not lower.
fn bounds(
    wider: &Map<String, Value>,
    narrower: &Map<String, Value>,
    place: &str,
) -> Result<(), String> {
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
                Some(n) => return Err(format!("at {place}: `{key}` is {w}, the other allows {n}")),
                None => {
                    return Err(format!(
                        "at {place}: `{key}` is {w}, the other has no such bound"
                    ));
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
) -> Result<(), String> {
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
        return Err(format!(
            "at {}: {missing:?} is required, the other does not require it",
            place_of(at)
        ));
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
        let looser = covers(&search(200, false), &search(500, false)).unwrap_err();
        assert!(
            looser.contains("/properties/query") && looser.contains("maxLength"),
            "{looser}"
        );
        let extra = covers(&search(200, false), &search(200, true)).unwrap_err();
        assert!(extra.contains("additionalProperties"), "{extra}");
        assert_eq!(covers(&json!({}), &search(200, true)), Ok(()));
    }

    /// Required fields, types and enums are compared; unknown keywords are
    /// refused unless both sides say the same.
    #[test]
    fn required_types_enums_and_opaque_keywords() {
        let mut strict = search(200, false);
        strict["required"] = json!(["query", "limit"]);
        let why = covers(&strict, &search(200, false)).unwrap_err();
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
