"""Cohere's grounding spans (issue 35): ``<co>cited text</co: 0:[1,2],1:[3]>``
in an answer keeps the cited text and loses the tags, as vLLM's Cohere
Command parsers' ``citations_with_emoji`` tests expect ("foo bar" of
"foo <co>bar</co: 0:[1,2],1:[3,4]>"). The knowledge is formats/cohere.py's
``RESIDUE``; other tags and prose stay as written."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from .support.detectutil import check_byte_cuts, check_split_invariant
from .support.streamutil import tool

REQUEST: dict[str, Any] = {
    "model": "CohereLabs/c4ai-command-r7b-12-2024",
    "messages": [{"role": "user", "content": "x"}],
    "tools": [tool("lookup", {"query": {"type": "string"}})],
}

CITED = "foo <co>bar</co: 0:[1,2],1:[3,4]> and <co>emoji: 🌈</co: 0:[1]>."


def test_the_tags_go_and_the_cited_text_stays() -> None:
    content, _, calls, _ = check_split_invariant(CITED, REQUEST)
    assert (content, calls) == ("foo bar and emoji: 🌈.", [])


def test_the_reasoning_and_the_answer_channel() -> None:
    """vLLM's ``citations_with_emoji`` case: the spans go in both."""
    text = (
        "<|START_THINKING|>This is a rainbow <co>emoji: 🌈</co: 0:[1]><|END_THINKING|>\n"
        "<|START_RESPONSE|>foo <co>bar</co: 0:[1,2],1:[3,4]><|END_RESPONSE|>"
    )
    content, reasoning, _, _ = check_split_invariant(text, REQUEST)
    assert (content, reasoning) == ("foo bar", "This is a rainbow emoji: 🌈")


def test_in_the_reasoning_other_tags_stay_and_a_held_start_is_released() -> None:
    text = "<|START_THINKING|>a <b> c <co>d</co: 1:[2]> e <|END_THINKING|>ok"
    content, reasoning, _, _ = check_split_invariant(text, REQUEST)
    assert (content, reasoning) == ("ok", "a <b> c d e")
    text = "<|START_THINKING|>ends with </co: 1"
    _, reasoning, _, _ = check_split_invariant(text, REQUEST, finish="length")
    assert reasoning == "ends with </co: 1"


def test_other_tags_and_a_close_that_cites_nothing_stay() -> None:
    for text in (
        "Use <code>x</code> and <col> tags.",
        "A tag </co: see below> is text.",
        "`<co>bar</co: 0:[1]>` in code stays.",
    ):
        content, _, _, _ = check_split_invariant(text, REQUEST)
        assert content == text, text


@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from([CITED, "x </co: 0:[1" + "]> y", "a <co>b</co: 1:[2]"]),
    cuts=st.lists(st.integers(0, 2000), max_size=10),
)
def test_any_byte_split_gives_the_whole_result(text: str, cuts: list[int]) -> None:
    check_byte_cuts(text, cuts, REQUEST)
