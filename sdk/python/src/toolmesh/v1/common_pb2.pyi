from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RiskLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RISK_LEVEL_UNSPECIFIED: _ClassVar[RiskLevel]
    RISK_LEVEL_LOW: _ClassVar[RiskLevel]
    RISK_LEVEL_MEDIUM: _ClassVar[RiskLevel]
    RISK_LEVEL_HIGH: _ClassVar[RiskLevel]

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    ERROR_CODE_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_ARGUMENTS: _ClassVar[ErrorCode]
    ERROR_CODE_PERMISSION_DENIED: _ClassVar[ErrorCode]
    ERROR_CODE_APPROVAL_REQUIRED: _ClassVar[ErrorCode]
    ERROR_CODE_DISABLED: _ClassVar[ErrorCode]
    ERROR_CODE_RATE_LIMITED: _ClassVar[ErrorCode]
    ERROR_CODE_UNAVAILABLE: _ClassVar[ErrorCode]
    ERROR_CODE_DEADLINE_EXCEEDED: _ClassVar[ErrorCode]
    ERROR_CODE_EXECUTOR_FAILED: _ClassVar[ErrorCode]
    ERROR_CODE_TOOL_ERROR: _ClassVar[ErrorCode]
    ERROR_CODE_CANCELLED: _ClassVar[ErrorCode]
    ERROR_CODE_PRECONDITION_FAILED: _ClassVar[ErrorCode]

class ToolFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_FORMAT_UNSPECIFIED: _ClassVar[ToolFormat]
    TOOL_FORMAT_NATIVE: _ClassVar[ToolFormat]
    TOOL_FORMAT_OPENAI: _ClassVar[ToolFormat]
    TOOL_FORMAT_OPENAI_RESPONSES: _ClassVar[ToolFormat]
    TOOL_FORMAT_ANTHROPIC: _ClassVar[ToolFormat]
    TOOL_FORMAT_GEMINI: _ClassVar[ToolFormat]
    TOOL_FORMAT_MCP: _ClassVar[ToolFormat]

class Limit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIMIT_UNSPECIFIED: _ClassVar[Limit]
    LIMIT_MAX_CALL_MESSAGE_BYTES: _ClassVar[Limit]
    LIMIT_MAX_DESCRIPTION_CHARS: _ClassVar[Limit]
    LIMIT_MAX_TIMEOUT_MS: _ClassVar[Limit]
    LIMIT_MIN_PING_INTERVAL_MS: _ClassVar[Limit]

class DefaultValue(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEFAULT_VALUE_UNSPECIFIED: _ClassVar[DefaultValue]
    DEFAULT_VALUE_TIMEOUT_MS: _ClassVar[DefaultValue]
RISK_LEVEL_UNSPECIFIED: RiskLevel
RISK_LEVEL_LOW: RiskLevel
RISK_LEVEL_MEDIUM: RiskLevel
RISK_LEVEL_HIGH: RiskLevel
ERROR_CODE_UNSPECIFIED: ErrorCode
ERROR_CODE_NOT_FOUND: ErrorCode
ERROR_CODE_INVALID_ARGUMENTS: ErrorCode
ERROR_CODE_PERMISSION_DENIED: ErrorCode
ERROR_CODE_APPROVAL_REQUIRED: ErrorCode
ERROR_CODE_DISABLED: ErrorCode
ERROR_CODE_RATE_LIMITED: ErrorCode
ERROR_CODE_UNAVAILABLE: ErrorCode
ERROR_CODE_DEADLINE_EXCEEDED: ErrorCode
ERROR_CODE_EXECUTOR_FAILED: ErrorCode
ERROR_CODE_TOOL_ERROR: ErrorCode
ERROR_CODE_CANCELLED: ErrorCode
ERROR_CODE_PRECONDITION_FAILED: ErrorCode
TOOL_FORMAT_UNSPECIFIED: ToolFormat
TOOL_FORMAT_NATIVE: ToolFormat
TOOL_FORMAT_OPENAI: ToolFormat
TOOL_FORMAT_OPENAI_RESPONSES: ToolFormat
TOOL_FORMAT_ANTHROPIC: ToolFormat
TOOL_FORMAT_GEMINI: ToolFormat
TOOL_FORMAT_MCP: ToolFormat
LIMIT_UNSPECIFIED: Limit
LIMIT_MAX_CALL_MESSAGE_BYTES: Limit
LIMIT_MAX_DESCRIPTION_CHARS: Limit
LIMIT_MAX_TIMEOUT_MS: Limit
LIMIT_MIN_PING_INTERVAL_MS: Limit
DEFAULT_VALUE_UNSPECIFIED: DefaultValue
DEFAULT_VALUE_TIMEOUT_MS: DefaultValue

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff_ms", "max_backoff_ms", "backoff_multiplier", "attempt_timeout_ms")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff_ms: int
    max_backoff_ms: int
    backoff_multiplier: float
    attempt_timeout_ms: int
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff_ms: _Optional[int] = ..., max_backoff_ms: _Optional[int] = ..., backoff_multiplier: _Optional[float] = ..., attempt_timeout_ms: _Optional[int] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("name", "version", "description", "input_schema", "output_schema", "risk", "idempotent", "timeout_ms", "owner", "tags", "retry", "deprecated", "preconditions", "read_only", "streams_progress")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    RISK_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    DEPRECATED_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    STREAMS_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    input_schema: str
    output_schema: str
    risk: RiskLevel
    idempotent: bool
    timeout_ms: int
    owner: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    retry: RetryPolicy
    deprecated: str
    preconditions: _containers.RepeatedCompositeFieldContainer[Precondition]
    read_only: bool
    streams_progress: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[str] = ..., output_schema: _Optional[str] = ..., risk: _Optional[_Union[RiskLevel, str]] = ..., idempotent: _Optional[bool] = ..., timeout_ms: _Optional[int] = ..., owner: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., deprecated: _Optional[str] = ..., preconditions: _Optional[_Iterable[_Union[Precondition, _Mapping]]] = ..., read_only: _Optional[bool] = ..., streams_progress: _Optional[bool] = ...) -> None: ...

class Precondition(_message.Message):
    __slots__ = ("tool", "same_argument")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SAME_ARGUMENT_FIELD_NUMBER: _ClassVar[int]
    tool: str
    same_argument: str
    def __init__(self, tool: _Optional[str] = ..., same_argument: _Optional[str] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("code", "message", "retryable", "retry_after_ms", "approval_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    retryable: bool
    retry_after_ms: int
    approval_id: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., retry_after_ms: _Optional[int] = ..., approval_id: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("output", "data", "metadata", "error", "parts")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    output: str
    data: str
    metadata: _containers.ScalarMap[str, str]
    error: ToolError
    parts: _containers.RepeatedCompositeFieldContainer[ContentPart]
    def __init__(self, output: _Optional[str] = ..., data: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., parts: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image", "audio", "resource_link", "resource", "annotations", "meta")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_LINK_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: Media
    audio: Media
    resource_link: ResourceLink
    resource: EmbeddedResource
    annotations: str
    meta: str
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[Media, _Mapping]] = ..., audio: _Optional[_Union[Media, _Mapping]] = ..., resource_link: _Optional[_Union[ResourceLink, _Mapping]] = ..., resource: _Optional[_Union[EmbeddedResource, _Mapping]] = ..., annotations: _Optional[str] = ..., meta: _Optional[str] = ...) -> None: ...

class Media(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ResourceLink(_message.Message):
    __slots__ = ("uri", "name", "title", "description", "mime_type", "size", "icons")
    URI_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ICONS_FIELD_NUMBER: _ClassVar[int]
    uri: str
    name: str
    title: str
    description: str
    mime_type: str
    size: int
    icons: str
    def __init__(self, uri: _Optional[str] = ..., name: _Optional[str] = ..., title: _Optional[str] = ..., description: _Optional[str] = ..., mime_type: _Optional[str] = ..., size: _Optional[int] = ..., icons: _Optional[str] = ...) -> None: ...

class EmbeddedResource(_message.Message):
    __slots__ = ("uri", "mime_type", "text", "blob", "meta")
    URI_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    uri: str
    mime_type: str
    text: str
    blob: bytes
    meta: str
    def __init__(self, uri: _Optional[str] = ..., mime_type: _Optional[str] = ..., text: _Optional[str] = ..., blob: _Optional[bytes] = ..., meta: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("progress", "total", "message")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    progress: float
    total: float
    message: str
    def __init__(self, progress: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class CallContext(_message.Message):
    __slots__ = ("caller", "tenant", "trace_id", "metadata", "session_id", "claimed_caller", "claimed_tenant", "caller_roles")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALLER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_CALLER_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_TENANT_FIELD_NUMBER: _ClassVar[int]
    CALLER_ROLES_FIELD_NUMBER: _ClassVar[int]
    caller: str
    tenant: str
    trace_id: str
    metadata: _containers.ScalarMap[str, str]
    session_id: str
    claimed_caller: str
    claimed_tenant: str
    caller_roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, caller: _Optional[str] = ..., tenant: _Optional[str] = ..., trace_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., session_id: _Optional[str] = ..., claimed_caller: _Optional[str] = ..., claimed_tenant: _Optional[str] = ..., caller_roles: _Optional[_Iterable[str]] = ...) -> None: ...
