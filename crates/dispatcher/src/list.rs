//! ListTools: the tools a caller can call now, natively or in a model
//! vendor's shape (OpenAI Chat and Responses, Anthropic, Gemini, MCP).
//!
//! Names go out unchanged: registration admits only what every vendor
//! accepts (`toolmesh::spec::validate_name`), so a model calls a tool by
//! the name it was shown and no format needs a mapping back.

use crate::call::resolve;
use serde_json::{Value, json};
use std::sync::Arc;
use toolmesh::Principal;
use toolmesh::pb::{ListToolsResponse, RiskLevel, ToolFormat, ToolSpec};
use toolmesh::rollout::Caller;
use toolmesh::spec::SEARCH_TOOL;
use toolmesh::{Snapshot, ToolDef, ToolEntry};
use toolmesh_policy::{Decision, Policy};

/// The version of `name` listed for `caller`: the one a bare name resolves
/// to among the `exposed` ([`resolve::version`]), when `keep` keeps it.
/// One name of [`callable`](crate::projection::callable), for a watch that looks only at the names a
/// change touched.
pub(crate) fn listed<'s>(
    snapshot: &'s Snapshot,
    name: &str,
    caller: &Caller<'_>,
    exposed: &impl Fn(&Arc<ToolEntry>) -> bool,
    keep: &impl Fn(&Arc<ToolEntry>) -> bool,
) -> Option<&'s Arc<ToolEntry>> {
    resolve::version(snapshot, name, caller, exposed)
        .map(|choice| choice.entry)
        .filter(|entry| keep(entry))
}

/// The input schema of `entry` as `who`'s grant narrows it, when it does
/// (`[grants.arguments.TOOL]`); nothing is decided when no grant narrows.
pub(crate) fn narrowed(policy: &Policy, who: &Principal, entry: &ToolEntry) -> Option<Value> {
    if !policy.narrows_any() {
        return None;
    }
    let Decision::Allow { rule, .. } = policy.decide(who, entry.def.spec()) else {
        return None;
    };
    let narrowing = policy.narrowing(&rule, entry.def.name())?;
    Some(
        entry
            .def
            .read_input_schema(|schema| narrowing.apply(schema)),
    )
}

/// `entry`'s spec as a caller's listing shows it: with the input schema
/// `schema` its grant narrows it to, when one does.
fn listed_spec(entry: &ToolEntry, schema: Option<&Value>) -> ToolSpec {
    let mut spec = entry.def.spec().clone();
    if let Some(schema) = schema {
        spec.input_schema = schema.to_string();
    }
    spec
}

/// Builds the response for `entries` in `format`; `schema_of` gives the
/// input schema a caller sees where it differs from the tool's own. In a
/// `deferred` listing the Anthropic shape marks every tool
/// `"defer_loading": true` but the dispatcher's own `search_tools`.
pub(crate) fn render(
    snapshot_version: u64,
    entries: &[Arc<ToolEntry>],
    (format, deferred): (ToolFormat, bool),
    schema_of: impl Fn(&ToolEntry) -> Option<Value>,
) -> ListToolsResponse {
    let narrowed: Vec<Option<Value>> = entries.iter().map(|e| schema_of(e)).collect();
    let entries: Vec<&Arc<ToolEntry>> = entries.iter().collect();
    render_narrowed(snapshot_version, &entries, &narrowed, (format, deferred))
}

/// [`render`] with the schema each entry is narrowed to already worked out
/// (`narrowed[i]` for `entries[i]`; none: the tool's own).
pub(crate) fn render_narrowed(
    snapshot_version: u64,
    entries: &[&Arc<ToolEntry>],
    narrowed: &[Option<Value>],
    (format, deferred): (ToolFormat, bool),
) -> ListToolsResponse {
    // Each shape shows the schema this caller is held to (its grant may
    // narrow the tool's own).
    let each = |shape: fn(&ToolDef, &Value) -> Value| {
        Value::Array(
            entries
                .iter()
                .zip(narrowed)
                .map(|(e, schema)| match schema {
                    Some(schema) => shape(&e.def, schema),
                    None => e.def.read_input_schema(|schema| shape(&e.def, schema)),
                })
                .collect(),
        )
    };
    let formatted = match format {
        ToolFormat::Openai => each(openai_chat),
        ToolFormat::OpenaiResponses => each(openai_responses),
        ToolFormat::Anthropic if deferred => each(|def, schema| {
            let mut tool = anthropic(def, schema);
            if def.name() != SEARCH_TOOL {
                tool["defer_loading"] = Value::Bool(true);
            }
            tool
        }),
        ToolFormat::Anthropic => each(anthropic),
        ToolFormat::Gemini => json!({ "functionDeclarations": each(gemini) }),
        ToolFormat::Mcp => each(mcp),
        ToolFormat::Native | ToolFormat::Unspecified => Value::Null,
    };
    let formatted = if formatted.is_null() {
        String::new()
    } else {
        formatted.to_string()
    };
    let tools = entries
        .iter()
        .zip(narrowed)
        .map(|(e, schema)| listed_spec(e, schema.as_ref()))
        .collect();
    ListToolsResponse {
        snapshot_version,
        tools,
        formatted,
        next_page_token: String::new(),
    }
}

/// OpenAI Chat Completions: `{"type":"function","function":{"name",
/// "description","parameters"}}`.
fn openai_chat(def: &ToolDef, schema: &Value) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": def.name(),
            "description": def.spec().description,
            "parameters": schema,
        }
    })
}

/// OpenAI Responses: flat `{"type":"function","name","description",
/// "parameters","strict"}`; `strict` only when the schema is in OpenAI's
/// strict subset (the API would refuse it otherwise, as strict is its
/// default).
fn openai_responses(def: &ToolDef, schema: &Value) -> Value {
    json!({
        "type": "function",
        "name": def.name(),
        "description": def.spec().description,
        "parameters": schema,
        "strict": is_strict(schema),
    })
}

/// Anthropic Messages: `{"name","description","input_schema"}`.
fn anthropic(def: &ToolDef, schema: &Value) -> Value {
    json!({
        "name": def.name(),
        "description": def.spec().description,
        "input_schema": schema,
    })
}

/// Gemini: one `functionDeclarations` entry, the schema as
/// `parametersJsonSchema` (full JSON Schema, not the OpenAPI subset).
fn gemini(def: &ToolDef, schema: &Value) -> Value {
    json!({
        "name": def.name(),
        "description": def.spec().description,
        "parametersJsonSchema": schema,
    })
}

/// Whether an output schema may be MCP's `outputSchema`: one whose results
/// are JSON objects (a client expects `structuredContent` for each, and
/// the door sends only objects there). A schema saying another `type`, such
/// as an array of results, is left out; the result still goes as text.
fn answers_objects(schema: &Value) -> bool {
    match schema.get("type") {
        None => schema.is_object(),
        Some(Value::String(kind)) => kind == "object",
        Some(_) => false,
    }
}

/// The MCP `Tool`: schemas, hints from risk and idempotency, and toolmesh's
/// own facts under `_meta` (`toolmesh/version`, `toolmesh/owner`,
/// `toolmesh/deprecated`, and `toolmesh/streams_progress` for a tool that
/// reports progress to a call with a `progressToken`). MCP's `inputSchema`
/// must be an object schema.
fn mcp(def: &ToolDef, schema: &Value) -> Value {
    let spec = def.spec();
    let mut tool = json!({
        "name": def.name(),
        "title": title(def.name()),
        "description": spec.description,
        "inputSchema": match schema {
            Value::Object(schema) => Value::Object(schema.clone()),
            _ => json!({"type": "object"}),
        },
        "annotations": {
            "title": title(def.name()),
            "readOnlyHint": def.read_only(),
            "destructiveHint": def.risk() == RiskLevel::High,
            "idempotentHint": def.idempotent(),
        },
        "_meta": { "toolmesh/version": def.version().to_string() },
    });
    if let Some(output) = def.output_schema().filter(|s| answers_objects(s)) {
        tool["outputSchema"] = output.clone();
    }
    if !spec.owner.is_empty() {
        tool["_meta"]["toolmesh/owner"] = json!(spec.owner);
    }
    if !spec.deprecated.is_empty() {
        tool["_meta"]["toolmesh/deprecated"] = json!(spec.deprecated);
    }
    if def.streams_progress() {
        tool["_meta"]["toolmesh/streams_progress"] = json!(true);
    }
    tool
}

/// A title for people: `search_kb` reads "Search kb".
fn title(name: &str) -> String {
    let spaced = name.replace(['_', '-'], " ");
    let mut chars = spaced.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_ascii_uppercase().to_string() + chars.as_str()
    })
}

/// Whether `schema` is in OpenAI's strict subset: every object schema
/// closes `additionalProperties` and requires every property it declares,
/// wherever it sits (properties, items, `$defs`, `anyOf`, …).
pub(crate) fn is_strict(schema: &Value) -> bool {
    let Value::Object(map) = schema else {
        return false;
    };
    let is_object = map.get("type") == Some(&json!("object")) || map.contains_key("properties");
    if is_object {
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            return false;
        }
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let all_required = map
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|p| p.keys().all(|k| required.contains(&k.as_str())));
        if !all_required {
            return false;
        }
    }
    map.iter().all(|(key, value)| match key.as_str() {
        "properties" | "$defs" | "definitions" => value
            .as_object()
            .is_none_or(|children| children.values().all(is_strict)),
        "items" | "not" | "additionalItems" => !value.is_object() || is_strict(value),
        "anyOf" | "allOf" | "oneOf" | "prefixItems" => value
            .as_array()
            .is_none_or(|children| children.iter().all(is_strict)),
        _ => true,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::projection::callable;
    use toolmesh::rollout::{Caller, Sticky};
    use toolmesh::{Instance, Snapshot, ToolDef};

    /// A caller no rollout routes.
    pub(crate) const ANYONE: Caller<'static> = Caller {
        tenant: "t",
        principal: "p",
        sticky: Sticky::None,
    };

    /// A tool `name@version` on one instance, `healthy` or not (also the
    /// version-resolution tests' entries).
    pub(crate) fn entry(name: &str, version: &str, healthy: bool) -> ToolEntry {
        ToolEntry {
            def: Arc::new(
                ToolDef::new(ToolSpec {
                    name: name.into(),
                    version: version.into(),
                    description: format!("Does {name}."),
                    input_schema:
                        r#"{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}"#
                            .into(),
                    ..ToolSpec::default()
                })
                .unwrap(),
            ),
            instances: vec![Instance {
                executor_id: "x".into(),
                endpoint: "127.0.0.1:1".into(),
                service: "s".into(),
                healthy,
                execute_token: "".into(),
            }]
            .into(),
            disabled: None,
        }
    }

    /// The OpenAI export is the function-calling array with the input schema
    /// as parameters.
    #[test]
    fn openai_export() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("search_kb", "1.0.0", true));
        let s = b.finish();
        let listed = callable(&s, &s, &ANYONE, s.names(), |_| true);
        let response = render(s.version(), &listed, (ToolFormat::Openai, false), |_| None);
        let value: Value = serde_json::from_str(&response.formatted).unwrap();
        assert_eq!(
            value,
            json!([{
                "type": "function",
                "function": {
                    "name": "search_kb",
                    "description": "Does search_kb.",
                    "parameters": {"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}
                }
            }])
        );
        assert!(
            render(1, &listed, (ToolFormat::Native, false), |_| None)
                .formatted
                .is_empty()
        );
    }

    /// A deferred listing in the Anthropic shape marks every tool
    /// `defer_loading` but `search_tools`; other shapes, and listings not
    /// deferred, carry no such key.
    #[test]
    fn deferred_anthropic_marks_all_but_search_tools() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("search_kb", "1.0.0", true));
        let s = b.finish();
        let mut listed = vec![crate::search_tool::entry()];
        listed.extend(callable(&s, &s, &ANYONE, s.names(), |_| true));
        let shaped = |format, deferred| -> Value {
            serde_json::from_str(&render(1, &listed, (format, deferred), |_| None).formatted)
                .unwrap()
        };
        let deferred = shaped(ToolFormat::Anthropic, true);
        assert_eq!(deferred[0]["name"], SEARCH_TOOL);
        assert!(deferred[0].get("defer_loading").is_none());
        assert_eq!(deferred[1]["defer_loading"], true);
        assert_eq!(
            keys(&deferred[1]),
            ["defer_loading", "description", "input_schema", "name"]
        );
        let plain = shaped(ToolFormat::Anthropic, false);
        assert!(plain[1].get("defer_loading").is_none());
        let openai = shaped(ToolFormat::Openai, true);
        assert_eq!(openai[0]["function"]["name"], SEARCH_TOOL);
        assert!(openai[1].get("defer_loading").is_none());
    }

    /// A definition with `input_schema`, risk, idempotency, owner and
    /// deprecation for the shape tests.
    fn def_with(name: &str, input_schema: &str, output_schema: &str) -> ToolDef {
        ToolDef::new(ToolSpec {
            name: name.into(),
            version: "1.2.0".into(),
            description: "Finds articles.".into(),
            input_schema: input_schema.into(),
            output_schema: output_schema.into(),
            risk: RiskLevel::High as i32,
            idempotent: true,
            owner: "kb-team".into(),
            deprecated: "use search_kb 2".into(),
            ..ToolSpec::default()
        })
        .unwrap()
    }

    const LOOSE: &str = r#"{"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}},"required":["q"]}"#;
    const STRICT: &str = r#"{"type":"object","additionalProperties":false,"properties":{"q":{"type":"string"},"f":{"type":"object","additionalProperties":false,"properties":{"tag":{"type":"string"}},"required":["tag"]}},"required":["q","f"]}"#;

    /// OpenAI's and Anthropic's rule for names, `^[a-zA-Z0-9_-]{1,64}$`.
    fn openai_name_ok(name: &str) -> bool {
        (1..=64).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    /// Gemini's rule: starts with a letter or `_`, then `[a-zA-Z0-9_.:-]`, at most 64.
    fn gemini_name_ok(name: &str) -> bool {
        name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
    }

    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort();
        k
    }

    /// Every name registration admits is one every vendor accepts, and a
    /// name with '.' (which OpenAI and Anthropic reject) is refused at
    /// registration, saying why.
    #[test]
    fn registered_names_fit_every_vendor() {
        for name in ["a", "search_kb", "get-user-2", &"x".repeat(64)] {
            assert!(toolmesh::spec::validate_name(name).is_ok(), "{name}");
            assert!(openai_name_ok(name) && gemini_name_ok(name), "{name}");
        }
        for name in ["kb.search", "1abc", "", &"x".repeat(65), "a b", "a@1"] {
            let refused = toolmesh::spec::validate_name(name).unwrap_err().to_string();
            assert!(refused.contains("no '.'"), "{refused}");
        }
    }

    /// OpenAI Responses: flat, exactly the documented keys, name within the
    /// rule, and `strict` true only for a schema in the strict subset.
    #[test]
    fn openai_responses_shape() {
        for (schema, strict) in [(LOOSE, false), (STRICT, true)] {
            let tool = openai_responses(
                &def_with("search_kb", schema, ""),
                def_with("search_kb", schema, "").input_schema(),
            );
            assert_eq!(
                keys(&tool),
                ["description", "name", "parameters", "strict", "type"]
            );
            assert_eq!(tool["type"], "function");
            assert!(openai_name_ok(tool["name"].as_str().unwrap()));
            assert_eq!(tool["strict"], strict, "{schema}");
        }
        let chat = openai_chat(
            &def_with("search_kb", LOOSE, ""),
            def_with("search_kb", LOOSE, "").input_schema(),
        );
        assert_eq!(keys(&chat), ["function", "type"]);
        assert_eq!(
            keys(&chat["function"]),
            ["description", "name", "parameters"]
        );
    }

    /// The strict subset: every object closed and fully required, at any
    /// depth and through combinators.
    #[test]
    fn strict_subset() {
        let closed = |props: Value, required: Value| json!({"type":"object","additionalProperties":false,"properties":props,"required":required});
        assert!(is_strict(&closed(json!({}), json!([]))));
        assert!(is_strict(&closed(
            json!({"a":{"type":"string"}}),
            json!(["a"])
        )));
        assert!(
            !is_strict(&closed(json!({"a":{"type":"string"}}), json!([]))),
            "a not required"
        );
        assert!(
            !is_strict(&json!({"type":"object","properties":{}})),
            "open object"
        );
        let nested_open = closed(
            json!({"a":{"type":"array","items":{"type":"object","properties":{}}}}),
            json!(["a"]),
        );
        assert!(!is_strict(&nested_open), "open object inside items");
        let in_any_of = closed(
            json!({"a":{"anyOf":[{"type":"string"},{"type":"object"}]}}),
            json!(["a"]),
        );
        assert!(!is_strict(&in_any_of), "open object inside anyOf");
        assert!(!is_strict(&json!(true)));
    }

    /// Anthropic: exactly name, description and input_schema; the name fits.
    #[test]
    fn anthropic_shape() {
        let tool = anthropic(
            &def_with("search_kb", LOOSE, ""),
            def_with("search_kb", LOOSE, "").input_schema(),
        );
        assert_eq!(keys(&tool), ["description", "input_schema", "name"]);
        assert!(openai_name_ok(tool["name"].as_str().unwrap()));
        assert_eq!(tool["input_schema"]["type"], "object");
    }

    /// Gemini: a `functionDeclarations` list whose entries carry the schema
    /// as `parametersJsonSchema`.
    #[test]
    fn gemini_shape() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("search_kb", "1.0.0", true));
        let s = b.finish();
        let listed = callable(&s, &s, &ANYONE, s.names(), |_| true);
        let value: Value = serde_json::from_str(
            &render(s.version(), &listed, (ToolFormat::Gemini, false), |_| None).formatted,
        )
        .unwrap();
        assert_eq!(keys(&value), ["functionDeclarations"]);
        let declaration = &value["functionDeclarations"][0];
        assert_eq!(
            keys(declaration),
            ["description", "name", "parametersJsonSchema"]
        );
        assert!(gemini_name_ok(declaration["name"].as_str().unwrap()));
    }

    /// MCP: name, schemas (an object `inputSchema`; `outputSchema` when the
    /// tool has one), hints from risk and idempotency, toolmesh facts in
    /// `_meta`, never `@version` in the name.
    #[test]
    fn mcp_shape() {
        let tool = mcp(
            &def_with("search_kb", LOOSE, r#"{"type":"object"}"#),
            def_with("search_kb", LOOSE, r#"{"type":"object"}"#).input_schema(),
        );
        assert_eq!(tool["name"], "search_kb");
        assert_eq!(tool["title"], "Search kb");
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["outputSchema"], json!({"type":"object"}));
        assert_eq!(
            tool["annotations"],
            json!({"title":"Search kb","readOnlyHint":false,"destructiveHint":true,"idempotentHint":true})
        );
        assert_eq!(
            tool["_meta"],
            json!({"toolmesh/version":"1.2.0","toolmesh/owner":"kb-team","toolmesh/deprecated":"use search_kb 2"})
        );
        let plain = mcp(
            &def_with("t", r#"{"type":"object"}"#, ""),
            def_with("t", r#"{"type":"object"}"#, "").input_schema(),
        );
        assert!(plain.get("outputSchema").is_none());
        let listed = mcp(
            &def_with("t", r#"{"type":"object"}"#, r#"{"type":"array"}"#),
            def_with("t", r#"{"type":"object"}"#, "").input_schema(),
        );
        assert!(listed.get("outputSchema").is_none(), "an array of results");
        let read_only = ToolDef::new(ToolSpec {
            read_only: true,
            risk: RiskLevel::Low as i32,
            ..def_with("t", LOOSE, "").spec().clone()
        })
        .unwrap();
        assert_eq!(
            mcp(&read_only, read_only.input_schema())["annotations"]["readOnlyHint"],
            true
        );
        assert!(plain["_meta"].get("toolmesh/streams_progress").is_none());
        let streaming = ToolDef::new(ToolSpec {
            streams_progress: true,
            ..def_with("t", LOOSE, "").spec().clone()
        })
        .unwrap();
        assert_eq!(
            mcp(&streaming, streaming.input_schema())["_meta"]["toolmesh/streams_progress"],
            true
        );
    }
}
