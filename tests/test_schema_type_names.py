"""Schema types as tool schemas really write them (issue 35, the engines'
XML-call tests): Python's and C's type names (``float``, ``int``, ``bool``…)
mean the JSON types, and a parameter that admits a string and other types
takes the JSON reading of XML text when it is one of those others."""

from __future__ import annotations

from typing import Any

import pytest

from streamfix.toolargs import schema_types

from .support.detectutil import check_split_invariant


@pytest.mark.parametrize(
    ("name", "json_type"),
    [("float", "number"), ("double", "number"), ("int", "integer"), ("bool", "boolean")],
)
def test_type_names_mean_the_json_types(name: str, json_type: str) -> None:
    assert schema_types({"type": name}) == {json_type}
    assert schema_types({"type": [name, "null"]}) == {json_type, "null"}


def _request(props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props}
    return {
        "model": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": params}}],
    }


def _call(**values: str) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values.items())
    return f"<tool_call>\n<function=f>\n{params}</function>\n</tool_call>"


def test_a_float_parameter_is_a_number() -> None:
    _, _, calls, _ = check_split_invariant(_call(x="3.14"), _request({"x": {"type": "float"}}))
    assert calls == [("f", {"x": 3.14})]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),  # an object: one of the others
        ("7", 7),
        ("2 dollars", "2 dollars"),  # not JSON: the text
        ("{not valid json", "{not valid json"),
        ('"quoted"', '"quoted"'),  # a JSON string: the text as it stands
        ("[1, 2]", "[1, 2]"),  # an array is not admitted: the text
    ],
)
def test_string_or_other_takes_the_other_when_the_text_is_one(text: str, value: Any) -> None:
    request = _request({"v": {"type": ["string", "object", "integer"]}})
    _, _, calls, _ = check_split_invariant(_call(v=text), request)
    assert calls == [("f", {"v": value})]


def test_a_string_parameter_keeps_json_looking_text() -> None:
    _, _, calls, _ = check_split_invariant(_call(v='{"a": 1}'), _request({"v": {"type": "string"}}))
    assert calls == [("f", {"v": '{"a": 1}'})]
