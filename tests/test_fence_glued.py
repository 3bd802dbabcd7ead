"""Fences glued to other backtick runs around a lifted call: the call's own
fence goes with it, every other backtick stays, at any split.

A code block closed by the first three backticks of a run (``````` ``````json
```````: the block's close, then a fenced call's opening) and a call's fence
closed by the first three of a longer run (the rest is the next fence's
opening, or text) once gave results that depended on where the stream was
split, and dropped the other blocks' fences.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from .support.detectutil import check_byte_cuts, check_split_invariant
from .test_detect import MIX

CALL = '{"name": "refresh_cache"}'
PY = "```python\nx = 1\n```"
#: Byte cuts for ``check_byte_cuts`` (taken modulo the stream's length).
CUTS = [[7, 300, 301, 302, 303], [50, 51, 52, 53, 54, 55, 56], [999, 1000, 1001, 1002]]


def ticks(n: int) -> str:
    return "`" * n


def test_hypothesis_counter_example() -> None:
    """The case hypothesis found: a python block, a fenced call glued to its
    close, a python block glued to the call's close."""
    text = f"Hello{PY}```json\n{CALL}\n```{PY}"
    content, _, calls, finish = check_split_invariant(text)
    assert content == f"Hello{PY}{PY}"
    assert calls == [("refresh_cache", {})]
    assert finish == "tool_calls"
    for cuts in CUTS:
        check_byte_cuts(text, cuts)


@pytest.mark.parametrize("lead", ["Hello", "Hello\n"], ids=["mid_line", "line_head"])
@pytest.mark.parametrize("n", [3, 4, 5, 6])
@pytest.mark.parametrize(
    "tail", ["python\nx = 1\n```", "\nBye", ""], ids=["glued_block", "line_end", "reply_end"]
)
def test_runs_around_a_fenced_call(lead: str, n: int, tail: str) -> None:
    """A run of ``n`` backticks after the call's body (its first three close
    the call's fence), the call's opening fence glued to a block's close
    before it: the other blocks' backticks all stay."""
    text = f"{lead}{PY}```json\n{CALL}\n{ticks(n)}{tail}"
    content, _, calls, _ = check_split_invariant(text)
    assert content == f"{lead}{PY}{ticks(n - 3)}{tail}"
    assert calls == [("refresh_cache", {})]
    for cuts in CUTS:
        check_byte_cuts(text, cuts)


@pytest.mark.parametrize("n", [4, 5, 6])
@pytest.mark.parametrize("tail", ["python\nx = 1\n```", ""], ids=["glued_block", "reply_end"])
def test_empty_fence_left_by_a_lift_keeps_the_longer_run(n: int, tail: str) -> None:
    """A fence the detector did not take for one (it closed the inline
    block ```` ``` b ```` before it), emptied by the lift of the call
    inside: the residue stripper takes it away with a closing fence as long
    as its opening one; the rest of a longer run stays, at any split."""
    text = f"a ``` b\n```json\n{CALL}\n{ticks(n)}{tail}"
    content, _, calls, _ = check_split_invariant(text)
    assert content == f"a ``` b\n{ticks(n - 3)}{tail}"
    assert calls == [("refresh_cache", {})]


def test_code_after_a_glued_call_is_still_code() -> None:
    """After the lift, the block glued to the call's close is a block of its
    own: a call written inside it stays text, one after it is lifted."""
    text = f"Hello{PY}```json\n{CALL}\n``````python\n{CALL}\n```\n{CALL}"
    content, _, calls, _ = check_split_invariant(text)
    assert content == f"Hello{PY}```python\n{CALL}\n```\n"
    assert calls == [("refresh_cache", {}), ("refresh_cache", {})]


GLUED = st.sampled_from(
    [
        "```",
        "``",
        "``````",
        "````",
        "``````json\n" + CALL + "\n``````",
        "```json\n" + CALL + "\n````",
        "``` b\n",
        "```python\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(MIX, GLUED), max_size=10), st.lists(st.integers(0, 10**6), max_size=8))
# a call drafted at the start of reasoning, an open after it: the open is
# the draft's text at every split (it was taken for the open written again)
@example(
    [
        "<think>",
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>',
        "<think>",
    ],
    [],
)
def test_glued_mix_is_split_invariant(tokens: list[str], cuts: list[int]) -> None:
    """``test_detect.test_any_mix_is_split_invariant``, with more examples
    and more backtick runs in the mix."""
    text = "".join(tokens)
    check_byte_cuts(text, cuts)
    check_byte_cuts(text, cuts, finish="length")


LO = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'


@pytest.mark.parametrize(
    "text",
    [
        # An info line longer than MAX_TOKEN: code whether its newline is
        # in the same piece or not.
        "```" + LO + "\n",
        # A token after a fence stripped in the same piece: not "after a
        # backtick" (it is not, in what goes out).
        "``` b\n```<|tool_result|>",
        # The backticks of a stripped fence do not count for inline code.
        "```Hello```json\n" + CALL + "\n```" + LO,
        "`Hello" + PY + "Hello```json\n" + CALL + "\n```" + LO,
        # The rest of a run after an empty fence's close is looked at.
        "```Hello" + LO[:-1] + "\n``````json\n" + CALL + "\n``````",
    ],
)
def test_residue_found_by_the_glued_mix(text: str) -> None:
    """Cases hypothesis found with the mix below (the residue stripper
    decided them on text it strips, or past its own hold limits)."""
    check_split_invariant(text)
