"""Fuzzing with hypothesis: arbitrary bytes and arbitrary text around real
call markers, through the SSE decoder, ``fix_sse`` and every registered
format's parser.

Properties: no exception escapes (a broken stream ends with an error
event, never a traceback); the output is always well-formed SSE whose data
lines are valid JSON (or ``[DONE]``); calls are only ever made to offered
tools; buffers stay bounded (the decoder's by ``max_event_bytes``, a call
region by ``max_call_chars``). Example counts stay modest (the "ci"
profile in conftest.py); the few fixed cases at the end pin sizes that
hypothesis would take too long to reach.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.errors import UpstreamProtocolError
from streamfix.formats import ABORT, OPAQUE, RawCall, all_formats
from streamfix.session import SSESession
from streamfix.spec import tools_of
from streamfix.sse import SSEDecoder

from .support.streamutil import (
    SHAPES_REQUEST,
    SHAPES_TOOLS,
    assemble,
    chunk,
    run_sse,
    split_at,
    sse,
)

OFFERED = {t["function"]["name"] for t in SHAPES_TOOLS}

#: Real markers of every family, plus the leading shapes and fragments.
MARKERS = sorted(
    {m for f in all_formats() for m in (*f.markers, *f.leading)}
    | {
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "[CALL_ID]",
        "<|python_tag|>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "<function=",
        "</function>",
        "<parameter=",
        "</parameter>",
        "{{",
        "}}",
        "<think>",
        "</think>",
        "```json\n",
        "```",
        "<|eot_id|>",
        "<|im_end|>",
        "functools[",
    }
)

NAMES = ["lookup_order", "create_ticket", "refresh_cache", "rm_rf", "", "lookup"]

#: Pieces that look like the inside of a call.
CALL_BITS = [
    '{"name": "lookup_order", "arguments": {"order_id": "A1"}}',
    '{"name": "rm_rf", "arguments": {}}',
    '{"name": "create_ticket", "arguments": {"title": "x", "priority": "2"}}',
    '[{"name": "refresh_cache", "arguments": {}}]',
    "lookup_order(order_id='A1')",
    '{"order_id": "A1"}',
    '"arguments": {',
    '"name": "',
    "\n",
    " ",
    "}",
    "]",
    '"',
    "\\",
    "{",
]

piece = st.one_of(
    st.sampled_from(MARKERS),
    st.sampled_from(CALL_BITS),
    st.sampled_from(NAMES),
    st.text(max_size=12),
    st.text(alphabet="{}[]<>|\"':,= \n\\/_", max_size=8),
)
texts = st.lists(piece, max_size=14)


def well_formed(out: bytes) -> list[Any]:
    """Check ``out`` is well-formed SSE: blocks end with a blank line, each
    data payload is JSON (or [DONE]). Returns the decoded payloads."""
    # the last non-blank line is followed by a blank line: no event is left
    # unfinished (a client would drop it, and bytes after it would merge)
    body = out.rstrip(b"\r\n")
    tail = out[len(body) :].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    assert not body or len(tail) >= 2, out[-80:]
    payloads: list[Any] = []
    for block in out.split(b"\n\n")[:-1]:
        lines = block.split(b"\n")
        data = [
            ln[6:] if ln.startswith(b"data: ") else ln[5:]
            for ln in lines
            if ln.startswith(b"data:")
        ]
        if not data:
            # a comment (keep-alive) or a raw non-data block passed on
            continue
        payload = b"\n".join(data)
        payloads.append(payload if payload == b"[DONE]" else orjson.loads(payload))
    return payloads


def check_stream(out: bytes) -> None:
    payloads = well_formed(out)
    a = assemble(out)
    # a stream ends one way: [DONE] or an error event, never both
    assert a.done != bool(a.errors) or (not a.done and not a.errors), out[-300:]
    for c in a.tool_calls:
        assert c["function"]["name"] in OFFERED, c
        orjson.loads(c["function"]["arguments"] or "{}")  # always JSON
    if a.done:
        assert payloads[-1] == b"[DONE]"


# -- the SSE decoder ------------------------------------------------------------------


def decode_all(parts: list[bytes], limit: int) -> tuple[list[tuple[bytes, bytes | None]], bool]:
    dec = SSEDecoder(limit)
    events = []
    try:
        for p in parts:
            events += dec.feed(p)
            # bounded between feeds: past the limit it raises, at the latest
            # on the read after the one that completed other events
            assert len(dec._buf) <= limit + len(p)
        events += dec.close()
    except UpstreamProtocolError:
        return [(e.raw, e.data) for e in events], True
    return [(e.raw, e.data) for e in events], False


sse_bytes = st.lists(
    st.one_of(
        st.binary(max_size=24),
        st.sampled_from(
            [b"data: ", b"data:", b"\n", b"\r", b"\r\n", b"\n\n", b": c", b"event: x", b"id: 1"]
        ),
        st.sampled_from([b"\xef\xbb\xbf", b"[DONE]", b'{"choices": []}', b"\xff", b"\xe4\xb8"]),
    ),
    max_size=20,
).map(b"".join)


@given(sse_bytes, st.lists(st.integers(0, 400), max_size=6))
def test_decoder_any_bytes_any_split(data: bytes, cuts: list[int]) -> None:
    whole, err1 = decode_all([data], 64)
    split, err2 = decode_all(split_at(data, cuts), 64)
    if err1 or err2:
        return  # over the limit: both raise, possibly at different reads
    assert split == whole
    # nothing is lost: the raw bytes of the events are the input (minus a BOM)
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    assert b"".join(raw for raw, _ in whole) == body


@given(st.binary(min_size=1, max_size=300), st.integers(1, 64))
def test_decoder_never_buffers_past_its_limit(junk: bytes, limit: int) -> None:
    junk = junk.replace(b"\n", b"x").replace(b"\r", b"x")  # never an event end
    dec = SSEDecoder(limit)
    try:
        for i in range(0, len(junk), 7):
            dec.feed(junk[i : i + 7])
            assert len(dec._buf) <= limit + 7
    except UpstreamProtocolError as exc:
        assert "larger than" in str(exc)
        assert dec._buf == b""  # released at once


# -- fix_sse ----------------------------------------------------------------------------


@given(st.binary(max_size=400), st.booleans())
def test_fix_sse_any_bytes(data: bytes, tools: bool) -> None:
    out = run_sse(data, SHAPES_REQUEST if tools else None)
    well_formed(out)


@given(texts, st.lists(st.integers(0, 2000), max_size=8), st.sampled_from(["stop", "length"]))
def test_fix_sse_text_around_markers(pieces: list[str], cuts: list[int], finish: str) -> None:
    raw = sse(
        [chunk(role="assistant", content="")] + [chunk(p) for p in pieces] + [chunk(finish=finish)]
    )
    out = run_sse(split_at(raw, cuts), SHAPES_REQUEST)
    check_stream(out)
    assert assemble(out).done  # a whole upstream stream ends normally
    # split invariance: the network's chunking changes nothing a client sees
    assert seen(out) == seen(run_sse(raw, SHAPES_REQUEST))


def seen(out: bytes) -> tuple[Any, ...]:
    """What a client assembles, less the random call ids."""
    a = assemble(out)
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in a.tool_calls]
    return a.content, a.reasoning, calls, a.finish_reason, a.done, len(a.errors)


@given(texts, st.lists(st.integers(0, 2000), max_size=4))
def test_fix_sse_text_around_markers_cut_off(pieces: list[str], cuts: list[int]) -> None:
    # the upstream stops anywhere (no finish, no [DONE]): still well formed
    raw = sse([chunk(role="assistant", content="")] + [chunk(p) for p in pieces], done=False)
    out = run_sse(split_at(raw, cuts), SHAPES_REQUEST)
    check_stream(out)


@given(texts)
def test_session_fail_mid_call_is_an_error_not_a_call(pieces: list[str]) -> None:
    s = SSESession(SHAPES_REQUEST)
    out = s.feed(sse([chunk(role="assistant", content="")] + [chunk(p) for p in pieces], False))
    out += s.fail(UpstreamProtocolError("upstream died"))
    check_stream(out)
    a = assemble(out)
    assert a.errors and not a.done
    assert out.endswith(b"\n\n") and out.rsplit(b"\n\n", 2)[-2].startswith(b'data: {"error"')
    # no text finish is made up; a call whose JSON was complete before the
    # failure may be released (with its finish), the error still follows
    assert a.finish_reason is None or (a.finish_reason == "tool_calls" and a.tool_calls)


# -- every registered format's parser --------------------------------------------------

FORMATS = all_formats()
TOOLS = tools_of(SHAPES_REQUEST)


@settings(max_examples=40)
@given(st.sampled_from(FORMATS), texts)
def test_every_format_parse_any_text(fmt: Any, pieces: list[str]) -> None:
    markers = [*fmt.markers, *fmt.leading, *fmt.tool_markers(TOOLS)] or [""]
    for marker in markers[:3]:
        region = marker + "".join(pieces)
        got = fmt.parse(region, TOOLS)
        assert got is None or (isinstance(got, list) and all(isinstance(c, RawCall) for c in got))
        fmt.partial_is_call(region, TOOLS)


@settings(max_examples=40)
@given(st.sampled_from(FORMATS), texts)
def test_every_format_end_finder_any_text(fmt: Any, pieces: list[str]) -> None:
    for marker in [*fmt.markers, *fmt.leading, *fmt.tool_markers(TOOLS)][:3]:
        finder = fmt.end_finder(marker)
        for p in [marker, *pieces]:
            r = finder.feed(p)
            assert r is None or r in (ABORT, OPAQUE) or 0 <= r <= len(p), (r, p)
            if r is not None:
                break


# -- bounded memory, fixed sizes -------------------------------------------------------


def test_huge_unterminated_call_region_stays_within_max_call_chars() -> None:
    limit = 20_000
    s = SSESession(SHAPES_REQUEST, max_call_chars=limit)
    head = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "'
    out = [s.feed(sse([chunk(role="assistant", content=""), chunk(head)], False))]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        peak_held = 0
        for i in range(400):  # 400 x 1000 chars: 20x the limit
            text = f"{i:04d}" + "abcdefghij" * 99 + "x" * 6
            out.append(s.feed(sse([chunk(text)], False)))
            peak_held = max(peak_held, tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    out.append(s.feed(sse([chunk(finish="stop")])))
    data = b"".join(out)
    check_stream(data)
    # what is held at any time is about the limit (chars, a few bytes each),
    # not the 400 KB the upstream sent
    assert peak_held < 8 * limit + 200_000, peak_held
    assert assemble(data).done


def test_many_small_markers_do_not_grow_memory() -> None:
    # a hostile stream of marker prefixes, each almost a call
    s = SSESession(SHAPES_REQUEST)
    out = [s.feed(sse([chunk(role="assistant", content="")], False))]
    tracemalloc.start()
    try:
        for i in range(300):
            out.append(s.feed(sse([chunk(f'<tool_call>{{"name": "x{i}"}}</tool_call> <|')], False)))
            if i == 50:
                after_warmup = tracemalloc.get_traced_memory()[0]
        grown = tracemalloc.get_traced_memory()[0] - after_warmup
    finally:
        tracemalloc.stop()
    out.append(s.feed(sse([chunk(finish="stop")])))
    check_stream(b"".join(out))
    assert grown < 2_000_000, grown


def test_last_event_without_blank_line_is_ended_not_merged() -> None:
    # The upstream closes right after its last data line (no blank line),
    # and held text is released after it at end of stream: both must reach
    # the client as separate, complete events.
    last = b"data: " + orjson.dumps(chunk(" world", finish="stop"))
    raw = sse([chunk(role="assistant", content=""), chunk("Hello")], done=False) + last
    for request in (None, SHAPES_REQUEST):
        out = run_sse(raw, request)
        check_stream(out)
        a = assemble(out)
        assert a.content == "Hello world" and a.finish_reason == "stop"
