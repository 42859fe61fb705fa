from toolmesh.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecuteRequest(_message.Message):
    __slots__ = ("call_id", "tool", "version", "arguments", "attempt", "context")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    version: str
    arguments: str
    attempt: int
    context: _common_pb2.CallContext
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., version: _Optional[str] = ..., arguments: _Optional[str] = ..., attempt: _Optional[int] = ..., context: _Optional[_Union[_common_pb2.CallContext, _Mapping]] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: _common_pb2.ToolResult
    def __init__(self, result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class ExecuteEvent(_message.Message):
    __slots__ = ("progress", "chunk", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: _common_pb2.Progress
    chunk: _common_pb2.OutputChunk
    result: _common_pb2.ToolResult
    def __init__(self, progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., chunk: _Optional[_Union[_common_pb2.OutputChunk, _Mapping]] = ..., result: _Optional[_Union[_common_pb2.ToolResult, _Mapping]] = ...) -> None: ...
