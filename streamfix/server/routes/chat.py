"""``POST /v1/chat/completions``: one chat request served through the chain.

Streamed (through ``SSESession``), one request::

    read + validate body (caller.validate) ─► Scope: table, tenant, route
      ─► Plan.of: the request's steps (plan.py: named tool, soft required,
         narrowing, its decision awaited before)
      ─► Exchange.open: each row's steps (plan.for_row: served model,
         budget, JSON fallback, engine fields), pool.send (weighted choice,
         failover, retries) ─► 200?
      ─► prepare the caller's response (caller.stream)
      ─► Exchange.pump: each read through session.feed ─► hold or write
      ─► end: [DONE] passed on, or an error event (never a fake finish)

Non-streamed replies are repaired whole (``Chain.complete``). The front
doors (``doors.py``) hand their translated bodies to ``serve_chat``.

The request's ``model`` picks its rows in the request's table
(``upstream/table.py``): failover and asking again stay within them. With
``--request-timeout`` the whole request is bounded: a 504 before the
reply began, an error event (``request_timeout``) after.

*Holding.* Until the chain has emitted real output (``output_started``;
with ``--required soft`` and ``tool_choice: "required"``, until a call was
emitted; while a ``response_format`` reply is held to its end,
``Chain.holding_json``) the repaired bytes are held, not written (``caller.stream.ClientStream``),
so that the request can still be asked again (``reask.py`` decides
why, ``Plan.again`` replans) without the client seeing two replies. A
request that no reply can make be asked again (no tools, no
``response_format``, no call required) is committed once its reply began
(``Chain.began``: the role chunk), not at its first text.

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

import logging
import time
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ... import jsoncodec
from ...chain import Chain
from ...context import Context
from ...session import SSESession, error_event
from ...wire import Door
from .. import narrowing, record
from ..caller.replies import calls_in, completion_to_sse
from ..caller.stream import ClientStream
from ..caller.validate import read_request, validate_chat
from ..exchange import Exchange
from ..plan import Plan
from ..proxy import PROXY
from ..reask import stream_error
from ..scope import Scope
from ..upstream.budget import estimate_prompt_tokens
from ..upstream.pool import UpstreamFailure
from ..upstream.table import TENANT, tenant_label

log = logging.getLogger("streamfix.server")

PATH = "/chat/completions"


async def chat(request: web.Request) -> web.StreamResponse:
    refused = refused_early(request, "chat")
    if refused is not None:
        return refused
    body = await read_request(request.app[PROXY], request, "chat", validate_chat)
    return await serve_chat(request, body)


def refused_early(request: web.Request, endpoint: str) -> web.Response | None:
    """The 429 of a tenant whose slots this process holds, before its body
    is read (``Fleet.precheck``), counted for ``endpoint``."""
    proxy = request.app[PROXY]
    refused = proxy.fleet.precheck(request.get(TENANT))
    if refused is not None:
        proxy.count(endpoint, False, refused.status, tenant_label(request))
    return refused


async def serve_chat(
    request: web.Request, body: dict[str, Any], door: Door | None = None
) -> web.StreamResponse:
    """Serve a validated chat body; a front door's (``streamfix.wire``)
    reply is encoded by ``door``."""
    # the scope is the web.Request's; what the body asks goes as values
    scope = Scope.of(request, "chat" if door is None else door.endpoint)
    proxy = scope.proxy
    stream = body.get("stream") is True
    scope.route("chat", body.get("model"), stream)
    # the request's steps (plan.py), narrowing's decision awaited before
    narrowed = await narrowing.decide(scope, body)
    plan = Plan.of(body, soft=proxy.cfg.required == "soft", narrowed=narrowed, door=door)
    if door is not None:
        # the usage a door reports when the upstream sends none
        door.input_estimate = estimate_prompt_tokens(plan.client)
    if plan.tools:
        await proxy.build_matcher(plan.tools)
    ticket = await proxy.fleet.admit(scope.tenant, scope.rows, body.get("model"), _tokens(plan))
    if isinstance(ticket, web.Response):  # a tenant's limit (state/fleet.py)
        scope.count(ticket.status, stream)
        return ticket
    scope.ticket = ticket
    try:
        async with proxy.slot():
            if not stream:
                return await scope.answer(_whole(scope, plan))
            client = scope.client(request, door.encoder() if door else None)
            return await scope.answer(_stream(scope, plan, client), client)
    finally:
        proxy.fleet.finish(ticket)


def _tokens(plan: Plan) -> int:
    """What a request counts against a tokens-per-minute limit as it
    starts: its prompt's estimate and its ``max_tokens`` (corrected by the
    reply's usage as it ends)."""
    body = plan.client
    out = body.get("max_tokens") or body.get("max_completion_tokens")
    return estimate_prompt_tokens(body) + (out if isinstance(out, int) else 0)


def _options(ex: Exchange, plan: Plan) -> dict[str, Any]:
    """The chain's options for this attempt. While the reply may still be
    asked again for coming out empty, a call region the model wrote but
    that reads as nothing is held back (``Options.hold_unreadable``): the
    reply is then empty, and the model gets another try; on the last
    attempt it is given back as text."""
    opts = plan.options(ex.options)
    if "empty" not in plan.done and plan.reasks < ex.scope.proxy.cfg.max_reasks:
        opts = {**opts, "hold_unreadable": True}
    return opts


async def _open(scope: Scope, plan: Plan) -> Exchange | None:
    """The attempt's upstream exchange (its narrowing noted in the
    recording); None when every row failed because the server refused the
    request's ``json_schema`` format (a 500 from llama-cpp-python's
    server): learned, and to be asked again as ``json_object``
    (``AskAgain.format_refused``)."""
    try:
        ex = await Exchange.open(scope, PATH, plan)
    except UpstreamFailure as f:
        up, error = f.upstream, f.body
        if (
            up is None
            or error is None
            or not scope.proxy.ask.format_refused(up, plan, f.status, error)
        ):
            raise
        return None
    if plan.narrowing and plan.shown is not None:  # the narrowing step's note
        record.narrowed(plan.shown)
    return ex


async def _whole(scope: Scope, plan: Plan) -> web.StreamResponse:
    """A non-streamed request's attempts, until one is the reply."""
    proxy = scope.proxy
    while True:
        ex = await _open(scope, plan)
        if ex is None:
            continue
        raw = await ex.whole()
        if not ex.ok:
            if proxy.ask.refused(ex.up, plan, ex.resp.status, raw):
                continue
            return ex.relayed(raw)
        obj = ex.completion(raw, "a reply that is not a JSON object", choices=False)
        fixed, report = _repaired(ex, obj, plan)
        if scope.ticket is not None:
            scope.ticket.usage(obj.get("usage"))
        reason = proxy.ask.again(plan, report, calls_in(fixed), ex.sent)
        if reason is not None:
            log.info("asking %s again: %s", ex.up.name, reason)
            continue
        proxy.ask.settle(plan, calls_in(fixed))
        if plan.door is None:
            reply = scope.named(fixed)
        else:
            record.chat_reply(jsoncodec.dumps(fixed))  # the chat side, for replay
            reply = plan.door.reply(fixed)
        out = web.Response(body=jsoncodec.dumps(reply), headers=ex.headers)
        out.content_type = "application/json"
        return out


def _repaired(ex: Exchange, obj: dict[str, Any], plan: Plan) -> tuple[dict[str, Any], Any]:
    """A whole completion through the chain: (the repaired one, the report)."""
    proxy = ex.scope.proxy
    ctx = Context.of(plan.client, _options(ex, plan))
    t0 = time.perf_counter()
    fixed = Chain(ctx).complete(obj)
    proxy.metrics.chunk_seconds.of(ex.scope.model).observe(time.perf_counter() - t0)
    if ctx.report.reasoning:
        ex.up.mark_reasoning(ex.model, ctx.report.prompt_opened_reasoning)
    proxy.count_report(ctx.report, ex.scope.model)
    return fixed, ctx.report


async def _stream(scope: Scope, plan: Plan, client: ClientStream) -> web.StreamResponse:
    """A streamed request's attempts, until one is the reply."""
    proxy = scope.proxy
    while True:
        ex = await _open(scope, plan)
        if ex is None:
            continue
        try:
            if not ex.ok:
                raw = await ex.error_body()
                if proxy.ask.refused(ex.up, plan, ex.resp.status, raw):
                    continue
                if not client.prepared:
                    return ex.relayed(raw)
                await client.commit()
                await client.write(
                    error_event(
                        f"upstream {ex.shown} answered HTTP {ex.resp.status}", "upstream_error"
                    )
                )
                return client.response
            if ex.resp.content_type == "application/json":
                # the upstream ignored ``stream``: one completion (or an
                # error) as JSON; repaired, then sent as a stream
                return await _json_as_stream(ex, await ex.whole(), client, plan)
            # before prepare: fails as a 500
            session = SSESession(plan.client, **_options(ex, plan))
            await client.prepare(ex.headers)
            outcome = await _attempt(ex, session, client, plan)
        finally:
            ex.close()
        if outcome.reask is None:
            return client.response
        if outcome.reask == "empty_stream":
            if await _diagnose_empty(ex, plan):
                client.discard()
                continue
            await client.commit()
            if outcome.tail:
                await client.write(outcome.tail)
            return client.response
        log.info("asking %s again: %s", ex.up.name, outcome.reask)
        client.discard()
        if outcome.reask != "context":  # counted where the window was learned
            proxy.ask.next_body(plan, outcome.reask, ex.sent)


async def _json_as_stream(
    ex: Exchange, raw: bytes, client: ClientStream, plan: Plan
) -> web.StreamResponse:
    obj = ex.completion(raw, type_="upstream_error")
    ctx = Context.of(plan.client, _options(ex, plan))
    fixed = Chain(ctx).complete(obj)
    ex.scope.proxy.count_report(ctx.report, ex.scope.model)
    await client.prepare(CIMultiDict())
    await client.commit()
    await client.write(completion_to_sse(fixed))
    return client.response


class Outcome:
    """How one streamed attempt ended for the request: ``reask`` (None: it
    is the reply, already finished for the caller; else the reason to
    discard it and ask again) and, for an empty stream being looked into,
    the ``tail`` that would end it."""

    __slots__ = ("reask", "tail")

    def __init__(self, reask: str | None = None, tail: bytes = b"") -> None:
        self.reask = reask
        self.tail = tail


async def _attempt(ex: Exchange, session: SSESession, client: ClientStream, plan: Plan) -> Outcome:
    """Stream one upstream reply to the client, held until the chain has
    shown real output (a call, for ``required`` under ``--required soft``),
    and decide whether it is the reply."""
    proxy, up = ex.scope.proxy, ex.up
    chain = session.chain
    # No reason to ask again can arise from this reply's text (no tools,
    # no response_format, no call required): it is committed once it has
    # begun (the role chunk), not held until its first text. An error
    # event before it (an overflow in a 200 stream) is still held.
    final = not plan.tools and chain.ctx.json is None and not plan.wants_call

    def ready() -> bool:
        if chain.holding_json or session.report.json_invalid:
            return False  # held to its end: it may still be asked again
        if plan.wants_call:
            return chain.calls_emitted > 0
        return chain.output_started or (final and chain.began)

    try:
        ended = await ex.pump(session, client, ready)
    finally:
        proxy.count_report(session.report, ex.scope.model)
        if session.report.reasoning:
            up.mark_reasoning(ex.model, session.report.prompt_opened_reasoning)
    if session.stopped:
        log.info("cut %s: %s", up.name, session.report.cut)
    if not client.committed and client.held_bytes:
        # llama.cpp-style overflow reported as an error event in a 200
        # stream: the upstream's error events only, never the reply's text
        held = b"".join(client.held)
        error = stream_error(held) if b"context_length_exceeded" in held else None
        if error is not None and proxy.ask.context_exceeded(up, plan, error):
            return Outcome(None if client.gone() else "context")
    if ended.error is None and not client.committed:
        reason = proxy.ask.reason(plan, session.report, chain.calls_emitted)
        if reason is not None:
            return Outcome(None if client.gone() else reason)
    if (
        not ended.got_data
        and not client.committed
        and "context" not in plan.done
        and plan.reasks < proxy.cfg.max_reasks
    ):
        return Outcome("empty_stream", ended.tail)
    proxy.ask.settle(plan, chain.calls_emitted)
    await client.commit()
    if ended.tail:
        await client.write(ended.tail)
    return Outcome()


async def _diagnose_empty(ex: Exchange, plan: Plan) -> bool:
    """An HTTP 200 stream with an empty body: llama.cpp's answer when the
    prompt does not fit its window (no error, nothing to learn from).
    Ask the same upstream the same thing, not streamed and for one token:
    a ``context_length_exceeded`` there states the window and the
    prompt's size, and the request can be fitted and asked again.
    Returns True when it was."""
    probe = {k: v for k, v in plan.body.items() if k not in ("stream_options",)}
    probe.update(stream=False, max_tokens=1)
    probe.pop("max_completion_tokens", None)
    try:
        check = await Exchange.open(ex.scope, PATH, probe, order=[ex.up], retries=0, recorded=False)
    except UpstreamFailure:
        return False
    try:
        if check.resp.status != 400:
            return False
        raw = await check.error_body()
    except (TimeoutError, aiohttp.ClientError):
        return False
    finally:
        check.close()
    return ex.scope.proxy.ask.context_exceeded(ex.up, plan, raw)
