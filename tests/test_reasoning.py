"""Reasoning in content goes to reasoning_content (transforms/reasoning.py),
with tools offered; never with no tools; nothing inside it is lifted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.formats.registry import prompt_opening_models
from streamfix.transforms.reasoning import UNOPENED_HOLD, ReasoningSplitter

from .support.detectutil import check_split_invariant, result, run_parts, run_pieces
from .support.streamutil import SHAPES_REQUEST, chunk, sse

#: A request to a model whose template opens ``<think>`` in the prompt: the
#: splitter holds the start of the reply for an unopened section.
R1_REQUEST = {**SHAPES_REQUEST, "model": "deepseek-r1-distill-qwen-7b"}

CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
A1 = ("lookup_order", {"order_id": "A-1"})

CASES = [
    # (content, expected content, expected reasoning, calls)
    ("<think>Let me see.</think>The answer is 4.", "The answer is 4.", "Let me see.", []),
    # the blanks around the channel are the template's layout
    ("<think>\nplan\n</think>\n\n" + CALL, "", "plan", [A1]),
    ("Let me think about it.</think>\n" + CALL, "", "Let me think about it.", [A1]),
    ("I should call it: " + CALL + "</think>Done.", "Done.", "I should call it: " + CALL, []),
    ("<think>drafting " + CALL + "</think>", "", "drafting " + CALL, []),
    ("No reasoning here, just text.", "No reasoning here, just text.", "", []),
    ("<think></think>Hi", "Hi", "", []),
    # only the first section counts (the reference parsers split at the first
    # close): once the answer has begun, the tags are text
    ("Hi <think>aside</think> there", "Hi <think>aside</think> there", "", []),
    ("<think>one</think>A<think>two</think>B", "A<think>two</think>B", "one", []),
    ("<think>one</think>A</think>B", "A</think>B", "one", []),
    ("<think>never closed", "", "never closed", []),
    # a reply that ended without the close: the blanks before it are layout
    ("<think>never closed\n", "", "never closed", []),
    ("a <thinking> tag is not ours", "a <thinking> tag is not ours", "", []),
]


@pytest.mark.parametrize(("text", "content", "reasoning", "calls"), CASES)
def test_reasoning_split_at_every_boundary(
    text: str, content: str, reasoning: str, calls: list[tuple[str, dict[str, str]]]
) -> None:
    got = check_split_invariant(text, R1_REQUEST)
    assert got == (content, reasoning, calls, "tool_calls" if calls else "stop")


@given(st.sampled_from(CASES), st.lists(st.integers(1, 7), min_size=1, max_size=20))
def test_reasoning_any_chunking(case: tuple[str, str, str, list[object]], sizes: list[int]) -> None:
    text = case[0]
    pieces, i, k = [], 0, 0
    while i < len(text):
        pieces.append(text[i : i + sizes[k % len(sizes)]])
        i += sizes[k % len(sizes)]
        k += 1
    assert result(run_pieces(pieces, R1_REQUEST)[0])[:2] == (case[1], case[2])


def test_no_tools_no_split() -> None:
    text = "<think>x</think>y"
    a, _ = run_pieces([text], {"model": "m", "messages": []})
    assert (a.content, a.reasoning) == (text, "")


def test_unopened_hold_is_bounded() -> None:
    long = "word " * (UNOPENED_HOLD // 5 + 50)
    text = long + "</think>after"
    # The closing tag comes after the bound: all of it was content.
    got = check_split_invariant(text[:300], R1_REQUEST)  # short: decided at the end
    assert got[0] == text[:300]
    pieces = [text[i : i + 16] for i in range(0, len(text), 16)]
    a, _ = run_pieces(pieces, R1_REQUEST, repetition=False)
    assert a.reasoning == "" and a.content == long + "after"  # the stray tag stripped


def test_hold_releases_once_the_bound_is_passed() -> None:
    sp = ReasoningSplitter(Context.of(R1_REQUEST, {}))
    released = ""
    for _ in range(UNOPENED_HOLD // 10 + 5):
        d = Delta(content="abcdefghi ")
        sp.feed(d)
        released += d.content or ""
    assert len(released) >= UNOPENED_HOLD


def test_upstream_reasoning_field_means_no_hold() -> None:
    sp = ReasoningSplitter(Context.of(R1_REQUEST, {}))
    d = Delta(reasoning="thinking")
    sp.feed(d)
    d = Delta(content="Answer")
    sp.feed(d)
    assert d.content == "Answer" and sp.feed_text("more")


def test_upstream_reasoning_kept_and_appended() -> None:
    data = sse(
        [
            chunk(role="assistant", content=""),
            chunk(reasoning="upstream thoughts. "),
            chunk("<think>more</think>text"),
            chunk(finish="stop"),
        ]
    )
    a, _ = run_parts([data])
    assert (a.content, a.reasoning) == ("text", "upstream thoughts. more")


def test_non_streaming_is_the_same() -> None:
    import streamfix

    text = "Plan: look it up.</think>\n" + CALL
    completion = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    out = streamfix.fix_completion(completion, R1_REQUEST)
    msg = out["choices"][0]["message"]
    assert msg["reasoning_content"] == "Plan: look it up."
    assert not msg.get("content")
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["lookup_order"]
    assert out["choices"][0]["finish_reason"] == "tool_calls"


def test_hold_can_be_switched_off_by_an_option() -> None:
    ctx = Context.of(R1_REQUEST, {"unopened_reasoning_hold": 0})
    sp = ReasoningSplitter(ctx)
    assert sp.feed_text("Straight to the answer")
    d = Delta(content="still text</think>")
    sp.feed(d)
    # Too late to move the text, but the stray tag is debris, and the
    # report says the model reasons (the proxy holds for it next time).
    assert d.content == "still text"
    assert ctx.report.reasoning and ctx.report.counts["stripped.stray_think"] == 1


@pytest.mark.parametrize(
    ("request_", "hold"),
    [
        (SHAPES_REQUEST, 0),  # an ordinary model: no reply is delayed
        (R1_REQUEST, UNOPENED_HOLD),
        ({**SHAPES_REQUEST, "model": "Qwen/QwQ-32B"}, UNOPENED_HOLD),
        ({**SHAPES_REQUEST, "model": "Qwen3-30B-A3B-Thinking-2507"}, UNOPENED_HOLD),
        ({**SHAPES_REQUEST, "reasoning_effort": "high"}, UNOPENED_HOLD),
        ({**SHAPES_REQUEST, "chat_template_kwargs": {"enable_thinking": True}}, UNOPENED_HOLD),
        ({**SHAPES_REQUEST, "chat_template_kwargs": {"enable_thinking": False}}, 0),
    ],
)
def test_hold_only_for_requests_to_reasoning_models(request_: dict[str, object], hold: int) -> None:
    assert Context.of(request_, {}).reasoning_hold == hold
    assert Context.of(request_, {"unopened_reasoning_hold": 7}).reasoning_hold == 7


@pytest.mark.parametrize(
    ("model", "hold", "prompt_opens"),
    [
        ("qwen3:8b", UNOPENED_HOLD, False),  # hybrid thinking
        ("qwen3:4b-instruct-2507", 0, False),
        ("qwen3-vl:8b-instruct", 0, False),
        ("qwen3-coder:30b", 0, False),
        ("qwen3:4b-thinking-2507", UNOPENED_HOLD, True),
        ("qwen3-vl:8b-thinking", UNOPENED_HOLD, True),
        ("qwen3.5:9b", UNOPENED_HOLD, True),
    ],
)
def test_ollama_tags_name_the_qwen3_releases(model: str, hold: int, prompt_opens: bool) -> None:
    """An Ollama tag puts the size before the release (``qwen3-vl:8b-instruct``):
    an instruct model's reply is not held, a thinking one's starts inside
    the reasoning its template opened."""
    assert Context.of({**SHAPES_REQUEST, "model": model}, {}).reasoning_hold == hold
    assert (prompt_opening_models().search(model) is not None) is prompt_opens


def test_an_ordinary_reply_is_not_delayed() -> None:
    sp = ReasoningSplitter(Context.of(SHAPES_REQUEST, {}))
    d = Delta(content="The answer")
    sp.feed(d)
    assert d.content == "The answer"
