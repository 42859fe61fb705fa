"""The `toolmesh.v1.Executor` service: one call from request to result, with the execute token, argument checks, the deadline, cancellation and error mapping."""

from __future__ import annotations

import asyncio
import concurrent.futures
import difflib
import functools
import hmac
import logging
import threading
import time
from typing import Any, AsyncIterator

import grpc

from toolmesh._context import Context, Emit
from toolmesh._tools import ArgumentsError, ResultError, Tool, ToolError
from toolmesh.v1 import common_pb2 as pb, executor_pb2, executor_pb2_grpc

log = logging.getLogger("toolmesh.executor")

# A tool's timeout when its spec leaves it 0 (the mesh default, from the contract).
DEFAULT_TIMEOUT = pb.DEFAULT_VALUE_TIMEOUT_MS / 1000
# The caller's deadline is answered a little early (a tenth of it, at most
# 20 ms) so the DEADLINE_EXCEEDED result travels back before the caller's
# own timer turns it into a bare gRPC status, as the Rust SDK does.
ANSWER_EARLY_MAX = 0.020


def failure(code: pb.ErrorCode, message: str, retryable: bool = False) -> pb.ToolResult:
    return pb.ToolResult(error=pb.ToolError(code=code, message=message, retryable=retryable))


class DispatcherOnly:
    """Execute from dispatchers only: the token this executor registered,
    which the registry hands to dispatchers alone. Enforced from the start;
    a registry that does not take the token turns the check off."""

    def __init__(self, token: str):
        self.token = token
        self.enforced = True

    async def admit(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not self.enforced:
            return
        presented = dict(context.invocation_metadata() or ()).get("authorization", "")
        if isinstance(presented, str):
            presented = presented.encode()
        if not hmac.compare_digest(presented, f"Bearer {self.token}".encode()):
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "this executor accepts Execute calls from toolmesh dispatchers only: "
                "call the tool through a dispatcher (Dispatcher.Invoke)",
            )


class Calls:
    """Runs calls of this executor's tools to their `ToolResult`."""

    def __init__(self, tools: dict[str, Tool], executor_id: str, threads: concurrent.futures.Executor):
        self.tools = tools
        self.executor_id = executor_id
        self.threads = threads
        # Sync calls still on a thread, answered or not (a tool that ignores
        # its deadline keeps its thread until it returns).
        self.on_threads = 0
        self._count_lock = threading.Lock()

    async def run(self, request: executor_pb2.ExecuteRequest, caller_timeout: float | None, emit: Emit | None) -> pb.ToolResult:
        tool = self.tools.get(request.tool)
        if tool is None:
            return self._not_found(request.tool)
        if request.version and request.version != tool.spec.version:
            return failure(
                pb.ERROR_CODE_NOT_FOUND,
                f"tool {request.tool}@{request.version} is not served by executor {self.executor_id}; "
                f"it serves version {tool.spec.version}",
            )
        try:
            kwargs = tool.parse_arguments(request.arguments)
        except ArgumentsError as e:
            return failure(pb.ERROR_CODE_INVALID_ARGUMENTS, str(e))

        budget, bound = self._budget(tool, caller_timeout)
        if budget <= 0:
            return self._deadline_exceeded(tool, budget, bound)
        deadline = time.monotonic() + budget
        ctx = Context(request, deadline, emit)
        if tool.context_param is not None:
            kwargs[tool.context_param] = ctx
        log.debug("call %s of %s, attempt %d, budget %.0f ms", request.call_id, tool.name, request.attempt, budget * 1000)
        if tool.is_async:
            running: asyncio.Future[Any] = asyncio.ensure_future(tool.fn(**kwargs))
        else:
            running = asyncio.wrap_future(self._on_thread(functools.partial(tool.fn, **kwargs)))
        running.add_done_callback(functools.partial(_reap, tool.name, request.call_id))
        try:
            done, _ = await asyncio.wait({running}, timeout=budget)
        except asyncio.CancelledError:
            # The caller went away, or the executor stopped waiting for it.
            ctx._cancel()
            running.cancel()
            raise
        finally:
            ctx._finish()
        # A call that ended only once its deadline had passed (a sync tool
        # that saw the deadline and returned) is late all the same.
        if not done or time.monotonic() >= deadline:
            ctx._cancel()
            running.cancel()  # an async tool stops at its next await; a sync one watches ctx
            return self._deadline_exceeded(tool, budget, bound)
        return self._outcome(tool, request, running)

    def _on_thread(self, work: Any) -> concurrent.futures.Future[Any]:
        with self._count_lock:
            self.on_threads += 1
        running = self.threads.submit(work)
        running.add_done_callback(lambda _: self._off_thread())
        return running

    def _off_thread(self) -> None:
        with self._count_lock:
            self.on_threads -= 1

    def _outcome(self, tool: Tool, request: executor_pb2.ExecuteRequest, finished: asyncio.Future[Any]) -> pb.ToolResult:
        if finished.cancelled():
            return failure(
                pb.ERROR_CODE_EXECUTOR_FAILED,
                f"tool {tool.name} was cancelled before it finished: executor {self.executor_id} is shutting down",
            )
        error = finished.exception()
        if isinstance(error, ToolError):
            result = failure(pb.ERROR_CODE_TOOL_ERROR, error.message, error.retryable)
            if error.retry_after is not None:
                result.error.retry_after_ms = max(0, int(error.retry_after * 1000 + 0.999))
            return result
        if error is not None:
            return self._broke(tool, request, error)
        try:
            return tool.encode(finished.result())
        except ResultError as e:
            log.error("call %s of %s: %s", request.call_id, tool.name, e)
            return failure(pb.ERROR_CODE_EXECUTOR_FAILED, str(e))

    def _broke(self, tool: Tool, request: executor_pb2.ExecuteRequest, error: BaseException) -> pb.ToolResult:
        """A bug, not an answer: the details stay in this executor's log, the
        caller learns only that it happened and where to look."""
        log.error(
            "tool %s failed on call %s (attempt %d); the caller was told EXECUTOR_FAILED",
            tool.name,
            request.call_id,
            request.attempt,
            exc_info=error,
        )
        # A bug tends to repeat for the same input: not retryable.
        return failure(
            pb.ERROR_CODE_EXECUTOR_FAILED,
            f"tool {tool.name} failed with an unexpected error; executor {self.executor_id} "
            f"logged the details under call {request.call_id}",
        )

    @staticmethod
    def _budget(tool: Tool, caller_timeout: float | None) -> tuple[float, str]:
        tool_timeout = tool.spec.timeout_ms / 1000 if tool.spec.timeout_ms else DEFAULT_TIMEOUT
        if caller_timeout is not None:
            caller = caller_timeout - min(caller_timeout / 10, ANSWER_EARLY_MAX)
            if caller < tool_timeout:
                return caller, "caller"
        return tool_timeout, "tool"

    @staticmethod
    def _deadline_exceeded(tool: Tool, budget: float, bound: str) -> pb.ToolResult:
        ms = max(0, round(budget * 1000))
        why = f"before the caller's deadline ({ms} ms)" if bound == "caller" else f"within its timeout of {ms} ms"
        return failure(pb.ERROR_CODE_DEADLINE_EXCEEDED, f"tool {tool.name} did not finish {why}; the call was cancelled")

    def _not_found(self, wanted: str) -> pb.ToolResult:
        close = difflib.get_close_matches(wanted, list(self.tools), n=3)
        hint = f"did you mean {' or '.join(repr(n) for n in close)}?" if close else f"it serves {', '.join(sorted(self.tools))}"
        return failure(pb.ERROR_CODE_NOT_FOUND, f"executor {self.executor_id} has no tool {wanted[:64]!r}; {hint}")


def _reap(tool: str, call_id: str, finished: asyncio.Future[Any]) -> None:
    """Retrieves the outcome of a call nobody waits for any more (its
    deadline passed), so a late failure is logged rather than lost."""
    if finished.cancelled():
        return
    error = finished.exception()
    if error is not None and not isinstance(error, (ToolError, asyncio.CancelledError)):
        log.debug("call %s of %s ended with %r", call_id, tool, error)


# The generated servicer carries no types (mypy reads it as Any).
class ExecutorService(executor_pb2_grpc.ExecutorServicer):  # type: ignore[misc]
    """`Execute` and `ExecuteStream`, for dispatchers holding the token."""

    def __init__(self, calls: Calls, gate: DispatcherOnly):
        self.calls = calls
        self.gate = gate

    async def Execute(
        self, request: executor_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> executor_pb2.ExecuteResponse:
        await self.gate.admit(context)
        result = await self.calls.run(request, context.time_remaining(), None)
        return executor_pb2.ExecuteResponse(result=result)

    async def ExecuteStream(
        self, request: executor_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[executor_pb2.ExecuteEvent]:
        await self.gate.admit(context)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[executor_pb2.ExecuteEvent | None] = asyncio.Queue()
        # Progress may come from a sync tool's thread: hand it to the loop.

        def emit(event: executor_pb2.ExecuteEvent) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        call = asyncio.ensure_future(self.calls.run(request, context.time_remaining(), emit))
        call.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            yield executor_pb2.ExecuteEvent(result=call.result())
        finally:
            # The caller went away mid-stream: the call is cancelled with it.
            call.cancel()
