//! The organisation simulated at one scale: how many executors, which tools
//! each serves, and tool definitions of a realistic size.
//!
//! The mix, at every scale: one executor in ten belongs to a replicated
//! service (ten replicas serving the same ten tools), the other nine in ten
//! are single instances of a team's own ten tools. At full scale that is
//! 10,000 executors and 100,000 tool instances: 100 services × 10 replicas
//! share 1,000 tool names (10 instances each), and 9,000 executors serve
//! 90,000 single-instance tools, 91,000 names in all. Each definition is
//! 1–3 KiB, mostly its input schema.

use toolmesh::pb::{RegisterRequest, RiskLevel, ToolSpec};

/// Tools each executor serves.
pub(crate) const TOOLS_PER_EXECUTOR: usize = 10;
/// Replicas of each replicated service.
pub(crate) const REPLICAS: usize = 10;
/// One executor in this many belongs to a replicated service.
const REPLICATED_ONE_IN: usize = 10;

/// The population at one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Executors.
    pub(crate) executors: usize,
}

impl Shape {
    /// Executors that are replicas of a service (a whole number of services).
    pub(crate) fn replicated(&self) -> usize {
        (self.executors / REPLICATED_ONE_IN) / REPLICAS * REPLICAS
    }

    /// Tool instances (what the executors register).
    pub(crate) fn instances(&self) -> usize {
        self.executors * TOOLS_PER_EXECUTOR
    }

    /// Distinct tool names (snapshot entries).
    pub(crate) fn names(&self) -> usize {
        let services = self.replicated() / REPLICAS;
        (services + self.executors - self.replicated()) * TOOLS_PER_EXECUTOR
    }

    /// The tool names executor `e` serves.
    pub(crate) fn tool_names(&self, e: usize) -> Vec<String> {
        (0..TOOLS_PER_EXECUTOR)
            .map(|t| match e < self.replicated() {
                true => format!("svc{:03}_op{t}", e / REPLICAS),
                false => format!("team{e:05}_op{t}"),
            })
            .collect()
    }

    /// What executor `e` (in its `generation`-th process) registers.
    pub(crate) fn request(
        &self,
        e: usize,
        generation: usize,
        endpoint: &str,
        lease_ms: u32,
    ) -> RegisterRequest {
        let service = match e < self.replicated() {
            true => format!("svc{:03}", e / REPLICAS),
            false => format!("team{e:05}"),
        };
        RegisterRequest {
            executor_id: executor_id(e, generation),
            service,
            endpoint: endpoint.to_owned(),
            tools: self.tool_names(e).iter().map(|n| tool_spec(n)).collect(),
            lease_ttl_ms: lease_ms,
            execute_token: String::new(),
        }
    }
}

/// The id of executor `e`'s `generation`-th process.
pub(crate) fn executor_id(e: usize, generation: usize) -> String {
    format!("org-{e:05}-{generation}")
}

/// Fields of a parameter the generated schemas draw from.
const FIELDS: [(&str, &str, &str); 8] = [
    (
        "query",
        "string",
        "Free text to match against the records' titles and bodies; quoted phrases match exactly.",
    ),
    (
        "account_id",
        "string",
        "The account the records belong to, as shown in the account settings page (acct_ followed by 16 hex digits).",
    ),
    (
        "since",
        "string",
        "Only records changed at or after this instant (RFC 3339, for example 2026-01-31T12:00:00Z).",
    ),
    (
        "limit",
        "integer",
        "Most records to return in one page; ask for the next page with the cursor of this one.",
    ),
    (
        "cursor",
        "string",
        "Where the previous page ended, exactly as it returned it; omit for the first page.",
    ),
    (
        "include_archived",
        "boolean",
        "Also return records that were archived; they are left out unless this is true.",
    ),
    (
        "region",
        "string",
        "The region whose copy of the data to read; defaults to the account's home region.",
    ),
    (
        "fields",
        "array",
        "Fields to return for each record; omit for the default set (id, title, updated).",
    ),
];

/// A definition of 1–3 KiB: its size varies with the name, as real ones do.
pub(crate) fn tool_spec(name: &str) -> ToolSpec {
    let seed = name
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    let fields = 3 + seed % 6;
    let mut properties = Vec::with_capacity(fields);
    for i in 0..fields {
        let (field, kind, about) = FIELDS[(seed / 7 + i) % FIELDS.len()];
        let extra = match kind {
            "integer" => r#","minimum":1,"maximum":500"#.to_owned(),
            "array" => r#","items":{"type":"string","maxLength":64},"maxItems":32"#.to_owned(),
            "string" => format!(r#","maxLength":{}"#, 64 + 64 * (i % 4)),
            _ => String::new(),
        };
        properties.push(format!(
            r#""{field}_{i}":{{"type":"{kind}","description":"{about} ({name}, parameter {i}.)"{extra}}}"#
        ));
    }
    let input_schema = format!(
        r#"{{"type":"object","properties":{{{}}},"required":["{}"],"additionalProperties":false}}"#,
        properties.join(","),
        format_args!("{}_0", FIELDS[(seed / 7) % FIELDS.len()].0),
    );
    ToolSpec {
        name: name.to_owned(),
        version: "1.0.0".into(),
        description: format!(
            "{name}: reads the records of one account that match a query and returns them a page at a time, newest first, with the cursor of the next page."
        ),
        input_schema,
        risk: RiskLevel::Low as i32,
        idempotent: true,
        timeout_ms: 5_000,
        owner: "org-scale".into(),
        tags: vec!["org-scale".into(), format!("group-{}", seed % 16)],
        ..ToolSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use std::collections::HashSet;

    #[test]
    fn the_full_mix_is_as_documented() {
        let shape = Shape { executors: 10_000 };
        assert_eq!(shape.instances(), 100_000);
        assert_eq!(shape.replicated(), 1_000);
        assert_eq!(shape.names(), 91_000);
        let names: HashSet<String> = (0..shape.executors)
            .flat_map(|e| shape.tool_names(e))
            .collect();
        assert_eq!(names.len(), shape.names());
    }

    #[test]
    fn definitions_are_valid_and_one_to_three_kib() {
        for name in ["svc000_op0", "team01234_op9", "team09999_op3", "svc099_op7"] {
            let spec = tool_spec(name);
            let bytes = spec.encoded_len();
            assert!((1024..=3072).contains(&bytes), "{name}: {bytes} bytes");
            toolmesh::ToolDef::new(spec).unwrap();
        }
    }
}
