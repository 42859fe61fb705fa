from toolmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListToolsRequest(_message.Message):
    __slots__ = ("context", "format", "snapshot_version", "page_size", "page_token", "defer_loading")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DEFER_LOADING_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    format: _common_pb2.ToolFormat
    snapshot_version: int
    page_size: int
    page_token: str
    defer_loading: bool
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., format: _Optional[_Union[_common_pb2.ToolFormat, str]] = ..., snapshot_version: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., defer_loading: _Optional[bool] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("snapshot_version", "tools", "formatted", "next_page_token")
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    FORMATTED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    formatted: str
    next_page_token: str
    def __init__(self, snapshot_version: _Optional[int] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ..., formatted: _Optional[str] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class InvokeRequest(_message.Message):
    __slots__ = ("tool", "arguments", "call_id", "context", "snapshot_version", "approval_id")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    tool: str
    arguments: str
    call_id: str
    context: _common_pb2.CallContext
    snapshot_version: int
    approval_id: str
    def __init__(self, tool: _Optional[str] = ..., arguments: _Optional[str] = ..., call_id: _Optional[str] = ..., context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., snapshot_version: _Optional[int] = ..., approval_id: _Optional[str] = ...) -> None: ...

class InvokeResponse(_message.Message):
    __slots__ = ("result", "call_id", "executor_id", "attempts", "snapshot_version", "tool_version")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.ToolResult
    call_id: str
    executor_id: str
    attempts: int
    snapshot_version: int
    tool_version: str
    def __init__(self, result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ..., call_id: _Optional[str] = ..., executor_id: _Optional[str] = ..., attempts: _Optional[int] = ..., snapshot_version: _Optional[int] = ..., tool_version: _Optional[str] = ...) -> None: ...

class InvokeEvent(_message.Message):
    __slots__ = ("progress", "chunk", "done")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    progress: _common_pb2.Progress
    chunk: _common_pb2.OutputChunk
    done: InvokeResponse
    def __init__(self, progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., chunk: _Optional[_Union[_common_pb2.OutputChunk, _Mapping]] = ..., done: _Optional[_Union[InvokeResponse, _Mapping]] = ...) -> None: ...

class SearchToolsRequest(_message.Message):
    __slots__ = ("context", "query", "limit", "tags", "max_risk", "format")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    MAX_RISK_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    query: str
    limit: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    max_risk: _common_pb2.RiskLevel
    format: _common_pb2.ToolFormat
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., query: _Optional[str] = ..., limit: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., max_risk: _Optional[_Union[_common_pb2.RiskLevel, str]] = ..., format: _Optional[_Union[_common_pb2.ToolFormat, str]] = ...) -> None: ...

class SearchToolsResponse(_message.Message):
    __slots__ = ("snapshot_version", "matches", "formatted")
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    FORMATTED_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    matches: _containers.RepeatedCompositeFieldContainer[ToolMatch]
    formatted: str
    def __init__(self, snapshot_version: _Optional[int] = ..., matches: _Optional[_Iterable[_Union[ToolMatch, _Mapping]]] = ..., formatted: _Optional[str] = ...) -> None: ...

class ToolMatch(_message.Message):
    __slots__ = ("tool", "score")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    tool: _common_pb2.ToolSpec
    score: float
    def __init__(self, tool: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ..., score: _Optional[float] = ...) -> None: ...

class WatchToolsRequest(_message.Message):
    __slots__ = ("context", "format")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    context: _common_pb2.CallContext
    format: _common_pb2.ToolFormat
    def __init__(self, context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ..., format: _Optional[_Union[_common_pb2.ToolFormat, str]] = ...) -> None: ...

class ToolsChange(_message.Message):
    __slots__ = ("snapshot_version", "tools", "formatted", "removed", "synced")
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    FORMATTED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    formatted: str
    removed: _containers.RepeatedScalarFieldContainer[str]
    synced: bool
    def __init__(self, snapshot_version: _Optional[int] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ..., formatted: _Optional[str] = ..., removed: _Optional[_Iterable[str]] = ..., synced: _Optional[bool] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("tool", "caller_token", "session_id")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    CALLER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tool: str
    caller_token: str
    session_id: str
    def __init__(self, tool: _Optional[str] = ..., caller_token: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("verdict", "principal", "tenant", "roles", "rule", "reason", "trace", "tool_version", "approval_required", "argument_limits", "input_schema", "fallback", "rollout")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    ARGUMENT_LIMITS_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    verdict: str
    principal: str
    tenant: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    rule: str
    reason: str
    trace: _containers.RepeatedScalarFieldContainer[str]
    tool_version: str
    approval_required: bool
    argument_limits: _containers.RepeatedScalarFieldContainer[str]
    input_schema: str
    fallback: str
    rollout: str
    def __init__(self, verdict: _Optional[str] = ..., principal: _Optional[str] = ..., tenant: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., trace: _Optional[_Iterable[str]] = ..., tool_version: _Optional[str] = ..., approval_required: _Optional[bool] = ..., argument_limits: _Optional[_Iterable[str]] = ..., input_schema: _Optional[str] = ..., fallback: _Optional[str] = ..., rollout: _Optional[str] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("id", "tool", "version", "arguments_sha256", "caller", "tenant", "summary", "state", "expires_in_ms", "decided_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_MS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    tool: str
    version: str
    arguments_sha256: str
    caller: str
    tenant: str
    summary: str
    state: str
    expires_in_ms: int
    decided_by: str
    def __init__(self, id: _Optional[str] = ..., tool: _Optional[str] = ..., version: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., caller: _Optional[str] = ..., tenant: _Optional[str] = ..., summary: _Optional[str] = ..., state: _Optional[str] = ..., expires_in_ms: _Optional[int] = ..., decided_by: _Optional[str] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ("approvals",)
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DenyRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ApprovalResponse(_message.Message):
    __slots__ = ("approval",)
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...
