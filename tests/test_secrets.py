"""Upstream keys never cross the proxy (issue 37, defects 14 and 15): not
in a header (relayed or the proxy's own), not split between writes or
between events, not escaped as JSON, URLs or HTML write them.

``secrets.Secrets`` and ``StreamScrub`` are tested as plain functions;
then the proxy, the real app on loopback, in front of a scripted upstream
that echoes its key.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.server.upstream.secrets import Secrets, StreamScrub

from .support.streamutil import assemble, chunk, sse
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

KEY = "sk-zq7w9E2r4T6y8U1i3O5p7A9sDf"
SECRETS = Secrets([KEY.encode()])


def escaped(text: str, every: int = 1) -> str:
    """``text`` with every ``every``-th character as a JSON ``\\u`` escape."""
    return "".join(f"\\u{ord(c):04x}" if i % every == 0 else c for i, c in enumerate(text))


@pytest.mark.parametrize(
    "spelling",
    [
        KEY,
        escaped(KEY),
        escaped(KEY, 3),
        escaped(KEY).upper().replace("\\U", "\\u"),
        "".join(f"%{ord(c):02X}" for c in KEY),
        "".join(f"&#{ord(c)};" for c in KEY),
        "".join(f"&#x{ord(c):x};" for c in KEY),
    ],
)
def test_every_spelling_is_redacted(spelling: str) -> None:
    out = SECRETS(f'{{"error": "bad key {spelling} given"}}'.encode())
    assert out == b'{"error": "bad key [redacted] given"}'


def test_text_without_a_key_is_the_same_object() -> None:
    data = b'data: {"choices":[{"delta":{"content":"caf\\u00e9 50% &#33;"}}]}\n\n'
    assert SECRETS(data) is data
    assert SECRETS.text("plain") == "plain"


def content_events(pieces: list[str]) -> list[bytes]:
    return [sse([chunk(p)], done=False) for p in pieces]


def scrubbed(writes: list[bytes]) -> bytes:
    scrub = StreamScrub(SECRETS)
    return b"".join(scrub.feed(w) for w in writes) + scrub.close()


@pytest.mark.parametrize("cut", [1, 2, 6, 14, 28])
def test_a_key_split_between_two_events_is_redacted(cut: int) -> None:
    out = scrubbed(content_events([f"Your key: {KEY[:cut]}", f"{KEY[cut:]} is wrong."]))
    got = assemble(out).content
    assert KEY[2:] not in got and KEY[: max(cut, 2)] + KEY[cut:][:2] not in got
    assert "[redacted]" in got and got.startswith("Your key: ") and got.endswith(" is wrong.")


def test_a_key_in_many_pieces_is_redacted() -> None:
    pieces = ["see "] + [KEY[i : i + 3] for i in range(0, len(KEY), 3)] + [" ok"]
    got = assemble(scrubbed(content_events(pieces))).content
    assert got == "see [redacted] ok"


def test_a_key_split_between_writes_is_redacted() -> None:
    data = b"".join(content_events([f"key {KEY} end"]))
    at = data.index(KEY.encode()) + 9
    assert assemble(scrubbed([data[:at], data[at:]])).content == "key [redacted] end"


def test_ordinary_events_pass_as_they_came() -> None:
    events = content_events(["I will ask", " you a task", " sk-", "y blue"])
    scrub = StreamScrub(SECRETS)
    outs = [scrub.feed(e) for e in events]
    assert b"".join(outs) + scrub.close() == b"".join(events)
    # the first two leave at once; "sk-" may begin a key, and waits one event
    assert outs == [events[0], events[1], b"", events[2] + events[3]]


@given(st.lists(st.integers(0, 80), max_size=6), st.text(max_size=20))
def test_split_invariance(cuts: list[int], noise: str) -> None:
    text = f"{noise} {KEY} {noise}"
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b]]
    got = assemble(scrubbed(content_events(pieces))).content
    assert KEY not in got and KEY[1:] not in got and "[redacted]" in got


# -- through the proxy ------------------------------------------------------


async def call(px: AppServer, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    async def go() -> tuple[int, dict[str, str], bytes]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(px.root + "/v1/chat/completions", json=body) as r,
        ):
            return r.status, dict(r.headers), await r.read()

    return await asyncio.wait_for(go(), 20)


def body(stream: bool = True) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


def no_key(headers: dict[str, str], data: bytes) -> None:
    text = " ".join(f"{k}: {v}" for k, v in headers.items()) + data.decode()
    for i in range(len(KEY) - 7):
        assert KEY[i : i + 8] not in text


ECHO = {"X-Debug-Auth": f"Bearer {KEY}", "X-Echo": escaped(KEY, 2)}


@pytest.mark.parametrize(
    "reply, status",
    [
        (Reply.stream(sse([chunk(role="assistant"), chunk("hi"), chunk(finish="stop")])), 200),
        (Reply.error(401, "Incorrect API key"), 401),
        (Reply.error(503, "busy"), 503),
    ],
)
async def test_headers_echoing_the_key_are_redacted(reply: Reply, status: int) -> None:
    reply.headers.update(ECHO)
    async with (
        FakeUpstream(reply) as up,
        AppServer(proxy_app(f"{up.url}#api_key={KEY}", retries=0)) as px,
    ):
        got, headers, data = await call(px, body())
    assert got == status
    no_key(headers, data)
    assert headers["X-Debug-Auth"] == "Bearer [redacted]"


async def test_a_key_split_between_events_never_reaches_the_client() -> None:
    chunks = [chunk(role="assistant"), chunk(f"Incorrect API key provided: {KEY[:12]}")]
    chunks += [chunk(KEY[12:20]), chunk(KEY[20:] + " (see docs)"), chunk(finish="stop")]
    async with (
        FakeUpstream(Reply.events(sse(chunks), delay=0.01)) as up,
        AppServer(proxy_app(f"{up.url}#api_key={KEY}", retries=0)) as px,
    ):
        status, headers, data = await call(px, body())
    assert status == 200
    no_key(headers, data)
    got = assemble(data)
    assert got.content == "Incorrect API key provided: [redacted] (see docs)" and got.done


@pytest.mark.parametrize("stream", [True, False])
async def test_an_escaped_key_is_redacted_in_events_and_error_bodies(stream: bool) -> None:
    said = escaped(KEY, 2)
    event = b'data: {"choices":[{"index":0,"delta":{"content":"key ' + said.encode() + b'"}}]}\n\n'
    if stream:
        ok = Reply.stream(
            sse([chunk(role="assistant")], done=False) + event + sse([chunk(finish="stop")])
        )
    else:
        whole = orjson.dumps(completion("key KEY")).replace(b"KEY", said.encode())
        ok = Reply(body=whole, content_type="application/json")
    err = Reply(
        status=401,
        body=b'{"error": {"message": "Incorrect API key provided: ' + said.encode() + b'"}}',
        content_type="application/json",
    )
    for reply in (ok, err):
        async with (
            FakeUpstream(reply) as up,
            AppServer(proxy_app(f"{up.url}#api_key={KEY}", retries=0)) as px,
        ):
            status, headers, data = await call(px, body(stream))
        assert status == (200 if reply is ok else 401)
        no_key(headers, data)
        assert said.encode() not in data and b"[redacted]" in data
        if reply is ok:
            got = assemble(data).content if stream else orjson.loads(data)["choices"][0]
            assert got == "key [redacted]" or got["message"]["content"] == "key [redacted]"
        decoded = data.decode().encode().decode("unicode_escape", "ignore")
        assert KEY not in decoded
    assert orjson.loads(data)["error"]["message"].endswith("[redacted]")
