"""LFM2's own habits around its call tokens (vLLM ``test_lfm2_tool_parser.py``):
an empty call list shows nothing, and the call's body written again after
``<|tool_call_end|>`` goes with the call."""

from __future__ import annotations

from streamfix.formats.lfm2 import CLOSE, OPEN, Lfm2

from .support.detectutil import check_split_invariant, run_pieces
from .support.streamutil import SHAPES_REQUEST

BODY = '[lookup_order(order_id="A-1")]'
A1 = ("lookup_order", {"order_id": "A-1"})
REQUEST = {**SHAPES_REQUEST, "model": "LiquidAI/LFM2-1.2B"}


def test_an_empty_call_list_shows_nothing() -> None:
    got = check_split_invariant(OPEN + "[]" + CLOSE, REQUEST)
    assert got[:3] == ("", "", [])
    got = check_split_invariant(OPEN + "[ ]" + CLOSE + "No call needed.", REQUEST)
    assert got[:3] == ("No call needed.", "", [])


def test_the_echoed_body_goes_with_the_call() -> None:
    text = OPEN + BODY + CLOSE + BODY + CLOSE
    assert check_split_invariant(text, REQUEST) == ("", "", [A1], "tool_calls")
    _, report = run_pieces(list(text), REQUEST)
    assert report.counts["stripped.echoed_call"] == 1
    # after blanks, and with text after it
    text = OPEN + BODY + CLOSE + "\n" + BODY + CLOSE + "\nDone."
    assert check_split_invariant(text, REQUEST) == ("Done.", "", [A1], "tool_calls")


def test_text_that_is_not_the_echo_stays() -> None:
    other = '[lookup_order(order_id="B-2")]'
    text = OPEN + BODY + CLOSE + " " + other[:-1] + " is another."
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [A1] and content == other[:-1] + " is another."
    # the echo's start, then the reply ends
    text = OPEN + BODY + CLOSE + BODY[:10]
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [A1] and content == BODY[:10]


def test_echo_after_needs_the_closed_region() -> None:
    fmt = Lfm2()
    assert fmt.echo_after(OPEN + BODY + CLOSE) == BODY + CLOSE
    assert fmt.echo_after(OPEN + BODY) == ""


def test_thinking_on_the_prompt_opens_no_reasoning() -> None:
    """LFM2 writes ``<think>`` itself when it reasons (Ollama's LFM2 parser
    tests): thinking on, a sentence before a call is the answer's."""
    req = {
        **REQUEST,
        "model": "lfm2.5-thinking:1.2b",
        "chat_template_kwargs": {"enable_thinking": True},
    }
    got = check_split_invariant("Let me look." + OPEN + BODY + CLOSE, req)
    assert got[:3] == ("Let me look.", "", [A1])
    got = check_split_invariant(
        "<think>Which order?</think>Let me look." + OPEN + BODY + CLOSE, req
    )
    assert got[:3] == ("Let me look.", "Which order?", [A1])
