"""The chain and the public entry points: transparency, the fast path,
vendor fields, per-choice state, errors (streamfix/chain.py, api.py,
session.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamfix

from .support.streamutil import CAPTURES, assemble, chunk, run_sse, split_at, sse, tool

WEATHER = {"tools": [tool("get_weather", {"city": {"type": "string"}})]}


@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURES.glob("*.sse")))
def test_real_streams_without_tools_are_byte_identical(name: str) -> None:
    data = (CAPTURES / name).read_bytes()
    if name.startswith("e_repetition"):
        # A real loop: the one thing done to a reply without tools is the cut.
        out = run_sse(data)
        assert data.startswith(out.split(b"\n\n")[0])
        assert assemble(out).ext is not None and assemble(out).ext["cut"] == "repetition"
        return
    assert run_sse(data) == data
    assert run_sse([data[i : i + 7] for i in range(0, len(data), 7)]) == data


_content = st.text(max_size=12)
_vendor = st.dictionaries(
    st.sampled_from(["system_fingerprint", "x_vendor", "usage", "service_tier"]),
    st.integers(-(2**53), 2**53) | st.text(max_size=5),
    max_size=2,
)


@given(
    st.lists(st.tuples(_content, _vendor, st.booleans()), max_size=20),
    st.lists(st.integers(0, 3000), max_size=30),
)
def test_transparency_property(
    pieces: list[tuple[str, dict[str, Any], bool]], cuts: list[int]
) -> None:
    """No tools, no loop: the output is the input, byte for byte and frame
    for frame, comments and unknown fields included, at any split."""
    data = b""
    for content, vendor, comment in pieces:
        if comment:
            data += b": ping - 1\r\n\r\n"
        data += sse([chunk(content, extra=vendor)], done=False)
    data += b"data: [DONE]\n\n"
    assert run_sse(split_at(data, cuts), None, repetition=False) == data


def test_unchanged_chunks_are_the_upstream_bytes_even_with_tools() -> None:
    """The fast path: a chunk nothing changes goes out as it came, with
    its odd spacing and key order, not re-encoded."""
    frame = (
        b'data: {"choices":[{"delta":{"role":"assistant"},"index":0}],  "id":"x", "x_odd": 1}\n\n'
    )
    assert run_sse(frame, WEATHER).startswith(frame)


def test_changed_chunk_keeps_vendor_fields() -> None:
    calls = [
        {
            "index": 0,
            "id": "a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{}"},
        }
    ]
    extra = {"system_fingerprint": "fp_1", "x_vendor": {"k": [1, 2]}}
    fin = chunk(finish="tool_calls", extra=extra)
    fin["choices"][0]["logprobs"] = {"content": []}
    out = run_sse(sse([chunk(tool_calls=calls, extra=extra), fin]), WEATHER)
    objs = [orjson.loads(b[6:]) for b in out.split(b"\n\n") if b.startswith(b"data: {")]
    assert all(o["system_fingerprint"] == "fp_1" and o["x_vendor"] == {"k": [1, 2]} for o in objs)
    assert any(o["choices"][0].get("logprobs") == {"content": []} for o in objs)


def test_usage_is_sent_once() -> None:
    calls = [
        {
            "index": 0,
            "id": "a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{}"},
        }
    ]
    out = run_sse(
        sse(
            [
                chunk(tool_calls=calls),
                chunk(finish="tool_calls", extra={"usage": {"total_tokens": 9}}),
            ]
        ),
        WEATHER,
    )
    assert out.count(b'"usage"') == 1


def test_choices_are_tracked_per_index() -> None:
    """n > 1: each choice's calls are joined on their own."""
    c0 = [
        {
            "index": 0,
            "id": "a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "A"}'},
        }
    ]
    c1 = [
        {
            "index": 0,
            "id": "b",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "B"}'},
        }
    ]
    out = run_sse(
        sse(
            [
                chunk(tool_calls=c0, index=0),
                chunk(tool_calls=c1, index=1),
                chunk(finish="tool_calls", index=0),
                chunk(finish="tool_calls", index=1),
            ]
        ),
        WEATHER,
    )
    per_choice: dict[int, list[str]] = {0: [], 1: []}
    for b in out.split(b"\n\n"):
        if b.startswith(b"data: {"):
            for ch in orjson.loads(b[6:])["choices"]:
                for call in ch["delta"].get("tool_calls") or []:
                    per_choice[ch["index"]].append(call["function"]["arguments"])
    assert per_choice == {0: ['{"city": "A"}'], 1: ['{"city": "B"}']}


def test_upstream_error_object_passes_through() -> None:
    frame = b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n'
    assert run_sse(frame, WEATHER) == frame


def test_chunk_that_is_not_json_ends_with_an_error_event() -> None:
    a = assemble(
        run_sse(sse([chunk(role="assistant")], done=False) + b"data: {not json\n\n", WEATHER)
    )
    assert a.errors and a.errors[0]["type"] == "upstream_protocol_error"


def test_event_over_the_size_limit_ends_with_an_error_event() -> None:
    a = assemble(run_sse(b"data: " + b"x" * 5000, None, max_event_bytes=1000))
    assert a.errors and "larger than 1000 bytes" in a.errors[0]["message"]


def test_unknown_option_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="unknown streamfix option"):
        streamfix.fix_completion({"choices": []}, None, lifting=True)


def test_stream_without_finish_chunk_is_not_given_one() -> None:
    """llama.cpp's interrupted stream has no finish chunk: we do not invent
    a normal finish."""
    data = (CAPTURES / "g_interrupted_stream_A.sse").read_bytes()
    a = assemble(run_sse(data, WEATHER))
    assert a.finish_reason is None


def test_fix_chunks_yields_the_same_objects_when_unchanged() -> None:
    items = [chunk(role="assistant"), chunk("hi"), chunk(finish="stop")]

    async def source() -> AsyncIterator[dict[str, Any]]:
        for i in items:
            yield i

    async def go() -> list[dict[str, Any]]:
        return [c async for c in streamfix.fix_chunks(source())]

    out = asyncio.run(go())
    assert len(out) == 3 and all(a is b for a, b in zip(out, items, strict=True))


def test_fix_chunks_repairs_tool_calls() -> None:
    calls = [
        {
            "index": 0,
            "id": "a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{"},
        }
    ]
    more = [{"index": 0, "function": {"name": "get_weather", "arguments": "}"}}]
    items = [
        chunk(role="assistant"),
        chunk(tool_calls=calls),
        chunk(tool_calls=more),
        chunk(finish="tool_calls"),
    ]

    async def source() -> AsyncIterator[dict[str, Any]]:
        for i in items:
            yield i

    async def go() -> list[dict[str, Any]]:
        return [c async for c in streamfix.fix_chunks(source(), WEATHER)]

    out = asyncio.run(go())
    names = [
        tc["function"]["name"]
        for c in out
        for tc in c["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert names == ["get_weather"]
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_source_is_closed_when_the_consumer_stops_early() -> None:
    closed = []

    async def source() -> AsyncIterator[bytes]:
        try:
            while True:
                yield sse([chunk("x")], done=False)
        finally:
            closed.append(True)

    async def go() -> None:
        gen = streamfix.fix_sse(source())
        async for _ in gen:
            break
        await gen.aclose()

    asyncio.run(go())
    assert closed == [True]


def test_good_events_before_a_broken_one_in_the_same_read_are_not_lost() -> None:
    data = sse([chunk(role="assistant"), chunk("kept")], done=False) + b"data: {broken\n\n"
    a = assemble(run_sse(data, None))
    assert a.content == "kept"
    assert a.errors and a.errors[0]["type"] == "upstream_protocol_error"


def test_events_before_an_oversized_one_in_the_same_read_are_not_lost() -> None:
    data = sse([chunk("kept")], done=False) + b"data: " + b"x" * 3000
    a = assemble(run_sse(data, None, max_event_bytes=1000))
    assert a.content == "kept"
    assert a.errors and "larger than 1000 bytes" in a.errors[0]["message"]


def test_report_says_when_the_reply_carried_reasoning() -> None:
    plain = streamfix.SSESession(WEATHER)
    plain.feed(sse([chunk("hi"), chunk(finish="stop")]))
    assert not plain.report.reasoning
    thinking = streamfix.SSESession(None)
    thinking.feed(sse([chunk(reasoning="let me think"), chunk("hi"), chunk(finish="stop")]))
    assert thinking.report.reasoning


def test_plain_text_takes_the_lane_with_tools_declared() -> None:
    """With tools offered, a plain content chunk is accepted by every step's
    ``feed_text`` and no Delta is built (the fast path stays fast)."""
    session = streamfix.SSESession(WEATHER)
    session.feed(sse([chunk(role="assistant", content=""), chunk("Hello")], done=False))
    st = session.chain._choices[0]
    lane = st.text_lane
    assert lane is not None and len(lane.accepts) == len(st.steps) - 1  # all but the accumulator
    assert all(accepts(" there, friend") for accepts in lane.accepts)


def test_events_before_a_broken_one_in_a_later_read_are_not_lost() -> None:
    """The same with the decoder past the stream's start, where a read of
    several single-line events takes the session's batch fast path."""
    first = sse([chunk(role="assistant")], done=False)
    second = sse([chunk("kept"), chunk(" too")], done=False) + b"data: {broken\n\n"
    a = assemble(run_sse([first, second], None))
    assert a.content == "kept too"
    assert a.errors and a.errors[0]["type"] == "upstream_protocol_error"


@given(st.lists(st.text(max_size=6), min_size=1, max_size=12), st.integers(1, 12))
def test_batched_reads_are_the_same_as_one_event_per_read(texts: list[str], per_read: int) -> None:
    events = [sse([chunk(t)], done=False) for t in texts] + [b"data: [DONE]\n\n"]
    reads = [sse([chunk(role="assistant")], done=False)]
    reads += [b"".join(events[i : i + per_read]) for i in range(0, len(events), per_read)]
    one_by_one = [sse([chunk(role="assistant")], done=False), *events]
    assert run_sse(reads, WEATHER) == run_sse(one_by_one, WEATHER)
    assert run_sse(reads, None) == b"".join(reads)


@given(
    st.lists(st.text(max_size=6), min_size=1, max_size=40),
    st.integers(20, 400),
    st.sampled_from([None, WEATHER]),
)
def test_reads_cut_inside_events_are_the_same_as_one_event_per_read(
    texts: list[str], size: int, request: dict[str, Any] | None
) -> None:
    """Large reads that begin and end inside an event (what a proxy reads
    from a fast upstream): the same bytes out as one event per read."""
    events = [sse([chunk(role="assistant")], done=False)]
    events += [sse([chunk(t)], done=False) for t in texts] + [b"data: [DONE]\n\n"]
    data = b"".join(events)
    reads = [data[i : i + size] for i in range(0, len(data), size)]
    assert run_sse(reads, request) == run_sse(events, request)


def test_only_the_event_cut_between_reads_goes_through_the_sse_decoder() -> None:
    """Reads of several events cut anywhere: the whole events in them take
    the fast path; the decoder sees only the events that straddle two
    reads (and the stream's first read)."""
    from streamfix.sse import SSEDecoder

    parsed = 0
    real = SSEDecoder._parse_lf

    def counting(self: SSEDecoder, buf: bytes) -> Any:
        nonlocal parsed
        events = real(self, buf)
        parsed += len(events)
        return events

    events = [sse([chunk(role="assistant")], done=False)]
    events += [sse([chunk(f" w{i}")], done=False) for i in range(300)]
    data = b"".join(events)
    size = len(events[5]) * 10 + 17  # about ten and a half events per read
    reads = [data[i : i + size] for i in range(0, len(data), size)]
    session = streamfix.SSESession(WEATHER)
    with mock.patch.object(SSEDecoder, "_parse_lf", counting):
        out = b"".join(session.feed(r) for r in reads)
    assert out == data
    assert parsed <= len(reads) + 10
