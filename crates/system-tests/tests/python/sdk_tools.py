"""An executor written with the toolmesh Python SDK as a user would, for
tests/python_sdk.rs: a sync tool with a typed schema and a tool error, one
that breaks with a secret in its exception, async and sync tools that
report what they see of deadlines and cancellation, and one that streams
progress. Registry and token come from TOOLMESH_REGISTRY / TOOLMESH_TOKEN.
Lines it prints ("... started: X", "... cancelled: X") are what the test
waits on."""

import asyncio
from typing import Annotated

from pydantic import BaseModel, Field

import toolmesh

ORDERS = {"o_1001": ("shipped", 2), "o_1002": ("packing", 1)}


def say(line: str) -> None:
    print(line, flush=True)


class Order(BaseModel):
    status: str
    items: int


@toolmesh.tool(risk="low", idempotent=True, timeout=2, tags=["orders", "read"], owner="orders-team")
def get_order(order_id: Annotated[str, Field(description="The order id, e.g. o_1001", pattern=r"^o_[0-9]+$")]) -> Order:
    """Look up one order by id: its status and item count."""
    if order_id not in ORDERS:
        raise toolmesh.ToolError(f"order {order_id} not found; order ids look like o_1001")
    status, items = ORDERS[order_id]
    return Order(status=status, items=items)


@toolmesh.tool(risk="medium")
def cancel_order(order_id: str, reason: str = "") -> str:
    """Cancel an order (reversible until it ships)."""
    raise RuntimeError(f"orders database refused the connection for {order_id}: password hunter2 expired")


@toolmesh.tool(timeout=30)
async def slow_echo(text: str, delay_ms: int) -> str:
    """Echo a text back after a delay."""
    say(f"slow_echo started: {text}")
    try:
        await asyncio.sleep(delay_ms / 1000)
    except asyncio.CancelledError:
        say(f"slow_echo cancelled: {text}")
        raise
    return text


@toolmesh.tool(timeout=60)
def wait_for_cancel(label: str, seconds: float, ctx: toolmesh.Context) -> str:
    """Wait until cancelled, at most `seconds`, saying what it saw."""
    say(f"wait_for_cancel started: {label}")
    if ctx.wait_cancelled(seconds):
        say(f"wait_for_cancel saw the cancellation: {label}")
        return "cancelled"
    return "not cancelled"


@toolmesh.tool(idempotent=True)
async def count(to: Annotated[int, Field(ge=1, le=100)], ctx: toolmesh.Context) -> dict:
    """Count to a number, reporting each step."""
    for step in range(1, to + 1):
        ctx.progress(step, to, f"{step} of {to}")
        await asyncio.sleep(0)
    return {"counted": to}


if __name__ == "__main__":
    toolmesh.serve(get_order, cancel_order, slow_echo, wait_for_cancel, count, service="orders-py", lease_ttl=2)
