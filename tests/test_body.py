"""``BodyReads``: a reply's body read whole-buffer at a time gives the same
bytes as aiohttp's ``readany()``, leaves the reader as ``readany()`` would,
and keeps flow control working (a paused connection is resumed)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.bodyreads import BodyReads, takes_whole_buffer

from .support.upstream_fake import AppServer


class _Protocol:
    """What a ``StreamReader`` asks of its connection's protocol."""

    def __init__(self) -> None:
        self.connected = True
        self._reading_paused = False

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._reading_paused = False


def _reader(limit: int) -> aiohttp.StreamReader:
    reader = aiohttp.StreamReader(_Protocol(), limit, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    reader.begin_http_chunk_receiving()
    return reader


def _state(r: Any) -> tuple[Any, ...]:
    return (r._size, r._cursor, list(r._http_chunk_splits), r._protocol._reading_paused)


#: HTTP chunks arriving, and reads, in some order: a chunk's bytes, a read,
#: or a ``read(n)`` by someone else first (it leaves part of a chunk).
_STEPS = st.lists(
    st.one_of(st.binary(min_size=1, max_size=40), st.none(), st.integers(1, 30)), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(steps=_STEPS, limit=st.sampled_from([16, 64, 1 << 16]))
async def test_the_same_reads_and_state_as_readany(
    steps: list[bytes | int | None], limit: int
) -> None:
    """Each read gives what ``readany()`` gives, and leaves the reader's
    size, cursor, HTTP chunk ends and pause as it leaves them (a small
    ``limit`` pauses the protocol: then the read must resume it)."""
    mine, theirs = _reader(limit), _reader(limit)
    reads = BodyReads(mine)
    assert reads.whole
    for step in steps:
        if not theirs._buffer and not isinstance(step, bytes):
            continue  # a read would wait
        if step is None:
            assert await reads.read() == await theirs.readany()
        elif isinstance(step, int):
            assert await mine.read(step) == await theirs.read(step)
        else:
            for r in (mine, theirs):
                r.feed_data(step)
                r.end_http_chunk_receiving()
        assert _state(mine) == _state(theirs)
    for r in (mine, theirs):
        r.feed_eof()
    assert await reads.read() == await theirs.readany()
    assert await reads.read() == b"" == await theirs.readany()


async def test_an_unknown_reader_is_read_with_readany() -> None:
    class Reader(aiohttp.StreamReader):
        pass

    reader = Reader(_Protocol(), 1 << 16, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    reads = BodyReads(reader)
    assert not reads.whole and not takes_whole_buffer(reader)
    reader.feed_data(b"ab")
    reader.feed_data(b"cd")
    reader.feed_eof()
    assert [part async for part in reads] == [b"abcd"]


async def test_an_error_is_raised_as_readany_raises_it() -> None:
    reader = _reader(1 << 16)
    reader.feed_data(b"x")
    reader.set_exception(aiohttp.ClientPayloadError("cut"))
    with pytest.raises(aiohttp.ClientPayloadError):
        await BodyReads(reader).read()


#: HTTP chunks the upstream below writes, and their size: past aiohttp's
#: high-water marks (4096 HTTP chunks, 128 KiB) and the loopback socket's
#: buffers, so that its connection pauses before the body is all in.
CHUNKS = 40000
CHUNK = bytes(range(32, 127)) * 4


async def _many_chunks(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(CHUNKS):
        await resp.write(b"%05d" % i + CHUNK)  # one HTTP chunk per write
    await resp.write_eof()
    return resp


async def test_a_real_reply_many_chunks_per_read_and_flow_control() -> None:
    """A loopback upstream writes 40000 HTTP chunks at once to a reader that
    is slow to read: its connection is paused, and must be resumed by the
    reads (else this hangs); every byte arrives, in order, and reads take
    many chunks at once."""
    app = web.Application()
    app.router.add_get("/v1/many", _many_chunks)
    parts: list[bytes] = []
    paused = False
    async with (
        AppServer(app) as server,
        aiohttp.ClientSession() as s,
        s.get(server.url + "/many") as resp,
    ):
        reads = BodyReads(resp.content)
        assert reads.whole
        assert resp.connection is not None
        protocol = resp.connection.protocol

        async def read_slowly() -> None:
            nonlocal paused
            async for part in reads:
                parts.append(part)
                await asyncio.sleep(0.02)  # the upstream writes on meanwhile
                paused |= protocol._reading_paused  # type: ignore[union-attr]

        await asyncio.wait_for(read_slowly(), 20)
    assert b"".join(parts) == b"".join(b"%05d" % i + CHUNK for i in range(CHUNKS))
    assert paused, "the upstream never got ahead of the reader: flow control untested"
    assert len(parts) < CHUNKS / 10


async def _many_chunks_gzip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    resp.enable_compression(web.ContentCoding.gzip)
    await resp.prepare(request)
    for i in range(CHUNKS):
        await resp.write(b"%05d" % i + CHUNK)
    await resp.write_eof()
    return resp


async def test_a_compressed_reply_is_read_whole() -> None:
    """An upstream that gzips its stream (behind nginx, say): aiohttp
    decompresses it as it reads, and resumes the decompression when the
    reads drain its buffer; every byte arrives, in order, without a hang."""
    app = web.Application()
    app.router.add_get("/v1/gz", _many_chunks_gzip)
    parts: list[bytes] = []
    async with (
        AppServer(app) as server,
        aiohttp.ClientSession() as s,
        s.get(server.url + "/gz") as resp,
    ):
        assert resp.headers["Content-Encoding"] == "gzip"
        reads = BodyReads(resp.content)
        assert reads.whole

        async def read_slowly() -> None:
            async for part in reads:
                parts.append(part)
                await asyncio.sleep(0.005)

        await asyncio.wait_for(read_slowly(), 20)
    assert b"".join(parts) == b"".join(b"%05d" % i + CHUNK for i in range(CHUNKS))
