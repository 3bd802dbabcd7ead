"""Functionary v3.2's recipient lines (llama.cpp ``tests/test-chat.cpp``):
the template ends the prompt with ``>>>``, so the first message shows only
its recipient line; later messages carry the marker."""

from __future__ import annotations

from streamfix.formats.functionary import Functionary

from .support.detectutil import check_split_invariant, run_pieces
from .support.streamutil import SHAPES_REQUEST

REQUEST = {**SHAPES_REQUEST, "model": "meetkai/functionary-small-v3.2"}
OTHER = {**SHAPES_REQUEST, "model": "qwen2.5-7b-instruct"}
A1 = ("lookup_order", {"order_id": "A-1"})
T1 = ("create_ticket", {"title": "Late", "priority": 2})


def test_the_first_message_is_a_call() -> None:
    text = 'lookup_order\n{"order_id": "A-1"}'
    assert check_split_invariant(text, REQUEST) == ("", "", [A1], "tool_calls")
    _, report = run_pieces([text], REQUEST)
    assert report.counts["prompt_marker.functionary"] == 1
    assert report.counts["lifted.functionary"] == 1


def test_the_first_message_is_text() -> None:
    text = "all\nHello, world!\nWhat's up?"
    got = check_split_invariant(text, REQUEST)
    assert got == ("Hello, world!\nWhat's up?", "", [], "stop")
    _, report = run_pieces([text], REQUEST)
    assert report.counts["stripped.header"] == 1


def test_later_messages_carry_the_marker() -> None:
    text = (
        'all\nLet me look.\n>>>lookup_order\n{"order_id": "A-1"}'
        '>>>create_ticket\n{"title": "Late", "priority": 2}'
    )
    assert check_split_invariant(text, REQUEST) == ("Let me look.", "", [A1, T1], "tool_calls")
    text = 'lookup_order\n{"order_id": "A-1"}\n>>>all\nDone, it shipped.'
    assert check_split_invariant(text, REQUEST) == ("Done, it shipped.", "", [A1], "tool_calls")


def test_a_first_line_that_is_no_recipient_goes_out_as_written() -> None:
    for text in ("Hello there.\nHow can I help?", "all of them\nare here", "lookup"):
        assert check_split_invariant(text, REQUEST) == (text, "", [], "stop")


def test_other_models_are_not_read_so() -> None:
    # Without the template's marker, a first line naming a tool is text.
    text = 'lookup_order\n{"order_id": "A-1"}'
    assert check_split_invariant(text, OTHER) == (text, "", [], "stop")
    text = "all\nHello"
    assert check_split_invariant(text, OTHER) == (text, "", [], "stop")


def test_a_repl_transcript_is_prose() -> None:
    text = "In the shell:\n>>> import os\n>>> os.getcwd()\nThat prints the folder."
    for request in (REQUEST, OTHER):
        assert check_split_invariant(text, request) == (text, "", [], "stop")


def test_a_marker_line_then_no_json_is_text() -> None:
    text = "Quoted:\n>>>lookup_order\nis how it starts."
    assert check_split_invariant(text, OTHER) == (text, "", [], "stop")


def test_the_format_reads_only_its_own_shape() -> None:
    fmt = Functionary()
    assert fmt.parse('>>>lookup_order\n{"order_id": "A-1"}', {}) is not None
    assert fmt.parse(">>>all\nHello", {}) is None
    assert fmt.parse(">>>lookup_order\n[1, 2]", {}) is None
    assert fmt.is_header(">>>all\n") and not fmt.is_header(">>>lookup_order\n")
