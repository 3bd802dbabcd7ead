"""``POST /v1/completions``: the legacy text-completions API, passed through
to the request's chat rows with one repair, the repetition cutter
(``streamfix.text_session``): a looping choice ends with
``finish_reason: "length"`` and the upstream request is closed. Same
routing, failover, slots, limits and error shapes as chat; no budget (the
prompt is text, not messages) and nothing held back, so nothing is asked
again: a chunk goes to the client as soon as it is read.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ... import jsoncodec
from ...sse import DONE_EVENT, encode_data
from ...text_session import CompletionSession
from ..caller.stream import ClientStream
from ..caller.validate import read_request, validate_completion
from ..exchange import Exchange
from ..proxy import PROXY
from ..scope import Scope

ENDPOINT = "completions"
PATH = "/completions"


async def completions(request: web.Request) -> web.StreamResponse:
    body = await read_request(request.app[PROXY], request, ENDPOINT, validate_completion)
    stream = body.get("stream") is True
    scope = Scope.of(request, ENDPOINT)
    scope.route("chat", body.get("model"), stream)
    client = scope.client(request)
    async with scope.proxy.slot():
        return await scope.answer(_serve(scope, body, client), client if stream else None)


async def _serve(scope: Scope, body: dict[str, Any], client: ClientStream) -> web.StreamResponse:
    ex = await Exchange.open(scope, PATH, body)
    session = CompletionSession(body)
    try:
        if not ex.ok:
            return ex.relayed(await ex.error_body())
        if body.get("stream") is not True or ex.resp.content_type == "application/json":
            return _whole(ex, session, body, await ex.whole())
        await client.prepare(ex.headers)
        client.committed = True
        ended = await ex.pump(session, client, lambda: True)
        if ended.tail:
            await client.write(ended.tail)
        return client.response
    finally:
        ex.close()
        scope.proxy.count_report(session.report, scope.model)


def _whole(
    ex: Exchange, session: CompletionSession, body: dict[str, Any], raw: bytes
) -> web.StreamResponse:
    """A non-streamed reply (or one that ignored ``stream``), cut whole."""
    obj = ex.completion(raw)
    fixed = ex.scope.named(session.complete(obj))
    if body.get("stream") is True:  # the client asked for a stream: one event
        out = web.Response(body=encode_data(jsoncodec.dumps(fixed)) + DONE_EVENT)
        out.content_type = "text/event-stream"
        return out
    out = web.Response(body=jsoncodec.dumps(fixed), headers=ex.headers)
    out.content_type = "application/json"
    return out
