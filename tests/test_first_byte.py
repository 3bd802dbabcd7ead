"""The reply's first byte: what the proxy writes before the rest of the
reply is repaired (``exchange.pump``), and when it commits (``_attempt``)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest

from streamfix.server import exchange
from streamfix.session import SSESession

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app

MESSAGES = [{"role": "user", "content": "hi"}]


async def _first_read(url: str, payload: dict[str, Any], wait: float) -> bytes | None:
    """The first body bytes the client reads within ``wait`` seconds (None:
    nothing came)."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/chat/completions", data=orjson.dumps(payload)) as r,
    ):
        assert r.status == 200
        try:
            return await asyncio.wait_for(r.content.readany(), wait)
        except TimeoutError:
            return None


@pytest.mark.parametrize("tools", [False, True])
async def test_a_reply_that_cannot_be_asked_again_goes_out_at_its_role_chunk(
    tools: bool,
) -> None:
    # the role chunk, then silence: without tools nothing can make the
    # request be asked again, so the role chunk is the client's at once; with
    # tools the reply may still be empty and asked again: held
    role = sse([chunk(role="assistant", content="")], done=False)
    payload: dict[str, Any] = {"model": "m", "messages": MESSAGES, "stream": True}
    if tools:
        payload["tools"] = SHAPES_TOOLS
    async with (
        FakeUpstream(Reply.stream(role, end="hang")) as up,
        AppServer(proxy_app(up.url, read_timeout=30)) as px,
    ):
        first = await _first_read(px.url, payload, 1.0)
    if tools:
        assert first is None
    else:
        assert first is not None and b'"role":"assistant"' in first.replace(b" ", b"")


async def test_a_response_format_reply_is_still_held_at_its_role_chunk() -> None:
    role = sse([chunk(role="assistant", content="")], done=False)
    payload = {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "response_format": {"type": "json_object"},
    }
    async with (
        FakeUpstream(Reply.stream(role, end="hang")) as up,
        AppServer(proxy_app(up.url, read_timeout=30)) as px,
    ):
        assert await _first_read(px.url, payload, 1.0) is None


@pytest.mark.parametrize("tools", [False, True])
async def test_a_whole_reply_in_one_read_is_fed_from_its_first_event(
    tools: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fast upstream's whole reply in one read: the session is fed its
    # first event alone (what goes out first is repaired first), and the
    # client gets the same bytes as from one feed of the whole read
    raw = text_stream([f"word{i} " for i in range(30)])
    feeds: list[bytes] = []
    real = SSESession.feed

    def feed(self: SSESession, data: bytes) -> bytes:
        feeds.append(data)
        return real(self, data)

    monkeypatch.setattr(SSESession, "feed", feed)
    payload: dict[str, Any] = {"model": "m", "messages": MESSAGES, "stream": True}
    if tools:
        payload["tools"] = SHAPES_TOOLS
    got = []
    async with FakeUpstream(Reply.stream(raw)) as up, AppServer(proxy_app(up.url)) as px:
        for lead in (exchange.LEAD_EVENTS, 0):  # split, then one feed of the read
            monkeypatch.setattr(exchange, "LEAD_EVENTS", lead)
            async with (
                aiohttp.ClientSession() as s,
                s.post(px.url + "/chat/completions", data=orjson.dumps(payload)) as r,
            ):
                got.append(await r.read())
            if lead:
                assert b"".join(feeds) == raw and len(feeds) > 1
                assert feeds[0] == raw[: raw.index(b"\n\n") + 2]
            else:
                assert feeds[-1] == raw
    assert assemble(got[0]).content == "".join(f"word{i} " for i in range(30))
    assert got[0] == got[1]
