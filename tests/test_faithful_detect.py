"""What the model said reaches the client: nothing lost, nothing invented.

- Prose that mentions a call tag (``<tool_call>``, ``<function=NAME>``,
  ``<function_call>``…) is released as text, at once, not held to the end
  and dropped; a region that *is* a broken call is still stripped.
- A call needs a call's context: markup inside inline code is text for the
  detector; in Harmony's final channel, JSON is the answer.
- ``tool_choice: "none"`` lifts nothing; ``parallel_tool_calls: false``
  keeps the first call only (text or structured), the rest dropped and
  counted.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfix
from streamfix.session import SSESession

from .support.detectutil import (
    check_byte_cuts,
    check_split_invariant,
    result,
    run_parts,
    run_pieces,
)
from .support.streamutil import SHAPES_REQUEST, assemble, chunk, sse, text_stream, tool

LONG = (
    "Hermes-style models wrap each call in <tool_call> tags, and the server's parser "
    "extracts the JSON between them before the client ever sees it; if the parser is "
    "missing, the tags leak into the content and the user sees them verbatim, which is "
    "why a proxy that repairs streams is useful."
)

MENTIONS = [
    LONG,
    "Llama-style models write <function=NAME> followed by JSON, and the server parses it.",
    "Llama-style models write <function=lookup_order> followed by JSON, as the prompt says.",
    "Some models use <function_call> tags instead, which works the same way.",
    "Batches go in <tool_calls> tags; the parser splits them.",
    "Wrap the call in <tool_call>\nthe JSON goes here\n</tool_call> and send it.",
    "I like <tool_call> tags",
    "Qwen3-Coder opens with <tool_call> and then <b>bold</b> text.",
]


def whole(text: str, request: dict[str, Any] = SHAPES_REQUEST) -> dict[str, Any]:
    """The non-streamed path: one completion through ``fix_completion``."""
    completion = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }
    msg: dict[str, Any] = streamfix.fix_completion(completion, request)["choices"][0]
    return msg


# -- 2. prose that mentions a call tag ---------------------------------------


def test_the_long_answer_reaches_the_client_streamed_and_not() -> None:
    assert len(LONG) > 200
    a, report = run_pieces(list(LONG))
    assert (a.content, a.calls(), a.finish_reason) == (LONG, [], "stop")
    assert report.counts["released.mentioned_marker"] == 1
    assert not report.counts["stripped.unparsed_call"]
    msg = whole(LONG)
    assert msg["message"]["content"] == LONG and msg["finish_reason"] == "stop"
    assert not msg["message"].get("tool_calls")


def test_prose_that_mentions_a_tag_is_released_verbatim() -> None:
    for text in MENTIONS:
        assert check_split_invariant(text) == (text, "", [], "stop"), text
        assert whole(text)["message"]["content"] == text


def test_a_mention_is_released_as_it_streams_not_at_the_end() -> None:
    """The words after the tag go out as soon as they show it is prose: not
    held to the end of the stream (or to ``max_call_chars``)."""
    s = SSESession(SHAPES_REQUEST)
    pieces = ["Models wrap each call in <tool_call>", " tags, and then"]
    out = s.feed(text_stream(pieces, done=False))
    assert "<tool_call> tags, and then" in assemble(out).content


def test_a_broken_call_is_given_back_or_held_back() -> None:
    """A region that reads as a call but holds nothing readable (a wrapper
    whose JSON is broken, or that the stream ends inside with no length
    finish) goes out as text, counted, never as nothing (issue 35); a
    caller that asks again (``hold_unreadable``, the proxy) holds it back
    while it is all the reply has.
    Cut off by the token limit it is a cut-off call: never shown. An empty
    wrapper has nothing to give back: removed."""
    cut = '<tool_call>{"name": "lookup_order", "arguments": {'
    assert check_split_invariant(cut)[0] == cut
    assert check_split_invariant(cut, finish="length")[0] == ""
    broken = 'Checking.<tool_call>{"name": "lookup_order", "arguments": {"order_id": }}</tool_call>'
    assert check_split_invariant(broken)[0] == broken
    a, report = run_pieces([broken])
    assert report.counts["given_back.unreadable"] == 1
    a, report = run_pieces([broken], hold_unreadable=True)
    assert a.content == broken and report.counts["given_back.unreadable"] == 1
    alone = broken.removeprefix("Checking.")
    a, report = run_pieces([alone], hold_unreadable=True)
    assert a.content == "" and report.counts["stripped.unparsed_call"] == 1
    assert check_split_invariant("Done.<tool_call>\n</tool_call>")[0] == "Done."
    xml = "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\n"
    assert check_split_invariant(xml, finish="length")[0] == ""
    # A lone opener at the end is debris (the backstop strips the marker).
    assert check_split_invariant("Done.\n<tool_call>")[0] == "Done."


def test_calls_are_still_lifted() -> None:
    for text in (
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>',
        "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nA-1\n</parameter>\n"
        "</function>\n</tool_call>",
        '<function=lookup_order>{"order_id": "A-1"}</function>',
        "<tool_call>lookup_order\n<arg_key>order_id</arg_key>\n<arg_value>A-1</arg_value>\n"
        "</tool_call>",
        '<function_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</function_call>',
    ):
        got = check_split_invariant(text)
        assert got == ("", "", [("lookup_order", {"order_id": "A-1"})], "tool_calls"), text


_PROSE = st.text(st.sampled_from(list("abc ,.;'\n")), min_size=1, max_size=30).filter(
    lambda s: s.strip() and s.lstrip()[0] not in "{[`<"
)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["<tool_call>", "<function=NAME>", "<function_call>", "<tool_calls>"]),
    _PROSE,
    st.lists(st.integers(0, 400), max_size=6),
)
def test_a_mention_is_text_at_any_split(marker: str, prose: str, cuts: list[int]) -> None:
    text = f"See {marker} {prose.strip()} end."
    assert check_split_invariant(text)[0] == text
    check_byte_cuts(text, cuts)


# -- 3. a call needs a call's context ----------------------------------------

BASH_REQUEST: dict[str, Any] = {
    "model": "m",
    "messages": [],
    "tools": [tool("Bash", {"command": {"type": "string"}}, ["command"])],
}
BASH_LINE = 'To clean up you would run: `Bash(command="rm -rf build/")` but I have not run it'


def test_a_line_of_code_in_prose_is_text() -> None:
    for text in (
        BASH_LINE,
        'To clean up you would run:\n`Bash(command="rm -rf build/")` but I have not run it',
        '`Bash(command="rm -rf build/")`',
    ):
        assert check_split_invariant(text, BASH_REQUEST) == (text, "", [], "stop")
    # On its own line, outside code, it is a call.
    got = check_split_invariant('I will clean up.\nBash(command="rm -rf build/")', BASH_REQUEST)
    assert got[2] == [("Bash", {"command": "rm -rf build/"})]


INLINE_CODE = [
    # Markup inside inline code, not right after the backtick.
    'Mistral writes `out: [TOOL_CALLS][{"name": "lookup_order", "arguments": '
    '{"order_id": "A-1"}}]` when it calls a tool.',
    'Hermes writes `x <tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}'
    "</tool_call>` and the server lifts it.",
    'A `` `quoted` <tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call> `` span.',
]


def test_markup_in_inline_code_is_text() -> None:
    for text in INLINE_CODE:
        assert check_split_invariant(text) == (text, "", [], "stop"), text
        assert whole(text)["message"]["content"] == text


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(INLINE_CODE), st.lists(st.integers(0, 2000), max_size=6))
def test_inline_code_is_text_at_any_byte_cut(text: str, cuts: list[int]) -> None:
    check_byte_cuts(text, cuts)


def test_after_the_code_span_calls_count_again() -> None:
    text = (
        "Hermes writes `<tool_call>` around calls.\n"
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
    )
    got = check_split_invariant(text)
    assert got[0] == "Hermes writes `<tool_call>` around calls."
    assert got[2] == [("lookup_order", {"order_id": "A-1"})]


HARMONY_REQUEST: dict[str, Any] = {**SHAPES_REQUEST, "model": "openai/gpt-oss-20b"}


def test_json_in_harmonys_final_channel_is_the_answer() -> None:
    answer = '{"name": "lookup_order", "arguments": {"order_id": "A-1"}}'
    text = (
        "<|channel|>analysis<|message|>They want the JSON itself.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>" + answer
    )
    got = check_split_invariant(text, HARMONY_REQUEST)
    assert got == (answer, "They want the JSON itself.", [], "stop")
    # A call in its own channel is still a call.
    call = (
        "<|channel|>analysis<|message|>Look it up.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.lookup_order <|constrain|>json"
        '<|message|>{"order_id": "A-1"}<|call|>'
    )
    got = check_split_invariant(call, HARMONY_REQUEST)
    assert got[2] == [("lookup_order", {"order_id": "A-1"})]


# -- 4. request options: tool_choice "none", parallel_tool_calls false ------

CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
CALL2 = '<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call>'
NONE_REQUEST: dict[str, Any] = {**SHAPES_REQUEST, "tool_choice": "none"}
ONE_REQUEST: dict[str, Any] = {**SHAPES_REQUEST, "parallel_tool_calls": False}


def test_tool_choice_none_lifts_nothing() -> None:
    text = "Sure.\n" + CALL
    assert check_split_invariant(text, NONE_REQUEST) == (text, "", [], "stop")
    assert whole(text, NONE_REQUEST)["message"]["content"] == text
    assert not whole(text, NONE_REQUEST)["message"].get("tool_calls")
    # Leftover tokens are still stripped.
    assert check_split_invariant("Hello.<|im_end|>", NONE_REQUEST)[0] == "Hello."


def test_one_call_when_parallel_tool_calls_is_false() -> None:
    text = "Sure.\n" + CALL + "\n" + CALL2
    got = check_split_invariant(text, ONE_REQUEST)
    assert got == ("Sure.", "", [("lookup_order", {"order_id": "A-1"})], "tool_calls")
    _, report = run_pieces([text], ONE_REQUEST)
    assert report.counts["dropped_call.parallel"] == 1
    msg = whole(text, ONE_REQUEST)
    assert [c["function"]["name"] for c in msg["message"]["tool_calls"]] == ["lookup_order"]
    # Without the option both go out.
    assert len(check_split_invariant(text)[2]) == 2


def _structured(n: int) -> bytes:
    chunks = [chunk(role="assistant")]
    for i in range(n):
        args = orjson.dumps({"order_id": f"A-{i}"}).decode()
        head = {"index": i, "id": f"call_{i}", "type": "function"}
        chunks.append(chunk(tool_calls=[{**head, "function": {"name": "lookup_order"}}]))
        chunks.append(chunk(tool_calls=[{"index": i, "function": {"arguments": args}}]))
    chunks.append(chunk(finish="tool_calls"))
    return sse(chunks)


def test_one_structured_call_when_parallel_tool_calls_is_false() -> None:
    a, report = run_parts([_structured(3)], ONE_REQUEST)
    assert a.calls() == [("lookup_order", {"order_id": "A-0"})]
    assert a.finish_reason == "tool_calls" and report.counts["dropped_call.parallel"] == 2
    a, _ = run_parts([_structured(3)], SHAPES_REQUEST)
    assert len(a.calls()) == 3


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([NONE_REQUEST, ONE_REQUEST]),
    st.lists(st.integers(1, 9), min_size=1, max_size=8),
)
def test_request_options_at_any_split(request: dict[str, Any], sizes: list[int]) -> None:
    text = "Sure.\n" + CALL + "\n" + CALL2 + "\nDone."
    pieces, i, k = [], 0, 0
    while i < len(text):
        pieces.append(text[i : i + sizes[k % len(sizes)]])
        i, k = i + sizes[k % len(sizes)], k + 1
    assert result(run_pieces(pieces, request)[0]) == result(run_pieces([text], request)[0])
