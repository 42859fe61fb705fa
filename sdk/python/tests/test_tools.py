"""@tool: specs and schemas from type hints, definitions refused with a reason, arguments checked, results encoded."""

import dataclasses
import json
import typing
import unittest
from typing import Annotated, Literal

import typing_extensions
from pydantic import BaseModel, Field

import toolmesh
from toolmesh._tools import ArgumentsError, ResultError
from toolmesh.v1 import common_pb2 as pb


class Line(BaseModel):
    sku: str
    qty: int = Field(ge=1)


@dataclasses.dataclass
class Receipt:
    order_id: str
    total_cents: int


class Shipment(typing_extensions.TypedDict):
    carrier: str


class SchemaFromHints(unittest.TestCase):
    def test_parameters_become_a_closed_object_schema(self):
        """Types, defaults, Field constraints and descriptions, Literal enums
        and nested models reach the input schema; extra keys are refused;
        pydantic's titles are left out but a property named "title" stays;
        parameters may be named like pydantic's own attributes."""

        @toolmesh.tool
        def place(
            lines: list[Line],
            title: Annotated[str, Field(description="shown on the invoice")],
            priority: Literal["low", "high"] = "low",
            json: str = "",
        ) -> str:
            """Place an order."""
            return "ok"

        schema = json_of(place.spec.input_schema)
        self.assertEqual(
            schema,
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
                    "title": {"type": "string", "description": "shown on the invoice"},
                    "priority": {"type": "string", "enum": ["low", "high"], "default": "low"},
                    "json": {"type": "string", "default": ""},
                },
                "required": ["lines", "title"],
                "$defs": {
                    "Line": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                        "required": ["sku", "qty"],
                    }
                },
            },
        )
        self.assertEqual(place.spec.output_schema, "", "a str result has no output schema")

    def test_decorator_arguments_and_docstring_fill_the_spec(self):
        @toolmesh.tool(risk="HIGH", idempotent=True, read_only=False, timeout=2.5, tags=["a", "b"], owner="team", version="2.1.0")
        def refund(order_id: str) -> None:
            """
            Refund an order.

            Irreversible.
            """

        spec = refund.spec
        self.assertEqual(spec.name, "refund")
        self.assertEqual(spec.version, "2.1.0")
        self.assertEqual(spec.description, "Refund an order.\n\nIrreversible.")
        self.assertEqual(spec.risk, pb.RISK_LEVEL_HIGH)
        self.assertTrue(spec.idempotent)
        self.assertEqual(spec.timeout_ms, 2500)
        self.assertEqual(list(spec.tags), ["a", "b"])
        self.assertEqual(spec.owner, "team")
        self.assertFalse(spec.streams_progress)

    def test_a_plain_tool_is_low_risk_with_the_default_timeout(self):
        @toolmesh.tool
        def ping() -> str:
            """Answer pong."""
            return "pong"

        self.assertEqual(ping.spec.risk, pb.RISK_LEVEL_LOW)
        self.assertEqual(ping.spec.timeout_ms, 0)
        self.assertFalse(ping.spec.idempotent)
        self.assertEqual(json_of(ping.spec.input_schema), {"type": "object", "additionalProperties": False, "properties": {}})
        self.assertEqual(ping(), "pong", "the decorated function is still callable")

    def test_a_context_parameter_is_not_an_argument_and_streams(self):
        @toolmesh.tool
        async def work(steps: int, ctx: toolmesh.Context) -> dict:
            """Work in steps."""
            return {}

        self.assertEqual(json_of(work.spec.input_schema)["properties"], {"steps": {"type": "integer"}})
        self.assertEqual(work.context_param, "ctx")
        self.assertTrue(work.is_async)
        self.assertTrue(work.spec.streams_progress)

        @toolmesh.tool(streams_progress=False)
        def quiet(ctx: toolmesh.Context) -> str:
            """Quiet."""
            return ""

        self.assertFalse(quiet.spec.streams_progress)

    def test_object_return_types_become_the_output_schema(self):
        """Models, dataclasses and TypedDicts describe `data`; plain types do not."""
        for returns, properties in [
            (Line, {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}),
            (Receipt, {"order_id": {"type": "string"}, "total_cents": {"type": "integer"}}),
            (Shipment, {"carrier": {"type": "string"}}),
        ]:

            def f() -> returns:  # noqa: F821
                """Return something."""

            spec = toolmesh.tool(f).spec
            self.assertEqual(json_of(spec.output_schema)["properties"], properties, returns)
        for plain in (dict, list[int], int, str, None, toolmesh.Output):

            def g() -> plain:  # noqa: F821
                """Return something."""

            self.assertEqual(toolmesh.tool(g).spec.output_schema, "", plain)


class DefinitionsRefused(unittest.TestCase):
    def refused(self, fn, needle, **options):
        with self.assertRaises(toolmesh.ToolDefinitionError) as raised:
            toolmesh.tool(**options)(fn)
        self.assertIn(needle, str(raised.exception))
        return str(raised.exception)

    def test_each_mistake_is_named_with_its_fix(self):
        def documented(x: int) -> str:
            """Documented."""

        def undocumented(x: int) -> str:
            pass

        def untyped(x) -> str:
            """Untyped."""

        def variadic(*args: int) -> str:
            """Variadic."""

        def positional(x: int, /) -> str:
            """Positional."""

        message = self.refused(undocumented, "write a docstring")
        self.assertIn("'undocumented'", message)
        self.refused(untyped, "parameter x has no type hint")
        self.refused(variadic, "*args")
        self.refused(positional, "positional-only")
        self.refused(documented, "start with a letter", name="bad.name")
        self.refused(documented, "semantic version", version="1")
        self.refused(documented, "risk 'severe'", risk="severe")
        self.refused(documented, "timeout", timeout=0)
        self.refused(documented, "timeout", timeout=601)
        self.refused(documented, "limit is 4096", description="x" * 4097)

    def test_a_tool_is_decorated_once(self):
        @toolmesh.tool
        def once() -> str:
            """Once."""

        with self.assertRaises(toolmesh.ToolDefinitionError):
            toolmesh.tool(once)


class Arguments(unittest.TestCase):
    def test_arguments_are_checked_and_converted(self):
        @toolmesh.tool
        def place(lines: list[Line], note: str = "none") -> str:
            """Place."""

        kwargs = place.parse_arguments('{"lines": [{"sku": "a", "qty": 2}]}')
        self.assertEqual(kwargs, {"lines": [Line(sku="a", qty=2)], "note": "none"})
        with self.assertRaises(ArgumentsError) as raised:
            place.parse_arguments('{"lines": [{"sku": "a", "qty": 0}], "extra": 1}')
        message = str(raised.exception)
        self.assertIn("arguments for place do not match its input schema", message)
        self.assertIn("at /lines/0/qty:", message)
        self.assertIn("at /extra:", message)
        with self.assertRaises(ArgumentsError):
            place.parse_arguments("not json")
        with self.assertRaises(ArgumentsError) as raised:
            place.parse_arguments('{"lines": [{"sku": "a", "qty": 1, "qty": 2}]}')
        self.assertIn("repeat the key 'qty'", str(raised.exception))
        with self.assertRaises(ArgumentsError) as raised:
            place.parse_arguments("")
        self.assertIn("at /lines:", str(raised.exception), "no text reads as {}")


class Results(unittest.TestCase):
    def test_values_map_to_output_and_data(self):
        @toolmesh.tool
        def anything() -> typing.Any:
            """Anything."""

        self.assertEqual(anything.encode("text"), pb.ToolResult(output="text"))
        self.assertEqual(anything.encode(None), pb.ToolResult())
        self.assertEqual(anything.encode({"a": [1, 2]}), pb.ToolResult(output='{"a":[1,2]}', data='{"a":[1,2]}'))
        self.assertEqual(anything.encode(Line(sku="s", qty=1)).data, '{"sku":"s","qty":1}')
        self.assertEqual(
            anything.encode(toolmesh.Output("3 orders", data=[1, 2, 3], metadata={"k": "v"})),
            pb.ToolResult(output="3 orders", data="[1,2,3]", metadata={"k": "v"}),
        )
        with self.assertRaises(ResultError):
            anything.encode(object())

    def test_a_declared_object_result_is_checked(self):
        @toolmesh.tool
        def receipt() -> Receipt:
            """Receipt."""

        self.assertEqual(receipt.encode({"order_id": "o_1", "total_cents": 5}).data, '{"order_id":"o_1","total_cents":5}')
        with self.assertRaises(ResultError) as raised:
            receipt.encode({"order_id": "o_1"})
        self.assertIn("tool receipt returned a value that is not its declared JSON", str(raised.exception))


def json_of(text: str):
    return json.loads(text)


if __name__ == "__main__":
    unittest.main()
