"""Tools as decorated, typed functions: the spec, the input schema from type hints, and argument checking."""

from __future__ import annotations

import datetime
import enum
import inspect
import json
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import pydantic
import pydantic_core

from toolmesh._context import Context
from toolmesh.v1 import common_pb2 as pb

# What toolmesh accepts as a tool name: what OpenAI's and Anthropic's tool
# APIs accept, so no model format has to rename it.
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
# Semantic versions: MAJOR.MINOR.PATCH with optional pre-release and build.
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
# The contract's limits on a spec.
MAX_DESCRIPTION_CHARS = pb.LIMIT_MAX_DESCRIPTION_CHARS
MAX_TIMEOUT_MS = pb.LIMIT_MAX_TIMEOUT_MS


class Risk(str, enum.Enum):
    """How much harm a tool can do: LOW reads, MEDIUM is a reversible write,
    HIGH is irreversible (the mesh asks for an approval first)."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


_RISK_LEVELS = {
    Risk.LOW: pb.RISK_LEVEL_LOW,
    Risk.MEDIUM: pb.RISK_LEVEL_MEDIUM,
    Risk.HIGH: pb.RISK_LEVEL_HIGH,
}


class ToolError(Exception):
    """A business error the model should read ("order o_9 not found; ids look
    like o_1001"): the call ends as TOOL_ERROR with this message. Say what went
    wrong and how to fix the call. Not retryable unless marked; `retry_after`
    (seconds) marks it retryable and asks callers to wait that long."""

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retryable = retryable or retry_after is not None
        self.retry_after = retry_after


@dataclass(frozen=True)
class Output:
    """A result with text for the model and structured data apart, when
    returning a plain value (text, or JSON used for both) is not enough."""

    text: str = ""
    data: Any = None
    metadata: dict[str, str] = field(default_factory=dict)


class ToolDefinitionError(ValueError):
    """A tool that cannot be served, named, with what to change."""


@dataclass(frozen=True)
class Tool:
    """A function made into a tool by `@tool`: still callable as before."""

    fn: Callable[..., Any]
    spec: pb.ToolSpec
    is_async: bool
    arguments: type[pydantic.BaseModel]
    # Keyword the function takes its Context as, if it does.
    context_param: str | None
    # Checks and encodes return values when the return type has a schema.
    returns: pydantic.TypeAdapter[Any] | None

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def parse_arguments(self, text: str) -> dict[str, Any]:
        """The keyword arguments of one call from its JSON text, checked
        against the parameters' types; raises `ArgumentsError`."""
        text = text or "{}"
        repeated = _repeated_key(text)
        if repeated:
            raise ArgumentsError(f"arguments for {self.name} repeat the key {repeated}: send each key once")
        try:
            parsed = self.arguments.model_validate_json(text)
        except pydantic.ValidationError as e:
            raise ArgumentsError(f"arguments for {self.name} do not match its input schema: {_violations(e)}") from None
        # Every field has its parameter's name as alias (see _arguments_model).
        return {param.alias or name: getattr(parsed, name) for name, param in self.arguments.model_fields.items()}

    def encode(self, value: Any) -> pb.ToolResult:
        """What the function returned, as a result: text as `output`, None as
        nothing, an `Output` as it says, anything else as JSON in both `data`
        and `output`. Raises `ResultError` for a value that is not JSON."""
        if isinstance(value, Output):
            result = pb.ToolResult(output=value.text, metadata=value.metadata)
            if value.data is not None:
                result.data = self._json(value.data)
            return result
        if value is None:
            return pb.ToolResult()
        if isinstance(value, str):
            return pb.ToolResult(output=value)
        text = self._json(value)
        return pb.ToolResult(output=text, data=text)

    def _json(self, value: Any) -> str:
        try:
            if self.returns is not None:
                value = self.returns.validate_python(value)
                return self.returns.dump_json(value).decode()
            return pydantic_core.to_json(value).decode()
        except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as e:
            raise ResultError(f"tool {self.name} returned a value that is not its declared JSON: {e}") from None


class ArgumentsError(ValueError):
    """A call's arguments do not fit the tool's parameters."""


class ResultError(ValueError):
    """A tool returned something that cannot be sent as its result."""


def _repeated_key(text: str) -> str | None:
    """The first key repeated in one JSON object of `text`, at any depth (the
    value checked must be the value used); None when there is none or the
    text is not JSON (validation then says why)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(repr(key))
            seen.add(key)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return None
    return found[0] if found else None


def _violations(error: pydantic.ValidationError) -> str:
    """Each problem as `at /pointer: what`, the way the dispatcher words them."""
    parts = []
    for problem in error.errors(include_url=False):
        pointer = "".join(f"/{step}" for step in problem["loc"])
        parts.append(f"at {pointer or '/'}: {problem['msg']}")
    return "; ".join(parts)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    version: str = "1.0.0",
    description: str | None = None,
    risk: Risk | str = Risk.LOW,
    idempotent: bool = False,
    read_only: bool = False,
    timeout: float | datetime.timedelta | None = None,
    tags: typing.Iterable[str] = (),
    owner: str = "",
    streams_progress: bool | None = None,
) -> Any:
    """Makes a typed function (sync or async) a tool.

    The input schema comes from the parameters' type hints (pydantic: use
    `Annotated[str, Field(description=...)]` for what the model should read
    about a parameter), the description from the docstring, and the output
    schema from the return type when it is an object with fields (a pydantic
    model, a dataclass or a TypedDict). A parameter annotated `Context` is
    not an argument: it receives the call's context (deadline, cancellation,
    progress), and such a tool streams its progress unless told otherwise.

    `risk` is "low" (reads), "medium" (reversible write) or "high"
    (irreversible: needs an approval); `idempotent=True` lets the dispatcher
    retry a call that may have reached the executor; `timeout` is in seconds
    (default: the mesh's, 10 s; at most 600 s). Use as `@tool` or `@tool(...)`.
    """

    def make(fn: Callable[..., Any]) -> Tool:
        return _define(
            fn,
            name=name,
            version=version,
            description=description,
            risk=risk,
            idempotent=idempotent,
            read_only=read_only,
            timeout=timeout,
            tags=tags,
            owner=owner,
            streams_progress=streams_progress,
        )

    return make(fn) if fn is not None else make


def _define(fn: Callable[..., Any], **options: Any) -> Tool:
    if isinstance(fn, Tool):
        raise ToolDefinitionError(f"{fn.name} is already a tool: apply @tool once")
    if not callable(fn):
        raise ToolDefinitionError(f"@tool decorates functions, not {fn!r}")
    name = options["name"] or fn.__name__

    def fail(why: str) -> ToolDefinitionError:
        return ToolDefinitionError(f"tool {name!r}: {why}")

    if not NAME.match(name):
        raise fail(
            "the name must start with a letter, then use only letters, digits, '_' or '-' "
            "(no '.': OpenAI's and Anthropic's tool APIs reject it), at most 64 characters; "
            "pass name=... to @tool"
        )
    version = options["version"]
    if not SEMVER.match(version):
        raise fail(f'version {version!r} is not a semantic version such as "1.0.0"')
    description = options["description"] or inspect.cleandoc(fn.__doc__ or "")
    if not description.strip():
        raise fail("it has no description: write a docstring saying what it does, so a model can choose it")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise fail(f"its description has {len(description)} characters; the limit is {MAX_DESCRIPTION_CHARS}")
    try:
        risk = Risk(options["risk"].lower() if isinstance(options["risk"], str) else options["risk"])
    except ValueError:
        raise fail(f'risk {options["risk"]!r} is not one of "low", "medium" or "high"') from None
    timeout_ms = _timeout_ms(options["timeout"], fail)

    arguments, context_param = _arguments_model(fn, name, fail)
    returns, output_schema = _returns(fn, fail)
    streams = options["streams_progress"]
    spec = pb.ToolSpec(
        name=name,
        version=version,
        description=description,
        input_schema=_compact(_schema_of(arguments.model_json_schema(by_alias=True))),
        output_schema=_compact(output_schema) if output_schema else "",
        risk=_RISK_LEVELS[risk],
        idempotent=bool(options["idempotent"]),
        read_only=bool(options["read_only"]),
        timeout_ms=timeout_ms,
        owner=options["owner"],
        tags=list(options["tags"]),
        streams_progress=(context_param is not None) if streams is None else bool(streams),
    )
    return Tool(
        fn=fn,
        spec=spec,
        is_async=inspect.iscoroutinefunction(fn),
        arguments=arguments,
        context_param=context_param,
        returns=returns,
    )


def _timeout_ms(timeout: float | datetime.timedelta | None, fail: Callable[[str], Exception]) -> int:
    if timeout is None:
        return 0
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    ms = math.ceil(seconds * 1000) if math.isfinite(seconds) else -1
    if not 0 < ms <= MAX_TIMEOUT_MS:
        raise fail(f"timeout {timeout!r} is out of range: give seconds, more than 0 and at most 600")
    return ms


def _arguments_model(
    fn: Callable[..., Any], name: str, fail: Callable[[str], Exception]
) -> tuple[type[pydantic.BaseModel], str | None]:
    """A pydantic model of the function's parameters (extra keys refused),
    and the parameter that takes the Context, if any."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:  # an annotation that does not resolve
        raise fail(f"its type hints cannot be read: {e}") from None
    fields: dict[str, Any] = {}
    context_param = None
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise fail(f"*{param.name} cannot be described by a schema: name every parameter")
        if param.kind is param.POSITIONAL_ONLY:
            raise fail(f"parameter {param.name} is positional-only: arguments arrive by name")
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if isinstance(annotation, type) and issubclass(annotation, Context):
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            raise fail(f"parameter {param.name} has no type hint: annotate it (e.g. {param.name}: str) so its schema can be made")
        default = ... if param.default is inspect.Parameter.empty else param.default
        # Fields get neutral names and the parameter's name as alias, so that
        # a parameter may be called anything (`json`, `schema`, `_id`) without
        # clashing with pydantic's own attributes.
        fields[f"p{index}"] = (typing.Annotated[annotation, pydantic.Field(alias=param.name)], default)
    try:
        model = pydantic.create_model(
            f"{name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        model.model_json_schema(by_alias=True)
    except (pydantic.PydanticSchemaGenerationError, pydantic.errors.PydanticUserError, TypeError) as e:
        raise fail(f"its parameters have no JSON Schema: {e}") from None
    return model, context_param


# Return types that carry no structure worth a schema.
_PLAIN_RETURNS = (inspect.Signature.empty, None, type(None), str, Any, Output)


def _returns(
    fn: Callable[..., Any], fail: Callable[[str], Exception]
) -> tuple[pydantic.TypeAdapter[Any] | None, dict[str, Any] | None]:
    """For a return type that is an object with fields: an adapter that
    checks and encodes what the function returns, and its schema."""
    annotation = typing.get_type_hints(fn, include_extras=True).get("return", inspect.Signature.empty)
    if annotation in _PLAIN_RETURNS:
        return None, None
    try:
        adapter = pydantic.TypeAdapter(annotation)
        schema = _schema_of(adapter.json_schema(mode="serialization"))
    except (pydantic.PydanticSchemaGenerationError, pydantic.errors.PydanticUserError, TypeError) as e:
        raise fail(f"its return type has no JSON Schema: {e}") from None
    if schema.get("type") != "object" or "properties" not in schema:
        return None, None
    return adapter, schema


def _schema_of(schema: dict[str, Any]) -> dict[str, Any]:
    """A generated schema without pydantic's `title`s, which only repeat the
    names to a model (a property called "title" stays)."""

    def strip(node: Any, in_properties: bool = False) -> Any:
        if isinstance(node, list):
            return [strip(item) for item in node]
        if not isinstance(node, dict):
            return node
        return {
            key: strip(value, in_properties=not in_properties and key in ("properties", "$defs"))
            for key, value in node.items()
            if in_properties or key != "title"
        }

    return typing.cast(dict[str, Any], strip(schema))


def _compact(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"))
