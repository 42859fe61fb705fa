"""What a running call tells its tool: who called, how long it may take, whether it was cancelled, and where progress goes."""

from __future__ import annotations

import threading
import time
from typing import Callable

from toolmesh.v1 import common_pb2 as pb, executor_pb2

# Where a call's progress events go (nowhere when the call is not streamed).
Emit = Callable[[executor_pb2.ExecuteEvent], None]


class Context:
    """The call a tool is running, for tools that take a parameter annotated
    `Context` (it is not one of the tool's arguments).

    Sync tools poll `cancelled` (or wait with `wait_cancelled`); async tools
    are cancelled like any asyncio task (`asyncio.CancelledError`) and may
    check `cancelled` too. A call is cancelled when its deadline passes, when
    its caller goes away, or when the executor stops before it finished.
    """

    def __init__(self, request: executor_pb2.ExecuteRequest, deadline: float, emit: Emit | None):
        self._request = request
        self._deadline = deadline
        self._emit = emit
        self._cancelled = threading.Event()
        self._done = False

    @property
    def call_id(self) -> str:
        """The same on every attempt of one call: use it to de-duplicate work."""
        return self._request.call_id

    @property
    def attempt(self) -> int:
        """1 for the first attempt, counting up."""
        return self._request.attempt

    @property
    def tool(self) -> str:
        return self._request.tool

    @property
    def caller(self) -> str:
        """The principal the dispatcher authenticated."""
        return self._request.context.caller

    @property
    def tenant(self) -> str:
        return self._request.context.tenant

    @property
    def session_id(self) -> str:
        """The agent session (run) the call belongs to, if the caller said."""
        return self._request.context.session_id

    @property
    def call_context(self) -> pb.CallContext:
        """Everything the dispatcher passed on about the caller."""
        return self._request.context

    def time_remaining(self) -> float:
        """Seconds left before the call's deadline (0 once it passed)."""
        return max(0.0, self._deadline - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """Whether the call was cancelled or its deadline passed: stop working,
        nobody reads the answer."""
        return self._cancelled.is_set() or time.monotonic() >= self._deadline

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Blocks until the call is cancelled, at most `timeout` seconds (for
        sync tools: a sleep that ends early); True when it was cancelled."""
        limit = self.time_remaining() if timeout is None else min(timeout, self.time_remaining())
        return self._cancelled.wait(limit) or self.cancelled

    def progress(self, progress: float, total: float | None = None, message: str = "") -> None:
        """Reports how far the call has come: `progress` grows with every
        report, `total` is the work in all when known. Callers that stream
        (InvokeStream, MCP clients with a progress token) see it; otherwise
        it is dropped. Never blocks; callable from sync and async tools."""
        event = pb.Progress(progress=progress, total=total if total and total > 0 else 0, message=message)
        self._send(executor_pb2.ExecuteEvent(progress=event))

    def partial(self, text: str) -> None:
        """Sends a piece of the output as it is produced, for display; the
        result still carries the whole output."""
        self._send(executor_pb2.ExecuteEvent(chunk=pb.OutputChunk(text=text)))

    def _send(self, event: executor_pb2.ExecuteEvent) -> None:
        if self._emit is not None and not self._done and not self.cancelled:
            self._emit(event)

    def _cancel(self) -> None:
        self._cancelled.set()

    def _finish(self) -> None:
        """The result is out: later reports have nowhere to go."""
        self._done = True
