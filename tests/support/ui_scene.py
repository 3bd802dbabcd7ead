"""A proxy with the operator page (``--ui``) that has served scripted
repairs, a loop, an unrecognised shape and a reply full of markup and
``<script>``: shared by the page's handler tests (tests/test_ui.py), its
browser tests (tests/e2e/test_ui_browser.py) and the screenshots
(``python -m bench.ui_screens``).

The upstream is a ``FakeUpstream`` on loopback that answers by the last
user message (``SCRIPT``), so the order of requests does not matter.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from streamfix.server.app import create_app
from streamfix.server.config import ServerConfig, TenantConfig, parse_upstream
from streamfix.server.record import RECORDER

from .streamutil import SHAPES_TOOLS, text_stream
from .upstream_fake import AppServer, FakeUpstream, Received, Reply, completion

ADMIN_KEY = "sk-admin-ui-0123456789"
TENANT_KEY = "sk-tenant-ui-9876543210"
UPSTREAM_KEY = "sk-upstream-secret-5555"
URL_PASSWORD = "url-password-7777"

#: What a reply written by an attacker (or a confused model) looks like.
HOSTILE = (
    'Look: <script>alert("pwned")</script> <a href="javascript:alert(1)">click</a> '
    '<img src=x onerror="alert(2)"> </textarea></pre>'
)
TEXT_CALL = ["Let me check. ", "<tool_call>", '{"name": "lookup_order", ', '"arguments": ']
TEXT_CALL += ['{"order_id": "A1"}}', "</tool_call>"]

#: The last user message → the upstream's reply.
SCRIPT: dict[str, bytes] = {
    "repair": text_stream(TEXT_CALL),
    "loop": text_stream(["Here:\n"] + ["the cat sat on the mat.\n"] * 60, "length"),
    "unrecognised": text_stream(["<tool_call>not a call at all</tool_call>"]),
    "hostile": text_stream(
        [
            HOSTILE,
            "<tool_call>",
            '{"name": "lookup_order", "arguments": {"order_id": "<script>x</script>"}}',
            "</tool_call>",
        ]
    ),
    "plain": text_stream(["Hello", " there"]),
    # a call as text, then ChatML's end token (stripped: not unrecognised)
    "call, then im_end": text_stream([*TEXT_CALL, "<|im_", "end|>"]),
    # JSON asked for, written as a small model does: fenced, quoted and
    # commented as Python, a trailing comma (several json_* repairs)
    "json": text_stream(
        ["Sure:\n```json\n{'a': True, ", "'b': None, // c\n", ' "d": [1, 2,], ', "'e': 'x'}\n```"]
    ),
}

#: What ``streamfix probe`` asks (``server/probe.py``'s cases), answered as a
#: small model does: calls written as text, reasoning in the content.
PROBE_ANSWERS = (
    (
        "Paris and in Tokyo",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        '</tool_call>\n<tool_call>{"name": "get_weather", "arguments": {"city": "Tokyo"}}'
        "</tool_call>",
    ),
    (
        "weather in Paris",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    ),
    ("step by step", "<think>17 times 3 is 51.</think>51"),
)

#: A llama.cpp server's model card and ``/props`` (the proxy's probe reads
#: the engine and the window from them).
ROUTES = {
    "/v1/models": {
        "object": "list",
        "data": [{"id": "m", "object": "model", "owned_by": "llamacpp"}],
    },
    "/props": {"default_generation_settings": {"n_ctx": 8192}},
}


def _reply(rec: Received) -> Reply | None:
    body = rec.body if isinstance(rec.body, dict) else {}
    messages = body.get("messages") or [{}]
    said = str(messages[-1].get("content") or "")
    if said not in SCRIPT:
        text = next((a for q, a in PROBE_ANSWERS if q in said), "Hello there.")
        if body.get("stream") is not True:
            return Reply.json(completion(text))
        return Reply.events(text_stream([text[i : i + 12] for i in range(0, len(text), 12)]))
    return Reply.events(SCRIPT[said])


@dataclass
class Scene:
    upstream: FakeUpstream
    proxy: AppServer
    record: Path
    reloads: list[int] = field(default_factory=list)

    @property
    def root(self) -> str:
        return self.proxy.root

    async def chat(self, what: str, model: str = "m", key: str = ADMIN_KEY, **extra: Any) -> bytes:
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": what}],
            "tools": SHAPES_TOOLS,
            "stream": True,
            **extra,
        }
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                self.proxy.url + "/chat/completions",
                data=orjson.dumps(payload),
                headers={"Authorization": f"Bearer {key}"},
            ) as r,
        ):
            assert r.status == 200, await r.text()
            return await r.read()

    async def json_repairs(self, n: int) -> None:
        """``n`` requests asking for JSON, each reply needing repairs."""
        for _ in range(n):
            await self.chat("json", response_format={"type": "json_object"})

    async def serve_the_script(self) -> None:
        """The scripted requests, then the recordings written."""
        for what in ("repair", "loop", "unrecognised", "hostile", "plain"):
            await self.chat(what)
        await self.chat("repair", key=TENANT_KEY)
        await self.chat("unrecognised", model="other-model")  # the catch-all row
        recorder = self.proxy.app[RECORDER]
        assert await asyncio.to_thread(recorder.flush, 5.0)


def config(upstream: FakeUpstream, record: Path, **settings: Any) -> ServerConfig:
    root = upstream.url.replace("http://", f"http://user:{URL_PASSWORD}@")
    return ServerConfig(
        upstreams=[
            parse_upstream(f"{upstream.url}#model=m,api_key={UPSTREAM_KEY}"),
            parse_upstream(root),
        ],
        api_keys=[ADMIN_KEY],
        tenants=[TenantConfig("team-a", (TENANT_KEY,), ("m",))],
        record=str(record),
        ui=True,
        probe_interval=0,
        backoff=0.01,
        **settings,
    )


@asynccontextmanager
async def scene(record: Path, serve: bool = True, **settings: Any) -> AsyncIterator[Scene]:
    """The upstream and the proxy, running; with ``serve``, the script served."""
    async with FakeUpstream(handler=_reply, routes=ROUTES) as up:
        reloads: list[int] = []
        cfg = config(up, record, **settings)

        def source() -> ServerConfig:
            reloads.append(1)
            return config(up, record, **settings)

        async with AppServer(create_app(cfg, source)) as px:
            s = Scene(up, px, record, reloads)
            if serve:
                await s.serve_the_script()
            yield s
