//! Redaction of `"x-sensitive": true` values, following the schema forms the validator resolves.

use super::REDACTED;
use serde_json::Value;

/// Schemas followed (through `$ref`, `allOf`, …) for one value before giving up and redacting it.
const MAX_SCHEMAS_PER_VALUE: usize = 64;
/// Nesting depth beyond which a value is redacted whole.
const MAX_DEPTH: usize = 64;
/// Compiled size allowed for one `patternProperties` regex; beyond it the key counts as matching.
const MAX_PATTERN_BYTES: usize = 256 * 1024;

/// `arguments` with every value whose schema says `"x-sensitive": true`
/// replaced by [`REDACTED`].
///
/// Walks `properties`, `patternProperties`, `additionalProperties`,
/// `unevaluatedProperties`, `items`, `prefixItems`, `additionalItems`,
/// `unevaluatedItems` and `contains`, and through `$ref` and
/// `$dynamicRef` (JSON Pointers, %-encoded or not, `$anchor` and
/// `$dynamicAnchor` names, and `$id`s within the schema), `allOf`, `anyOf`,
/// `oneOf`, `not`, `if`, `then`, `else`, `dependentSchemas` and draft-7
/// `dependencies`, at any depth. When unsure it redacts: a reference it
/// cannot resolve within the schema redacts the value whole, a
/// `patternProperties` regex it cannot compile matches every key, and a
/// value nested deeper than 64 levels or reached through too many schemas
/// is redacted whole.
pub fn redact(schema: &Value, arguments: &Value) -> Value {
    redact_value(schema, vec![schema], arguments, 0)
}

fn redact_value(root: &Value, schemas: Vec<&Value>, value: &Value, depth: usize) -> Value {
    let Some(schemas) = expand(root, schemas) else {
        return Value::String(REDACTED.into());
    };
    if depth > MAX_DEPTH
        || schemas
            .iter()
            .any(|s| s.get("x-sensitive") == Some(&Value::Bool(true)))
    {
        return Value::String(REDACTED.into());
    }
    match value {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (key, item) in map {
                let children = schemas
                    .iter()
                    .flat_map(|s| property_schemas(s, key))
                    .collect();
                out.insert(key.clone(), redact_value(root, children, item, depth + 1));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let children = schemas.iter().flat_map(|s| item_schemas(s, i)).collect();
                    redact_value(root, children, item, depth + 1)
                })
                .collect(),
        ),
        scalar => scalar.clone(),
    }
}

/// The subschemas of `schema` that apply to its property `key`.
fn property_schemas<'a>(schema: &'a Value, key: &str) -> Vec<&'a Value> {
    let mut out = Vec::new();
    let named = schema.get("properties").and_then(|p| p.get(key));
    out.extend(named);
    let mut matched = false;
    if let Some(Value::Object(patterns)) = schema.get("patternProperties") {
        for (pattern, sub) in patterns {
            if pattern_matches(pattern, key) {
                matched = true;
                out.push(sub);
            }
        }
    }
    if named.is_none() && !matched {
        out.extend(schema.get("additionalProperties"));
        // Also skips properties that subschemas evaluate; assuming it
        // applies to those too redacts more, never less.
        out.extend(schema.get("unevaluatedProperties"));
    }
    out
}

/// The subschemas of `schema` that apply to its item at `index`.
fn item_schemas(schema: &Value, index: usize) -> Vec<&Value> {
    let mut out = Vec::new();
    let positional = schema
        .get("prefixItems")
        .and_then(|p| p.get(index))
        .or_else(|| {
            schema
                .get("items")
                .filter(|v| v.is_array())
                .and_then(|p| p.get(index))
        });
    match positional {
        Some(p) => out.push(p),
        None => {
            out.extend(schema.get("items").filter(|v| !v.is_array()));
            out.extend(schema.get("additionalItems"));
            out.extend(schema.get("unevaluatedItems"));
        }
    }
    out.extend(schema.get("contains"));
    out
}

/// Whether `key` matches a `patternProperties` regex; a pattern that does
/// not compile here counts as matching (redacting more, never less).
fn pattern_matches(pattern: &str, key: &str) -> bool {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_PATTERN_BYTES)
        .build()
        .map_or(true, |r| r.is_match(key))
}

/// The schemas that apply to one value: the given ones plus everything
/// reachable through references and the applicators. `None` when there are
/// too many to follow or a reference does not resolve (the caller then
/// redacts).
fn expand<'a>(root: &'a Value, start: Vec<&'a Value>) -> Option<Vec<&'a Value>> {
    let mut out: Vec<&Value> = Vec::new();
    let mut work = start;
    while let Some(schema) = work.pop() {
        if !schema.is_object() || out.iter().any(|s| std::ptr::eq(*s, schema)) {
            continue;
        }
        if out.len() >= MAX_SCHEMAS_PER_VALUE {
            return None;
        }
        out.push(schema);
        for key in ["$ref", "$dynamicRef"] {
            if let Some(reference) = schema.get(key) {
                let targets = reference.as_str().map(|r| resolve(root, r))?;
                if targets.is_empty() {
                    return None;
                }
                work.extend(targets);
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(list)) = schema.get(key) {
                work.extend(list.iter());
            }
        }
        for key in ["not", "if", "then", "else"] {
            work.extend(schema.get(key));
        }
        for key in ["dependentSchemas", "dependencies"] {
            if let Some(Value::Object(map)) = schema.get(key) {
                // Object values are schemas; arrays (draft-7 property lists) are not.
                work.extend(map.values().filter(|v| v.is_object()));
            }
        }
    }
    Some(out)
}

/// Every subschema of `root` that `reference` may name: a JSON Pointer
/// (`#/$defs/a%20b`), an anchor (`#name`), or an `$id` within the schema,
/// optionally followed by a fragment. Empty when none matches.
fn resolve<'a>(root: &'a Value, reference: &str) -> Vec<&'a Value> {
    let (base, fragment) = reference.split_once('#').unwrap_or((reference, ""));
    let resources: Vec<&Value> = if base.is_empty() {
        vec![root]
    } else {
        let mut found = Vec::new();
        walk(root, &mut |s| {
            let id = s.get("$id").and_then(Value::as_str).unwrap_or_default();
            let id = id.split('#').next().unwrap_or_default();
            if !id.is_empty() && (id == base || id.ends_with(&format!("/{base}"))) {
                found.push(s);
            }
        });
        found
    };
    let Some(fragment) = percent_decode(fragment) else {
        return Vec::new();
    };
    let mut targets = Vec::new();
    for resource in resources {
        if fragment.is_empty() || fragment.starts_with('/') {
            targets.extend(resource.pointer(&fragment));
        } else {
            walk(resource, &mut |s| {
                let named = ["$anchor", "$dynamicAnchor"]
                    .iter()
                    .any(|k| s.get(*k).and_then(Value::as_str) == Some(fragment.as_str()));
                if named {
                    targets.push(s);
                }
            });
        }
    }
    targets
}

/// Calls `visit` on every object in `value`, depth first, without recursion.
fn walk<'a>(value: &'a Value, visit: &mut impl FnMut(&'a Value)) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                visit(v);
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
}

/// `%XX` sequences decoded (RFC 3986); `None` when malformed or not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each schema form the validator resolves, with the value it must hide:
    /// every case checks the redacted field and that a plain field survives.
    #[test]
    fn every_resolved_form_is_followed() {
        let secret = json!({"x-sensitive": true});
        let cases = [
            (
                "$anchor ref",
                json!({"properties": {"s": {"$ref": "#tok"}}, "$defs": {"t": {"$anchor": "tok", "x-sensitive": true}}}),
            ),
            (
                "%-encoded pointer",
                json!({"properties": {"s": {"$ref": "#/$defs/a%20b"}}, "$defs": {"a b": secret}}),
            ),
            (
                "~-escaped pointer",
                json!({"properties": {"s": {"$ref": "#/$defs/a~1b"}}, "$defs": {"a/b": secret}}),
            ),
            (
                "dependentSchemas",
                json!({"dependentSchemas": {"p": {"properties": {"s": secret}}}}),
            ),
            (
                "draft-7 dependencies",
                json!({"dependencies": {"p": {"properties": {"s": secret}}, "q": ["p"]}}),
            ),
            (
                "$defs via plain pointer",
                json!({"properties": {"s": {"$ref": "#/$defs/k"}}, "$defs": {"k": secret}}),
            ),
            (
                "definitions",
                json!({"properties": {"s": {"$ref": "#/definitions/k"}}, "definitions": {"k": secret}}),
            ),
            ("allOf", json!({"allOf": [{"properties": {"s": secret}}]})),
            (
                "anyOf",
                json!({"anyOf": [{}, {"properties": {"s": secret}}]}),
            ),
            ("oneOf", json!({"oneOf": [{"properties": {"s": secret}}]})),
            (
                "if/then/else",
                json!({"if": {"required": ["p"]}, "then": {}, "else": {"properties": {"s": secret}}}),
            ),
            ("if", json!({"if": {"properties": {"s": secret}}})),
            (
                "patternProperties also on a named property",
                json!({"properties": {"s": {"type": "string"}}, "patternProperties": {"^s$": secret}}),
            ),
            (
                "additionalProperties",
                json!({"properties": {"p": {}}, "additionalProperties": secret}),
            ),
            (
                "unevaluatedProperties",
                json!({"properties": {"p": {}}, "unevaluatedProperties": secret}),
            ),
            (
                "$id-relative ref",
                json!({"$id": "https://example.com/root.json", "properties": {"s": {"$ref": "item.json"}},
                       "$defs": {"i": {"$id": "item.json", "x-sensitive": true}}}),
            ),
            (
                "$dynamicRef",
                json!({"properties": {"s": {"$dynamicRef": "#meta"}}, "$defs": {"m": {"$dynamicAnchor": "meta", "x-sensitive": true}}}),
            ),
            (
                "unresolvable ref",
                json!({"properties": {"s": {"$ref": "#/$defs/missing"}}}),
            ),
        ];
        for (form, schema) in cases {
            let out = redact(&schema, &json!({"p": "plain", "s": "secret"}));
            assert_eq!(out["s"], json!(REDACTED), "{form}: {out}");
            assert_eq!(out["p"], json!("plain"), "{form}: {out}");
        }
    }

    /// Array forms: `items`, `prefixItems` and `contains` reach the items.
    #[test]
    fn array_forms_are_followed() {
        let secret = json!({"x-sensitive": true});
        let out = redact(
            &json!({"properties": {
                "a": {"items": {"properties": {"s": secret}}},
                "b": {"prefixItems": [{}, secret]},
                "c": {"contains": secret}
            }}),
            &json!({"a": [{"s": 1, "p": 2}], "b": [1, 2, 3], "c": [1]}),
        );
        assert_eq!(
            out,
            json!({"a": [{"s": REDACTED, "p": 2}], "b": [1, REDACTED, 3], "c": [REDACTED]})
        );
    }

    /// A key that no pattern matches is not redacted by it; a pattern that
    /// does not compile matches every key.
    #[test]
    fn patterns_are_matched() {
        let schema = json!({"patternProperties": {"^x-": {"x-sensitive": true}}});
        assert_eq!(
            redact(&schema, &json!({"x-key": 1, "name": 2})),
            json!({"x-key": REDACTED, "name": 2})
        );
        let broken = json!({"patternProperties": {"(": {"x-sensitive": true}}});
        assert_eq!(redact(&broken, &json!({"a": 1})), json!({"a": REDACTED}));
        assert_eq!(percent_decode("a%2"), None);
        assert_eq!(percent_decode("a%zz"), None);
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
    }
}
