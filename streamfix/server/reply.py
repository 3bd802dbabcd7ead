"""A chat request's attempts, until one is the reply: the one loop that
sends the plan (``Exchange.open``: each row's steps, the pool), repairs
what comes back (the chain), and asks again with a reason
(``reask.AskAgain`` decides, ``Plan.again`` replans).

Each attempt ends as the reply (a response, already finished for the
caller) or as ``Again``: the reason to discard it and send the plan once
more. Both ways, streamed or whole, go through the same loop::

    Exchange.open(plan) ─► every row refused json_schema? learned, again
      ─► an error answer: asked again for it (an overflow, a refused
         format: ``AskAgain.error_reasked``) or relayed
      ─► whole: read, repaired (Chain.complete), judged (AskAgain.again)
      ─► streamed: pumped through the session, held until ``ready``,
         judged as it ended (AskAgain.again: an overflow error event, or
         an empty 200 stream's ``Exchange.window_probe``, first)
      ─► Again(reason): the plan replanned (``Plan.again``), the held
         bytes discarded, the loop goes on

*Holding.* Until the chain has emitted real output (``output_started``;
with ``--required soft`` and ``tool_choice: "required"``, until a call was
emitted; while a ``response_format`` reply is held to its end,
``Chain.holding_json``) the repaired bytes are held, not written
(``caller.stream.ClientStream``), so that the request can still be asked
again without the client seeing two replies. A request that no reply can
make be asked again (no tools, no ``response_format``, no call required)
is committed once its reply began (``Chain.began``: the role chunk), not
at its first text.

*An upstream that ignores* ``stream: true`` and answers one JSON
completion: it is repaired like a non-streamed reply and sent to the
client as a stream (``completion_to_sse``); a JSON error there is a 502.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from aiohttp import web
from multidict import CIMultiDict

from .. import jsoncodec
from ..chain import Chain
from ..context import Context, Report
from ..session import SSESession, error_event
from . import record
from .caller.replies import calls_in, completion_to_sse
from .caller.stream import ClientStream
from .exchange import Exchange
from .plan import Plan
from .reask import stream_error
from .scope import Scope
from .upstream.pool import UpstreamFailure

log = logging.getLogger("streamfix.server")

PATH = "/chat/completions"


class Again(NamedTuple):
    """An attempt that is not the reply: the ``reason`` it is asked again
    for (the plan already replanned for it, ``AskAgain.again``)."""

    reason: str


async def reply(scope: Scope, plan: Plan, client: ClientStream | None) -> web.StreamResponse:
    """The request's attempts until one is the reply: streamed to
    ``client``, or whole when there is none."""
    ask = scope.proxy.ask
    while True:
        try:
            ex = await Exchange.open(scope, PATH, plan)
        except UpstreamFailure as f:
            # every row refused the request's json_schema (a 500 from
            # llama-cpp-python's server): learned, asked as json_object
            up, error = f.upstream, f.body
            if up is None or error is None or not ask.format_refused(up, plan, f.status, error):
                raise
            continue
        if plan.narrowing and plan.shown is not None:  # the narrowing step's note
            record.narrowed(plan.shown)
        try:
            if ex.ok:
                options = plan.options(ex.options, scope.proxy.cfg.max_reasks)
                out = await (
                    _whole(ex, plan, options)
                    if client is None
                    else _streamed(ex, plan, options, client)
                )
            else:
                raw = await (ex.whole() if client is None else ex.error_body())
                if ask.error_reasked(ex.up, plan, ex.resp.status, raw):
                    continue
                out = await _relayed(ex, raw, client)
        finally:
            ex.close()
        if not isinstance(out, Again):
            return out
        log.info("asking %s again: %s", ex.up.name, out.reason)
        if client is not None:
            client.discard()


async def _relayed(ex: Exchange, raw: bytes, client: ClientStream | None) -> web.StreamResponse:
    """An upstream's error answer for the caller: relayed as it came
    before the stream began, else the stream ends with an error event."""
    if client is None or not client.prepared:
        return ex.relayed(raw)
    await client.commit()
    await client.write(
        error_event(f"upstream {ex.shown} answered HTTP {ex.resp.status}", "upstream_error")
    )
    return client.response


def _repaired(
    ex: Exchange, obj: dict[str, Any], plan: Plan, options: dict[str, Any]
) -> tuple[dict[str, Any], Report]:
    """A whole completion through the chain (``options``: the attempt's,
    ``Plan.options``): (the repaired one, the report)."""
    proxy = ex.scope.proxy
    ctx = Context.of(plan.client, options)
    t0 = time.perf_counter()
    fixed = Chain(ctx).complete(obj)
    proxy.metrics.chunk_seconds.of(ex.scope.model).observe(time.perf_counter() - t0)
    if ctx.report.reasoning:
        ex.up.mark_reasoning(ex.model, ctx.report.prompt_opened_reasoning)
    proxy.count_report(ctx.report, ex.scope.model)
    return fixed, ctx.report


async def _whole(ex: Exchange, plan: Plan, options: dict[str, Any]) -> web.StreamResponse | Again:
    """A non-streamed attempt answered 200: the reply, or why to ask again."""
    scope = ex.scope
    ask = scope.proxy.ask
    raw = await ex.whole()
    obj = ex.completion(raw, "a reply that is not a JSON object", choices=False)
    fixed, report = _repaired(ex, obj, plan, options)
    if scope.ticket is not None:
        scope.ticket.usage(obj.get("usage"))
    reason = ask.again(plan, report, calls_in(fixed), ex.sent)
    if reason is not None:
        return Again(reason)
    if plan.door is None:
        body = scope.named(fixed)
    else:
        record.chat_reply(jsoncodec.dumps(fixed))  # the chat side, for replay
        body = plan.door.reply(fixed)
    out = web.Response(body=jsoncodec.dumps(body), headers=ex.headers)
    out.content_type = "application/json"
    return out


async def _streamed(
    ex: Exchange, plan: Plan, options: dict[str, Any], client: ClientStream
) -> web.StreamResponse | Again:
    """A streamed attempt answered 200: the reply (finished for the
    caller), or why to ask again."""
    if ex.resp.content_type == "application/json":
        # the upstream ignored ``stream``: one completion (or an error) as
        # JSON; repaired, then sent as a stream
        obj = ex.completion(await ex.whole(), type_="upstream_error")
        fixed, _ = _repaired(ex, obj, plan, options)
        await client.prepare(CIMultiDict())
        await client.commit()
        await client.write(completion_to_sse(fixed))
        return client.response
    session = SSESession(plan.client, **options)  # before prepare: fails as a 500
    await client.prepare(ex.headers)
    return await _pumped(ex, session, client, plan)


async def _pumped(
    ex: Exchange, session: SSESession, client: ClientStream, plan: Plan
) -> web.StreamResponse | Again:
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
    report, overflow = None, None  # committed: nothing to judge, the outcome counted
    if not client.committed:
        if client.gone():
            return client.response
        # an overflow: llama.cpp-style, as an error event in a 200 stream
        # (the upstream's error events only, never the reply's text), or
        # an empty 200 stream, which a one-token probe looks into
        held = b"".join(client.held)
        error = stream_error(held) if b"context_length_exceeded" in held else None
        if (
            error is None
            and not ended.got_data
            and "context" not in plan.done
            and plan.reasks < proxy.cfg.max_reasks
        ):
            error = await ex.window_probe(plan.body)
        report = session.report if ended.error is None else None
        overflow = (up, error) if error is not None else None
    reason = proxy.ask.again(plan, report, chain.calls_emitted, ex.sent, overflow)
    if reason is not None:
        return Again(reason)
    await client.commit()
    if ended.tail:
        await client.write(ended.tail)
    return client.response
