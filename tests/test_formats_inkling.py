"""Thinking Machines' Inkling messages (SGLang ``inkling_detector.py``):
``<|message_model|>NAME<|content_invoke_tool_json|>{"name":…,"args":…}``
``<|end_message|>`` is a call; thinking and text messages are reasoning and
content, their control tokens never shown."""

from __future__ import annotations

from streamfix.formats.inkling import Inkling

from .support.detectutil import check_split_invariant, run_pieces
from .support.streamutil import SHAPES_REQUEST

REQUEST = {**SHAPES_REQUEST, "model": "thinkingmachines/Inkling"}
A1 = ("lookup_order", {"order_id": "A-1"})
CALL = (
    '<|message_model|>lookup_order<|content_invoke_tool_json|>{"name":"lookup_order",'
    '"args":{"order_id":"A-1"}}<|end_message|>'
)


def test_a_whole_reply() -> None:
    text = (
        "<|message_model|><|content_thinking|>Look it up.<|end_message|>"
        "<|message_model|><|content_text|>One moment.<|end_message|>"
        + CALL
        + "<|content_model_end_sampling|>"
    )
    got = check_split_invariant(text, REQUEST)
    assert got == ("One moment.", "Look it up.", [A1], "tool_calls")
    _, report = run_pieces([text], REQUEST)
    assert report.counts["lifted.inkling"] == 1


def test_two_calls_and_text_before() -> None:
    assert check_split_invariant("Sure." + CALL + CALL, REQUEST) == (
        "Sure.",
        "",
        [A1, A1],
        "tool_calls",
    )


def test_a_frame_without_header_or_end() -> None:
    text = 'Sure.<|content_invoke_tool_json|>{"name":"lookup_order","args":{"order_id":"A-1"}}'
    assert check_split_invariant(text, REQUEST) == ("Sure.", "", [A1], "tool_calls")


def test_a_header_naming_another_tool_is_no_call() -> None:
    region = CALL.replace("lookup_order<|", "create_ticket<|").removesuffix("<|end_message|>")
    assert Inkling().parse(region, {}) is None


def test_a_text_message_is_content() -> None:
    text = "Hi<|message_model|><|content_text|>there<|end_message|>"
    assert check_split_invariant(text, REQUEST) == ("Hithere", "", [], "stop")


def test_prose_after_the_message_token_is_text() -> None:
    text = "<|message_model|>lookup_order is the tool you want."
    assert check_split_invariant(text, REQUEST)[2] == []
