//! The `Tool` trait teams implement, and the values a tool describes itself with and returns.

use crate::CallCx;
use std::{collections::HashMap, fmt, future::Future, time::Duration};
use toolmesh::pb::{self, Precondition, RetryPolicy, RiskLevel, ToolSpec};

/// A tool an executor serves.
///
/// `Args` is the typed argument struct: its JSON Schema (generated with
/// schemars) becomes the spec's `input_schema`, and every call's arguments are
/// checked against that schema and deserialised with serde before
/// [`Tool::call`] runs. Derive `Deserialize` and `JsonSchema`, add
/// `#[serde(deny_unknown_fields)]` so the schema says
/// `additionalProperties: false`, and write `///` docs on the fields: they
/// become the `description`s the model reads.
pub trait Tool: Send + Sync + 'static {
    /// The typed arguments.
    type Args: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static;

    /// Name, version, description and the other spec fields. Called once,
    /// when the tool is added to an [`Executor`](crate::Executor).
    fn info(&self) -> ToolInfo;

    /// Runs one call. Business errors ("user u_9 not found") are a
    /// [`ToolFailure`]; long-running work should watch [`CallCx::cancelled`].
    fn call(
        &self,
        args: Self::Args,
        cx: CallCx,
    ) -> impl Future<Output = Result<ToolOutput, ToolFailure>> + Send;
}

/// What a tool says about itself: everything in its spec except the input
/// schema, which comes from the tool's `Args` type.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    name: String,
    version: String,
    description: String,
    risk: RiskLevel,
    idempotent: bool,
    read_only: bool,
    streams_progress: bool,
    timeout: Duration,
    owner: String,
    tags: Vec<String>,
    retry: Option<RetryPolicy>,
    deprecated: String,
    preconditions: Vec<Precondition>,
    output_schema: String,
}

impl ToolInfo {
    /// A LOW-risk, non-idempotent tool with the default timeout (10 s).
    ///
    /// `version` is semver ("1.0.0"); `description` is what a model reads to
    /// decide whether to call the tool, so say what it does, what it returns
    /// and when not to use it.
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        ToolInfo {
            name: name.into(),
            version: version.into(),
            description: description.into(),
            risk: RiskLevel::Low,
            idempotent: false,
            read_only: false,
            streams_progress: false,
            timeout: Duration::ZERO,
            owner: String::new(),
            tags: Vec::new(),
            retry: None,
            deprecated: String::new(),
            preconditions: Vec::new(),
            output_schema: String::new(),
        }
    }

    /// How much harm the tool can do (LOW read-only, MEDIUM reversible write,
    /// HIGH irreversible: needs approval).
    pub fn risk(mut self, risk: RiskLevel) -> Self {
        self.risk = risk;
        self
    }

    /// Whether the dispatcher may send a call again after it may have reached
    /// an executor. Only say `true` if running a call twice is harmless.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Declares that a call only reads and changes nothing (MCP clients see
    /// `readOnlyHint: true`; a read-only, idempotent tool's answers may be
    /// cached by the dispatcher when its policy says so).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Declares that the tool reports progress (and maybe partial output)
    /// through [`CallCx::progress`](crate::CallCx::progress): the spec says
    /// `streams_progress`, so dispatchers call it by `ExecuteStream` and pass
    /// the reports on to callers that stream (`InvokeStream`, MCP clients
    /// with a `progressToken`). Callers that do not stream still get the
    /// result when the tool ends.
    pub fn streams_progress(mut self, streams: bool) -> Self {
        self.streams_progress = streams;
        self
    }

    /// The JSON Schema every result's `data` satisfies. The dispatcher
    /// checks each result against it: one that does not is EXECUTOR_FAILED
    /// and never reaches the model.
    pub fn output_schema(mut self, schema: &serde_json::Value) -> Self {
        self.output_schema = schema.to_string();
        self
    }

    /// Upper bound for one execution (zero means the mesh default, 10 s; at
    /// most 600 s). Sub-millisecond parts round up.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The team or person who answers for the tool.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Free labels for filtering (replaces any set before).
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The retry policy the dispatcher uses for idempotent calls.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Declares that a call of this tool needs an earlier successful call of
    /// `tool` in the same session (`CallContext.session_id`). With a
    /// non-empty `same_argument`, both calls must have passed the same value
    /// for that top-level argument (`edit_file` requires `read_file` on the
    /// same `path`); empty means any successful call of `tool` will do.
    ///
    /// The dispatcher enforces preconditions; the executor only declares
    /// them. Each call adds one (an exact repeat is ignored).
    pub fn requires(mut self, tool: impl Into<String>, same_argument: impl Into<String>) -> Self {
        let precondition = Precondition {
            tool: tool.into(),
            same_argument: same_argument.into(),
        };
        if !self.preconditions.contains(&precondition) {
            self.preconditions.push(precondition);
        }
        self
    }

    /// Marks this version deprecated; `message` tells the model what to use
    /// instead ("use search_kb 2.x"). An empty message clears the mark.
    pub fn deprecated(mut self, message: impl Into<String>) -> Self {
        self.deprecated = message.into();
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tool's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The spec these fields describe, with `input_schema` filled in.
    pub(crate) fn to_spec(&self, input_schema: String) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            version: self.version.clone(),
            description: self.description.clone(),
            input_schema,
            output_schema: self.output_schema.clone(),
            risk: self.risk as i32,
            idempotent: self.idempotent,
            read_only: self.read_only,
            streams_progress: self.streams_progress,
            timeout_ms: duration_ms_ceil(self.timeout),
            owner: self.owner.clone(),
            tags: self.tags.clone(),
            retry: self.retry,
            deprecated: self.deprecated.clone(),
            preconditions: self.preconditions.clone(),
        }
    }
}

/// Milliseconds, rounded up, saturating at `u32::MAX`.
pub(crate) fn duration_ms_ceil(d: Duration) -> u32 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u32::try_from(ms).unwrap_or(u32::MAX)
}

/// A successful result: text for the model, optional structured JSON and
/// string metadata.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    pub(crate) output: String,
    pub(crate) data: String,
    pub(crate) metadata: HashMap<String, String>,
    /// Content beyond the text (images, audio, resources), after it.
    pub(crate) parts: Vec<pb::ContentPart>,
    /// Set when a value could not be serialised; the call then fails with
    /// EXECUTOR_FAILED instead of returning half a result.
    pub(crate) encode_error: Option<String>,
}

impl ToolOutput {
    /// Text for the model, no structured data.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            output: text.into(),
            ..ToolOutput::default()
        }
    }

    /// A result whose content is `parts`, in order (text parts among them):
    /// what an MCP tool answers with.
    pub fn from_parts(parts: Vec<pb::ContentPart>) -> Self {
        ToolOutput {
            parts,
            ..ToolOutput::default()
        }
    }

    /// `value` as JSON, both as the text (`output`) and as `data`.
    ///
    /// A value that cannot be serialised (say, a map with non-string keys)
    /// makes the call fail with EXECUTOR_FAILED naming the serde error.
    pub fn json(value: &impl serde::Serialize) -> Self {
        match serde_json::to_string(value) {
            Ok(json) => ToolOutput {
                output: json.clone(),
                data: json,
                ..ToolOutput::default()
            },
            Err(e) => ToolOutput {
                encode_error: Some(e.to_string()),
                ..ToolOutput::default()
            },
        }
    }

    /// Sets the structured `data` (JSON) and keeps the text.
    pub fn with_data(mut self, value: impl serde::Serialize) -> Self {
        match serde_json::to_string(&value) {
            Ok(json) => self.data = json,
            Err(e) => self.encode_error = Some(e.to_string()),
        }
        self
    }

    /// Adds one metadata entry (replacing an earlier one with the same key).
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds a content part after the text and the parts added before it
    /// (see [`toolmesh::content`]: `image`, `audio`, `resource_link`…). A
    /// caller over MCP gets each as its content block; a gRPC caller gets
    /// them in `ToolResult.parts`, and `output` describes each in a line for
    /// readers of text alone.
    pub fn with_part(mut self, part: pb::ContentPart) -> Self {
        self.parts.push(part);
        self
    }

    /// Adds an image (its bytes and media type, e.g. `image/png`).
    pub fn with_image(self, data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> Self {
        self.with_part(toolmesh::content::image(data, mime_type))
    }

    /// The text for the model.
    pub fn output(&self) -> &str {
        &self.output
    }

    /// The content parts added with [`ToolOutput::with_part`].
    pub fn parts(&self) -> &[pb::ContentPart] {
        &self.parts
    }

    /// The result's content in order — the text first, when there is any,
    /// then the parts — and the text a text-only reader gets for it; no
    /// parts at all for text alone.
    pub(crate) fn take_content(&mut self) -> (String, Vec<pb::ContentPart>) {
        let output = std::mem::take(&mut self.output);
        if self.parts.is_empty() {
            return (output, Vec::new());
        }
        let text = (!output.is_empty()).then(|| toolmesh::content::text(output));
        let parts: Vec<pb::ContentPart> = text
            .into_iter()
            .chain(std::mem::take(&mut self.parts))
            .collect();
        let text = toolmesh::content::text_of(&parts);
        if toolmesh::content::only_text(&parts) {
            return (text, Vec::new());
        }
        (text, parts)
    }

    /// The structured data as JSON text (empty when there is none).
    pub fn data(&self) -> &str {
        &self.data
    }
}

/// A business error the tool reports ("user u_9 not found"): it reaches the
/// model as a TOOL_ERROR with this message. Not retryable unless marked.
///
/// Any `std::error::Error` converts into a `ToolFailure` (its text becomes the
/// message), so `?` works inside [`Tool::call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    pub(crate) message: String,
    pub(crate) retryable: bool,
    pub(crate) retry_after: Option<Duration>,
    /// Which error code the failure reaches the caller with.
    pub(crate) kind: FailureKind,
}

/// The error code a [`ToolFailure`] reaches the caller with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// A business error the tool reported: TOOL_ERROR.
    Tool,
    /// The tool could not run here now: UNAVAILABLE.
    Unavailable,
    /// Something under the tool broke: EXECUTOR_FAILED.
    Executor,
}

impl ToolFailure {
    /// A non-retryable failure; write `message` for the model: what went
    /// wrong and how to fix it.
    pub fn new(message: impl Into<String>) -> Self {
        ToolFailure {
            message: message.into(),
            retryable: false,
            retry_after: None,
            kind: FailureKind::Tool,
        }
    }

    /// The tool cannot run on this instance right now (a dependency it
    /// needs is down): UNAVAILABLE, retryable, so the dispatcher may try
    /// another instance of an idempotent tool and counts it against this
    /// tool here (not the whole instance).
    pub fn unavailable(message: impl Into<String>) -> Self {
        ToolFailure {
            kind: FailureKind::Unavailable,
            ..ToolFailure::new(message).retryable()
        }
    }

    /// Something the tool depends on broke while it ran (a process it
    /// drives died mid-call, a protocol error): EXECUTOR_FAILED, not a
    /// business error. Not retryable unless marked; the dispatcher then
    /// retries only what its rules allow (idempotent tools).
    pub fn executor_failed(message: impl Into<String>) -> Self {
        ToolFailure {
            kind: FailureKind::Executor,
            ..ToolFailure::new(message)
        }
    }

    /// Marks the failure as transient: the same call may succeed later.
    pub fn retryable(mut self) -> Self {
        self.retryable = true;
        self
    }

    /// Retryable, and not before `after` has passed.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retryable = true;
        self.retry_after = Some(after);
        self
    }

    /// The message for the model.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the failure was marked retryable.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The error code the failure reaches the caller with: TOOL_ERROR,
    /// UNAVAILABLE or EXECUTOR_FAILED.
    pub fn code(&self) -> pb::ErrorCode {
        match self.kind {
            FailureKind::Tool => pb::ErrorCode::ToolError,
            FailureKind::Unavailable => pb::ErrorCode::Unavailable,
            FailureKind::Executor => pb::ErrorCode::ExecutorFailed,
        }
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl<E: std::error::Error> From<E> for ToolFailure {
    fn from(error: E) -> Self {
        ToolFailure::new(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Executor;

    /// Arguments of the test tool.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct EditArgs {
        /// The file.
        #[allow(dead_code)]
        path: String,
    }

    struct Edit;

    impl Tool for Edit {
        type Args = EditArgs;
        fn info(&self) -> ToolInfo {
            ToolInfo::new("edit", "2.0.0", "Edit a file.")
                .requires("read", "path")
                .requires("login", "")
                .requires("read", "path")
                .deprecated("use edit 3.x")
        }
        async fn call(&self, _args: EditArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
            Ok(ToolOutput::text("edited"))
        }
    }

    /// `requires` and `deprecated` reach the spec the executor registers:
    /// preconditions in declaration order (an exact repeat dropped, an empty
    /// `same_argument` kept as "any call"), the deprecation text verbatim;
    /// a plain tool has neither.
    #[test]
    fn preconditions_and_deprecation_reach_the_spec() {
        let specs = Executor::new("files").tool(Edit).specs();
        assert_eq!(specs.len(), 1);
        let spec = &specs[0];
        assert_eq!(
            spec.preconditions,
            vec![
                Precondition {
                    tool: "read".into(),
                    same_argument: "path".into(),
                },
                Precondition {
                    tool: "login".into(),
                    same_argument: String::new(),
                },
            ]
        );
        assert_eq!(spec.deprecated, "use edit 3.x");
        toolmesh::ToolDef::new(spec.clone()).expect("the spec validates");

        let plain = ToolInfo::new("t", "1.0.0", "d").to_spec("{}".into());
        assert!(plain.preconditions.is_empty());
        assert!(plain.deprecated.is_empty());
        let cleared = ToolInfo::new("t", "1.0.0", "d")
            .deprecated("old")
            .deprecated("")
            .to_spec("{}".into());
        assert!(cleared.deprecated.is_empty());
    }
}
