"""``POST /v1/chat/completions``: one chat request served through the chain.

Streamed (through ``SSESession``), one request::

    read + validate body (caller.validate) ─► Scope: table, tenant, route
      ─► Exchange.open: budget (fit the prompt, clamp max_tokens, engine
         fields), pool.send (weighted choice, failover, retries) ─► 200?
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
so that the request can still be asked again (``reask.py``) without the
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
from ...spec import tools_of
from ...wire import Door
from .. import narrowing, record
from ..caller.replies import calls_in, completion_to_sse
from ..caller.stream import ClientStream
from ..caller.validate import read_request, validate_chat
from ..exchange import Exchange
from ..proxy import PROXY
from ..reask import Attempt, named_tool, narrow_to_tool, narrow_to_tools, stream_error
from ..scope import Scope
from ..upstream.budget import estimate_prompt_tokens
from ..upstream.pool import UpstreamFailure

log = logging.getLogger("streamfix.server")

PATH = "/chat/completions"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await read_request(request.app[PROXY], request, "chat", validate_chat)
    return await serve_chat(request, body)


async def serve_chat(
    request: web.Request, body: dict[str, Any], door: Door | None = None
) -> web.StreamResponse:
    """Serve a validated chat body; a front door's (``streamfix.wire``)
    reply is encoded by ``door``."""
    stream = body.get("stream") is True
    scope = Scope.of(request, "chat" if door is None else door.endpoint, stream)
    scope.route("chat", body.get("model"))
    proxy = scope.proxy
    soft = proxy.cfg.required == "soft" and bool(body.get("tools"))
    name = named_tool(body) if soft else None
    if name is not None:
        up_body = narrow_to_tool(body, name)
        # The chain lifts only what the model was shown: the one tool.
        body = {**body, "tools": up_body["tools"]}
    tools = tools_of(body)
    if name is None:
        soft = soft and body.get("tool_choice") == "required" and bool(tools)
        up_body = {**body, "tool_choice": "auto"} if soft else dict(body)
    # --narrow-tools: the model sees the few tools the turn needs; the
    # chain still knows all the client's (a hidden one's call is valid)
    narrowed = await narrowing.decide(scope, body) if name is None else None
    full = up_body
    if narrowed is not None and narrowed.kept is not None:
        up_body = narrow_to_tools(
            up_body, narrowed.kept, required=body.get("tool_choice") == "required"
        )
    if tools:
        await proxy.build_matcher(tools)
    if door is not None:
        # the usage a door reports when the upstream sends none
        door.input_estimate = estimate_prompt_tokens(body)
    att = Attempt(up_body, soft, door, name is not None, narrowed, full)
    async with proxy.slot():
        if not stream:
            return await scope.answer(_whole(scope, body, att))
        client = scope.client(request, door.encoder() if door else None)
        return await scope.answer(_stream(scope, body, att, client), client)


def _options(ex: Exchange, att: Attempt) -> dict[str, Any]:
    """The chain's options for this attempt. While the reply may still be
    asked again for coming out empty, a call region the model wrote but
    that reads as nothing is held back (``Options.hold_unreadable``): the
    reply is then empty, and the model gets another try; on the last
    attempt it is given back as text."""
    opts = att.options(ex.options)
    if "empty" not in att.done and att.reasks < ex.scope.proxy.cfg.max_reasks:
        opts = {**opts, "hold_unreadable": True}
    return opts


async def _open(scope: Scope, att: Attempt) -> Exchange | None:
    """The attempt's upstream exchange (its narrowing noted in the
    recording); None when every row failed because the server refused the
    request's ``json_schema`` format (a 500 from llama-cpp-python's
    server): learned, and to be asked again as ``json_object``
    (``AskAgain.format_refused``)."""
    try:
        ex = await Exchange.open(scope, PATH, att.body, budget=True)
    except UpstreamFailure as f:
        up, error = f.upstream, f.body
        if (
            up is None
            or error is None
            or not scope.proxy.ask.format_refused(up, att, f.status, error)
        ):
            raise
        return None
    if att.narrowing:
        assert att.narrowed is not None
        record.narrowed(att.narrowed.note())
    return ex


async def _whole(scope: Scope, client_body: dict[str, Any], att: Attempt) -> web.StreamResponse:
    """A non-streamed request's attempts, until one is the reply."""
    proxy = scope.proxy
    while True:
        ex = await _open(scope, att)
        if ex is None:
            continue
        raw = await ex.whole()
        if not ex.ok:
            if ex.resp.status == 400 and proxy.ask.context_exceeded(ex.up, att, raw):
                continue
            if proxy.ask.format_refused(ex.up, att, ex.resp.status, raw):
                continue
            return ex.relayed(raw)
        obj = ex.completion(raw, "a reply that is not a JSON object", choices=False)
        fixed, report = _repaired(ex, client_body, obj, att)
        reason = proxy.ask.reason(att, report, calls_in(fixed))
        if reason is not None:
            log.info("asking %s again: %s", ex.up.name, reason)
            proxy.ask.next_body(att, reason, ex.sent)
            continue
        proxy.ask.settle(att, calls_in(fixed))
        if att.door is None:
            reply = scope.named(fixed)
        else:
            record.chat_reply(jsoncodec.dumps(fixed))  # the chat side, for replay
            reply = att.door.reply(fixed)
        out = web.Response(body=jsoncodec.dumps(reply), headers=ex.headers)
        out.content_type = "application/json"
        return out


def _repaired(
    ex: Exchange, client_body: dict[str, Any], obj: dict[str, Any], att: Attempt
) -> tuple[dict[str, Any], Any]:
    """A whole completion through the chain: (the repaired one, the report)."""
    proxy = ex.scope.proxy
    ctx = Context.of(client_body, _options(ex, att))
    t0 = time.perf_counter()
    fixed = Chain(ctx).complete(obj)
    proxy.metrics.chunk_seconds.of(ex.scope.model).observe(time.perf_counter() - t0)
    if ctx.report.reasoning:
        ex.up.mark_reasoning(ex.model, ctx.report.prompt_opened_reasoning)
    proxy.count_report(ctx.report, ex.scope.model)
    return fixed, ctx.report


async def _stream(
    scope: Scope, client_body: dict[str, Any], att: Attempt, client: ClientStream
) -> web.StreamResponse:
    """A streamed request's attempts, until one is the reply."""
    proxy = scope.proxy
    while True:
        ex = await _open(scope, att)
        if ex is None:
            continue
        try:
            if not ex.ok:
                raw = await ex.error_body()
                if ex.resp.status == 400 and proxy.ask.context_exceeded(ex.up, att, raw):
                    continue
                if proxy.ask.format_refused(ex.up, att, ex.resp.status, raw):
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
                return await _json_as_stream(ex, await ex.whole(), client, client_body, att)
            # before prepare: fails as a 500
            session = SSESession(client_body, **_options(ex, att))
            await client.prepare(ex.headers)
            outcome = await _attempt(ex, session, client, att)
        finally:
            ex.close()
        if outcome.reask is None:
            return client.response
        if outcome.reask == "empty_stream":
            if await _diagnose_empty(ex, att):
                client.discard()
                continue
            await client.commit()
            if outcome.tail:
                await client.write(outcome.tail)
            return client.response
        log.info("asking %s again: %s", ex.up.name, outcome.reask)
        client.discard()
        if outcome.reask != "context":  # counted where the window was learned
            proxy.ask.next_body(att, outcome.reask, ex.sent)


async def _json_as_stream(
    ex: Exchange, raw: bytes, client: ClientStream, client_body: dict[str, Any], att: Attempt
) -> web.StreamResponse:
    obj = ex.completion(raw, type_="upstream_error")
    ctx = Context.of(client_body, _options(ex, att))
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


async def _attempt(
    ex: Exchange, session: SSESession, client: ClientStream, att: Attempt
) -> Outcome:
    """Stream one upstream reply to the client, held until the chain has
    shown real output (a call, for ``required`` under ``--required soft``),
    and decide whether it is the reply."""
    proxy, up = ex.scope.proxy, ex.up
    chain = session.chain

    def ready() -> bool:
        if chain.holding_json or session.report.json_invalid:
            return False  # held to its end: it may still be asked again
        return chain.calls_emitted > 0 if att.wants_call else chain.output_started

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
        if error is not None and proxy.ask.context_exceeded(up, att, error):
            return Outcome(None if client.gone() else "context")
    if ended.error is None and not client.committed:
        reason = proxy.ask.reason(att, session.report, chain.calls_emitted)
        if reason is not None:
            return Outcome(None if client.gone() else reason)
    if (
        not ended.got_data
        and not client.committed
        and "context" not in att.done
        and att.reasks < proxy.cfg.max_reasks
    ):
        return Outcome("empty_stream", ended.tail)
    proxy.ask.settle(att, chain.calls_emitted)
    await client.commit()
    if ended.tail:
        await client.write(ended.tail)
    return Outcome()


async def _diagnose_empty(ex: Exchange, att: Attempt) -> bool:
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
    return ex.scope.proxy.ask.context_exceeded(ex.up, att, raw)
