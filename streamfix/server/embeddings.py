"""``POST /v1/embeddings``: routed to the ``kind = "embedding"`` rows of the
request's model, with the chat path's weights, failover, retries, slots,
limits and error shapes. Nothing in an embedding needs repair: the reply
is relayed as the upstream sent it."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ..errors import RequestError
from .proxy import PROXY, table_of, with_model
from .replies import failure_response, json_error, read_reply, relay_error
from .table import tenant_label, tenant_of
from .upstreams import Upstream, UpstreamFailure, response_headers
from .validate import read_request, validate_embeddings

ENDPOINT = "embeddings"


async def embeddings(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    body = await read_request(proxy, request, ENDPOINT, validate_embeddings)
    tenant = tenant_label(request)
    try:
        route = table_of(request).route("embedding", body.get("model"), tenant_of(request))
    except RequestError as exc:
        proxy.count(ENDPOINT, False, exc.status, tenant)
        raise
    labels = (tenant, route.model)
    async with proxy.slot():
        deadline = proxy.deadline()
        try:
            async with deadline:
                out = await _relay(request, body, route.rows)
        except TimeoutError:
            if not deadline.expired():
                raise
            out = json_error(504, proxy.timeout_message, "timeout", "request_timeout")
    proxy.count(ENDPOINT, False, out.status, *labels)
    return out


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
