"""``POST /v1/embeddings``: routed to the ``kind = "embedding"`` rows of the
request's model, with the chat path's weights, failover, retries, slots,
limits and error shapes. Nothing in an embedding needs repair: the reply
is relayed as the upstream sent it."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from aiohttp import web

from .proxy import PROXY, with_model
from .replies import failure_response, read_reply, relay_error
from .table import tenant_label
from .upstreams import Upstream, UpstreamFailure, response_headers
from .validate import read_request, validate_embeddings

ENDPOINT = "embeddings"


async def embeddings(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    body = await read_request(proxy, request, ENDPOINT, validate_embeddings)
    route = proxy.route(request, "embedding", body.get("model"), ENDPOINT, False)
    labels = (tenant_label(request), route.model)
    async with proxy.slot():
        return await proxy.answer(
            _relay(request, body, route.rows),
            lambda status: proxy.count(ENDPOINT, False, status, *labels),
        )


async def _relay(
    request: web.Request, body: dict[str, Any], rows: list[Upstream]
) -> web.StreamResponse:
    proxy = request.app[PROXY]
    try:
        up, resp = await proxy.send(
            "POST",
            "/embeddings",
            request,
            lambda up: orjson.dumps(with_model(body, up)),
            rows,
        )
    except UpstreamFailure as f:
        return failure_response(f)
    try:
        raw = await read_reply(resp)
    except (TimeoutError, aiohttp.ClientError) as exc:
        return proxy.reply_failed(up, exc)
    finally:
        resp.close()
    if resp.status != 200:
        return relay_error(
            resp.status, raw, response_headers(resp.headers), resp.content_type, up.name
        )
    out = web.Response(body=raw, headers=response_headers(resp.headers))
    out.content_type = resp.content_type
    return out
