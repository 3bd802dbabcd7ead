"""``POST /v1/completions``: the legacy text-completions API, passed through
to the request's chat rows with one repair, the repetition cutter
(``streamfix.completions``): a looping choice ends with
``finish_reason: "length"`` and the upstream request is closed. Same
routing, failover, slots, limits and error shapes as chat; no budget (the
prompt is text, not messages) and nothing held back, so nothing is asked
again: a chunk goes to the client as soon as it is read.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from .. import jsoncodec
from ..completions import CompletionSession
from ..errors import UpstreamProtocolError
from ..sse import DONE_EVENT, encode_data
from .body import BodyReads
from .client import ClientGone, ClientStream
from .proxy import PROXY, Proxy, table_of, with_model
from .replies import failure_response, json_error, read_reply, relay_error
from .table import tenant_label
from .upstreams import ERROR_BODY_BYTES, ReadWatch, Upstream, UpstreamFailure, response_headers
from .validate import read_request, validate_completion

ENDPOINT = "completions"


async def completions(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    body = await read_request(proxy, request, ENDPOINT, validate_completion)
    stream = body.get("stream") is True
    route = proxy.route(request, "chat", body.get("model"), ENDPOINT, stream)
    labels = (tenant_label(request), route.model)
    table = table_of(request)
    client = ClientStream(request, None, table.redact if table.secrets else None)
    async with proxy.slot():
        return await proxy.answer(
            _serve(proxy, request, body, route.rows, client),
            lambda status: proxy.count(ENDPOINT, stream, status, *labels),
            client if stream else None,
        )


async def _serve(
    proxy: Proxy,
    request: web.Request,
    body: dict[str, Any],
    rows: list[Upstream],
    client: ClientStream,
) -> web.StreamResponse:
    try:
        up, resp = await proxy.send(
            "POST", "/completions", request, lambda u: orjson.dumps(with_model(body, u)), rows
        )
    except UpstreamFailure as f:
        return failure_response(f)
    session = CompletionSession(body)
    try:
        if resp.status != 200:
            raw = await resp.content.read(ERROR_BODY_BYTES)
            return relay_error(
                resp.status, raw, response_headers(resp.headers), resp.content_type, up.name
            )
        if body.get("stream") is not True or resp.content_type == "application/json":
            return await _whole(proxy, up, resp, session, body)
        await client.prepare(response_headers(resp.headers))
        client.committed = True
        await _pump(proxy, up, resp, session, client)
        return client.response
    finally:
        resp.close()
        proxy.count_report(session.report)


async def _whole(
    proxy: Proxy,
    up: Upstream,
    resp: aiohttp.ClientResponse,
    session: CompletionSession,
    body: dict[str, Any],
) -> web.StreamResponse:
    """A non-streamed reply (or one that ignored ``stream``), cut whole."""
    try:
        raw = await read_reply(resp)
    except (TimeoutError, aiohttp.ClientError) as exc:
        return proxy.reply_failed(up, exc)
    try:
        obj = jsoncodec.loads_lenient(raw)  # as the SDKs read it
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        proxy.upstream_error(up, "protocol")
        return json_error(
            502, f"upstream {up.name} sent JSON that is not a completion", "upstream_protocol_error"
        )
    fixed = session.complete(obj)
    if body.get("stream") is True:  # the client asked for a stream: one event
        out = web.Response(body=encode_data(jsoncodec.dumps(fixed)) + DONE_EVENT)
        out.content_type = "text/event-stream"
        return out
    out = web.Response(body=jsoncodec.dumps(fixed), headers=response_headers(resp.headers))
    out.content_type = "application/json"
    return out


async def _pump(
    proxy: Proxy,
    up: Upstream,
    resp: aiohttp.ClientResponse,
    session: CompletionSession,
    client: ClientStream,
) -> None:
    """Stream one upstream reply to the client as it is read; a cut ends
    it (``session.finished``: the caller closes the upstream)."""
    watch = ReadWatch(resp, proxy.cfg.read_timeout)
    got_data = False
    try:
        async for data in BodyReads(resp.content):
            got_data = True
            watch.last = time.perf_counter()
            out = session.feed(data)
            watch.busy = True
            if out:
                await client.write(out)
            watch.busy = False
            if session.finished:
                break
            if client.gone():
                raise ClientGone
        _, tail = proxy.stream_end(up, session, got_data)
    except (UpstreamProtocolError, TimeoutError, aiohttp.ClientError) as exc:
        _, tail = proxy.stream_broke(up, session, exc)
    finally:
        watch.cancel()
    if tail:
        await client.write(tail)
