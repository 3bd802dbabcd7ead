"""Every model-family call of ``family_cases.py`` through the whole chain
(detector, registry, argument validation) as a client sees it: the calls
come out structured, the text around them stays content, and the result is
the same whole, split at every character boundary, one character per
chunk, and split at random (hypothesis)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamfix
from tests.support.streamutil import SHAPES_REQUEST, Assembled, assemble, fix_text, text_stream

from .support.family_cases import CASES, Case

BEFORE = "Before. "
AFTER = " Done."

#: Cases about the end finder's edge (their trailing junk swallows the blank
#: before ``AFTER``; a GLM value whose close was lost runs on through text
#: after ``</tool_call>``, which only ``<`` or the end of the stream ends):
#: checked in test_formats_families.py only. So are Harmony's built-in
#: recipients (no offered tool: stripped, never a client's call;
#: test_reasoning_families.py has them as a client sees them).
UNIT_ONLY = {
    "llama32-dangling-semicolon",
    "glm47-last-arg-value-close-lost",
    "harmony-builtin-python",
    "harmony-builtin-browser",
    "harmony-builtin-lookalike",
}
E2E = [c for c in CASES if c.calls is not None and c.id not in UNIT_ONLY]


def text_of(case: Case) -> str:
    return BEFORE + case.region + AFTER


def expected_calls(case: Case) -> list[tuple[str, Any]]:
    assert case.calls is not None
    return [(name.removeprefix("functions."), args or {}) for name, args in case.calls]


def outcome(a: Assembled) -> tuple[str, list[tuple[str, Any]], str | None]:
    calls = [
        (t["function"]["name"], orjson.loads(t["function"]["arguments"])) for t in a.tool_calls
    ]
    return a.content, calls, a.finish_reason


def check(case: Case, a: Assembled) -> None:
    content, calls, finish = outcome(a)
    assert calls == expected_calls(case)
    assert finish == "tool_calls"
    # Text around the call is content, in order (the detector may drop the
    # blanks that touch a lifted call; nothing else).
    assert content.split() == (BEFORE + AFTER).split()
    assert not a.errors


@pytest.mark.parametrize("case", E2E, ids=[c.id for c in E2E])
def test_family_whole_and_split(case: Case) -> None:
    text = text_of(case)
    whole = fix_text([text])
    check(case, whole)
    want = outcome(whole)
    assert outcome(fix_text(list(text))) == want
    for k in range(1, len(text)):
        assert outcome(fix_text([text[:k], text[k:]])) == want, k


@given(data=st.data())
def test_family_random_splits(data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(E2E))
    text = text_of(case)
    cuts = sorted(data.draw(st.lists(st.integers(1, len(text) - 1), max_size=10)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    check(case, fix_text([p for p in pieces if p]))


@pytest.mark.parametrize("case", E2E, ids=[c.id for c in E2E])
def test_family_non_streaming_equals_streaming(case: Case) -> None:
    """Many chunks or one: the same calls (the non-streaming path goes
    through the same detector)."""
    import streamfix
    from tests.support.streamutil import SHAPES_REQUEST

    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text_of(case)},
                "finish_reason": "stop",
            }
        ],
    }
    out = streamfix.fix_completion(body, SHAPES_REQUEST)
    msg = out["choices"][0]["message"]
    calls = [
        (t["function"]["name"], orjson.loads(t["function"]["arguments"]))
        for t in msg.get("tool_calls") or []
    ]
    assert calls == expected_calls(case)
    assert (msg.get("content") or "").split() == (BEFORE + AFTER).split()


@pytest.mark.parametrize("case", E2E, ids=[c.id for c in E2E])
def test_family_cut_off_is_not_a_call(case: Case) -> None:
    """The upstream stops (``length``) inside the first call's arguments: no
    call, and none of its markup is shown."""
    words = ("F-6", "Printer", "refresh_", "12345", "a ] b", "x {y}", "a, b", "<item>a")
    cut = min(i for i in (case.region.find(w) for w in words) if i >= 0)
    text = BEFORE + case.region[: cut + 3]
    a = fix_text([text], finish="length")
    assert a.tool_calls == []
    assert a.content.strip() == BEFORE.strip()
    assert a.finish_reason == "length"


def test_function_calls_in_prose_is_text() -> None:
    """``<function_calls>`` is a plain tag, not a special token: in prose
    about tool use it is text, byte for byte."""
    text = "Claude puts <function_calls> tags are what it writes, then <invoke>."
    a = fix_text(list(text))
    assert a.content == text
    assert a.tool_calls == []


@pytest.mark.parametrize(
    "tag",
    ["<minimax:tool_call>", "[TOOL_CALL]", "<seed:tool_call>", "<longcat_tool_call>", "<TOOLCALL>"],
)
def test_plain_wrapper_tag_in_prose_is_text(tag: str) -> None:
    """Wrappers that are plain tags (not special tokens) may be mentioned in
    prose: the text stays, byte for byte, and nothing is held to the end."""
    text = f"Models such as this one write {tag} before a call; it is documented."
    for pieces in ([text], list(text)):
        a = fix_text(pieces)
        assert a.content == text
        assert a.tool_calls == []


def test_mistral_marker_in_prose_is_not_a_call() -> None:
    text = "The [TOOL_CALLS] token is followed by a name and {arguments}."
    a = fix_text([text])
    assert a.tool_calls == []
    assert "followed by a name" in a.content


def test_unoffered_name_in_family_markup_is_stripped() -> None:
    text = 'OK. <|python_tag|>{"name": "delete_everything", "parameters": {}} Bye.'
    a = fix_text(list(text))
    assert a.tool_calls == []
    assert "delete_everything" not in a.content
    assert a.content.split() == ["OK.", "Bye."]


#: Calls whose closing token is a stop token engines usually do not send
#: (or that have none): the stream may end right where the JSON closes.
AT_END = [
    c
    for c in E2E
    if c.id
    in {
        "mistral-old",
        "mistral-v11",
        "llama-python-tag",
        "llama4-python-start-no-end",
        "harmony-no-call-token",
        "granite",
        "phi4",
        "internlm2-no-end-token",
        "apertus-no-suffix",
    }
]


@pytest.mark.parametrize("case", AT_END, ids=[c.id for c in AT_END])
@pytest.mark.parametrize("finish", ["stop", "tool_calls", "length"])
def test_family_call_at_the_end_of_the_stream(case: Case, finish: str) -> None:
    """The stream ends where the call's JSON closes, before any optional
    closing token: a whole call, lifted, whatever the finish reason."""
    text = BEFORE + case.region
    for pieces in ([text], list(text)):
        a = fix_text(pieces, finish=finish)
        assert outcome(a)[1] == expected_calls(case)
        assert a.content.strip() == BEFORE.strip()


BYTE_CASES = [c for c in E2E if c.id in {"deepseek-v31", "deepseek-v32-dsml", "gemma4", "kimi-k2"}]


@pytest.mark.parametrize("case", BYTE_CASES, ids=[c.id for c in BYTE_CASES])
def test_family_split_at_every_byte(case: Case) -> None:
    """The SSE bytes cut inside the multi-byte ``｜``/``▁`` of DeepSeek's
    tokens (and elsewhere): the same calls and content."""
    from tests.support.streamutil import SHAPES_REQUEST, assemble, run_sse, split_at, text_stream

    text = text_of(case)
    data = text_stream([text[i : i + 7] for i in range(0, len(text), 7)])
    want = outcome(assemble(run_sse(data, SHAPES_REQUEST)))
    assert want[1] == expected_calls(case)
    # Every cut inside a multi-byte character, and a stride of the others
    # (every byte everywhere is the core suite's job; this keeps it fast).
    inside = [k for k in range(1, len(data)) if data[k] & 0xC0 == 0x80]
    for k in sorted({*inside, *range(1, len(data), 13)}):
        assert outcome(assemble(run_sse(split_at(data, [k]), SHAPES_REQUEST))) == want, k


@pytest.mark.parametrize(
    "text",
    [
        # DeepSeek V3.1: the first call whole, the second cut inside its arguments
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup_order<｜tool▁sep｜>{"order_id": "F-6"}'
        '<｜tool▁call▁end｜><｜tool▁call▁begin｜>create_ticket<｜tool▁sep｜>{"title": "Pri',
        # Kimi K2: the same
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup_order:0"
        '<|tool_call_argument_begin|>{"order_id": "F-6"}<|tool_call_end|>'
        '<|tool_call_begin|>functions.create_ticket:1<|tool_call_argument_begin|>{"title": "Pri',
    ],
    ids=["deepseek-v31", "kimi-k2"],
)
def test_section_cut_after_its_first_call_is_cut_off_as_a_whole(text: str) -> None:
    """docs/shapes.md: a cut-off call is never returned. A section the model was
    still writing when the token limit hit is cut off as a whole (the proxy
    asks again with a larger allowance) rather than running half its calls."""
    session = streamfix.SSESession(SHAPES_REQUEST)
    a = assemble(session.feed(text_stream([BEFORE + text], "length")) + session.close())
    assert a.tool_calls == []
    assert a.content.strip() == BEFORE.strip()
    assert a.finish_reason == "length"
    assert session.report.truncated_call


@pytest.mark.parametrize(
    ("text", "content"),
    [
        (
            "I'll check that for you.<|message_sep|>\n\nfunction call<|role_sep|>\n"
            '{"name": "lookup_order", "arguments": {"order_id": "F-6"}}</s>',
            "I'll check that for you.",
        ),
        ("Hi<|message_sep|>\n\nThere", "Hi\n\nThere"),
    ],
    ids=["call", "text"],
)
def test_gigachat_message_separator_before_a_call_leaves_no_blank(text: str, content: str) -> None:
    """GigaChat 3's ``<|message_sep|>\\n\\n`` (one token for its tokenizer)
    before ``function call<|role_sep|>`` goes with the call: the content is
    the sentence, not the sentence and a blank line, at every split (vLLM's
    gigachat3 tests). Before other text the token alone is removed."""
    calls = [("lookup_order", {"order_id": "F-6"})] if "function call" in text else []
    for pieces in ([text], list(text), *([text[:k], text[k:]] for k in range(1, len(text)))):
        a = fix_text(pieces)
        assert (a.content, outcome(a)[1]) == (content, calls), pieces


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_harmony_message_without_body_at_the_end_is_a_call_without_arguments(finish: str) -> None:
    """``<|call|>`` is a stop token: a call message with no body ends the
    reply at its ``<|message|>``. Ended normally it is a call without
    arguments; cut by the token limit it may have been cut before its
    arguments, so it is no call."""
    text = BEFORE + "<|start|>assistant to=functions.refresh_cache<|channel|>commentary<|message|>"
    calls = [("refresh_cache", {})] if finish == "stop" else []
    for pieces in ([text], list(text)):
        a = fix_text(pieces, finish=finish)
        assert (a.content.strip(), outcome(a)[1]) == (BEFORE.strip(), calls)
