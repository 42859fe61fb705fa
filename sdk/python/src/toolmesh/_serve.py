"""`serve`: bind, serve `toolmesh.v1.Executor` and `grpc.health.v1`, keep the tools registered, and drain on SIGTERM."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import os
import re
import secrets
import signal
import sys
import uuid
from pathlib import Path
from typing import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from toolmesh._execute import Calls, DispatcherOnly, ExecutorService
from toolmesh._lease import Lease
from toolmesh._tls import TLS, TLSError
from toolmesh._tools import Tool
from toolmesh.v1 import common_pb2, executor_pb2, executor_pb2_grpc, registry_pb2

log = logging.getLogger("toolmesh")

DEFAULT_REGISTRY = "127.0.0.1:7070"
# The health name of the whole executor service: the service's full name.
EXECUTOR_HEALTH_SERVICE = executor_pb2.DESCRIPTOR.services_by_name["Executor"].full_name
# The largest call or result the mesh passes, from the contract.
MAX_CALL_MESSAGE_BYTES = common_pb2.LIMIT_MAX_CALL_MESSAGE_BYTES
# Longest the drain waits for the registry to confirm a Deregister.
DEREGISTER_TIMEOUT = 1.0
# Shortest interval between a client's pings the server accepts, from the contract.
KEEPALIVE_PERMIT_MS = common_pb2.LIMIT_MIN_PING_INTERVAL_MS
# Sync tools run on this many threads at once.
THREADS = 32
# Exit status for a configuration the executor cannot serve with (EX_USAGE).
EX_USAGE = 64


class ServeError(Exception):
    """A configuration the executor cannot serve with, and how to fix it."""


def serve(
    *tools: Tool,
    service: str | None = None,
    registry: str | None = None,
    token: str | None = None,
    listen: str = "127.0.0.1:0",
    advertise: str | None = None,
    lease_ttl: float = 10.0,
    grace: float = 10.0,
    tls: TLS | None = None,
) -> None:
    """Serves `tools` until SIGTERM or SIGINT, then drains; returns when done.

    `registry` is the registry's host:port (default `TOOLMESH_REGISTRY`, else
    127.0.0.1:7070; "" serves without registering), `token` the registration
    token (default `TOOLMESH_TOKEN`, or the file `TOOLMESH_TOKEN_FILE` names,
    read again at each registry call as a rotated service-account token
    must be), `service` the team or service name
    (default: the script's name). `listen` is where to bind (port 0 picks
    one); `advertise` the host:port dispatchers dial (default
    `TOOLMESH_ADVERTISE`, else the bound address, which must then not be a
    wildcard such as 0.0.0.0). `tls` gives the PEM files to serve and dial
    with (default `TOOLMESH_TLS_*`, as every toolmesh process reads them;
    none: plaintext). A configuration it cannot serve with exits with status
    64 and says why.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(
            serve_async(
                *tools,
                service=service,
                registry=registry,
                token=token,
                listen=listen,
                advertise=advertise,
                lease_ttl=lease_ttl,
                grace=grace,
                tls=tls,
            )
        )
    except ServeError as e:
        print(f"toolmesh: {e}", file=sys.stderr)
        raise SystemExit(EX_USAGE) from None


async def serve_async(
    *tools: Tool,
    service: str | None = None,
    registry: str | None = None,
    token: str | None = None,
    listen: str = "127.0.0.1:0",
    advertise: str | None = None,
    lease_ttl: float = 10.0,
    grace: float = 10.0,
    tls: TLS | None = None,
    shutdown: Awaitable[object] | None = None,
) -> None:
    """`serve` inside a running event loop: serves until `shutdown` completes
    (default: SIGTERM or SIGINT), then drains. Raises `ServeError` for a
    configuration it cannot serve with."""
    by_name = _tools_by_name(tools)
    service = service or _script_name()
    registry = os.environ.get("TOOLMESH_REGISTRY", DEFAULT_REGISTRY) if registry is None else registry
    token_of = _token_source(token)
    advertise = os.environ.get("TOOLMESH_ADVERTISE") if advertise is None else advertise
    tls = TLS.from_env() if tls is None else tls
    try:
        server_credentials = tls.server_credentials()
        channel_credentials = tls.channel_credentials()
    except TLSError as e:
        raise ServeError(str(e)) from None
    host, _ = _split(listen, "listen")
    if registry:
        _check_advertised(advertise, listen)

    executor_id = f"{service}-{uuid.uuid4().hex[:8]}"
    threads = concurrent.futures.ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="toolmesh-tool")
    gate = DispatcherOnly(secrets.token_hex(32))
    if not registry:
        gate.enforced = False  # nobody hands the token out: anyone may call
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_CALL_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_CALL_MESSAGE_BYTES),
            # The registry watches health over a stream that is silent while
            # the status holds, and older dispatchers ping every 10 s: accept
            # pings that often (grpcio's default refuses any within 5
            # minutes and closes the connection with too_many_pings).
            ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_PERMIT_MS),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
    )
    calls = Calls(by_name, executor_id, threads)
    executor_pb2_grpc.add_ExecutorServicer_to_server(ExecutorService(calls, gate), server)
    health_service = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_service, server)
    try:
        if server_credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, server_credentials)
    except RuntimeError as e:
        raise ServeError(f"cannot listen on {listen} ({e}): is the port in use?") from None
    if not port:
        raise ServeError(f"cannot listen on {listen}: is the port in use?")
    bound = f"{host}:{port}"
    endpoint = advertise or bound
    for name in ("", EXECUTOR_HEALTH_SERVICE):
        await health_service.set(name, health_pb2.HealthCheckResponse.SERVING)
    await server.start()
    log.info("executor %s serving %s; listening on %s", executor_id, ", ".join(by_name), bound)

    lease = None
    if registry:
        request = registry_pb2.RegisterRequest(
            executor_id=executor_id,
            service=service,
            endpoint=endpoint,
            tools=[t.spec for t in by_name.values()],
            lease_ttl_ms=max(1, round(lease_ttl * 1000)),
            execute_token=gate.token,
        )
        lease = Lease(registry, request, token_of, gate, channel_credentials)
        lease.start()

    await (shutdown if shutdown is not None else _signalled())

    log.info("draining: NOT_SERVING, deregistering, letting calls in flight finish (up to %g s)", grace)
    await health_service.enter_graceful_shutdown()
    if lease is not None:
        await lease.stop(DEREGISTER_TIMEOUT)
    await server.stop(grace)
    threads.shutdown(wait=False, cancel_futures=True)
    if calls.on_threads:
        log.warning(
            "%d sync tool calls are still running past the grace period; the process exits when they return "
            "(a sync tool should watch ctx.cancelled)",
            calls.on_threads,
        )
    log.info("drained")


def _tools_by_name(tools: tuple[Tool, ...]) -> dict[str, Tool]:
    if not tools:
        raise ServeError("no tools to serve: pass the functions decorated with @toolmesh.tool to serve()")
    by_name: dict[str, Tool] = {}
    for t in tools:
        if not isinstance(t, Tool):
            raise ServeError(f"{t!r} is not a tool: decorate it with @toolmesh.tool")
        if t.name in by_name:
            raise ServeError(f"two tools are named {t.name}: give one another name with @tool(name=...)")
        by_name[t.name] = t
    return by_name


def _script_name() -> str:
    """The running script's name ("orders" for orders.py), or "python"."""
    stem = re.sub(r"[^A-Za-z0-9_-]", "", Path(sys.argv[0] if sys.argv else "").stem)
    return stem if stem[:1].isalpha() else "python"


async def _signalled() -> None:
    """Completes on the first SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def _split(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ServeError(f"{what} address {address!r} is not host:port (e.g. 127.0.0.1:9001)")
    return host, int(port)


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _check_advertised(advertise: str | None, listen: str) -> None:
    """Refuses to register an endpoint no dispatcher can dial."""
    if advertise:
        host, port = _split(advertise, "advertised")
        if _is_wildcard(host):
            raise ServeError(f"would register {advertise}, which dispatchers cannot dial: advertise a routable host:port")
        if port == 0:
            raise ServeError(f"would register {advertise}, port 0, which dispatchers cannot dial: advertise the real port")
    elif _is_wildcard(_split(listen, "listen")[0]):
        raise ServeError(
            f"would register {listen}, which dispatchers cannot dial: pass advertise=HOST:PORT "
            "(or set TOOLMESH_ADVERTISE) with an address they can reach"
        )


def _token_source(token: str | None) -> Callable[[], str | None]:
    """Where the registration token comes from: `token` when given, else the
    file `TOOLMESH_TOKEN_FILE` names (read at each use), else
    `TOOLMESH_TOKEN`. An unreadable file sends no token and says why."""
    if token is not None:
        return lambda: token or None
    path = os.environ.get("TOOLMESH_TOKEN_FILE")
    if not path:
        fixed = os.environ.get("TOOLMESH_TOKEN") or None
        return lambda: fixed

    def read() -> str | None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError as e:
            log.warning("cannot read the token file %s (%s); registering without a token", path, e)
            return None

    return read
