"""The learned byte shape of plain-text events (``session._Shape``): an event
read without a JSON decode must give exactly what the decoded event gives,
whatever its middle holds, and learning must stay cheap when every chunk
differs (streamfix/session.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfix
import streamfix.session as session_mod

from .support.streamutil import assemble, chunk, run_sse, split_at, tool

WEATHER = {"tools": [tool("get_weather", {"city": {"type": "string"}})]}
_CALL_ID = re.compile(rb"call_[0-9a-f]{24}")


@contextmanager
def no_shapes() -> Iterator[None]:
    """The reference: every event decoded, as before shapes existed."""
    with mock.patch.object(session_mod._Shape, "learn", return_value=None):
        yield


def both(reads: list[bytes], request: dict[str, Any] | None) -> tuple[bytes, bytes]:
    """The output with shapes and without (generated call ids blanked)."""
    fast = run_sse(reads, request)
    with no_shapes():
        ref = run_sse(reads, request)
    return _CALL_ID.sub(b"call_", fast), _CALL_ID.sub(b"call_", ref)


def event(obj: dict[str, Any], spaced: bool = False) -> bytes:
    body = json.dumps(obj).encode() if spaced else orjson.dumps(obj)
    return b"data: " + body + b"\n\n"


ROLE = event(chunk(role="assistant", content=""))
PREFIX, SUFFIX = event(chunk("X")).split(b"X")


# Middles spliced between a learned shape's prefix and suffix: a plain
# string, escapes, a string that ends early, another structure, broken
# bytes. Each must read exactly as the decoded event does.
_MIDDLES = st.sampled_from(
    [
        b"plain",
        b"",
        b'caf\\u00e9 \\"quoted\\" back\\\\slash \\n',
        b'a","reasoning_content":"b',
        b'a"},"finish_reason":"stop","x":{"y":"',
        b'a","tool_calls":[{"index":0,"function":{"name":"get_weather","arguments":"{}"}}],"z":"',
        b"tab\there",
        b"\xff\xfe broken utf-8",
        b"caf\xc3\xa9 raw utf-8",
        b'a"}],"error":{"message":"boom"},"q":[{"r":"',
        b"unterminated \\",
        b"<tool_call>",
    ]
)

_EVENTS = st.one_of(
    st.text(max_size=8).map(lambda t: event(chunk(t))),
    st.text(max_size=8).map(lambda t: event(chunk(t), spaced=True)),
    st.text(max_size=4).map(lambda t: event(chunk(t, extra={"obfuscation": t + "n"}))),
    st.text(max_size=8).map(lambda t: event(chunk(reasoning=t))),
    _MIDDLES.map(lambda mid: PREFIX + mid + SUFFIX),
    st.just(b": keep-alive\n\n"),
)


@settings(max_examples=300)
@given(
    st.lists(_EVENTS, max_size=25),
    st.sampled_from([None, WEATHER]),
    st.integers(0, 2),
    st.lists(st.integers(0, 4000), max_size=6),
)
def test_shaped_events_read_as_the_decoded_ones(
    events: list[bytes], request: dict[str, Any] | None, how: int, cuts: list[int]
) -> None:
    """Any mix of events, one per read, several per read or cut anywhere:
    the same bytes out as with every event decoded."""
    stream = [ROLE, *events, event(chunk(finish="stop")), b"data: [DONE]\n\n"]
    if how == 0:
        reads = stream
    elif how == 1:
        reads = [b"".join(stream[i : i + 3]) for i in range(0, len(stream), 3)]
    else:
        reads = split_at(b"".join(stream), cuts)
    fast, ref = both(reads, request)
    assert fast == ref


def test_a_middle_that_is_not_one_string_is_decoded() -> None:
    """Prefix and suffix of the learned shape around ``a","reasoning_content":"b``:
    not a content string but two fields; the reasoning must be seen."""
    reads = [ROLE, event(chunk("one")), PREFIX + b'a","reasoning_content":"b' + SUFFIX]
    reads.append(event(chunk(finish="stop")))
    a = assemble(run_sse(reads, WEATHER))
    assert (a.content, a.reasoning) == ("onea", "b")


def test_escaped_content_is_read_unescaped() -> None:
    """A loop whose text only differs from its escaped bytes (``\\"``) is cut
    as the decoded text would be."""
    reads = [ROLE] + [event(chunk('say "hi" ')) for _ in range(200)]
    out, ref = both(reads, None)
    assert out == ref
    assert assemble(out).ext == {"cut": "repetition", "period": 9}


def test_plain_events_after_the_first_are_not_json_decoded() -> None:
    """The point of the shape: a stream of plain text is decoded only
    until its shape is learned."""
    calls = 0
    real = session_mod._decode

    def counting(payload: bytes) -> Any:
        nonlocal calls
        calls += 1
        return real(payload)

    events = [ROLE] + [event(chunk(f" word{i}")) for i in range(200)]
    whole = b"".join(events)
    with mock.patch.object(session_mod, "_decode", counting):
        for request in (None, WEATHER):
            # One event per read; all in one read (runs: ``_run``); reads
            # of 50 events; reads of 5000 bytes, cut inside events.
            for reads in (
                events,
                [whole],
                [b"".join(events[i : i + 50]) for i in range(0, len(events), 50)],
                [whole[i : i + 5000] for i in range(0, len(whole), 5000)],
            ):
                calls = 0
                session = streamfix.SSESession(request)
                assert b"".join(session.feed(r) for r in reads) == whole
                # The role chunk and the first plain event are decoded (the
                # shape is learned from it); no other.
                assert calls == 2, (request, len(reads))


def test_learning_slows_down_when_every_chunk_differs() -> None:
    """A per-chunk nonce after the content: no shape ever matches, and
    learning is tried a few times, then once in ``_LEARN_EVERY`` events."""
    learned = 0
    real = session_mod._Shape.learn

    def counting(raw: bytes, index: int, content: str, key: str) -> Any:
        nonlocal learned
        learned += 1
        return real(raw, index, content, key)

    n = 640
    reads = [ROLE] + [event(chunk(f" w{i}", extra={"obfuscation": str(i)})) for i in range(n)]
    with mock.patch.object(session_mod._Shape, "learn", counting):
        session = streamfix.SSESession(None)
        assert b"".join(session.feed(r) for r in reads) == b"".join(reads)
    eager = session_mod._EAGER_LEARNS
    assert learned <= eager + n // session_mod._LEARN_EVERY + 1


def test_shape_is_not_used_while_the_decoder_holds_a_partial_event() -> None:
    """A read shaped like the learned events that continues an event begun
    in the previous read belongs to that event (here: a second data line,
    which makes the event's payload two JSON texts, an error)."""
    partial = event(chunk("b"))[:-1]
    reads = [ROLE, event(chunk("a")), partial, PREFIX + b"c" + SUFFIX, b"data: [DONE]\n\n"]
    fast, ref = both(reads, None)
    assert fast == ref
    assert assemble(ref).errors


def test_no_shape_after_the_stream_finished() -> None:
    session = streamfix.SSESession(None)
    session.feed(ROLE + event(chunk("a")) + event(chunk("b")))
    assert session.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
    assert session.feed(event(chunk("late"))) == b""


def test_no_shape_is_learned_where_another_content_key_could_be_taken_for_the_delta() -> None:
    """``"content" :`` (a space before the colon) in the delta and a
    ``"content":`` string elsewhere: the shape would read the wrong one."""
    raw = (
        b'data: {"choices":[{"index":0,"delta":{"content" :"hi"},'
        b'"logprobs":{"content":"hi"},"finish_reason":null}]}\n\n'
    )
    assert session_mod._Shape.learn(raw, 0, "hi") is None
    reads = [ROLE, raw, raw.replace(b'{"content":"hi"}', b'{"content":"zz"}')]
    fast, ref = both(reads, None)
    assert fast == ref
