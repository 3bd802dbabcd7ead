"""A Harmony message to a function whose body is not JSON (vLLM
``test_openai_tool_parser.py``, ``to=functions.X<|channel|>commentary
<|message|>foo<|call|>``): no call (its arguments would not be JSON), and
what goes out is the body the model wrote, not the header's words."""

from __future__ import annotations

from streamfix.formats.harmony import MAX_TEXT_BODY, Harmony

from .support.detectutil import check_split_invariant
from .support.streamutil import SHAPES_REQUEST

REQUEST = {**SHAPES_REQUEST, "model": "openai/gpt-oss-20b"}
CALL = (
    "<|start|>assistant to=functions.lookup_order<|channel|>commentary json<|message|>"
    '{"order_id": "A-1"}<|call|>'
)
A1 = ("lookup_order", {"order_id": "A-1"})


def test_a_text_body_is_given_back_alone() -> None:
    text = (
        "<|start|>assistant to=functions.lookup_order<|channel|>commentary<|message|>foo<|call|>"
        + CALL
    )
    assert check_split_invariant(text, REQUEST) == ("foo", "", [A1], "tool_calls")


def test_a_text_body_cut_by_another_header_is_text_and_the_call_after_it_lifts() -> None:
    text = "<|channel|>commentary to=functions.lookup_order<|message|>foo" + CALL
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [A1] and "foo" in content


def test_given_back_is_the_body() -> None:
    fmt = Harmony()
    region = "<|channel|>commentary to=functions.x<|message|> foo <|end|>"
    assert fmt.given_back(region) == "foo"
    assert fmt.given_back("<|channel|>commentary to=functions.x") == (
        "<|channel|>commentary to=functions.x"
    )
    assert MAX_TEXT_BODY >= 1024


def test_the_recipient_as_the_role_is_a_call() -> None:
    # The reference parser reads a role that starts with to= as the
    # recipient (Ollama harmony/harmonyparser_test.go, TestHeaderParsing).
    text = (
        "<|start|>to=functions.lookup_order<|channel|>analysis<|message|>"
        '{"order_id": "A-1"}<|call|>'
    )
    assert check_split_invariant(text, REQUEST) == ("", "", [A1], "tool_calls")
