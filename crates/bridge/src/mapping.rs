//! An upstream's tool (an MCP tool, a gRPC method) as a toolmesh spec: which tools are exposed (`--tools`, `--methods`), under which name (`--rename`), with what risk and idempotency (what the upstream says, then `--risk` / `--idempotent`), and why a tool cannot join the mesh.

use rmcp::model::Tool;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;
use toolmesh::ToolPattern;
use toolmesh::pb::{RiskLevel, ToolSpec};
use toolmesh::spec::{MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS, SpecError, ToolDef};

/// Which upstream tools join the mesh, and what the bridge says about them
/// beyond what the upstream does.
#[derive(Debug, Clone, Default)]
pub struct ToolSelection {
    /// Upstream names (globs with `*` and `?`) to expose; empty exposes all.
    pub tools: Vec<ToolPattern>,
    /// Upstream name → name in the mesh.
    pub renames: BTreeMap<String, String>,
    /// Risk overrides, by upstream or mesh name.
    pub risk: BTreeMap<String, RiskLevel>,
    /// Tools declared idempotent whatever their annotations say, by
    /// upstream or mesh name.
    pub idempotent: BTreeSet<String>,
    /// Upper bound of one call of every tool (zero: the mesh default).
    pub timeout: Duration,
    /// Who answers for the tools.
    pub owner: String,
    /// Labels added to every tool.
    pub tags: Vec<String>,
    /// Also tag every tool `owner:OWNER` (with [`ToolSelection::owner`]), so
    /// a policy grant, which selects tools by name or tag, can cover every
    /// tool a team answers for with `tags = ["owner:OWNER"]`.
    pub owner_tag: bool,
}

impl ToolSelection {
    /// The tag `--owner-tag` adds to every tool.
    pub const OWNER_TAG_PREFIX: &'static str = "owner:";

    /// The labels every tool gets: `--tag`, then `owner:OWNER` with
    /// `--owner-tag` (once, and only when there is an owner).
    fn tool_tags(&self) -> Vec<String> {
        let mut tags = self.tags.clone();
        if self.owner_tag && !self.owner.trim().is_empty() {
            let tag = format!("{}{}", Self::OWNER_TAG_PREFIX, self.owner.trim());
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
        tags
    }

    /// Whether `--tools` exposes the upstream tool `name`.
    pub fn exposes(&self, name: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|p| p.matches(name))
    }

    /// The name `tool` has in the mesh: a `--rename` of its upstream name
    /// or of its default name, else its default name.
    fn mesh_name<'a>(&'a self, tool: &'a OfferedTool) -> &'a str {
        self.renames
            .get(&tool.upstream)
            .or_else(|| self.renames.get(&tool.name))
            .map_or(tool.name.as_str(), String::as_str)
    }

    /// The risk of a tool: `--risk` for it if given, else what the
    /// upstream says.
    fn risk(&self, name: &str, tool: &OfferedTool) -> RiskLevel {
        let given = self
            .risk
            .get(name)
            .or_else(|| self.risk.get(&tool.upstream));
        given.copied().unwrap_or(tool.risk)
    }

    /// Whether a tool may be retried: `--idempotent` for it, else what the
    /// upstream says.
    fn idempotent(&self, name: &str, tool: &OfferedTool) -> bool {
        self.idempotent.contains(name)
            || self.idempotent.contains(&tool.upstream)
            || tool.idempotent
    }

    /// Override keys (`--rename`, `--risk`, `--idempotent`) that name no
    /// tool of `offered`: probably typos, worth a warning.
    pub(crate) fn unmatched_overrides(&self, offered: &[OfferedTool]) -> Vec<String> {
        let mut known: BTreeSet<&str> = BTreeSet::new();
        for tool in offered {
            known.insert(&tool.upstream);
            known.insert(&tool.name);
            known.insert(self.mesh_name(tool));
        }
        let keys = self
            .renames
            .keys()
            .chain(self.risk.keys())
            .chain(self.idempotent.iter());
        let mut unmatched: Vec<String> = keys
            .filter(|key| !known.contains(key.as_str()))
            .cloned()
            .collect();
        unmatched.dedup();
        unmatched
    }
}

/// What the bridge knows of the upstream server, for specs and messages.
#[derive(Debug, Clone)]
pub struct ServerIdentity {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
}

impl ServerIdentity {
    /// The version every tool is registered at: the server's own when it
    /// is semver (so an upgrade that changes a schema is a new version),
    /// else 1.0.0.
    pub(crate) fn tool_version(&self) -> String {
        match semver::Version::parse(self.version.trim()) {
            Ok(version) => version.to_string(),
            Err(_) => "1.0.0".to_owned(),
        }
    }
}

/// One tool an upstream offers, in the terms every kind of upstream
/// shares.
#[derive(Debug, Clone)]
pub(crate) struct OfferedTool {
    /// Its name upstream: what a call names, and what the selection's
    /// globs and overrides match.
    pub(crate) upstream: String,
    /// Its name in the mesh unless `--rename` gives another: the upstream
    /// name itself for an MCP tool, `Service_Method` for a gRPC method.
    pub(crate) name: String,
    /// What a model reads (cut to the mesh's limit when mapped).
    pub(crate) description: String,
    /// JSON Schema of the arguments.
    pub(crate) input_schema: Value,
    /// JSON Schema of the structured result, if the upstream says.
    pub(crate) output_schema: Option<Value>,
    /// Risk as the upstream says (never safer than it says).
    pub(crate) risk: RiskLevel,
    /// Whether the upstream says the tool changes nothing.
    pub(crate) read_only: bool,
    /// Whether the upstream says running it twice is as running it once.
    pub(crate) idempotent: bool,
    /// Whether calls may report progress or stream.
    pub(crate) streams_progress: bool,
}

impl OfferedTool {
    /// An MCP tool of `server`: its annotations are the hints.
    pub(crate) fn from_mcp(tool: &Tool, server: &ServerIdentity) -> OfferedTool {
        let hints = hints(tool);
        OfferedTool {
            upstream: tool.name.to_string(),
            name: tool.name.to_string(),
            description: description(tool, server),
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|schema| Value::Object((**schema).clone())),
            risk: risk_from_hints(tool),
            read_only: hints.read_only_hint == Some(true),
            idempotent: hints.idempotent_hint == Some(true),
            // Any MCP tool may report progress: the dispatcher streams the
            // call, and reports reach callers that asked for them.
            streams_progress: true,
        }
    }
}

/// One upstream tool as the mesh will know it.
#[derive(Debug, Clone)]
pub(crate) struct MappedTool {
    /// Its name upstream (what `tools/call` names).
    pub(crate) upstream: String,
    /// Its spec in the mesh, validated.
    pub(crate) spec: ToolSpec,
}

/// The upstream's tools mapped: those that join, those `--tools` hides,
/// and those that cannot join with why.
#[derive(Debug, Default)]
pub(crate) struct Mapped {
    pub(crate) tools: Vec<MappedTool>,
    pub(crate) hidden: Vec<String>,
    pub(crate) problems: Vec<ToolProblem>,
}

/// What a bridge brings in, for the words and flags its messages use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamKind {
    /// An MCP server's tools (`bridge mcp`).
    #[default]
    Mcp,
    /// A gRPC service's methods (`bridge grpc`).
    Grpc,
    /// An HTTP API's operations (`bridge openapi`).
    OpenApi,
}

impl UpstreamKind {
    /// The flag that selects what is exposed: `--tools`, `--methods` or
    /// `--operations`.
    pub fn select_flag(self) -> &'static str {
        match self {
            UpstreamKind::Mcp => "--tools",
            UpstreamKind::Grpc => "--methods",
            UpstreamKind::OpenApi => "--operations",
        }
    }

    /// What one of the things it brings in is called upstream.
    pub fn noun(self) -> &'static str {
        match self {
            UpstreamKind::Mcp => "tool",
            UpstreamKind::Grpc => "method",
            UpstreamKind::OpenApi => "operation",
        }
    }
}

/// Why one upstream tool cannot join the mesh; the text says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolProblem {
    /// The tool's upstream name.
    pub upstream: String,
    /// What kind of upstream offers it (which flag leaves it out).
    pub offered_by: UpstreamKind,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// The kinds of [`ToolProblem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemKind {
    /// The upstream name breaks the mesh's name rule and no `--rename` maps it.
    Name(SpecError),
    /// The `--rename` target breaks the name rule.
    Rename(String, SpecError),
    /// Two upstream tools end up with one name.
    Duplicate {
        /// The name both would have.
        name: String,
        /// The other upstream tool.
        other: String,
    },
    /// The spec does not validate (schema, description…).
    Spec(SpecError),
}

impl fmt::Display for ToolProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let upstream = &self.upstream;
        let noun = self.offered_by.noun();
        let select = self.offered_by.select_flag();
        match &self.kind {
            ProblemKind::Name(reason) => write!(
                f,
                "upstream {noun} {upstream:?} cannot keep its name in the mesh ({reason}); give it one that fits with --rename '{upstream}={}', or leave it out with {select}",
                suggest_name(upstream)
            ),
            ProblemKind::Rename(name, reason) => write!(
                f,
                "--rename {upstream}={name}: the new name is not usable ({reason}); try --rename '{upstream}={}'",
                suggest_name(name)
            ),
            ProblemKind::Duplicate { name, other } => write!(
                f,
                "upstream {noun}s {other:?} and {upstream:?} would both be called {name:?} in the mesh; give one another name with --rename"
            ),
            ProblemKind::Spec(reason) => write!(
                f,
                "upstream {noun} {upstream:?} cannot be registered: {reason}; leave it out with {select}"
            ),
        }
    }
}

/// Maps every tool of `offered` (by an upstream of `kind`) as `selection`
/// says, each registered at `version`.
pub(crate) fn map_tools(
    kind: UpstreamKind,
    offered: &[OfferedTool],
    selection: &ToolSelection,
    version: &str,
) -> Mapped {
    let mut mapped = Mapped::default();
    let mut taken: HashMap<String, String> = HashMap::new();
    for tool in offered {
        let upstream = tool.upstream.clone();
        if !selection.exposes(&upstream) {
            mapped.hidden.push(upstream);
            continue;
        }
        let name = selection.mesh_name(tool).to_owned();
        if let Err(reason) = toolmesh::spec::validate_name(&name) {
            let problem = if name == tool.name {
                ProblemKind::Name(reason)
            } else {
                ProblemKind::Rename(name, reason)
            };
            mapped.problems.push(ToolProblem {
                upstream,
                offered_by: kind,
                kind: problem,
            });
            continue;
        }
        if let Some(other) = taken.get(&name) {
            mapped.problems.push(ToolProblem {
                upstream,
                offered_by: kind,
                kind: ProblemKind::Duplicate {
                    name,
                    other: other.clone(),
                },
            });
            continue;
        }
        let spec = spec_of(tool, &name, version, selection);
        match ToolDef::new(spec) {
            Ok(def) => {
                taken.insert(name, upstream.clone());
                mapped.tools.push(MappedTool {
                    upstream,
                    spec: def.spec().clone(),
                });
            }
            Err(reason) => mapped.problems.push(ToolProblem {
                upstream,
                offered_by: kind,
                kind: ProblemKind::Spec(reason),
            }),
        }
    }
    mapped
}

/// The spec of `tool` named `name` in the mesh.
fn spec_of(tool: &OfferedTool, name: &str, version: &str, selection: &ToolSelection) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        version: version.to_owned(),
        description: cut_description(&tool.description),
        input_schema: tool.input_schema.to_string(),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default(),
        risk: selection.risk(name, tool) as i32,
        idempotent: selection.idempotent(name, tool),
        read_only: tool.read_only,
        streams_progress: tool.streams_progress,
        timeout_ms: u32::try_from(selection.timeout.as_millis()).unwrap_or(u32::MAX),
        owner: selection.owner.clone(),
        tags: selection.tool_tags(),
        ..ToolSpec::default()
    }
}

/// The tool's annotations, or none at all.
fn hints(tool: &Tool) -> rmcp::model::ToolAnnotations {
    tool.annotations.clone().unwrap_or_default()
}

/// Risk as the upstream's hints say, never safer than they say:
/// `destructiveHint: true` is HIGH, else `readOnlyHint: true` is LOW, and
/// anything else (no annotations at all included) MEDIUM.
pub(crate) fn risk_from_hints(tool: &Tool) -> RiskLevel {
    let hints = hints(tool);
    if hints.destructive_hint == Some(true) {
        RiskLevel::High
    } else if hints.read_only_hint == Some(true) {
        RiskLevel::Low
    } else {
        RiskLevel::Medium
    }
}

/// What a model reads of an MCP tool: the upstream's description, else
/// its title, else a line naming the tool and server; cut at the mesh's
/// limit.
fn description(tool: &Tool, server: &ServerIdentity) -> String {
    let given = tool
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            tool.title
                .clone()
                .or_else(|| hints(tool).title)
                .filter(|t| !t.trim().is_empty())
        });
    let text = given.unwrap_or_else(|| {
        format!(
            "The tool {} of the MCP server {} (it gives no description).",
            tool.name, server.name
        )
    });
    cut_description(&text)
}

/// `text` cut at the mesh's limit for a description.
pub(crate) fn cut_description(text: &str) -> String {
    if text.chars().count() <= MAX_DESCRIPTION_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// A name close to `name` that the name rule accepts: other characters
/// become `_`, a leading non-letter gets a `t_` in front, cut to length.
pub(crate) fn suggest_name(name: &str) -> String {
    let mut fixed: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !fixed.starts_with(|c: char| c.is_ascii_alphabetic()) {
        fixed.insert_str(0, "t_");
    }
    fixed.chars().take(MAX_NAME_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use serde_json::json;
    use std::sync::Arc;

    fn tool(name: &str, annotations: Option<ToolAnnotations>) -> Tool {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let mut tool = Tool::new(
            name.to_owned(),
            format!("{name} does things"),
            Arc::new(schema.as_object().unwrap().clone()),
        );
        tool.annotations = annotations;
        tool
    }

    /// The tools as the bridge offers them from the MCP server [`server`].
    fn offered(tools: &[Tool]) -> Vec<OfferedTool> {
        tools
            .iter()
            .map(|tool| OfferedTool::from_mcp(tool, &server()))
            .collect()
    }

    fn server() -> ServerIdentity {
        ServerIdentity {
            name: "srv".into(),
            version: "2.1.0".into(),
        }
    }

    fn annotations(read_only: Option<bool>, destructive: Option<bool>) -> ToolAnnotations {
        let mut hints = ToolAnnotations::default();
        hints.read_only_hint = read_only;
        hints.destructive_hint = destructive;
        hints
    }

    /// Risk follows the hints and never guesses safer than they say: no
    /// annotations or no hint is MEDIUM; destructive wins over read-only.
    #[test]
    fn risk_from_the_hints() {
        let cases = [
            (None, RiskLevel::Medium),
            (Some(annotations(None, None)), RiskLevel::Medium),
            (Some(annotations(Some(true), None)), RiskLevel::Low),
            (
                Some(annotations(Some(false), Some(false))),
                RiskLevel::Medium,
            ),
            (Some(annotations(None, Some(true))), RiskLevel::High),
            (Some(annotations(Some(true), Some(true))), RiskLevel::High),
        ];
        for (hints, risk) in cases {
            assert_eq!(
                risk_from_hints(&tool("t", hints.clone())),
                risk,
                "{hints:?}"
            );
        }
    }

    /// `--tools`, `--rename`, `--risk` and `--idempotent` shape the specs;
    /// the server's semver becomes the version; read-only and idempotent
    /// hints carry over.
    #[test]
    fn selection_shapes_the_specs() {
        let mut idempotent = ToolAnnotations::default();
        idempotent.idempotent_hint = Some(true);
        idempotent.read_only_hint = Some(true);
        let offered = vec![
            tool("read", Some(idempotent)),
            tool("wipe", Some(annotations(None, Some(true)))),
            tool("odd.name", None),
            tool("secret", None),
        ];
        let selection = ToolSelection {
            tools: ["read", "wipe", "odd*"]
                .iter()
                .map(|p| ToolPattern::parse(p).unwrap())
                .collect(),
            renames: [("odd.name".to_owned(), "odd_name".to_owned())].into(),
            risk: [("wipe".to_owned(), RiskLevel::Medium)].into(),
            idempotent: ["odd_name".to_owned()].into(),
            timeout: Duration::from_secs(30),
            owner: "team-x".into(),
            tags: vec!["mcp".into()],
            owner_tag: false,
        };
        let mapped = map_tools(
            UpstreamKind::Mcp,
            &self::offered(&offered),
            &selection,
            &server().tool_version(),
        );
        assert!(mapped.problems.is_empty(), "{:?}", mapped.problems);
        assert_eq!(mapped.hidden, ["secret"]);
        let by_name: HashMap<&str, &MappedTool> = mapped
            .tools
            .iter()
            .map(|t| (t.spec.name.as_str(), t))
            .collect();
        let read = &by_name["read"].spec;
        assert_eq!(read.version, "2.1.0");
        assert_eq!(read.risk, RiskLevel::Low as i32);
        assert!(read.idempotent && read.read_only && read.streams_progress);
        assert_eq!(read.timeout_ms, 30_000);
        assert_eq!(
            (read.owner.as_str(), read.tags.as_slice()),
            ("team-x", &["mcp".to_owned()][..])
        );
        assert_eq!(by_name["wipe"].spec.risk, RiskLevel::Medium as i32);
        assert!(!by_name["wipe"].spec.idempotent);
        let tagged = ToolSelection {
            owner_tag: true,
            ..selection.clone()
        };
        let tagged = map_tools(
            UpstreamKind::Mcp,
            &self::offered(&offered),
            &tagged,
            &server().tool_version(),
        );
        assert_eq!(tagged.tools[0].spec.tags, ["mcp", "owner:team-x"]);
        let odd = by_name["odd_name"];
        assert_eq!(odd.upstream, "odd.name");
        assert!(odd.spec.idempotent);
        assert_eq!(odd.spec.risk, RiskLevel::Medium as i32);
        assert!(
            selection
                .unmatched_overrides(&self::offered(&offered))
                .is_empty()
        );
    }

    /// A name the mesh cannot carry, a bad rename, two tools with one name
    /// and a schema that does not compile are each refused with a message
    /// naming the tool and the fix; the other tools still map.
    #[test]
    fn problems_name_the_tool_and_the_fix() {
        let mut broken = tool("broken", None);
        broken.input_schema = Arc::new(
            json!({"type": "object", "properties": {"a": {"type": 7}}})
                .as_object()
                .unwrap()
                .clone(),
        );
        let offered = vec![
            tool("fs.read", None),
            tool("a", None),
            tool("b", None),
            tool("c", None),
            broken,
        ];
        let selection = ToolSelection {
            renames: [
                ("b".to_owned(), "a".to_owned()),
                ("c".to_owned(), "9c".to_owned()),
            ]
            .into(),
            ..ToolSelection::default()
        };
        let mapped = map_tools(
            UpstreamKind::Mcp,
            &self::offered(&offered),
            &selection,
            &server().tool_version(),
        );
        let names: Vec<&str> = mapped.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        let texts: Vec<String> = mapped.problems.iter().map(ToString::to_string).collect();
        assert_eq!(texts.len(), 4, "{texts:#?}");
        assert!(
            texts[0].contains("\"fs.read\"") && texts[0].contains("--rename 'fs.read=fs_read'"),
            "{}",
            texts[0]
        );
        assert!(
            texts[1].contains("\"a\" and \"b\"") && texts[1].contains("--rename"),
            "{}",
            texts[1]
        );
        assert!(
            texts[2].contains("--rename c=9c") && texts[2].contains("'c=t_9c'"),
            "{}",
            texts[2]
        );
        assert!(
            texts[3].contains("\"broken\"") && texts[3].contains("input_schema"),
            "{}",
            texts[3]
        );
        // Each kind of bridge names its own selecting flag and noun.
        let renamed = ToolSelection {
            renames: [("b".to_owned(), "a".to_owned())].into(),
            ..ToolSelection::default()
        };
        for (kind, noun, flag) in [
            (UpstreamKind::Mcp, "tool", "--tools"),
            (UpstreamKind::Grpc, "method", "--methods"),
            (UpstreamKind::OpenApi, "operation", "--operations"),
        ] {
            let mapped = map_tools(kind, &self::offered(&offered), &renamed, "1.0.0");
            let texts: Vec<String> = mapped.problems.iter().map(ToString::to_string).collect();
            assert!(
                texts[0].starts_with(&format!("upstream {noun} \"fs.read\""))
                    && texts[0].ends_with(&format!("leave it out with {flag}")),
                "{}",
                texts[0]
            );
            assert!(
                texts[1].starts_with(&format!("upstream {noun}s ")),
                "{}",
                texts[1]
            );
            assert!(
                texts[2].ends_with(&format!("leave it out with {flag}")),
                "{}",
                texts[2]
            );
            let others = ["--tools", "--methods", "--operations"];
            for other in others.iter().filter(|o| **o != flag) {
                assert!(texts.iter().all(|t| !t.contains(other)), "{texts:#?}");
            }
        }
        let unmatched = ToolSelection {
            risk: [("nope".to_owned(), RiskLevel::High)].into(),
            ..ToolSelection::default()
        };
        assert_eq!(
            unmatched.unmatched_overrides(&self::offered(&offered)),
            ["nope"]
        );
    }

    /// A missing description falls back to the title, then to a line
    /// naming the tool; a long one is cut to the limit; a version that is
    /// not semver gives 1.0.0.
    #[test]
    fn descriptions_and_versions_have_fallbacks() {
        let mut bare = tool("bare", None);
        bare.description = None;
        assert!(description(&bare, &server()).contains("bare of the MCP server srv"));
        bare.title = Some("Bare tool".into());
        assert_eq!(description(&bare, &server()), "Bare tool");
        bare.description = Some("x".repeat(MAX_DESCRIPTION_CHARS + 5).into());
        assert_eq!(
            description(&bare, &server()).chars().count(),
            MAX_DESCRIPTION_CHARS
        );
        let odd = ServerIdentity {
            name: "s".into(),
            version: "2024.1".into(),
        };
        assert_eq!(odd.tool_version(), "1.0.0");
    }
}
