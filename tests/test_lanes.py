"""The lanes (``delta.TextLane``): a chunk whose only owned field is plain
text, or plain reasoning text (``reasoning_content``, or ``reasoning`` as
newer vLLM names it), goes through each step's lane method instead of a
Delta through ``feed``. Whatever the texts hold (reasoning tags, markers, a
loop in the reasoning or in the answer) and however the stream is read (one
event per read, runs of a learned shape, decoded runs, cut anywhere), the
output must be exactly the full path's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfix
import streamfix.chain as chain_mod
from streamfix.chain import Chain
from streamfix.chunks import decode_view
from streamfix.context import UNOPENED_HOLD, Context
from streamfix.transforms.reasoning import ReasoningSplitter
from streamfix.transforms.repetition import RepetitionCutter
from streamfix.transforms.residue import ResidueStripper
from streamfix.transforms.turn_end import TurnEnd

from .support.streamutil import chunk, run_sse, split_at
from .test_runs import _CALL_ID, END, ROLE, WEATHER


@contextlib.contextmanager
def no_lanes() -> Iterator[None]:
    """The reference: every delta through the full path (no lane, and so
    no shape either)."""
    with mock.patch.object(chain_mod, "_lane_of", return_value=None):
        yield


def event(
    text: str | None,
    key: str,
    seq: int | None = None,
    content: str | None = None,
    index: int = 0,
) -> bytes:
    """An event of choice ``index`` with ``text`` in the field ``key``
    (``content`` when it is ``"content"``, else a reasoning field, with
    ``content`` beside it). ``seq``: bytes around the text that no other
    event has (decoded runs)."""
    obj = chunk(content, index=index)
    delta = obj["choices"][0]["delta"]
    delta[key] = text
    if seq is not None:
        obj["x_seq"] = seq
    return b"data: " + orjson.dumps(obj) + b"\n\n"


_PIECES = st.sampled_from(
    [
        " the",
        " weather",
        " so",
        "<think>",
        "</think>",
        "<tool_call>",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        "</tool_call>",
        "[TOOL_CALLS]",
        "`",
        "\n",
        "  ",
        "café",
        "",
    ]
)
#: A sentence a looping model repeats: 40 times is a loop the cutter cuts.
_LOOP = " I should check the weather in Paris first."
#: A whole call in one text: lifted from content, never from reasoning.
_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
#: (field, text) of each event; a loop in the reasoning or in the answer.
_PART = st.one_of(
    st.tuples(st.sampled_from(["content", "reasoning"]), _PIECES),
    st.tuples(st.sampled_from(["content", "reasoning"]), st.just(_CALL)),
    st.tuples(st.sampled_from(["content@1", "reasoning@1"]), _PIECES),  # a second choice
    st.tuples(st.sampled_from(["content", "reasoning"]), st.text(max_size=4)),
    st.tuples(st.sampled_from(["content", "reasoning"]), st.just(_LOOP)).map(lambda p: [p] * 40),
)


def _events(parts: list[Any], reasoning_key: str, varying: bool, both: bool) -> list[bytes]:
    events = [ROLE]
    for part in parts:
        for field, text in part if isinstance(part, list) else [part]:
            name, _, index = field.partition("@")
            key = reasoning_key if name == "reasoning" else "content"
            seq = len(events) if varying else None
            # ``both``: reasoning events carry ``"content": ""`` too (some servers)
            content = "" if both and key != "content" else None
            events.append(event(text, key, seq, content, int(index or 0)))
    events.append(END)
    return events


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(_PART, min_size=1, max_size=40),
    st.sampled_from(["reasoning_content", "reasoning"]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, WEATHER]),
    st.sampled_from([{}, {"unopened_reasoning_hold": UNOPENED_HOLD}]),
    st.lists(st.integers(0, 30000), max_size=6),
)
def test_the_lanes_give_the_full_paths_output(
    parts: list[Any],
    reasoning_key: str,
    varying: bool,
    both: bool,
    request: dict[str, Any] | None,
    options: dict[str, Any],
    cuts: list[int],
) -> None:
    """Reasoning and answer events mixed, read one per read, all at once
    and cut anywhere: with the lanes (shapes, runs, decoded runs) the
    output is the full path's, byte for byte. (With the proxy's option for
    a reasoning model, the splitter holds the start of an answer that may
    be reasoning without its opening tag, unless the upstream sent
    reasoning of its own first.)"""
    events = _events(parts, reasoning_key, varying, both)
    whole = b"".join(events)
    with no_lanes():
        ref = _CALL_ID.sub(b"call_", run_sse(events, request, **options))
    for reads in (events, [whole], split_at(whole, cuts)):
        assert _CALL_ID.sub(b"call_", run_sse(reads, request, **options)) == ref


def test_a_decoded_run_holds_the_texts_of_one_field() -> None:
    """Events that differ around their text, read at once: answer text,
    then a call written in the reasoning. The reasoning is no answer text:
    the call is not lifted from it, as the full path does not lift it."""
    events = [ROLE]
    events += [event(f" w{i}", "content", seq=i) for i in range(8)]
    events += [event(_CALL, "reasoning_content", seq=100 + i) for i in range(8)]
    events.append(END)
    with no_lanes():
        ref = run_sse(events, WEATHER)
    assert b'"tool_calls"' not in ref
    assert run_sse([b"".join(events)], WEATHER) == ref


def test_a_loop_in_the_reasoning_is_cut_on_the_lane() -> None:
    """Hundreds of reasoning events of one shape, looping: the runs take
    them on the reasoning lane, and the loop is cut where the full path
    cuts it (the stream ends there, with ``finish_reason: "length"``)."""
    events = [ROLE, *(event(_LOOP, "reasoning_content") for _ in range(200)), END]
    with no_lanes():
        ref = run_sse(events, WEATHER)
    for reads in (events, [b"".join(events)]):
        out = run_sse(reads, WEATHER)
        assert out == ref
    assert b'"finish_reason":"length"' in ref and ref.count(b"[DONE]") == 1
    assert ref.count(b"reasoning_content") < 200


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_takes_the_lane_and_keeps_the_servers_field_name(key: str) -> None:
    """A reasoning-only chunk goes through the reasoning lane (no Delta
    through the steps), is passed on as its own bytes, and marks the reply
    as reasoning; a chunk rebuilt later names the field as the server does."""
    chain = Chain(Context.of(WEATHER, {}))
    raw = event(" hmm", key)[6:-2]
    chain.feed(decode_view(ROLE[6:-2]), ROLE[6:-2])  # the choice's first chunk: full path
    with mock.patch.object(chain_mod._Choice, "run", side_effect=AssertionError("full path")):
        assert chain.feed(decode_view(raw), raw) == [chain_mod.PASS]
    assert chain.report.reasoning and chain.output_started
    # What the chain rebuilds for this choice (a cut) names the field so.
    assert chain._choices[0].reasoning_key == key


def test_the_reasoning_lane_leaves_out_steps_that_ignore_reasoning() -> None:
    st_ = Chain(Context.of(WEATHER, {}))._choice(0)
    lane = st_.reasoning_lane
    assert lane is not None
    kinds = [type(st_.steps[p]) for p in lane.pos]
    # the turn's end is looked for in reasoning too
    assert kinds == [ReasoningSplitter, RepetitionCutter, TurnEnd, ResidueStripper]
    st_ = Chain(Context.of(None, {}))._choice(0)
    assert st_.reasoning_lane is not None
    assert [type(st_.steps[p]) for p in st_.reasoning_lane.pos] == [RepetitionCutter]


def test_text_and_reasoning_in_one_chunk_take_the_full_path() -> None:
    """Content beside reasoning (or both reasoning fields) is no lane's:
    ``plain_text`` says so, and the full path keeps both."""
    obj = chunk(" answer", reasoning=" thought")
    raw = b"data: " + orjson.dumps(obj) + b"\n\n"
    out = run_sse([ROLE, raw, END], WEATHER)
    assert raw in out
    assert streamfix.chunks.plain_text(decode_view(raw[6:-2])) is None
