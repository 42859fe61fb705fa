//! ListTools: the tools a caller can call now, natively or in OpenAI's
//! function-calling shape.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolmesh::pb::{ListToolsResponse, ToolFormat};
use toolmesh::reference::VersionPattern;
use toolmesh::{Snapshot, ToolEntry};
use toolmesh_governance::{Decision, Policy, Principal};

/// How long a rendered listing is reused. Snapshots and policies are keyed
/// exactly; this bounds only how long an expired ejection stays hidden.
const CACHE_TTL: Duration = Duration::from_secs(1);
/// Listings kept at most (distinct caller views × formats).
const CACHE_ENTRIES: usize = 256;

/// Which listing: the snapshot listed, the current one (whose switches and
/// instances apply to a pinned listing too), policy generation, the
/// caller's identity and roles, the format.
type CacheKey = (u64, u64, u64, String, i32);

/// Rendered ListTools answers: a snapshot never changes, so a listing for
/// the same caller view is built once, not on every call.
#[derive(Debug, Default)]
pub(crate) struct ListCache {
    entries: Mutex<HashMap<CacheKey, (Instant, ListToolsResponse)>>,
}

impl ListCache {
    /// The cached answer for `key`, or `render`'s, remembered.
    pub(crate) fn get_or_render(
        &self,
        key: CacheKey,
        render: impl FnOnce() -> ListToolsResponse,
    ) -> ListToolsResponse {
        if let Some((at, hit)) = self.lock().get(&key)
            && at.elapsed() < CACHE_TTL
        {
            return hit.clone();
        }
        let response = render();
        let mut entries = self.lock();
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(key, (Instant::now(), response.clone()));
        response
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CacheKey, (Instant, ListToolsResponse)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The cache key of a listing for `who`.
pub(crate) fn cache_key(
    snapshot_version: u64,
    current_version: u64,
    policy_generation: u64,
    who: &toolmesh_governance::Principal,
    format: ToolFormat,
) -> CacheKey {
    let view = format!("{}/{}/{}", who.tenant, who.name, who.roles.join(","));
    (
        snapshot_version,
        current_version,
        policy_generation,
        view,
        format as i32,
    )
}

/// The version a bare name resolves to among those callable now, per name,
/// sorted by name.
pub(crate) fn callable(
    snapshot: &Snapshot,
    in_rotation: impl Fn(&Arc<ToolEntry>) -> bool,
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
    Some(narrowing.apply(entry.def.input_schema()))
}

/// Builds the response for `entries` in `format`; `schema_of` gives the
/// input schema a caller sees where it differs from the tool's own.
pub(crate) fn render(
    snapshot_version: u64,
    entries: &[&Arc<ToolEntry>],
    format: ToolFormat,
    schema_of: impl Fn(&ToolEntry) -> Option<Value>,
) -> ListToolsResponse {
    let narrowed: Vec<Option<Value>> = entries.iter().map(|e| schema_of(e)).collect();
    let formatted = match format {
        ToolFormat::Openai => openai(entries, &narrowed).to_string(),
        ToolFormat::Native | ToolFormat::Unspecified => String::new(),
    };
    let tools = entries
        .iter()
        .zip(&narrowed)
        .map(|(e, schema)| {
            let mut spec = e.def.spec().clone();
            if let Some(schema) = schema {
                spec.input_schema = schema.to_string();
            }
            spec
        })
        .collect();
    ListToolsResponse {
        snapshot_version,
        tools,
        formatted,
    }
}

/// `[{"type":"function","function":{"name","description","parameters"}}]`.
fn openai(entries: &[&Arc<ToolEntry>], narrowed: &[Option<Value>]) -> Value {
    Value::Array(
        entries
            .iter()
            .zip(narrowed)
            .map(|(e, schema)| {
                json!({
                    "type": "function",
                    "function": {
                        "name": e.def.name(),
                        "description": e.def.spec().description,
                        "parameters": schema.as_ref().unwrap_or(e.def.input_schema()),
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
                execute_token: "".into(),
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
        let names: Vec<String> = listed.iter().map(|e| e.def.label()).collect();
        assert_eq!(names, ["alpha@1.1.0", "zeta@1.0.0"]);
    }

    /// A listing is rendered once per snapshot, policy and caller view; a
    /// new snapshot version renders again.
    #[test]
    fn listings_are_cached_per_view() {
        let cache = ListCache::default();
        let who = toolmesh_governance::Principal {
            name: "a".into(),
            tenant: "t".into(),
            roles: vec!["agent".into()],
            anonymous: false,
        };
        let renders = std::cell::Cell::new(0);
        let render = |version| {
            renders.set(renders.get() + 1);
            render(version, &[], ToolFormat::Native, |_| None)
        };
        for _ in 0..3 {
            cache.get_or_render(cache_key(7, 7, 1, &who, ToolFormat::Native), || render(7));
        }
        assert_eq!(renders.get(), 1);
        let other = toolmesh_governance::Principal {
            roles: vec!["admin".into()],
            ..who.clone()
        };
        cache.get_or_render(cache_key(7, 7, 1, &other, ToolFormat::Native), || render(7));
        let fresh = cache.get_or_render(cache_key(8, 8, 1, &who, ToolFormat::Native), || render(8));
        assert_eq!(renders.get(), 3);
        assert_eq!(fresh.snapshot_version, 8);
    }

    /// The OpenAI export is the function-calling array with the input schema
    /// as parameters.
    #[test]
    fn openai_export() {
        let mut b = Snapshot::empty("e").next();
        b.put(entry("search_kb", "1.0.0", true));
        let s = b.finish();
        let listed = callable(&s, |e| e.exposed());
        let response = render(s.version(), &listed, ToolFormat::Openai, |_| None);
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
            render(1, &listed, ToolFormat::Native, |_| None)
                .formatted
                .is_empty()
        );
    }
}
