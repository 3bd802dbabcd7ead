"""``POST /v1/chat/completions``: one chat request served through the chain.

The route builds the plan; the reply loop sends it::

    read + validate body (caller.validate) ─► Scope: table, tenant, route
      ─► narrowing.decide (awaited: an embedding row may rank the tools)
      ─► Plan.of: the request's steps (plan.py: named tool, soft required,
         narrowing), the prompt's estimate
      ─► the tenant's limits (state/fleet.py), an upstream slot
      ─► reply.reply: the attempts until one is the reply (Exchange.open:
         each row's steps, pool.send; the chain; asked again with a reason)
      ─► Scope.answer: within --request-timeout, the status counted once

The front doors (``doors.py``) hand their translated bodies to
``serve_chat``. The request's ``model`` picks its rows in the request's
table (``upstream/table.py``): failover and asking again stay within
them. With ``--request-timeout`` the whole request is bounded: a 504
before the reply began, an error event (``request_timeout``) after.

*Cancellation paths* (each closes the upstream response, in ``finally``):
the client disconnects (the handler is cancelled when the server runs
with ``handler_cancellation=True``, as ``streamfix serve`` does, and a
closing transport is noticed at the next upstream read otherwise); a
write to the client fails; the chain cuts a loop (``session.finished``);
the upstream dies or times out (an error event goes to the client).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ...wire import Door
from .. import narrowing
from ..caller.validate import read_request, validate_chat
from ..plan import Plan
from ..proxy import PROXY
from ..reply import reply
from ..scope import Scope
from ..upstream.table import TENANT, tenant_label


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
    if door is not None:  # the usage a door reports when the upstream sends none
        door.input_estimate = plan.prompt_tokens
    ticket = await proxy.fleet.admit(
        scope.tenant, scope.rows, body.get("model"), plan.admitted_tokens
    )
    if isinstance(ticket, web.Response):  # a tenant's limit (state/fleet.py)
        scope.count(ticket.status, stream)
        return ticket
    scope.ticket = ticket
    try:
        async with proxy.slot():
            client = scope.client(request, door.encoder() if door else None) if stream else None
            return await scope.answer(reply(scope, plan, client), client)
    finally:
        proxy.fleet.finish(ticket)
