"""dots' ``<dots_function_call>`` blocks (SGLang ``dots_detector.py``):
MiniMax-style ``<invoke>`` elements, or one JSON object, in the family's
own wrapper."""

from __future__ import annotations

from streamfix.formats.dots import Dots

from .support.detectutil import check_split_invariant, run_pieces
from .support.streamutil import SHAPES_REQUEST

A1 = ("lookup_order", {"order_id": "A-1"})
T1 = ("create_ticket", {"title": "Late", "priority": 2})


def test_invokes_in_one_block() -> None:
    text = (
        "Checking.<dots_function_call>\n"
        '<invoke name="lookup_order">\n<parameter name="order_id">A-1</parameter>\n</invoke>\n'
        '<invoke name="create_ticket"><parameter name="title">Late</parameter>'
        '<parameter name="priority">2</parameter></invoke>\n</dots_function_call>'
    )
    assert check_split_invariant(text) == ("Checking.", "", [A1, T1], "tool_calls")
    _, report = run_pieces([text], SHAPES_REQUEST)
    assert report.counts["lifted.dots"] == 2


def test_a_json_body() -> None:
    text = (
        '<dots_function_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}'
        "</dots_function_call>"
    )
    assert check_split_invariant(text) == ("", "", [A1], "tool_calls")


def test_text_between_blocks_is_kept() -> None:
    block = (
        '<dots_function_call><invoke name="lookup_order">'
        '<parameter name="order_id">A-1</parameter></invoke></dots_function_call>'
    )
    assert check_split_invariant("before" + block + "after") == (
        "beforeafter",
        "",
        [A1],
        "tool_calls",
    )


def test_prose_naming_the_tag_is_text() -> None:
    text = "dots models wrap calls in <dots_function_call> tags."
    assert check_split_invariant(text) == (text, "", [], "stop")


def test_a_stray_close_is_stripped() -> None:
    assert check_split_invariant("some text </dots_function_call>")[0] == "some text "


def test_a_cut_invoke_does_not_parse() -> None:
    body = '<invoke name="lookup_order"><parameter name="order_id">A-1'
    assert Dots().parse("<dots_function_call>" + body, {}) is None
