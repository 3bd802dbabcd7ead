"""Llama 3 writes parallel calls as JSON objects joined by ``;`` with no
``<|python_tag|>`` (vLLM's Llama 3 JSON parser reads them so): every
object is a call, streamed at any split or whole, and the ``;`` between
them is not text."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.streamutil import fix_text, fixed_whole, split_sizes

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("searchTool", "getOpenIncidentsTool")
]
REQUEST = {"model": "meta-llama/Llama-3.2-1B-Instruct", "tools": TOOLS}
TEXT = (
    '{"name": "searchTool", "parameters": {"query": "a"}};\n'
    '{"name": "getOpenIncidentsTool", "parameters": {}} ; '
    '{"name": "searchTool", "parameters": {"query": "b"}}'
)
CALLS = [
    ("searchTool", {"query": "a"}),
    ("getOpenIncidentsTool", {}),
    ("searchTool", {"query": "b"}),
]


def test_every_object_joined_by_a_semicolon_is_a_call_whole() -> None:
    choice, _ = fixed_whole(TEXT, REQUEST)
    msg = choice["message"]
    assert not msg.get("content")
    got = [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in msg["tool_calls"]
    ]
    assert got == CALLS


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_every_object_joined_by_a_semicolon_is_a_call_at_any_split(sizes: list[int]) -> None:
    got = fix_text(split_sizes(TEXT, sizes), REQUEST)
    assert got.calls() == CALLS
    assert got.content == ""


def test_a_semicolon_after_json_that_is_no_call_is_kept() -> None:
    """Only a call's ``;`` goes: after JSON that is not a call, the text is
    the model's, byte for byte."""
    text = '{"error": "not found"}; {"status": 404} ; done.'
    got = fix_text([text], REQUEST)
    assert got.content == text
    assert got.calls() == []


def test_a_semicolon_and_prose_after_a_call_keep_the_prose() -> None:
    """After the last call, the ``;`` goes with the call; the prose after
    it is kept in place."""
    text = '{"name": "searchTool", "parameters": {"query": "a"}}; that is all.'
    got = fix_text([text], REQUEST)
    assert got.calls() == CALLS[:1]
    assert got.content.strip() == "that is all."
