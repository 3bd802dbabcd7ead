"""Structured output from the real SmolLM2 server when ``response_format``
is ignored (issue #30).

llama-cpp-python's server honours ``response_format: {"type":
"json_object"}``: its chat handlers turn it into a JSON grammar
(``llama_chat_format._grammar_for_response_format``), so this model then
writes clean JSON. The servers that matter here ignore it (Ollama and LM
Studio models with no grammar, engines that drop the field, a hosted API
behind a gateway that strips it). To be that server, a small loopback shim
between the proxy and the recording relay takes ``response_format`` out of
the chat request before the real server sees it::

    client ──► streamfix proxy ──► shim (drops response_format) ──► relay ──► llama.cpp

Asked in words for JSON ("You answer with a JSON object only.") at
temperature 0, SmolLM2-135M writes a ```` ```json ```` fence around an
object with a trailing comma. The client must get JSON that parses (or,
when the model wrote no JSON value at all, the reply as it came with the
documented note ``"streamfix": {"json": "invalid", …}``), and what it gets
must equal the chain's result on the server's own reply for that very
request (recorded by the relay), streamed and not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import orjson
import pytest
from aiohttp import web

from streamfix.tools.local import AppThread
from tests.e2e.common import post_json, post_stream
from tests.e2e.conftest import ProxyFactory
from tests.e2e.relay import RecordingRelay
from tests.support.streamutil import assemble, fixed_whole

pytestmark = pytest.mark.e2e

_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}
)

MESSAGES = [
    {"role": "system", "content": "You answer with a JSON object only."},
    {
        "role": "user",
        "content": 'Write a JSON object with the keys "name" and "age" for a person '
        "called Ada who is 36 years old.",
    },
]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def body(fmt: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "smollm2",
        "messages": MESSAGES,
        "max_tokens": 80,
        "temperature": 0,
        "seed": 7,
        "response_format": fmt,
    }


JSON_OBJECT = {"type": "json_object"}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}


class IgnoringShim:
    """Forwards everything to ``target``; a chat request loses its
    ``response_format`` on the way (a server that ignores it)."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        data = await request.read()
        if request.path.endswith("/chat/completions") and data:
            obj = orjson.loads(data)
            obj.pop("response_format", None)
            data = orjson.dumps(obj)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
            session.request(
                request.method, self.target + request.path_qs, data=data, headers=headers
            ) as up,
        ):
            resp = web.StreamResponse(
                status=up.status,
                headers={k: v for k, v in up.headers.items() if k.lower() not in _HOP},
            )
            await resp.prepare(request)
            try:
                async for piece in up.content.iter_any():
                    await resp.write(piece)
                await resp.write_eof()
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                pass  # the proxy stopped reading (a probe read what it needed)
            return resp


@pytest.fixture(scope="module")
def ignoring_proxy(relay_url: str) -> Iterator[AppThread]:
    """A proxy whose upstream ignores ``response_format`` (the shim)."""
    from streamfix.server import ServerConfig, create_app
    from streamfix.server.config import parse_upstream

    shim = AppThread(IgnoringShim(relay_url.removesuffix("/v1")).app).start()
    config = ServerConfig(upstreams=[parse_upstream(shim.base_url)])
    proxy = AppThread(create_app(config), handler_cancellation=True).start()
    try:
        yield proxy
    finally:
        proxy.stop()
        shim.stop()


def _whole(content: str, fmt: dict[str, Any], finish: str) -> dict[str, Any]:
    """The chain's result for the server's reply, as one whole message."""
    return fixed_whole(content, body(fmt), finish)[0]


def _check(content: str, note: dict[str, Any] | None, raw: str) -> None:
    """Parseable JSON, or the note (and then only because the model wrote
    no JSON value at all)."""
    if note is None:
        assert isinstance(orjson.loads(content), dict), content
    else:
        assert note["json"] == "invalid" and note["error"], note
        assert "{" not in raw and "[" not in raw, (raw, note)


@pytest.mark.parametrize("fmt", [JSON_OBJECT, JSON_SCHEMA], ids=["json_object", "json_schema"])
def test_streamed_json_from_a_server_that_ignores_response_format(
    http: httpx.Client, ignoring_proxy: AppThread, relay: RecordingRelay, fmt: dict[str, Any]
) -> None:
    mark = relay.mark()
    status, raw = post_stream(http, ignoring_proxy.base_url, body(fmt))
    assert status == 200
    got = assemble(raw)
    assert got.done and not got.errors
    exchanges = relay.chats_since(mark)
    assert exchanges and all("response_format" not in e.body for e in exchanges)
    server = exchanges[-1].assembled()  # the reply the client got (after any ask-again)
    want = _whole(server.content, fmt, server.finish_reason or "stop")
    assert got.content == (want["message"]["content"] or "")
    assert got.ext == want.get("streamfix")
    _check(got.content, got.ext, server.content)
    if fmt is JSON_SCHEMA and got.ext is None:
        assert set(orjson.loads(got.content)) >= {"name", "age"}


def test_whole_json_from_a_server_that_ignores_response_format(
    http: httpx.Client, ignoring_proxy: AppThread, relay: RecordingRelay
) -> None:
    mark = relay.mark()
    status, obj = post_json(http, ignoring_proxy.base_url, body(JSON_OBJECT))
    assert status == 200
    choice = obj["choices"][0]
    exchanges = relay.chats_since(mark)
    assert exchanges and all("response_format" not in e.body for e in exchanges)
    server = exchanges[-1].json()["choices"][0]
    want = _whole(server["message"]["content"] or "", JSON_OBJECT, server["finish_reason"])
    assert choice["message"]["content"] == want["message"]["content"]
    assert choice.get("streamfix") == want.get("streamfix")
    _check(
        choice["message"]["content"] or "", choice.get("streamfix"), server["message"]["content"]
    )


def test_shim_is_needed_the_server_honours_json_object(http: httpx.Client, relay_url: str) -> None:
    """Why the shim exists: asked directly with ``json_object``, this
    server constrains the model to JSON (a grammar), so it would never show
    the repair."""
    status, obj = post_json(http, relay_url, body(JSON_OBJECT))
    assert status == 200
    assert isinstance(orjson.loads(obj["choices"][0]["message"]["content"]), dict)


def test_json_schema_to_a_server_that_refuses_it(
    http: httpx.Client, make_proxy: ProxyFactory, relay_url: str, relay: RecordingRelay
) -> None:
    """Asked directly, this server refuses ``json_schema`` (HTTP 500: its
    request model takes ``text`` and ``json_object`` only), so the OpenAI
    SDK's ``.parse()`` fails against it. Through the proxy the refusal is
    learned and the request goes as ``json_object`` with the schema
    stated to the model: a reply that parses (held to the schema: one that
    misses it is asked again, then carries the note), and the next
    request goes as ``json_object`` at once."""
    status, _ = post_json(http, relay_url, body(JSON_SCHEMA))
    assert status == 500
    proxy = make_proxy()  # its own: what it learns stays in this test
    mark = relay.mark()
    for _ in range(2):
        status, obj = post_json(http, proxy.base_url, body(JSON_SCHEMA))
        assert status == 200, obj
        choice = obj["choices"][0]
        # JSON (the server's grammar sees to that); a 135M model may still
        # miss the schema (it has echoed the schema itself): then the note
        orjson.loads(choice["message"]["content"])
        note = choice.get("streamfix")
        assert note is None or note["json"] == "invalid", note
    sent = [e.body["response_format"]["type"] for e in relay.chats_since(mark)]
    assert sent[0] == "json_schema" and set(sent[1:]) == {"json_object"}, sent
    assert sent.count("json_schema") == 1
