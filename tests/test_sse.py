"""SSE decoder and encoder (streamfix/sse.py), against the WHATWG rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.errors import UpstreamProtocolError
from streamfix.sse import SSEDecoder, SSEEvent, encode_comment, encode_data

from .support.streamutil import CAPTURES, split_at


def decode(parts: list[bytes], max_event_bytes: int = 1 << 20) -> list[SSEEvent]:
    dec = SSEDecoder(max_event_bytes)
    out: list[SSEEvent] = []
    for p in parts:
        out.extend(dec.feed(p))
    out.extend(dec.close())
    return out


def fields(events: list[SSEEvent]) -> list[tuple[bytes | None, str | None, str | None, int | None]]:
    return [(e.data, e.event, e.id, e.retry) for e in events]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"data: a\n\n", [(b"a", None, None, None)]),
        (b"data: a\r\n\r\n", [(b"a", None, None, None)]),
        (b"data: a\r\rdata: b\r\r", [(b"a", None, None, None), (b"b", None, None, None)]),
        (b"data: a\ndata: b\n\n", [(b"a\nb", None, None, None)]),
        (b"data:a\n\n", [(b"a", None, None, None)]),  # no space after the colon
        (b"data:  a\n\n", [(b" a", None, None, None)]),  # only one space is removed
        (b"event: x\nid: 7\nretry: 300\ndata: a\n\n", [(b"a", "x", "7", 300)]),
        (b"retry: soon\ndata: a\n\n", [(b"a", None, None, None)]),  # non-digit retry ignored
        (b": ping - 2026\n\n", [(None, None, None, None)]),  # comment-only block
        (b": c\ndata: a\n\n", [(b"a", None, None, None)]),  # comment inside an event
        (b"data\n\n", [(b"", None, None, None)]),  # field with no colon
        (b"\xef\xbb\xbfdata: a\n\n", [(b"a", None, None, None)]),  # leading BOM
        (b"data: [DONE]\n\n", [(b"[DONE]", None, None, None)]),
        (b"data: a", [(b"a", None, None, None)]),  # no final blank line: dispatched at close
        (b"data: a\n", [(b"a", None, None, None)]),
    ],
)
def test_decoder_table(stream: bytes, expected: list[tuple[object, ...]]) -> None:
    assert fields(decode([stream])) == expected
    # …and the same one byte at a time.
    assert fields(decode([stream[i : i + 1] for i in range(len(stream))])) == expected


def test_raw_bytes_are_kept_exactly() -> None:
    stream = b"data: a\n\n: ping\n\nevent: e\r\ndata: b\r\n\r\ndata: c"
    events = decode([stream])
    assert b"".join(e.raw for e in events) == stream
    assert [e.raw for e in events] == [
        b"data: a\n\n",
        b": ping\n\n",
        b"event: e\r\ndata: b\r\n\r\n",
        b"data: c",
    ]


def test_bom_only_at_start() -> None:
    events = decode([b"\xef", b"\xbb", b"\xbfdata: a\n\n", b"data: \xef\xbb\xbfb\n\n"])
    assert [e.data for e in events] == [b"a", b"\xef\xbb\xbfb"]


def test_crlf_split_between_reads_is_one_line_end() -> None:
    events = decode([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"])
    assert [e.data for e in events] == [b"a", b"b"]


def test_event_over_the_limit_is_an_error_not_memory() -> None:
    dec = SSEDecoder(max_event_bytes=1000)
    dec.feed(b"data: " + b"x" * 500)
    with pytest.raises(UpstreamProtocolError, match="larger than 1000 bytes"):
        dec.feed(b"x" * 600)


def test_stray_blank_lines_are_framed_alike_before_and_after_a_cr() -> None:
    """A blank line before any field is its own (empty) block in the LF-only
    parser as in the general one, so a CR arriving later in the stream (it
    switches parsers) does not change how the earlier bytes were framed."""

    def raws(parts: list[bytes]) -> list[bytes]:
        d = SSEDecoder()
        out = [ev.raw for p in parts for ev in d.feed(p)]
        return out + [ev.raw for ev in d.close()]

    assert raws([b"\n\n", b"\r"]) == raws([b"\n\n\r"]) == [b"\n", b"\n", b"\r"]
    assert raws([b"data: x\n\n\ndata: y\n\n"]) == [b"data: x\n\n", b"\n", b"data: y\n\n"]


def test_trailing_blank_bytes_are_not_lost() -> None:
    events = decode([b"data: a\n\n\n"])
    assert b"".join(e.raw for e in events) == b"data: a\n\n\n"


def test_encoders() -> None:
    assert encode_data(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_comment() == b":\n\n"
    assert encode_comment("keep-alive") == b": keep-alive\n\n"


REAL = [p.read_bytes() for p in sorted(CAPTURES.glob("*.sse"))]


@given(
    st.sampled_from(REAL) if REAL else st.just(b"data: a\n\n"),
    st.lists(st.integers(0, 80_000), max_size=40),
)
def test_split_invariance_on_real_streams(stream: bytes, cuts: list[int]) -> None:
    whole = decode([stream])
    parts = decode(split_at(stream, cuts))
    assert fields(parts) == fields(whole)
    assert b"".join(e.raw for e in parts) == stream


_line_end = st.sampled_from([b"\n", b"\r", b"\r\n"])
_value = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12
).map(lambda s: s.encode())


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 6))):
        for _ in range(draw(st.integers(1, 3))):
            name = draw(st.sampled_from([b"data", b"event", b"id", b"retry", b""]))
            out += name + b": " + draw(_value) + draw(_line_end)
        out += draw(_line_end)
    return out


@given(sse_streams(), st.lists(st.integers(0, 400), max_size=30))
def test_split_invariance_any_stream_any_cut(stream: bytes, cuts: list[int]) -> None:
    """Any SSE with LF, CR or CRLF line ends and multi-byte characters,
    cut anywhere (inside UTF-8 sequences and between CR and LF), decodes
    to the same events and loses no byte."""
    whole = decode([stream])
    parts = decode(split_at(stream, cuts))
    assert fields(parts) == fields(whole)
    assert b"".join(e.raw for e in parts) == stream
