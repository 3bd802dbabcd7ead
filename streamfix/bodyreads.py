"""Reading a streamed reply's body: all that has arrived, in one piece.

aiohttp's ``StreamReader`` keeps one buffer entry per HTTP chunk, and
``readany()`` takes the entries one at a time, asking the connection's
protocol to resume reading after each (aiohttp 3.14 also runs its HTTP
parser on empty input there): about a microsecond per entry. Servers
write one HTTP chunk per token, so under load one read holds tens of
them, and that bookkeeping cost the proxy as much as the chain's repair
(``bench/proxy.py``). ``BodyReads`` takes the whole buffer at once and does
the bookkeeping once.

It relies on the reader's private fields. Where they are not all there
(another aiohttp version, a subclass), it is ``readany()``: same bytes,
aiohttp's cost.
"""

from __future__ import annotations

from typing import Any

import aiohttp

#: The ``StreamReader`` fields ``BodyReads`` reads and keeps true.
_FIELDS = (
    "_buffer",
    "_buffer_offset",
    "_size",
    "_cursor",
    "_http_chunk_splits",
    "_low_water",
    "_low_water_chunks",
    "_protocol",
    "_eof",
    "_exception",
    "_timer",
    "_wait",
    "_read_nowait",
)


def takes_whole_buffer(reader: aiohttp.StreamReader) -> bool:
    """Whether ``BodyReads`` takes ``reader``'s buffer itself (else it
    calls ``readany()``)."""
    return type(reader) is aiohttp.StreamReader and all(hasattr(reader, f) for f in _FIELDS)


class BodyReads:
    """``async for data in BodyReads(resp.content)``, or ``await
    reads.read()`` (``b""`` at the end): what ``iter_any()`` and
    ``readany()`` give, all that has arrived at each wake-up, in one
    ``bytes`` however many HTTP chunks it came in."""

    __slots__ = ("_reader", "whole")

    def __init__(self, reader: aiohttp.StreamReader) -> None:
        self._reader = reader
        #: False: the reader is not one this knows; ``readany()`` it is.
        self.whole = takes_whole_buffer(reader)

    def __aiter__(self) -> BodyReads:
        return self

    async def __anext__(self) -> bytes:
        data = await self.read()
        if not data:
            raise StopAsyncIteration
        return data

    async def read(self) -> bytes:
        r = self._reader
        if not self.whole:
            return await r.readany()
        # ``readany()``, with ``_take`` for ``_read_nowait(-1)``.
        if r._exception is not None:
            raise r._exception
        while not r._buffer and not r._eof:
            await r._wait("readany")
        return _take(r)


def _take(r: Any) -> bytes:
    """All of ``r``'s buffer: what ``_read_nowait(-1)`` returns, with the
    bookkeeping its ``_read_nowait_chunk`` does per entry done once (the
    size and cursor, the HTTP chunk ends behind the cursor dropped, and
    reading resumed once the buffer is below its low-water marks)."""
    buf = r._buffer
    if len(buf) < 2:
        return r._read_nowait(-1)  # type: ignore[no-any-return]
    r._timer.assert_timeout()
    offset = r._buffer_offset
    if offset:
        buf[0] = buf[0][offset:]
        r._buffer_offset = 0
    data = b"".join(buf)
    buf.clear()
    n = len(data)
    r._size -= n
    cursor = r._cursor = r._cursor + n
    splits = r._http_chunk_splits
    if splits is not None:
        while splits and splits[0] < cursor:
            splits.popleft()
    if r._size < r._low_water and (splits is None or len(splits) < r._low_water_chunks):
        # May feed the buffer again at once: that is the next read's.
        r._protocol.resume_reading()
    return data
