"""A client's ``response_format`` schema is data (issue 37, defects 1, 2
and 4): it never makes the proxy fetch a URL, its patterns run in linear
time, a reference to nothing is a 400, and a recursive schema meeting a
deep reply is a note, never a crash.

The proxy is the real app on loopback; the "internal address" a schema
points at is a real aiohttp server that counts its hits.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from streamfix import jsoncodec, schemas
from streamfix.api import fix_completion

from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

MESSAGES = [{"role": "user", "content": "hi"}]


def fmt(schema: dict[str, Any], strict: bool = False) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": schema, "strict": strict},
    }


async def post(root: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(root + "/v1/chat/completions", json=body) as r,
    ):
        raw = await r.read()
        return r.status, orjson.loads(raw)


class Counter(AppServer):
    """The internal address: counts every request it gets."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._hit)
        super().__init__(app)

    async def _hit(self, request: web.Request) -> web.Response:
        self.hits.append(request.path_qs)
        return web.json_response({"type": "object"})


async def test_a_remote_ref_is_a_400_and_never_fetched() -> None:
    async with Counter() as internal, FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        ref = f"{internal.root}/internal/admin?token=t0ps3cret"
        schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
        up.push(Reply.json(completion('{"a": 1}')))
        status, body = await post(
            px.root, {"model": "m", "messages": MESSAGES, "response_format": fmt(schema)}
        )
        assert status == 400
        assert ref in body["error"]["message"] and "fetches no schema" in body["error"]["message"]
        assert body["error"]["param"] == "response_format.json_schema.schema"
        assert internal.hits == [] and up.chat_requests == []


async def test_the_library_never_fetches_either() -> None:
    async with Counter() as internal:
        schema = {"type": "object", "properties": {"a": {"$ref": f"{internal.root}/s"}}}
        request = {"messages": MESSAGES, "response_format": fmt(schema)}
        out = await asyncio.to_thread(fix_completion, completion('{"a": 1}'), request)
        assert internal.hits == []
        note = out["choices"][0].get("streamfix") or {}
        assert note.get("json") == "invalid" and "fetches no schema" in note["error"]


async def test_a_dangling_ref_is_a_400() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        status, body = await post(
            px.root, {"model": "m", "messages": MESSAGES, "response_format": fmt(schema)}
        )
        assert status == 400 and "'#/$defs/missing' points at nothing" in body["error"]["message"]
        assert up.chat_requests == []


async def test_local_refs_and_embedded_ids_still_resolve() -> None:
    schema = {
        "$id": "https://example.com/root",
        "$defs": {
            "n": {"type": "integer"},
            "e": {"$id": "https://example.com/e", "type": "string"},
        },
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "e"}},
    }
    v = schemas.compile_schema(schema)
    assert schemas.errors(v, {"a": 1, "b": "x"}) is None
    assert "is not of type 'integer'" in (schemas.errors(v, {"a": "1"}) or "")


RECURSIVE = {
    "$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}},
    "$ref": "#/$defs/n",
}


def nested(n: int) -> str:
    return '{"c": ' * n + "{}" + "}" * n


@pytest.mark.parametrize("levels", [200, 400])
async def test_a_recursive_schema_meets_a_deep_reply(levels: int) -> None:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        up.default = Reply.json(completion(nested(levels)))
        status, body = await post(
            px.root, {"model": "m", "messages": MESSAGES, "response_format": fmt(RECURSIVE)}
        )
    assert status == 200
    choice = body["choices"][0]
    assert json.loads(choice["message"]["content"]) == json.loads(nested(levels))
    assert choice["streamfix"]["json"] == "invalid"
    if levels <= jsoncodec.MAX_DEPTH:  # read, but too deep to check
        assert f"deeper than {schemas.MAX_CHECK_DEPTH} levels" in choice["streamfix"]["error"]
    else:  # too deep to read: passed on as it came
        assert choice["streamfix"]["error"] == "not JSON after repair"


async def test_a_recursive_schema_checks_a_shallow_reply() -> None:
    v = schemas.compile_schema(RECURSIVE)
    assert schemas.errors(v, orjson.loads(nested(50))) is None
    assert schemas.errors(v, {"c": {"c": 5}}) is not None


EVIL = "^(a+)+$"


async def test_a_catastrophic_pattern_does_not_stall_anyone() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": EVIL}}}
    hostile_reply = Reply.json(completion(orjson.dumps({"a": "a" * 25 + "!"}).decode()))
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        up.handler = lambda rec: hostile_reply if "response_format" in rec.body else None
        up.default = Reply.json(completion("plain"))
        hostile = {"model": "m", "messages": MESSAGES, "response_format": fmt(schema)}
        plain = {"model": "m", "messages": MESSAGES}
        t0 = time.perf_counter()
        (hs, hb), (ps, pb) = await asyncio.gather(post(px.root, hostile), post(px.root, plain))
        took = time.perf_counter() - t0
    assert ps == 200 and pb["choices"][0]["message"]["content"] == "plain"
    assert hs == 200
    note = hb["choices"][0]["streamfix"]
    assert note["json"] == "invalid" and "does not match '^(a+)+$'" in note["error"]
    # On the backtracking engine this costs seconds (doubling per "a"), twice
    # (the reply is asked again once); on RE2, microseconds.
    assert took < 2.0


async def test_a_pattern_re2_cannot_run_is_a_400_naming_it() -> None:
    for schema in (
        {"type": "string", "pattern": r"(a)\1"},
        {"type": "object", "patternProperties": {"(?=x)y": {}}},
    ):
        async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
            status, body = await post(
                px.root, {"model": "m", "messages": MESSAGES, "response_format": fmt(schema)}
            )
        assert status == 400 and "is not supported" in body["error"]["message"]
        pattern = schema.get("pattern") or next(iter(schema["patternProperties"]))
        assert repr(pattern) in body["error"]["message"]


def test_pattern_properties_run_on_re2() -> None:
    v = schemas.compile_schema(
        {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}}
    )
    assert schemas.errors(v, {"a" * 30 + "!": "x", "aa": 1}) is None
    assert schemas.errors(v, {"aaa": "x"}) is not None
