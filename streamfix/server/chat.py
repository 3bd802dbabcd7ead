"""``POST /v1/chat/completions``: one chat request served through the chain.

Streamed (through ``SSESession``), one request::

    read + validate body ─► budget (clamp max_tokens, engine fields)
      ─► upstreams.send (weighted choice, failover, retries) ─► 200?
      ─► prepare client response (no-cache, X-Accel-Buffering: no)
      ─► for each upstream read: session.feed ─► hold or write
      ─► end: [DONE] passed on, or an error event (never a fake finish)

Non-streamed replies are repaired whole (``Chain.complete``). The front
doors (``doors.py``) hand their translated bodies to ``serve_chat``.

The request's ``model`` picks its rows in the request's table
(``table.py``): failover and asking again stay within them. With
``--request-timeout`` the whole request is bounded: a 504 before the
reply began, an error event (``request_timeout``) after.

*Holding.* Until the chain has emitted real output (``output_started``;
with ``--required soft`` and ``tool_choice: "required"``, until a call was
emitted) the repaired bytes are held, not written (``client.ClientStream``),
so that the request can still be asked again (``attempts.py``) without the
client seeing two replies.

*An upstream that ignores* ``stream: true`` and answers one JSON
completion: it is repaired like a non-streamed reply and sent to the
client as a stream (``completion_to_sse``); a JSON error there is a 502.

*Cancellation paths* (each closes the upstream response, in ``finally``):
the client disconnects (the handler is cancelled when the server runs
with ``handler_cancellation=True``, as ``streamfix serve`` does, and a
closing transport is noticed at the next upstream read otherwise); a
write to the client fails; the chain cuts a loop (``session.finished``);
the upstream dies or times out (an error event goes to the client).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from .. import jsoncodec
from ..chain import Chain
from ..context import Context, tools_of
from ..errors import UpstreamProtocolError
from ..session import SSESession, error_event
from ..wire import Door
from . import record
from .attempts import Attempt, named_tool, narrow_to_tool
from .body import BodyReads
from .client import MAX_HELD_BYTES, ClientGone, ClientStream
from .proxy import PROXY, Proxy, chain_options, table_of, with_model
from .replies import (
    calls_in,
    completion_to_sse,
    failure_response,
    json_error,
    read_reply,
    relay_error,
)
from .table import tenant_label
from .upstreams import ERROR_BODY_BYTES, ReadWatch, Upstream, UpstreamFailure, response_headers
from .validate import read_request, validate_chat

log = logging.getLogger("streamfix.server")


async def chat(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    body = await read_request(proxy, request, "chat", validate_chat)
    return await serve_chat(proxy, request, body)


async def serve_chat(
    proxy: Proxy, request: web.Request, body: dict[str, Any], door: Door | None = None
) -> web.StreamResponse:
    """Serve a validated chat body; a front door's (``streamfix.wire``)
    reply is encoded by ``door``."""
    stream = body.get("stream") is True
    endpoint = "chat" if door is None else door.endpoint
    route = proxy.route(request, "chat", body.get("model"), endpoint, stream)
    soft = proxy.cfg.required == "soft" and bool(body.get("tools"))
    name = named_tool(body) if soft else None
    if name is not None:
        up_body = narrow_to_tool(body, name)
        # The chain lifts only what the model was shown: the one tool.
        body = {**body, "tools": up_body["tools"]}
    else:
        soft = soft and body.get("tool_choice") == "required" and bool(tools_of(body))
        up_body = {**body, "tool_choice": "auto"} if soft else dict(body)
    tools = tools_of(body)
    if tools:
        await proxy.build_matcher(tools)
    labels = (tenant_label(request), route.model)
    att = Attempt(up_body, soft, stream, door, route.rows, labels, name is not None)
    async with proxy.slot():
        if stream:
            return await _chat_stream(proxy, request, body, att)
        return await _chat_once(proxy, request, body, att)


async def _chat_once(
    proxy: Proxy, request: web.Request, client_body: dict[str, Any], att: Attempt
) -> web.StreamResponse:
    return await proxy.answer(
        _chat_once_within(proxy, request, client_body, att),
        lambda status: proxy.count(att.endpoint, False, status, *att.labels),
    )


async def _chat_once_within(
    proxy: Proxy, request: web.Request, client_body: dict[str, Any], att: Attempt
) -> web.StreamResponse:
    while True:
        sent: dict[str, Any] = {}
        base = att.body
        try:
            up, resp = await proxy.send(
                "POST", "/chat/completions", request, proxy.body_fn(base, sent), att.rows
            )
        except UpstreamFailure as f:
            return failure_response(f)
        proxy.record_attempt(up, sent, resp)
        try:
            raw = await read_reply(resp)
        except (TimeoutError, aiohttp.ClientError) as exc:
            return proxy.reply_failed(up, exc)
        finally:
            resp.close()
        if resp.status != 200:
            if resp.status == 400 and proxy.ask.context_exceeded(up, att, raw):
                continue
            return relay_error(
                resp.status, raw, response_headers(resp.headers), resp.content_type, up.name
            )
        try:
            obj = jsoncodec.loads_lenient(raw)  # as the SDKs read it
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            proxy.upstream_error(up, "protocol")
            return json_error(
                502,
                f"upstream {up.name} sent a reply that is not a JSON object",
                "upstream_protocol_error",
            )
        ctx = Context.of(client_body, chain_options(up))
        t0 = time.perf_counter()
        fixed = Chain(ctx).complete(obj)
        proxy.metrics.chunk_seconds.observe(time.perf_counter() - t0)
        if ctx.report.reasoning and not up.info.reasoning:
            up.mark_reasoning()
        proxy.count_report(ctx.report)
        reason = proxy.ask.reason(att, ctx.report, calls_in(fixed))
        if reason is not None:
            log.info("asking %s again: %s", up.name, reason)
            proxy.ask.next_body(att, reason, sent)
            continue
        proxy.ask.settle(att, calls_in(fixed))
        reply = fixed if att.door is None else att.door.reply(fixed)
        out = web.Response(body=jsoncodec.dumps(reply), headers=response_headers(resp.headers))
        out.content_type = "application/json"
        return out


async def _chat_stream(
    proxy: Proxy, request: web.Request, client_body: dict[str, Any], att: Attempt
) -> web.StreamResponse:
    table = table_of(request)
    client = ClientStream(
        request,
        att.door.encoder() if att.door else None,
        table.redact if table.secrets else None,
    )
    return await proxy.answer(
        _chat_stream_within(proxy, request, client_body, att, client),
        lambda status: proxy.count(att.endpoint, True, status, *att.labels),
        client,
    )


async def _chat_stream_within(
    proxy: Proxy,
    request: web.Request,
    client_body: dict[str, Any],
    att: Attempt,
    client: ClientStream,
) -> web.StreamResponse:
    """The streamed request's attempts, until one is the reply."""
    while True:
        sent: dict[str, Any] = {}
        base = att.body
        try:
            up, resp = await proxy.send(
                "POST", "/chat/completions", request, proxy.body_fn(base, sent), att.rows
            )
        except UpstreamFailure as f:
            if not client.prepared:
                return failure_response(f)
            await client.commit()
            await client.write(error_event(f.message, "upstream_error", f.kind))
            return client.response
        proxy.record_attempt(up, sent, resp)
        try:
            if resp.status != 200:
                raw = await resp.content.read(ERROR_BODY_BYTES)
                if resp.status == 400 and proxy.ask.context_exceeded(up, att, raw):
                    continue
                if not client.prepared:
                    return relay_error(
                        resp.status,
                        raw,
                        response_headers(resp.headers),
                        resp.content_type,
                        up.name,
                    )
                await client.commit()
                await client.write(
                    error_event(f"upstream {up.name} answered HTTP {resp.status}", "upstream_error")
                )
                return client.response
            if resp.content_type == "application/json":
                # the upstream ignored ``stream``: one completion (or an
                # error) as JSON; repaired, then sent as a stream
                try:
                    raw = await read_reply(resp)
                except (TimeoutError, aiohttp.ClientError) as exc:
                    return proxy.reply_failed(up, exc)
                return await _json_as_stream(proxy, up, raw, client, client_body)
            # before prepare: fails as a 500
            session = SSESession(client_body, **chain_options(up))
            await client.prepare(response_headers(resp.headers))
            reask = await _pump(proxy, up, resp, session, client, att)
        finally:
            resp.close()
        if reask is None:
            return client.response
        if reask == "empty_stream":
            if await _diagnose_empty(proxy, request, up, att):
                client.discard()
                continue
            await client.commit()
            if att.tail:
                await client.write(att.tail)
            return client.response
        log.info("asking %s again: %s", up.name, reask)
        client.discard()
        if reask != "context":  # counted where the window was learned
            proxy.ask.next_body(att, reask, sent)


async def _json_as_stream(
    proxy: Proxy, up: Upstream, raw: bytes, client: ClientStream, client_body: dict[str, Any]
) -> web.StreamResponse:
    try:
        obj = jsoncodec.loads_lenient(raw)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or "error" in obj or not isinstance(obj.get("choices"), list):
        proxy.upstream_error(up, "protocol")
        if isinstance(obj, dict) and "error" in obj:
            return relay_error(502, raw, CIMultiDict(), "application/json", up.name)
        return json_error(
            502, f"upstream {up.name} sent JSON that is not a completion", "upstream_error"
        )
    ctx = Context.of(client_body, chain_options(up))
    fixed = Chain(ctx).complete(obj)
    proxy.count_report(ctx.report)
    await client.prepare(CIMultiDict())
    await client.commit()
    await client.write(completion_to_sse(fixed))
    return client.response


async def _pump(
    proxy: Proxy,
    up: Upstream,
    resp: aiohttp.ClientResponse,
    session: SSESession,
    client: ClientStream,
    att: Attempt,
) -> str | None:
    """Stream one upstream reply to the client. Returns a re-ask
    reason when the reply is to be discarded and asked again."""
    chain = session.chain
    observe = proxy.metrics.chunk_seconds.observe
    perf = time.perf_counter
    soft = att.soft
    got_data = False
    watch = ReadWatch(resp, proxy.cfg.read_timeout)
    try:
        async for data in record.reads(BodyReads(resp.content)):
            got_data = True
            t0 = watch.last = perf()
            out = session.feed(data)
            observe(perf() - t0)
            watch.busy = True  # writing to the client: not the upstream's silence
            if out:
                if client.committed:
                    await client.write(out)
                else:
                    client.hold(out)
                    ready = chain.calls_emitted > 0 if soft else chain.output_started
                    if ready or client.held_bytes > MAX_HELD_BYTES:
                        await client.commit()
                    else:
                        await client.keepalive_if_due()
            elif not client.committed:
                await client.keepalive_if_due()
            watch.busy = False
            if session.finished:
                break
            if client.gone():
                raise ClientGone
        error, tail = proxy.stream_end(up, session, got_data)
    except (UpstreamProtocolError, TimeoutError, aiohttp.ClientError) as exc:
        error, tail = proxy.stream_broke(up, session, exc)
    except (ClientGone, asyncio.CancelledError):
        raise
    except Exception:  # a bug of ours: end the stream cleanly, loudly in the log
        log.exception("internal error while repairing a stream from %s", up.name)
        error = "internal error"
        session.finish()
        tail = error_event("streamfix internal error", "internal_error")
    finally:
        watch.cancel()
        proxy.count_report(session.report)
        if session.report.reasoning and not up.info.reasoning:
            up.mark_reasoning()
    if session.stopped:
        log.info("cut %s: %s", up.name, session.report.cut)
    if not client.committed and client.held_bytes:
        # llama.cpp-style overflow reported as an error event in a 200 stream
        held = b"".join(client.held)
        if b"context_length_exceeded" in held and proxy.ask.context_exceeded(up, att, held):
            return None if client.gone() else "context"
    if error is None and not client.committed:
        reason = proxy.ask.reason(att, session.report, chain.calls_emitted)
        if reason is not None:
            return None if client.gone() else reason
    if (
        not got_data
        and not client.committed
        and "context" not in att.done
        and att.reasks < proxy.cfg.max_reasks
    ):
        att.tail = tail
        return "empty_stream"
    proxy.ask.settle(att, chain.calls_emitted)
    await client.commit()
    if tail:
        await client.write(tail)
    return None


async def _diagnose_empty(proxy: Proxy, request: web.Request, up: Upstream, att: Attempt) -> bool:
    """An HTTP 200 stream with an empty body: llama.cpp's answer when the
    prompt does not fit its window (no error, nothing to learn from).
    Ask the same upstream the same thing, not streamed and for one token:
    a ``context_length_exceeded`` there states the window and the
    prompt's size, and the request can be fitted and asked again.
    Returns True when it was."""
    probe = {k: v for k, v in att.body.items() if k not in ("stream_options",)}
    probe.update(stream=False, max_tokens=1)
    probe.pop("max_completion_tokens", None)
    try:
        _, resp = await proxy.send(
            "POST",
            "/chat/completions",
            request,
            lambda u: orjson.dumps(with_model(probe, u)),
            order=[up],
            retries=0,
        )
    except UpstreamFailure:
        return False
    try:
        if resp.status != 400:
            return False
        raw = await resp.content.read(ERROR_BODY_BYTES)
    except (TimeoutError, aiohttp.ClientError):
        return False
    finally:
        resp.close()
    return proxy.ask.context_exceeded(up, att, raw)
