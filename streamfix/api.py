"""The inline mounts: async generators around the sans-I/O chain.

Each is a few lines: feed, yield, and close the source in ``finally`` even
when the consumer stops early (as openai-python's ``_streaming.py`` does),
so an abandoned stream never leaves an upstream request running.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from . import plugins  # noqa: F401  (hands register its measured check)
from .chain import DEFER, FORGET, KEEPALIVE, PASS, RELEASE, Chain, Out
from .chunks import view_of
from .context import Context
from .errors import UpstreamProtocolError
from .session import SSESession


async def _aclose(source: object) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()


async def fix_sse(
    source: AsyncIterable[bytes], request: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[bytes]:
    """Repair a raw chat-completion SSE byte stream.

    Yields SSE bytes. A broken upstream stream (not SSE, a chunk that is not
    JSON, an event over the size limit) ends with an OpenAI-shaped error
    event rather than an exception, so a client reading the output sees a
    clean end. A loop cut ends the stream (``[DONE]``) and closes
    ``source``.
    """
    session = SSESession(request, **options)
    try:
        try:
            async for data in source:
                out = session.feed(data)
                if out:
                    yield out
                if session.finished:
                    break
            out = session.close()
        except UpstreamProtocolError as exc:
            out = session.fail(exc)
        if out:
            yield out
    finally:
        await _aclose(source)


async def fix_chunks(
    source: AsyncIterable[dict[str, Any]], request: dict[str, Any] | None = None, **options: Any
) -> AsyncIterator[dict[str, Any]]:
    """Repair a stream of decoded ``chat.completion.chunk`` dicts.

    Unchanged chunks are yielded as the same objects. Raises
    UpstreamProtocolError for an item that is not a JSON object.
    """
    chain = Chain(Context.of(request, options))
    kept: deque[dict[str, Any]] = deque()  # chunks the chain keeps back whole

    def sent(outs: list[Out], chunk: dict[str, Any] | None) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        for out in outs:
            if out is PASS:
                assert chunk is not None
                got.append(chunk)
            elif out is DEFER:
                assert chunk is not None
                kept.append(chunk)
            elif out is RELEASE:
                got.append(kept.popleft())
            elif out is FORGET:
                kept.clear()
            elif out is not KEEPALIVE:
                assert isinstance(out, dict)
                got.append(out)
        return got

    try:
        async for chunk in source:
            for out in sent(chain.feed(view_of(chunk), chunk), chunk):
                yield out
            if chain.stopped:
                break
        for out in sent(chain.close(), None):
            yield out
    finally:
        await _aclose(source)


def fix_completion(
    completion: dict[str, Any], request: dict[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """Repair one non-streamed ``chat.completion``; returns a new dict (the
    argument is not modified)."""
    return Chain(Context.of(request, options)).complete(completion)
