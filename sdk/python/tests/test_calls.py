"""One call from request to ToolResult: lookup, argument checks, error mapping, deadlines; and the configurations serve refuses."""

import asyncio
import concurrent.futures
import unittest

import toolmesh
from toolmesh._execute import Calls
from toolmesh.v1 import common_pb2 as pb, executor_pb2


@toolmesh.tool(version="1.2.0")
def get_order(order_id: str) -> dict:
    """Look up an order."""
    if order_id != "o_1":
        raise toolmesh.ToolError(f"order {order_id} not found", retry_after=0.25)
    return {"status": "shipped"}


@toolmesh.tool
def leaky(secret: str) -> str:
    """Break with a secret in the exception."""
    raise KeyError(f"the password is {secret}")


@toolmesh.tool
async def sleeper(seconds: float) -> str:
    """Sleep, async."""
    await asyncio.sleep(seconds)
    return "woke"


@toolmesh.tool
def watcher(ctx: toolmesh.Context) -> str:
    """Return as soon as the deadline passes, as a sync tool that watches it does."""
    ctx.wait_cancelled()
    return "saw it"


def run(tool, arguments="{}", caller_timeout=None, version=""):
    async def call():
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as threads:
            calls = Calls({t.name: t for t in (get_order, leaky, sleeper, watcher)}, "exec-1", threads)
            request = executor_pb2.ExecuteRequest(call_id="c-1", tool=tool, version=version, arguments=arguments, attempt=1)
            return await calls.run(request, caller_timeout, None)

    return asyncio.run(call())


class Calling(unittest.TestCase):
    def test_success_and_tool_error(self):
        self.assertEqual(run("get_order", '{"order_id": "o_1"}').data, '{"status":"shipped"}')
        error = run("get_order", '{"order_id": "o_2"}').error
        self.assertEqual(error.code, pb.ERROR_CODE_TOOL_ERROR)
        self.assertEqual(error.message, "order o_2 not found")
        self.assertTrue(error.retryable, "retry_after marks it retryable")
        self.assertEqual(error.retry_after_ms, 250)

    def test_unknown_tool_and_version(self):
        error = run("get_ordr").error
        self.assertEqual(error.code, pb.ERROR_CODE_NOT_FOUND)
        self.assertIn("did you mean 'get_order'?", error.message)
        error = run("get_order", '{"order_id": "o_1"}', version="9.0.0").error
        self.assertEqual(error.code, pb.ERROR_CODE_NOT_FOUND)
        self.assertIn("it serves version 1.2.0", error.message)
        self.assertEqual(run("get_order", '{"order_id": "o_1"}', version="1.2.0").error.code, 0)

    def test_arguments_are_checked_before_the_call(self):
        error = run("get_order", '{"order_id": 7, "x": 1}').error
        self.assertEqual(error.code, pb.ERROR_CODE_INVALID_ARGUMENTS)
        self.assertIn("at /order_id:", error.message)
        self.assertIn("at /x:", error.message)

    def test_an_unexpected_exception_is_logged_not_sent(self):
        with self.assertLogs("toolmesh.executor", "ERROR") as logged:
            error = run("leaky", '{"secret": "hunter2"}').error
        self.assertEqual(error.code, pb.ERROR_CODE_EXECUTOR_FAILED)
        self.assertFalse(error.retryable)
        self.assertNotIn("hunter2", error.message)
        self.assertIn("logged the details under call c-1", error.message)
        self.assertIn("hunter2", "\n".join(logged.output), "the traceback is in the log")

    def test_deadlines(self):
        """The caller's deadline (answered a little early) and the tool's
        timeout bound a call; a sync tool that returns once the deadline
        passed is late all the same."""
        error = run("sleeper", '{"seconds": 5}', caller_timeout=0.2).error
        self.assertEqual(error.code, pb.ERROR_CODE_DEADLINE_EXCEEDED)
        self.assertIn("before the caller's deadline (180 ms)", error.message)
        error = run("watcher", caller_timeout=0.2).error
        self.assertEqual(error.code, pb.ERROR_CODE_DEADLINE_EXCEEDED)
        self.assertEqual(run("sleeper", '{"seconds": 0}', caller_timeout=0.0).error.code, pb.ERROR_CODE_DEADLINE_EXCEEDED)
        self.assertEqual(run("sleeper", '{"seconds": 0.01}', caller_timeout=5).output, "woke")


class ServeRefuses(unittest.TestCase):
    def refused(self, needle, *tools, **options):
        async def go():
            never = asyncio.get_running_loop().create_future()
            await toolmesh.serve_async(*tools, registry="127.0.0.1:1", shutdown=never, **options)

        with self.assertRaises(toolmesh.ServeError) as raised:
            asyncio.run(go())
        self.assertIn(needle, str(raised.exception))

    def test_configurations_it_cannot_serve_with(self):
        self.refused("no tools to serve")
        self.refused("is not a tool: decorate it", print)

        def other(order_id: str) -> str:
            """Another tool by the same name."""

        self.refused("two tools are named get_order", get_order, toolmesh.tool(name="get_order")(other))
        self.refused("pass advertise=HOST:PORT", get_order, listen="0.0.0.0:0")
        self.refused("advertise a routable host:port", get_order, advertise="[::]:9001")
        self.refused("port 0", get_order, advertise="10.0.0.7:0")
        self.refused("is not host:port", get_order, listen="nonsense")
        self.refused("both a certificate and its key", get_order, tls=toolmesh.TLS(cert=__file__))
        self.refused("give the executor's own cert= and key=", get_order, tls=toolmesh.TLS(client_ca=__file__))
        self.refused("holds no PEM block", get_order, tls=toolmesh.TLS(cert=__file__, key=__file__))
        self.refused("ca='/nonexistent/ca.pem'", get_order, tls=toolmesh.TLS(ca="/nonexistent/ca.pem"))


if __name__ == "__main__":
    unittest.main()
