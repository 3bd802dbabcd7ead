"""Structured repetition a user asked for is not a loop (issue 24): an
empty grid, a table of zeros, 64 identical points, an empty timesheet, 600
``a`` pass byte for byte; a model that cannot stop is still cut, within
the bounds in ``streamfix/transforms/repetition.py``'s module doc: a
structured copy within ``STRUCTURED_BOUND`` (4,096 characters) past the
loop's start, prose and blanks within max(4 copies, 400 characters),
counted loops within max(16 copies, 1,000 characters), in content,
reasoning and tool arguments alike."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.transforms.repetition import (
    CHECK_EVERY,
    COUNTED_BOUND_CHARS,
    NUMBERED_STRUCTURED_SPAN,
    STRUCTURED_BOUND,
    STRUCTURED_SPAN,
    RepetitionCutter,
    _Channel,
    structured,
)

from .support.streamutil import (
    SHAPES_REQUEST,
    assemble,
    chunk,
    run_sse,
    split_at,
    split_sizes,
    sse,
    text_stream,
    tool,
)
from .support.structuredcorpus import STRUCTURED
from .test_repetition import (
    COUNTED_LOOPS,
    PROSE,
    _counted,
    _counted_bound,
    _counted_start,
    _first_hit,
    _pieces,
)

_IDS = [name for name, _ in STRUCTURED]
#: The examples of the issue at their natural size; every other one is
#: at least 2,000 characters.
_NATURAL = {
    "empty 9x9 grid",
    "C table of 256 zeros",
    "64 identical JSON points",
    "empty 40-row timesheet",
    "600 a's",
    "NumPy zeros 20x20",
    "chess board with dots",
}


def test_the_corpus_is_long() -> None:
    assert {name for name, text in STRUCTURED if len(text) < 2000} == _NATURAL
    assert max(len(text) for _, text in STRUCTURED) > 3800


# -- legitimate structured repetition passes ------------------------------------


@pytest.mark.parametrize("how", [1, 7, "random", "whole"])
@pytest.mark.parametrize(("name", "text"), STRUCTURED, ids=_IDS)
def test_structured_answer_passes_byte_identical(name: str, text: str, how: str | int) -> None:
    """No tools: the upstream's bytes come out as they went in, no cut."""
    data = text_stream(_pieces(text, how))
    assert run_sse(data) == data


@pytest.mark.parametrize(("name", "text"), STRUCTURED, ids=_IDS)
def test_structured_answer_with_tools_offered_is_not_cut(name: str, text: str) -> None:
    a = assemble(run_sse(text_stream(_pieces(text, "random")), SHAPES_REQUEST))
    assert a.ext is None and a.content == text


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(STRUCTURED),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
    st.lists(st.integers(0, 60_000), max_size=20),
)
def test_structured_answer_passes_at_any_split(
    item: tuple[str, str], sizes: list[int], cuts: list[int]
) -> None:
    """Split into deltas of any sizes and the bytes read at any points."""
    data = text_stream(split_sizes(item[1], sizes))
    assert run_sse(split_at(data, cuts)) == data


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(STRUCTURED), st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_structured_reasoning_passes(item: tuple[str, str], sizes: list[int]) -> None:
    """The same text as reasoning: its channel has the same rule."""
    pieces = split_sizes(item[1], sizes)
    a = assemble(run_sse(sse([chunk(reasoning=p) for p in pieces] + [chunk(finish="stop")])))
    assert a.ext is None and a.reasoning == item[1]


_STRING = {"type": "string"}
_WRITE = {"tools": [tool("write_file", {"path": _STRING, "content": _STRING})]}


def _call(args: str, size: int) -> bytes:
    """A stream whose one call's arguments are ``args``, in fragments."""
    chunks = [chunk(role="assistant")]
    for i in range(0, len(args), size):
        frag: dict[str, Any] = {"index": 0, "function": {"arguments": args[i : i + size]}}
        if i == 0:
            frag.update(id="call_1", type="function")
            frag["function"]["name"] = "write_file"
        chunks.append(chunk(tool_calls=[frag]))
    return sse([*chunks, chunk(finish="tool_calls")])


#: In arguments the text is JSON-escaped (``"`` is ``\\"``, a newline
#: ``\\n``): the bound counts the escaped characters, so the texts
#: still under the span once escaped.
_IN_ARGS = [(n, t) for n, t in STRUCTURED if len(orjson.dumps(t)) < STRUCTURED_SPAN]


def test_most_of_the_corpus_fits_in_arguments() -> None:
    assert len(_IN_ARGS) >= len(STRUCTURED) - 3


@pytest.mark.parametrize(("name", "text"), _IN_ARGS, ids=[n for n, _ in _IN_ARGS])
def test_structured_file_in_arguments_is_written(name: str, text: str) -> None:
    """The same text as a file a call writes: the call comes out whole."""
    args = orjson.dumps({"path": "table.txt", "content": text}).decode()
    a = assemble(run_sse(_call(args, 5), _WRITE))
    assert a.ext is None and a.finish_reason == "tool_calls"
    assert a.calls() == [("write_file", {"path": "table.txt", "content": text})]


_UNITS: list[tuple[str, bool]] = [
    ("a", True),
    ("-", True),
    ("}", True),
    ("─", True),
    ("0, ", True),
    ("| | | | |\n", True),
    ('{"x": 0, "y": 0}, ', True),
    ("0x00, ", True),
    ("a ", True),
    ("    '\\ufffe'\n", True),
    (". Name: ____________ Signature: ____________", True),
    ("\n", False),  # a blank flood: the commonest real loop (JSON mode)
    (" ", False),
    ("\t\n", False),
    ("😀", False),
    ("é", False),
    ("ha ", False),
    ("ab", False),
    ("the ", False),
    ("I am sorry, but I cannot help with that request. ", False),
    ("<tool_call>\n", False),
    ("我们需要重新考虑这个问题。", False),
    ("| name | status |\n", False),
    ("=" * 600, False),  # over STRUCTURED_MAX_PERIOD: 4 copies are 2,400 characters
]


@pytest.mark.parametrize(("unit", "expected"), _UNITS)
def test_which_copies_are_structured(unit: str, expected: bool) -> None:
    assert structured(unit) is expected


# -- real loops are still cut ---------------------------------------------------

#: (name, text before the loop, the structured copy a model cannot stop).
STRUCTURED_LOOPS: list[tuple[str, str, str]] = [
    ("a", "Sure, here they are: ", "a"),
    ("dashes", PROSE, "-"),
    ("braces", '{"a": ', "}"),
    ("zeros", '{"values": [', "0, "),
    ("empty table rows", "| Date | Hours |\n|---|---|\n", "| | |\n"),
    ("grid rows", "+---+---+---+\n", "|   |   |   |\n+---+---+---+\n"),
    ("points", "[", '{"x": 0, "y": 0}, '),
    ("byte table", "unsigned char b[] = {\n", "0x00, "),
    ("rule lines", PROSE, "=" * 80 + "\n"),
]
#: Loops that keep the prose bound: prose, blanks, a long copy.
PROSE_LOOPS: list[tuple[str, str, str]] = [
    ("sentence", PROSE, "I am sorry, but I cannot help with that request. "),
    ("ha", "That is funny: ", "ha "),
    ("newlines", PROSE, "\n"),
    ("spaces", '{"a": 1,', " "),
    ("tool tag", PROSE, "<tool_call>\n"),
    ("cjk", "答案如下：", "我们需要重新考虑这个问题。"),
]


def _loop(prefix: str, unit: str, reach: int) -> tuple[str, int]:
    """``prefix`` then ``unit`` past ``reach``; where the loop starts."""
    text = prefix + unit * (reach // len(unit) + 3)
    start, p = len(prefix), len(unit)
    while start > 0 and text[start - 1] == text[start - 1 + p]:
        start -= 1
    return text, start


def _feed(pieces: list[str], lane: str) -> tuple[int, int, dict[str, Any] | None]:
    """Feed a cutter one lane; (characters fed, of them sent, the cut)."""
    cutter = RepetitionCutter(Context.of(None, {}))
    fed = sent = 0
    for piece in pieces:
        if lane == "content":
            d = Delta(content=piece)
        elif lane == "reasoning":
            d = Delta(reasoning=piece)
        else:
            d = Delta(arg_text=[(0, piece)])
        cutter.feed(d)
        fed += len(piece)
        kept = d.content if lane == "content" else d.reasoning if lane == "reasoning" else piece
        if d.stop:
            return fed, sent + len(kept or "") * (lane != "args"), d.ext
        sent += len(kept or "")
    return fed, sent, None


_LANES = ["content", "reasoning", "args"]
_LOOP_IDS = [x[0] for x in STRUCTURED_LOOPS]


@pytest.mark.parametrize("how", [1, 3, "random", "whole"])
@pytest.mark.parametrize("lane", _LANES)
@pytest.mark.parametrize(("name", "prefix", "unit"), STRUCTURED_LOOPS, ids=_LOOP_IDS)
def test_structured_loop_is_cut_within_its_bound(
    name: str, prefix: str, unit: str, lane: str, how: str | int
) -> None:
    """A structured copy repeated forever is cut once it has run past
    ``STRUCTURED_SPAN`` and within ``STRUCTURED_BOUND`` of its start, in
    content, reasoning and a call's arguments; streamed in small pieces,
    the client has had at least the span of it (a table of that size
    is what a user may ask for)."""
    assert structured(unit)
    text, start = _loop(prefix, unit, 2 * STRUCTURED_BOUND)
    fed, sent, ext = _feed(_pieces(text, how), lane)
    assert ext == {"cut": "repetition", "period": len(unit)}
    assert start + STRUCTURED_SPAN <= fed  # the check that cut
    assert sent - start <= STRUCTURED_BOUND
    if how != "whole":
        assert fed - start <= STRUCTURED_BOUND + 8  # the piece that cut, at most
        if lane != "args":
            assert sent - start >= STRUCTURED_SPAN - 8


@pytest.mark.parametrize("lane", _LANES)
@pytest.mark.parametrize(("name", "prefix", "unit"), PROSE_LOOPS, ids=[x[0] for x in PROSE_LOOPS])
def test_prose_loop_keeps_its_bound(name: str, prefix: str, unit: str, lane: str) -> None:
    assert not structured(unit)
    bound = max(4 * len(unit), 400)
    text, start = _loop(prefix, unit, 2 * bound)
    fed, _, ext = _feed(_pieces(text, "random"), lane)
    assert ext == {"cut": "repetition", "period": len(unit)}
    assert fed - start <= bound


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(STRUCTURED_LOOPS + PROSE_LOOPS),
    st.lists(st.integers(1, 64), min_size=1, max_size=30),
)
def test_loops_through_the_chain_at_any_chunking(
    loop: tuple[str, str, str], sizes: list[int]
) -> None:
    """Through ``fix_sse`` without tools: the stream ends, cut, within
    the loop's bound of its start."""
    _, prefix, unit = loop
    bound = STRUCTURED_BOUND if structured(unit) else max(4 * len(unit), 400)
    text, start = _loop(prefix, unit, 2 * bound)
    a = assemble(run_sse(text_stream(split_sizes(text, sizes))))
    assert a.ext == {"cut": "repetition", "period": len(unit)} and a.finish_reason == "length"
    assert text.startswith(a.content) and len(a.content) - start <= bound


def test_structured_loop_in_arguments_drops_the_call() -> None:
    args = '{"path": "zeros.json", "content": "[' + "0, " * 3000
    a = assemble(run_sse(_call(args, 7), _WRITE))
    assert a.ext == {"cut": "repetition", "period": 3} and a.finish_reason == "length"
    assert a.tool_calls == []


def _signup_loop(lines: int) -> str:
    return "".join(f"{i}. Name: ____________ Signature: ____________\n" for i in range(1, lines))


def test_a_numbered_form_that_does_not_end_is_cut() -> None:
    """Numbered identical items of a form (structured) run
    ``NUMBERED_STRUCTURED_SPAN``, then are cut within the bound."""
    text = "Sign-up sheet\n\n" + _signup_loop(300)
    start = len("Sign-up sheet\n\n")
    fed, sent, ext = _feed(_pieces(text, "random"), "content")
    assert ext is not None and ext["period"] == len(_signup_loop(2))
    assert start + NUMBERED_STRUCTURED_SPAN <= fed <= start + STRUCTURED_BOUND
    assert sent - start >= NUMBERED_STRUCTURED_SPAN - CHECK_EVERY


@pytest.mark.parametrize("lane", ["content", "reasoning"])
@pytest.mark.parametrize("loop", COUNTED_LOOPS[:6], ids=[x[0] for x in COUNTED_LOOPS[:6]])
def test_counted_loops_keep_their_bound(loop: tuple[Any, ...], lane: str) -> None:
    """Counted loops are unchanged: within max(16 copies, 1,000 characters)."""
    _, prefix, unit, first, step = loop
    text = _counted(prefix, unit, first, step)
    start = _counted_start(text, prefix, unit(first))
    fed, sent, ext = _feed(_pieces(text, "random"), lane)
    assert ext is not None and ext.get("counted") is True
    assert sent - start <= _counted_bound(text, start, unit, first, step)
    assert fed - start <= max(COUNTED_BOUND_CHARS, 16 * len(unit(first))) + 8


@pytest.mark.parametrize(
    "unit", ["-", "0, ", "| | |\n", '{"x": 0, "y": 0}, ', "|   |   |\n+---+---+\n"]
)
def test_screened_checks_find_a_structured_loop_at_every_onset(unit: str) -> None:
    """Pieces of 64 characters or more meet several checks that one screen
    (``quiet``) may skip together: a structured loop starting anywhere on
    the check grid (it repeats every 256 characters) is found at the same
    check as with small pieces."""
    for onset in range(600, 600 + 256, 5):
        rnd = random.Random(onset)
        before = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(onset))
        text = before + unit * (STRUCTURED_BOUND // len(unit) + 2)
        small = _first_hit(_Channel(), split_sizes(text, [rnd.randint(1, 63) for _ in range(9)]))
        large = _first_hit(_Channel(), split_sizes(text, [rnd.randint(200, 3000)]))
        assert small == large, onset
        assert small is not None and small[0] == len(unit)
        assert small[1] - onset >= STRUCTURED_SPAN
