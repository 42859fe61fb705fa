"""The registration loop: Register, Heartbeat every ttl/3, register again when the registry forgot the lease, back off through outages, Deregister on drain."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Callable

import grpc

from toolmesh._execute import DispatcherOnly
from toolmesh.v1 import registry_pb2, registry_pb2_grpc

log = logging.getLogger("toolmesh.lease")

# First wait after a failed registry call, and the longest during an outage.
BACKOFF_INITIAL = 0.1
BACKOFF_MAX = 2.0
# Longest a single registry call may take.
RPC_TIMEOUT = 2.0
# Shortest heartbeat period, whatever lease is granted.
MIN_PERIOD = 0.01

# Codes that mean "the registry is not reachable right now", as opposed to
# a refusal (a bad token, a rejected request).
_TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.INTERNAL,
}


# What an executor refused for its token must change.
TOKEN_FIX = (
    "give the executor the token of a policy caller with the role `executor` "
    "(token=, TOOLMESH_TOKEN or TOOLMESH_TOKEN_FILE), or none under `toolmesh up`, "
    "whose development policy lets anyone register"
)


class Outage:
    """A line when the registry stops answering and each time the kind of
    failure changes (unreachable, refusing the token, refusing the request),
    one notice when it is back, and the backoff in between."""

    def __init__(self, registry: str):
        self.registry = registry
        self.kind: grpc.StatusCode | None = None
        self.backoff = BACKOFF_INITIAL

    def failed(self, what: str, error: grpc.aio.AioRpcError) -> float:
        code = error.code()
        if code == self.kind:
            log.debug("%s with registry %s failed again (%s: %s)", what, self.registry, code.name, error.details())
        elif code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            log.error(
                "%s refused by registry %s (%s: %s): it does not accept this executor's token; %s; retrying with backoff",
                what, self.registry, code.name, error.details(), TOKEN_FIX,
            )
        elif code in _TRANSIENT:
            log.warning("%s with registry %s failed (%s: %s); retrying with backoff until it answers", what, self.registry, code.name, error.details())
        else:
            log.error("%s refused by registry %s (%s: %s); retrying with backoff", what, self.registry, code.name, error.details())
        self.kind = code
        # Between half and all of the step, so a fleet that lost the same
        # registry does not come back in step.
        wait, self.backoff = self.backoff * random.uniform(0.5, 1.0), min(self.backoff * 2, BACKOFF_MAX)
        return wait

    def recovered(self) -> None:
        if self.kind is not None:
            log.info("registry %s reachable again", self.registry)
        self.kind = None
        self.backoff = BACKOFF_INITIAL


class Lease:
    """Keeps one executor registered while running; `stop` deregisters."""

    def __init__(
        self,
        registry: str,
        request: registry_pb2.RegisterRequest,
        token: Callable[[], str | None],
        gate: DispatcherOnly,
        credentials: grpc.ChannelCredentials | None = None,
    ):
        self.registry = registry
        self.request = request
        self.token = token
        self.gate = gate
        self.lease_id: str | None = None
        self.channel = (
            grpc.aio.insecure_channel(registry)
            if credentials is None
            else grpc.aio.secure_channel(registry, credentials)
        )
        self.client = registry_pb2_grpc.RegistryStub(self.channel)
        self.task: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The registration token, read again for every call (a token file
        the kubelet rotates is followed)."""
        token = self.token()
        return (("authorization", f"Bearer {token}"),) if token else ()

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._keep())

    async def _pause(self, seconds: float) -> bool:
        """Waits `seconds`; False (at once) when the loop is being stopped."""
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
        except asyncio.TimeoutError:
            return True
        return False

    async def _keep(self) -> None:
        outage = Outage(self.registry)
        while not self.stopping.is_set():
            try:
                response = await self.client.Register(self.request, metadata=self.metadata, timeout=RPC_TIMEOUT)
            except grpc.aio.AioRpcError as e:
                if not await self._pause(outage.failed("register", e)):
                    return
                continue
            outage.recovered()
            self._registered(response)
            granted = (response.lease_ttl_ms or self.request.lease_ttl_ms) / 1000
            period = max(granted / 3, MIN_PERIOD)
            heartbeat = registry_pb2.HeartbeatRequest(lease_id=response.lease_id)
            wait = period
            while await self._pause(wait):
                try:
                    await self.client.Heartbeat(heartbeat, metadata=self.metadata, timeout=RPC_TIMEOUT)
                except grpc.aio.AioRpcError as e:
                    if e.code() == grpc.StatusCode.NOT_FOUND:
                        outage.recovered()
                        log.info(
                            "registry %s does not know lease %s (it restarted or the lease expired); registering again",
                            self.registry,
                            heartbeat.lease_id,
                        )
                        break
                    wait = outage.failed("heartbeat", e)
                    continue
                outage.recovered()
                wait = period
            else:
                return

    def _registered(self, response: registry_pb2.RegisterResponse) -> None:
        for rejected in response.rejected:
            log.error("registry %s rejected tool %s: %s", self.registry, rejected.name, rejected.reason)
        self.lease_id = response.lease_id
        # An older registry cannot hand the token to dispatchers: then calls
        # cannot carry it, and are not checked.
        self.gate.enforced = response.execute_token_accepted
        log.info(
            "registered as %s with registry %s: lease %s (%d ms), %d tools, %d rejected",
            self.request.executor_id,
            self.registry,
            response.lease_id,
            response.lease_ttl_ms,
            len(self.request.tools) - len(response.rejected),
            len(response.rejected),
        )

    async def stop(self, limit: float) -> None:
        """Stops the loop and deregisters the lease, taking at most `limit`
        seconds (best effort: an unreachable registry lets it expire)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + limit
        self.stopping.set()
        if self.task is not None:
            # A Register already on the wire may finish first, so the lease it
            # grants is the one deregistered.
            try:
                await asyncio.wait_for(asyncio.shield(self.task), limit)
            except asyncio.TimeoutError:
                self.task.cancel()
        if self.lease_id is not None:
            try:
                await self.client.Deregister(
                    registry_pb2.DeregisterRequest(lease_id=self.lease_id), metadata=self.metadata, timeout=max(until - loop.time(), 0.1)
                )
                log.info("deregistered lease %s from registry %s", self.lease_id, self.registry)
            except grpc.aio.AioRpcError as e:
                log.warning("deregister from registry %s failed (%s); the lease will expire", self.registry, e.code().name)
        await self.channel.close()
