"""``POST /v1/embeddings``: routed to the ``kind = "embedding"`` rows of the
request's model, with the chat path's weights, failover, retries, slots,
limits and error shapes. Nothing in an embedding needs repair: the reply
is relayed as the upstream sent it, its ``model`` said as the client named
it, unless it is an error object sent with an HTTP 200 (a 502 with the
upstream's message, as on every route)."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from ..caller.stream import ModelName
from ..caller.validate import read_request, validate_embeddings
from ..exchange import Exchange
from ..proxy import PROXY
from ..scope import Scope

ENDPOINT = "embeddings"


async def embeddings(request: web.Request) -> web.StreamResponse:
    body = await read_request(request.app[PROXY], request, ENDPOINT, validate_embeddings)
    scope = Scope.of(request, ENDPOINT)
    scope.route("embedding", body.get("model"))
    async with scope.proxy.slot():
        return await scope.answer(_relay(scope, body))


async def _relay(scope: Scope, body: dict[str, Any]) -> web.StreamResponse:
    ex = await Exchange.open(scope, "/embeddings", body)
    raw = await ex.whole()
    if not ex.ok:
        return ex.relayed(raw)
    if b'"error"' in raw:  # a vector never holds the word: most replies are not parsed
        try:
            error = ex.error_reply(orjson.loads(raw), raw)
        except orjson.JSONDecodeError:
            error = None
        if error is not None:
            return error
    rename = ModelName.of(scope.asked)  # the reply in the client's name for the model
    out = web.Response(body=raw if rename is None else rename(raw), headers=ex.headers)
    out.content_type = ex.resp.content_type
    return out
