"""Poolside Laguna (Ollama ``model/parsers/laguna_test.go``): a call written
in ``<user>`` tags, and the blank and the echoed ``</think>`` that begin a
reply when the template closed the reasoning in the prompt (thinking off)."""

from __future__ import annotations

from typing import Any

from streamfix.formats.laguna import LagunaUser

from .support.detectutil import check_split_invariant
from .support.streamutil import SHAPES_REQUEST

REQUEST = {**SHAPES_REQUEST, "model": "poolside/Laguna-XS.2"}
OTHER = {**SHAPES_REQUEST, "model": "qwen2.5-7b-instruct"}
A1 = ("lookup_order", {"order_id": "A-1"})


def _off(request: dict[str, Any]) -> dict[str, Any]:
    return {**request, "chat_template_kwargs": {"enable_thinking": False}}


def test_a_call_in_user_tags() -> None:
    text = "<user>lookup_order\n<arg_key>order_id</arg_key>\n<arg_value>A-1</arg_value>\n</user>"
    assert check_split_invariant(text, REQUEST) == ("", "", [A1], "tool_calls")
    text = "Let me look.\n" + text
    assert check_split_invariant(text, REQUEST) == ("Let me look.", "", [A1], "tool_calls")


def test_a_json_call_in_user_tags() -> None:
    text = 'Let me look.<user>\n{"name": "lookup_order", "arguments": {"order_id": "A-1"}}\n</user>'
    assert check_split_invariant(text, REQUEST) == ("Let me look.", "", [A1], "tool_calls")


def test_user_tags_around_anything_else_are_text() -> None:
    for text in (
        "<user>hello</user>",
        "A transcript:\n<user>lookup the order please</user>\n<assistant>Sure.</assistant>",
        "<user>unknown_tool\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</user>",
        '<user>{"order_id": "A-1"}</user>',
    ):
        assert check_split_invariant(text, REQUEST) == (text, "", [], "stop")


def test_the_format_reads_only_offered_names() -> None:
    fmt = LagunaUser()
    tools = {"lookup_order": None}
    assert fmt.body_shape("<user>lookup_order\n", tools, False) is True  # type: ignore[arg-type]
    assert fmt.body_shape("<user>hello there", tools, False) is False  # type: ignore[arg-type]
    assert fmt.body_shape("<user>look", tools, False) is None  # type: ignore[arg-type]


def test_thinking_off_the_leading_blank_and_echoed_close_are_markup() -> None:
    assert check_split_invariant("\nHello! How can I help?", _off(REQUEST)) == (
        "Hello! How can I help?",
        "",
        [],
        "stop",
    )
    assert check_split_invariant("</think>\nTokyo", _off(REQUEST)) == ("Tokyo", "", [], "stop")
    # Later in the reply, with thinking off, a close is the answer's text.
    text = "Write </think> to close it."
    assert check_split_invariant(text, _off(REQUEST)) == (text, "", [], "stop")


def test_other_models_keep_a_close_that_begins_a_reply_with_thinking_off() -> None:
    text = "</think>\nTokyo"
    assert check_split_invariant(text, _off(OTHER)) == (text, "", [], "stop")
