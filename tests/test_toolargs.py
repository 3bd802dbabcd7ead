"""Argument parsing, repair and schema conversion (streamfix/args.py)."""

from __future__ import annotations

from typing import Any

import pytest

from streamfix.toolargs import (
    INVALID,
    coerce,
    looks_truncated,
    parse_call_args,
    parse_object,
    parse_value,
    schema_types,
    to_object,
    validate,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "priority": {"type": "integer"},
        "ratio": {"type": "number"},
        "urgent": {"type": "boolean"},
        "tags": {"type": "array"},
        "meta": {"type": "object"},
        "level": {"type": "string", "enum": ["low", "high"]},
    },
    "required": ["title"],
}


@pytest.mark.parametrize(
    ("text", "expected", "repaired"),
    [
        ('{"a": 1}', {"a": 1}, False),
        ('{"a": 1,}', {"a": 1}, True),
        ('{"a": [1, 2,],}', {"a": [1, 2]}, True),
        ("{'a': 'x', 'b': True, 'c': None}", {"a": "x", "b": True, "c": None}, True),
        ("{'a': (1, 2)}", {"a": [1, 2]}, True),
        ('{order_id: "E-5"}', {"order_id": "E-5"}, True),
        ("{'a': true, 'b': null}", {"a": True, "b": None}, True),
        ('{"a": "x, y: z", b: false}', {"a": "x, y: z", "b": False}, True),
        ('"{\\"a\\": 1}"', {"a": 1}, True),
        ("", {}, True),
        ("{}", {}, False),
        ('{"a": ', None, False),
        ("[1, 2]", None, False),
        ("not json", None, False),
    ],
)
def test_parse_object(text: str, expected: dict[str, Any] | None, repaired: bool) -> None:
    assert parse_object(text) == (expected, repaired)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[{"name": "x"}]', [{"name": "x"}]),
        ("[{'name': 'x',},]", [{"name": "x"}]),
        ('"s"', "s"),
        ("null", None),
        ("{bad", INVALID),
        ("", INVALID),
    ],
)
def test_parse_value(text: str, expected: Any) -> None:
    assert parse_value(text) == expected or (expected is INVALID and parse_value(text) is INVALID)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, ({}, False)),
        ({"a": 1}, ({"a": 1}, False)),
        ('{"a": 1}', ({"a": 1}, False)),
        (42, (None, False)),
        ({"a": object()}, (None, False)),
    ],
)
def test_to_object(raw: Any, expected: tuple[Any, bool]) -> None:
    assert to_object(raw) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"priority": "5"}, {"priority": 5}),
        ({"priority": 5.0}, {"priority": 5}),
        ({"ratio": "0.5"}, {"ratio": 0.5}),
        ({"urgent": "true"}, {"urgent": True}),
        ({"tags": '["a"]'}, {"tags": ["a"]}),
        ({"meta": '{"k": 1}'}, {"meta": {"k": 1}}),
        ({"title": 5}, {"title": "5"}),
        ({"title": '{"looks": "like json"}'}, {"title": '{"looks": "like json"}'}),
        ({"priority": "five"}, {"priority": "five"}),
        ({"unknown": "5"}, {"unknown": "5"}),
    ],
)
def test_coerce(args: dict[str, Any], expected: dict[str, Any]) -> None:
    assert coerce(args, SCHEMA)[0] == expected


#: Nullable and union schemas as Pydantic v2 and OpenAPI write them.
UNIONS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"type": ["string", "null"]},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "memo": {"type": "string", "nullable": True},
        "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "limit": {"type": ["integer", "null"]},
        "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "meta": {"oneOf": [{"type": "object"}, {"type": "null"}]},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        "title": {"type": "string"},
    },
}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"label": "null"}, {"label": None}),
        ({"label": "None"}, {"label": None}),
        ({"label": "none of these"}, {"label": "none of these"}),
        ({"label": "none"}, {"label": "none"}),
        ({"note": "null"}, {"note": None}),
        ({"memo": "null"}, {"memo": None}),
        ({"count": "5"}, {"count": 5}),
        ({"count": "null"}, {"count": None}),
        ({"limit": "42"}, {"limit": 42}),
        ({"limit": "NULL"}, {"limit": None}),
        ({"tags": '["a", "b"]'}, {"tags": ["a", "b"]}),
        ({"meta": '{"key": "value"}'}, {"meta": {"key": "value"}}),
        ({"either": "some text"}, {"either": "some text"}),
        ({"either": "5"}, {"either": "5"}),
        ({"either": 5}, {"either": 5}),
        ({"title": "null"}, {"title": "null"}),
        ({"title": '["looks", "like", "json"]'}, {"title": '["looks", "like", "json"]'}),
    ],
)
def test_coerce_nullable_and_unions(args: dict[str, Any], expected: dict[str, Any]) -> None:
    """``null`` is null where the schema admits it; a union converts to the
    first of its types the text reads as exactly; a string stays a string."""
    assert coerce(args, UNIONS)[0] == expected


def test_schema_types() -> None:
    assert schema_types({"type": ["integer", "null"]}) == {"integer", "null"}
    assert schema_types({"anyOf": [{"type": "array"}, {"oneOf": [{"type": "null"}]}]}) == {
        "array",
        "null",
    }
    assert schema_types({"type": "string", "nullable": True}) == {"string", "null"}
    assert schema_types({"description": "anything"}) == frozenset()
    # Names other schema dialects use (SGLang's MiMo tests: uint32, long).
    for name in ("uint32", "int64", "long", "short", "unsigned"):
        assert schema_types({"type": name}) == {"integer"}
    assert schema_types({"type": "float32"}) == {"number"}


@pytest.mark.parametrize(
    ("args", "errors"),
    [
        ({"title": "x"}, []),
        ({}, ["missing title"]),
        ({"title": "x", "priority": "high"}, ["priority: not integer"]),
        ({"title": "x", "priority": True}, ["priority: not integer"]),
        ({"title": "x", "level": "mid"}, ["level: not one of the enum"]),
        ({"title": "x", "extra": 1}, []),
    ],
)
def test_validate(args: dict[str, Any], errors: list[str]) -> None:
    assert validate(args, SCHEMA) == errors


def test_validate_additional_properties_false() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert validate({"a": 1, "b": 2}, schema) == ["unexpected b"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('order_id="D-4"', ([], {"order_id": "D-4"})),
        (
            "a=1, b=True, c=None, d=[1, 2], e={'k': 'v'}",
            ([], {"a": 1, "b": True, "c": None, "d": [1, 2], "e": {"k": "v"}}),
        ),
        ("flag=true, other=null", ([], {"flag": True, "other": None})),
        ('{"title": "x", "priority": 2}', ([{"title": "x", "priority": 2}], {})),
        ('"D-4"', (["D-4"], {})),
        ("", ([], {})),
        ("order_id=my_var", None),
        ("x=1+2", None),
        ("**kw", None),
        ("title: 'x'", None),
    ],
)
def test_parse_call_args(text: str, expected: Any) -> None:
    assert parse_call_args(text) == expected


@pytest.mark.parametrize(
    ("text", "cut"),
    [('{"city":', True), ('{"city": "Par', True), ('{"city": "Paris"}', False), ("", False)],
)
def test_looks_truncated(text: str, cut: bool) -> None:
    assert looks_truncated(text) is cut
