from toolmesh.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RolloutState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_STATE_UNSPECIFIED: _ClassVar[RolloutState]
    ROLLOUT_STATE_ACTIVE: _ClassVar[RolloutState]
    ROLLOUT_STATE_PROMOTED: _ClassVar[RolloutState]
    ROLLOUT_STATE_ABORTED: _ClassVar[RolloutState]

class RolloutAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLLOUT_ACTION_UNSPECIFIED: _ClassVar[RolloutAction]
    ROLLOUT_ACTION_START: _ClassVar[RolloutAction]
    ROLLOUT_ACTION_SET: _ClassVar[RolloutAction]
    ROLLOUT_ACTION_PROMOTE: _ClassVar[RolloutAction]
    ROLLOUT_ACTION_ABORT: _ClassVar[RolloutAction]

class ApprovalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_STATE_UNSPECIFIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_PENDING: _ClassVar[ApprovalState]
    APPROVAL_STATE_APPROVED: _ClassVar[ApprovalState]
    APPROVAL_STATE_DENIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_USED: _ClassVar[ApprovalState]
ROLLOUT_STATE_UNSPECIFIED: RolloutState
ROLLOUT_STATE_ACTIVE: RolloutState
ROLLOUT_STATE_PROMOTED: RolloutState
ROLLOUT_STATE_ABORTED: RolloutState
ROLLOUT_ACTION_UNSPECIFIED: RolloutAction
ROLLOUT_ACTION_START: RolloutAction
ROLLOUT_ACTION_SET: RolloutAction
ROLLOUT_ACTION_PROMOTE: RolloutAction
ROLLOUT_ACTION_ABORT: RolloutAction
APPROVAL_STATE_UNSPECIFIED: ApprovalState
APPROVAL_STATE_PENDING: ApprovalState
APPROVAL_STATE_APPROVED: ApprovalState
APPROVAL_STATE_DENIED: ApprovalState
APPROVAL_STATE_USED: ApprovalState

class DisableToolRequest(_message.Message):
    __slots__ = ("tool", "reason")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    tool: str
    reason: str
    def __init__(self, tool: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DisableToolResponse(_message.Message):
    __slots__ = ("snapshot_version",)
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    def __init__(self, snapshot_version: _Optional[int] = ...) -> None: ...

class EnableToolRequest(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: str
    def __init__(self, tool: _Optional[str] = ...) -> None: ...

class EnableToolResponse(_message.Message):
    __slots__ = ("snapshot_version",)
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    def __init__(self, snapshot_version: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("executor_id", "service", "endpoint", "tools", "lease_ttl_ms", "execute_token")
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    executor_id: str
    service: str
    endpoint: str
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolSpec]
    lease_ttl_ms: int
    execute_token: str
    def __init__(self, executor_id: _Optional[str] = ..., service: _Optional[str] = ..., endpoint: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.ToolSpec, _Mapping]]] = ..., lease_ttl_ms: _Optional[int] = ..., execute_token: _Optional[str] = ...) -> None: ...

class RejectedTool(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("lease_id", "snapshot_version", "lease_ttl_ms", "rejected", "execute_token_accepted")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_TOKEN_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    snapshot_version: int
    lease_ttl_ms: int
    rejected: _containers.RepeatedCompositeFieldContainer[RejectedTool]
    execute_token_accepted: bool
    def __init__(self, lease_id: _Optional[str] = ..., snapshot_version: _Optional[int] = ..., lease_ttl_ms: _Optional[int] = ..., rejected: _Optional[_Iterable[_Union[RejectedTool, _Mapping]]] = ..., execute_token_accepted: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("snapshot_version",)
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    def __init__(self, snapshot_version: _Optional[int] = ...) -> None: ...

class DeregisterRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class DeregisterResponse(_message.Message):
    __slots__ = ("snapshot_version",)
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    snapshot_version: int
    def __init__(self, snapshot_version: _Optional[int] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class WatchSnapshotsRequest(_message.Message):
    __slots__ = ("after_version", "deltas", "epoch")
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    after_version: int
    deltas: bool
    epoch: str
    def __init__(self, after_version: _Optional[int] = ..., deltas: _Optional[bool] = ..., epoch: _Optional[str] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("version", "epoch", "tools", "delta", "base_version", "removed", "rollouts")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    version: int
    epoch: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolEntry]
    delta: bool
    base_version: int
    removed: _containers.RepeatedCompositeFieldContainer[ToolKey]
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    def __init__(self, version: _Optional[int] = ..., epoch: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolEntry, _Mapping]]] = ..., delta: _Optional[bool] = ..., base_version: _Optional[int] = ..., removed: _Optional[_Iterable[_Union[ToolKey, _Mapping]]] = ..., rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ...) -> None: ...

class RolloutGuard(_message.Message):
    __slots__ = ("max_error_margin", "min_calls", "window_ms")
    MAX_ERROR_MARGIN_FIELD_NUMBER: _ClassVar[int]
    MIN_CALLS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    max_error_margin: float
    min_calls: int
    window_ms: int
    def __init__(self, max_error_margin: _Optional[float] = ..., min_calls: _Optional[int] = ..., window_ms: _Optional[int] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("tool", "canary_version", "basis_points", "tenants", "principals", "state", "reason", "changed_by", "automatic", "guard", "started_at_ms", "changed_at_ms")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    CANARY_VERSION_FIELD_NUMBER: _ClassVar[int]
    BASIS_POINTS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_FIELD_NUMBER: _ClassVar[int]
    AUTOMATIC_FIELD_NUMBER: _ClassVar[int]
    GUARD_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    tool: str
    canary_version: str
    basis_points: int
    tenants: _containers.RepeatedScalarFieldContainer[str]
    principals: _containers.RepeatedScalarFieldContainer[str]
    state: RolloutState
    reason: str
    changed_by: str
    automatic: bool
    guard: RolloutGuard
    started_at_ms: int
    changed_at_ms: int
    def __init__(self, tool: _Optional[str] = ..., canary_version: _Optional[str] = ..., basis_points: _Optional[int] = ..., tenants: _Optional[_Iterable[str]] = ..., principals: _Optional[_Iterable[str]] = ..., state: _Optional[_Union[RolloutState, str]] = ..., reason: _Optional[str] = ..., changed_by: _Optional[str] = ..., automatic: _Optional[bool] = ..., guard: _Optional[_Union[RolloutGuard, _Mapping]] = ..., started_at_ms: _Optional[int] = ..., changed_at_ms: _Optional[int] = ...) -> None: ...

class UpdateRolloutRequest(_message.Message):
    __slots__ = ("action", "tool", "basis_points", "tenants", "principals", "reason", "guard", "automatic")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    BASIS_POINTS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    GUARD_FIELD_NUMBER: _ClassVar[int]
    AUTOMATIC_FIELD_NUMBER: _ClassVar[int]
    action: RolloutAction
    tool: str
    basis_points: int
    tenants: _containers.RepeatedScalarFieldContainer[str]
    principals: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    guard: RolloutGuard
    automatic: bool
    def __init__(self, action: _Optional[_Union[RolloutAction, str]] = ..., tool: _Optional[str] = ..., basis_points: _Optional[int] = ..., tenants: _Optional[_Iterable[str]] = ..., principals: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., guard: _Optional[_Union[RolloutGuard, _Mapping]] = ..., automatic: _Optional[bool] = ...) -> None: ...

class UpdateRolloutResponse(_message.Message):
    __slots__ = ("rollout", "snapshot_version")
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    snapshot_version: int
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ..., snapshot_version: _Optional[int] = ...) -> None: ...

class ListRolloutsRequest(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: str
    def __init__(self, tool: _Optional[str] = ...) -> None: ...

class RolloutStatus(_message.Message):
    __slots__ = ("rollout", "stable_version", "canary_exposed")
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    STABLE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANARY_EXPOSED_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    stable_version: str
    canary_exposed: bool
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ..., stable_version: _Optional[str] = ..., canary_exposed: _Optional[bool] = ...) -> None: ...

class ListRolloutsResponse(_message.Message):
    __slots__ = ("rollouts", "snapshot_version")
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    rollouts: _containers.RepeatedCompositeFieldContainer[RolloutStatus]
    snapshot_version: int
    def __init__(self, rollouts: _Optional[_Iterable[_Union[RolloutStatus, _Mapping]]] = ..., snapshot_version: _Optional[int] = ...) -> None: ...

class ToolKey(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class ToolEntry(_message.Message):
    __slots__ = ("spec", "instances", "exposed", "disabled", "disabled_reason")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    EXPOSED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.ToolSpec
    instances: _containers.RepeatedCompositeFieldContainer[Instance]
    exposed: bool
    disabled: bool
    disabled_reason: str
    def __init__(self, spec: _Optional[_Union[_common_pb2.ToolSpec, _Mapping]] = ..., instances: _Optional[_Iterable[_Union[Instance, _Mapping]]] = ..., exposed: _Optional[bool] = ..., disabled: _Optional[bool] = ..., disabled_reason: _Optional[str] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ("executor_id", "endpoint", "healthy", "service", "execute_token")
    EXECUTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    executor_id: str
    endpoint: str
    healthy: bool
    service: str
    execute_token: str
    def __init__(self, executor_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., healthy: _Optional[bool] = ..., service: _Optional[str] = ..., execute_token: _Optional[str] = ...) -> None: ...

class ApprovalsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ApprovalsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionFactsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionFactsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SharedRecord(_message.Message):
    __slots__ = ("key", "revision", "ticket", "session")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    revision: int
    ticket: ApprovalTicket
    session: SessionRecord
    def __init__(self, key: _Optional[str] = ..., revision: _Optional[int] = ..., ticket: _Optional[_Union[ApprovalTicket, _Mapping]] = ..., session: _Optional[_Union[SessionRecord, _Mapping]] = ...) -> None: ...

class ListSharedRecordsRequest(_message.Message):
    __slots__ = ("prefix", "keys_only")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    KEYS_ONLY_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    keys_only: bool
    def __init__(self, prefix: _Optional[str] = ..., keys_only: _Optional[bool] = ...) -> None: ...

class ListSharedRecordsResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[SharedRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[SharedRecord, _Mapping]]] = ...) -> None: ...

class CompareAndPutRequest(_message.Message):
    __slots__ = ("record", "ttl_ms")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    record: SharedRecord
    ttl_ms: int
    def __init__(self, record: _Optional[_Union[SharedRecord, _Mapping]] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class CompareAndPutResponse(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    def __init__(self, ok: _Optional[bool] = ...) -> None: ...

class DeleteSharedRecordRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class DeleteSharedRecordResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Principal(_message.Message):
    __slots__ = ("name", "tenant", "roles", "anonymous", "issuer", "subject")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    ANONYMOUS_FIELD_NUMBER: _ClassVar[int]
    ISSUER_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    anonymous: bool
    issuer: str
    subject: str
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., anonymous: _Optional[bool] = ..., issuer: _Optional[str] = ..., subject: _Optional[str] = ...) -> None: ...

class ApprovalTicket(_message.Message):
    __slots__ = ("id", "tool", "version", "arguments_sha256", "caller", "summary", "requested_at_ms", "expires_at_ms", "state", "decided_by", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    tool: str
    version: str
    arguments_sha256: str
    caller: Principal
    summary: str
    requested_at_ms: int
    expires_at_ms: int
    state: ApprovalState
    decided_by: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., tool: _Optional[str] = ..., version: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., caller: _Optional[_Union[Principal, _Mapping]] = ..., summary: _Optional[str] = ..., requested_at_ms: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., state: _Optional[_Union[ApprovalState, str]] = ..., decided_by: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SessionRecord(_message.Message):
    __slots__ = ("facts", "written_ms")
    FACTS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_MS_FIELD_NUMBER: _ClassVar[int]
    facts: _containers.RepeatedScalarFieldContainer[str]
    written_ms: int
    def __init__(self, facts: _Optional[_Iterable[str]] = ..., written_ms: _Optional[int] = ...) -> None: ...
