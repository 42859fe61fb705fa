//! ListTools: the tools a caller can call now, natively or in OpenAI's
//! function-calling shape.

use serde_json::{Value, json};
use std::sync::Arc;
use toolmesh::pb::{ListToolsResponse, ToolFormat};
use toolmesh::reference::VersionPattern;
use toolmesh::{Snapshot, ToolEntry};

/// The version a bare name resolves to among those callable now, per name,
/// sorted by name.
pub(crate) fn callable(
    snapshot: &Snapshot,
    in_rotation: impl Fn(&ToolEntry) -> bool,
) -> Vec<&Arc<ToolEntry>> {
    snapshot
        .names()
        .filter_map(|name| {
            snapshot
                .versions(name)
                .iter()
                .rev()
                .find(|e| VersionPattern::Newest.matches(e.def.version()) && in_rotation(e))
        })
        .collect()
}

/// Builds the response for `entries` in `format`.
pub(crate) fn render(
    snapshot_version: u64,
    entries: &[&Arc<ToolEntry>],
    format: ToolFormat,
) -> ListToolsResponse {
    let formatted = match format {
        ToolFormat::Openai => openai(entries).to_string(),
        ToolFormat::Native | ToolFormat::Unspecified => String::new(),
    };
    ListToolsResponse {
        snapshot_version,
        tools: entries.iter().map(|e| e.def.spec().clone()).collect(),
        formatted,
    }
}

/// `[{"type":"function","function":{"name","description","parameters"}}]`.
fn openai(entries: &[&Arc<ToolEntry>]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| {
                json!({
                    "type": "function",
                    "function": {
                        "name": e.def.name(),
                        "description": e.def.spec().description,
                        "parameters": e.def.input_schema(),
                    }
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::pb::ToolSpec;
    use toolmesh::{Instance, ToolDef};

    fn entry(name: &str, version: &str, healthy: bool) -> ToolEntry {
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
            }]
            .into(),
            disabled: None,
        }
    }

    /// Only callable tools are listed, one version per name (the one a bare
    /// name resolves to), sorted; pre-releases and unhealthy ones are left out.
    #[test]
    fn lists_callable_tools_sorted() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("zeta", "1.0.0", true))
            .put(entry("alpha", "1.0.0", true))
            .put(entry("alpha", "1.1.0", true))
            .put(entry("alpha", "2.0.0-rc.1", true))
            .put(entry("down", "1.0.0", false));
        let s = b.finish();
        let listed = callable(&s, |e| e.exposed());
        let names: Vec<String> = listed
            .iter()
            .map(|e| format!("{}@{}", e.def.name(), e.def.version()))
            .collect();
        assert_eq!(names, ["alpha@1.1.0", "zeta@1.0.0"]);
    }

    /// The OpenAI export is the function-calling array with the input schema
    /// as parameters.
    #[test]
    fn openai_export() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("search_kb", "1.0.0", true));
        let s = b.finish();
        let listed = callable(&s, |e| e.exposed());
        let response = render(s.version(), &listed, ToolFormat::Openai);
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
        assert!(render(1, &listed, ToolFormat::Native).formatted.is_empty());
    }
}
