"""A toolmesh executor in Python, written from the generated stubs alone.

It serves toolmesh.v1.Executor and grpc.health.v1, registers its tools with
the registry (with a token), heartbeats at a third of the lease and registers
again when the registry answers NOT_FOUND, honours each call's deadline and
cancellation, returns tool errors inside the ToolResult, and drains on
SIGTERM: NOT_SERVING, Deregister, in-flight calls finish, exit.

    python executor.py --registry 127.0.0.1:7070 --listen 0.0.0.0:9001 --advertise 10.0.0.7:9001
"""
import argparse, hmac, json, logging, os, secrets, signal, threading, time, uuid
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from toolmesh.v1 import common_pb2 as pb, executor_pb2, executor_pb2_grpc, registry_pb2, registry_pb2_grpc

log = logging.getLogger("orders-executor")
ORDERS = {"o_1001": {"status": "shipped", "items": 2}, "o_1002": {"status": "packing", "items": 1}}


class ToolFailure(Exception):
    """A business error the model should read: what went wrong and how to fix it."""
    def __init__(self, message, retryable=False):
        super().__init__(message)
        self.retryable = retryable


def get_order(args, context):
    order = ORDERS.get(args["order_id"])
    if order is None:
        raise ToolFailure(f"order {args['order_id']} not found; order ids look like o_1001")
    return f"order {args['order_id']} is {order['status']}", order


def echo_after(args, context):
    """Waits delay_ms, giving up as soon as the call is cancelled or its deadline passes."""
    until = time.monotonic() + args["delay_ms"] / 1000
    while time.monotonic() < until:
        if not context.is_active():
            return None, None  # cancelled or past the deadline: nobody reads the answer
        time.sleep(0.005)
    return args["text"], {"text": args["text"]}


def schema(properties, required):
    return json.dumps({"type": "object", "properties": properties,
                       "required": required, "additionalProperties": False})


TOOLS = {
    "get_order": (get_order, pb.ToolSpec(
        name="get_order", version="1.0.0", description="Look up one order by id: its status and item count.",
        input_schema=schema({"order_id": {"type": "string", "description": "e.g. o_1001"}}, ["order_id"]),
        risk=pb.RISK_LEVEL_LOW, idempotent=True, timeout_ms=2000, owner="orders-team")),
    "echo_after": (echo_after, pb.ToolSpec(
        name="echo_after", version="1.0.0", description="Echo a text back after a delay.",
        input_schema=schema({"text": {"type": "string"},
                             "delay_ms": {"type": "integer", "minimum": 0, "maximum": 60000}}, ["text", "delay_ms"]),
        risk=pb.RISK_LEVEL_LOW, idempotent=True, timeout_ms=60000, owner="orders-team")),
}


def failed(code, message, retryable=False):
    return executor_pb2.ExecuteResponse(result=pb.ToolResult(
        error=pb.ToolError(code=code, message=message, retryable=retryable)))


class Executor(executor_pb2_grpc.ExecutorServicer):
    """Serves Execute to dispatchers only: they present the token we registered."""

    def __init__(self, token):
        self.token, self.enforced = token, True

    def Execute(self, request, context):
        presented = dict(context.invocation_metadata()).get("authorization", "")
        if self.enforced and not hmac.compare_digest(presented, f"Bearer {self.token}"):
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "this executor accepts Execute calls from toolmesh dispatchers only: "
                          "call the tool through a dispatcher (Dispatcher.Invoke)")
        if request.tool not in TOOLS:
            return failed(pb.ERROR_CODE_NOT_FOUND, f"no tool {request.tool!r} here; this executor serves {', '.join(TOOLS)}")
        run, _spec = TOOLS[request.tool]
        log.info("call %s (session %s): %s, attempt %d",
                 request.call_id, request.context.session_id or "-", request.tool, request.attempt)
        try:
            args = json.loads(request.arguments or "{}")
        except ValueError as e:
            return failed(pb.ERROR_CODE_INVALID_ARGUMENTS, f"arguments for {request.tool} are not JSON: {e}")
        try:
            output, data = run(args, context)
        except ToolFailure as e:  # the tool ran and said no: TOOL_ERROR, not a gRPC status
            return failed(pb.ERROR_CODE_TOOL_ERROR, str(e), e.retryable)
        except Exception as e:  # a bug: EXECUTOR_FAILED, the executor keeps serving
            log.exception("tool %s failed", request.tool)
            return failed(pb.ERROR_CODE_EXECUTOR_FAILED, f"tool {request.tool} broke: {e!r}")
        if output is None:
            return failed(pb.ERROR_CODE_DEADLINE_EXCEEDED, f"tool {request.tool} stopped: the call was cancelled or its deadline passed")
        return executor_pb2.ExecuteResponse(result=pb.ToolResult(output=output, data=json.dumps(data)))


def keep_registered(registry, request, metadata, stop, lease, executor):
    """Register, then heartbeat every ttl/3; register again when the registry forgot the lease."""
    while not stop.is_set():
        try:
            response = registry.Register(request, metadata=metadata, timeout=2)
        except grpc.RpcError as e:
            log.warning("register failed (%s: %s); retrying", e.code().name, e.details())
            stop.wait(1)
            continue
        for rejected in response.rejected:
            log.error("registry rejected tool %s: %s", rejected.name, rejected.reason)
        lease["id"] = response.lease_id
        executor.enforced = response.execute_token_accepted  # an older registry cannot hand it on
        log.info("registered as %s, lease %s", request.executor_id, response.lease_id)
        period = (response.lease_ttl_ms or request.lease_ttl_ms) / 3000
        while not stop.wait(period):
            try:
                registry.Heartbeat(registry_pb2.HeartbeatRequest(lease_id=lease["id"]), metadata=metadata, timeout=2)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    log.info("registry forgot lease %s; registering again", lease["id"])
                    break
                log.warning("heartbeat failed (%s: %s)", e.code().name, e.details())


def main():
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=env("TOOLMESH_REGISTRY", "127.0.0.1:7070"))
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--advertise", default=env("TOOLMESH_ADVERTISE"), help="host:port dispatchers dial")
    parser.add_argument("--token", default=env("TOOLMESH_TOKEN"), help="registration token")
    parser.add_argument("--ttl-ms", type=int, default=10000)
    parser.add_argument("--grace-ms", type=int, default=10000)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    executor = Executor(secrets.token_hex(32))
    executor_pb2_grpc.add_ExecutorServicer_to_server(executor, server)
    health_service = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_service, server)
    port = server.add_insecure_port(opts.listen)
    host = opts.listen.rsplit(":", 1)[0]
    endpoint = opts.advertise or f"{host}:{port}"
    if endpoint.rsplit(":", 1)[0] in ("0.0.0.0", "[::]", "::"):
        parser.error(f"would register {endpoint}, which dispatchers cannot dial: pass --advertise HOST:PORT")
    for service in ("", "toolmesh.v1.Executor"):
        health_service.set(service, health_pb2.HealthCheckResponse.SERVING)
    server.start()
    print(f"toolmesh python executor listening on {host}:{port}", flush=True)

    stop, lease = threading.Event(), {}
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    registry = registry_pb2_grpc.RegistryStub(grpc.insecure_channel(opts.registry))
    metadata = [("authorization", f"Bearer {opts.token}")] if opts.token else []
    request = registry_pb2.RegisterRequest(
        executor_id=f"orders-py-{uuid.uuid4().hex[:8]}", service="orders", endpoint=endpoint,
        tools=[spec for _, spec in TOOLS.values()], lease_ttl_ms=opts.ttl_ms, execute_token=executor.token)
    leasing = threading.Thread(target=keep_registered, args=(registry, request, metadata, stop, lease, executor),
                               daemon=True)
    leasing.start()
    while not stop.wait(0.5):
        pass

    log.info("draining")
    health_service.enter_graceful_shutdown()  # every service NOT_SERVING
    leasing.join(timeout=3)
    if "id" in lease:
        try:
            registry.Deregister(registry_pb2.DeregisterRequest(lease_id=lease["id"]), metadata=metadata, timeout=1)
            log.info("deregistered lease %s", lease["id"])
        except grpc.RpcError as e:
            log.warning("deregister failed (%s); the lease will expire", e.code().name)
    server.stop(opts.grace_ms / 1000).wait()
    log.info("drained")


if __name__ == "__main__":
    main()
