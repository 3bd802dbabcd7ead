"""The proxy's front doors for other wire APIs: thin aiohttp handlers.

Each door handler reads the body, has ``streamfix.wire`` translate it to
a chat-completions body (a RequestError is a 400 in the door's own error
shape), and hands both to ``routes.chat.serve_chat``: the same budgets,
failover, asking again and repair chain as ``/v1/chat/completions``, with
the reply encoded by the door. An image for a model that takes none
(no row it may go to has ``vision``) is replaced by a note to the model
and counted (``streamfix_dropped_parts_total{door,part}``, with the parts
the translation left out: docs/doors.md); a chat client's images go on
as sent (it speaks the upstream's API: the upstream's error is its answer).
``door_errors_mw`` gives every error
answered on a door's path (the proxy's own, an upstream's relayed one, a
401 from the key check) that door's error shape: Anthropic's on the
Messages paths, OpenAI's on the Responses path (an upstream's bare
``{"error": "text"}``, as Ollama and llama.cpp answer, reshaped too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from ...errors import RequestError
from ...middleware import Handler
from ...wire import Door
from ...wire.messages import MessagesDoor, reshape_error
from ...wire.responses import ResponsesDoor
from ...wire.responses import reshape_error as reshape_openai_error
from ...wire.turn import omit_images
from .. import record
from ..caller.validate import loads_request, read_body, validate_chat
from ..proxy import PROXY, Proxy
from ..scope import Scope
from ..upstream.budget import estimate_prompt_tokens
from ..upstream.table import tenant_label, tenant_of
from .chat import refused_early, serve_chat

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
COUNT_TOKENS = "/v1/messages/count_tokens"

#: Door path -> how an OpenAI-shaped error body becomes the door's.
ERROR_SHAPES: dict[str, Callable[[int, bytes], bytes]] = {
    MESSAGES: reshape_error,
    COUNT_TOKENS: reshape_error,
    RESPONSES: reshape_openai_error,
}


@web.middleware
async def door_errors_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors on a door's path in that door's shape (outermost middleware)."""
    resp = await handler(request)
    reshape = ERROR_SHAPES.get(request.path)
    if (
        reshape is not None
        and resp.status >= 400
        and isinstance(resp, web.Response)
        and isinstance(resp.body, bytes)
    ):
        resp.body = reshape(resp.status, resp.body)
        resp.content_type = "application/json"
    return resp


async def _json_body(request: web.Request) -> Any:
    return loads_request(await read_body(request.app[PROXY], request))


def door_handler(make: Callable[[Any], Door], endpoint: str) -> Handler:
    """A route handler serving requests translated by ``make`` (counted
    as ``endpoint`` in the metrics)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        proxy: Proxy = request.app[PROXY]
        refused = refused_early(request, endpoint)
        if refused is not None:
            return refused
        try:
            door = make(await _json_body(request))
            validate_chat(door.chat_body)
        except RequestError as exc:
            proxy.count(endpoint, False, exc.status, tenant_label(request))
            raise
        if not _takes_images(proxy, request, door.chat_body.get("model")):
            omit_images(door.chat_body, door.omitted)
        proxy.metrics.count_report(door.dropped)
        proxy.metrics.count_dropped_parts(endpoint, door.omitted)
        record.door(endpoint, door.chat_body)
        return await serve_chat(request, door.chat_body, door)

    return handle


def _takes_images(proxy: Proxy, request: web.Request, model: Any) -> bool:
    """Whether every row the request may go to takes images (``vision``,
    configured or probed): failover may pick any of them. A model not
    found is answered by the chat path; nothing to omit for it."""
    try:
        route = proxy.table.route("chat", model, tenant_of(request))
    except RequestError:
        return True
    return all(up.takes_images(up.served(model)) for up in route.rows)


async def count_tokens(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: the prompt's size as the proxy
    estimates it for budgets (``upstream.budget.estimate_prompt_tokens``,
    scaled by what the model's counts on its first row taught it); no
    upstream call."""
    body = await _json_body(request)
    if isinstance(body, dict):
        body = {**body, "max_tokens": 1, "stream": False}
    chat = MessagesDoor(body).chat_body
    scope = Scope.of(request, "count_tokens")
    row = scope.table.route("chat", chat.get("model"), scope.tenant).rows[0]
    scale = row.token_scale(row.served(chat.get("model")))
    tokens = max(1, round(estimate_prompt_tokens(chat) * scale))
    return web.json_response({"input_tokens": tokens})


def add_doors(app: web.Application, wrap: Callable[[Handler], Handler] | None = None) -> None:
    """The door routes (the proxy is ``app[PROXY]``); ``door_errors_mw``
    must be among the app's middlewares, outermost. ``wrap``: around each
    door's handler (``--record``)."""
    for path, door in ((MESSAGES, MessagesDoor), (RESPONSES, ResponsesDoor)):
        handler = door_handler(door, door.endpoint)
        app.router.add_post(path, wrap(handler) if wrap is not None else handler)
    app.router.add_post(COUNT_TOKENS, count_tokens)
