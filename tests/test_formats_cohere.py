"""Cohere's action blocks that do not read whole (formats/cohere.py): each
call object of the list is read alone (Ollama's Cohere parser tests)."""

from __future__ import annotations

from streamfix.formats.base import UNREADABLE, RawCall
from streamfix.formats.cohere import Cohere
from streamfix.spec import tools_of
from tests.support.streamutil import SHAPES_REQUEST

TOOLS = tools_of(SHAPES_REQUEST)


def parse(body: str) -> list[RawCall] | None:
    return Cohere().parse("<|START_ACTION|>" + body + "<|END_ACTION|>", TOOLS)


def test_a_missing_comma_between_calls_keeps_both() -> None:
    got = parse(
        '[{"tool_call_id": "0", "tool_name": "a", "parameters": {}}'
        '{"tool_call_id": "1", "tool_name": "b", "parameters": {"x": "{not json}"}}]'
    )
    assert got == [RawCall("a", {}), RawCall("b", {"x": "{not json}"})]


def test_a_call_that_does_not_read_leaves_its_sibling() -> None:
    got = parse(
        '[\n    {"tool_call_id": "0", "tool_name": "set_alarm", "parameters": {"time": 15:30}},'
        '    {"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Oslo"}}\n]'
    )
    assert got == [UNREADABLE, RawCall("get_weather", {"city": "Oslo"})]


def test_a_list_of_no_objects_or_with_prose_is_no_call() -> None:
    assert parse("[!!!]") is None
    assert parse('[{"tool_name": "a", "parameters": {}} and then]') is None
    assert parse('[{"tool_name": "a", "parameters": {time: 1}}]') is None
