"""A request to a path that would be right with ``/v1`` added or removed
gets a 404 that says so, in its door's error shape.

The two mistakes a client's base URL makes: an OpenAI client given
``http://HOST:PORT`` posts ``/chat/completions`` (its base URL must end in
``/v1``); an Anthropic client given ``http://HOST:PORT/v1`` posts
``/v1/v1/messages`` (it adds ``/v1`` itself). aiohttp's router says only
``Not Found``; this middleware asks the router whether the path with
``/v1`` added, or one ``/v1`` removed, is a route of the same method, and
if so answers with the path to use, in OpenAI's error shape, or
Anthropic's for a Messages path (``doors.ERROR_SHAPES``). Only for routes
under ``/v1/`` (not ``/healthz``, ``/metrics`` or the page); the router is
asked only once a request was not found, never on a routed one.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from ...middleware import Handler
from ..caller.replies import json_error
from .doors import ERROR_SHAPES

V1: Final = "/v1"


async def _routed(request: web.Request, path: str) -> bool:
    """Whether ``path`` is a route for ``request``'s method."""
    found = await request.app.router.resolve(request.clone(rel_url=path))
    return found.http_exception is None


async def right_path(request: web.Request) -> str | None:
    """The path ``request`` meant, with ``/v1`` added or one removed, if
    that is an API route (``/v1/…``) of its method."""
    path = request.path
    tries = [V1 + path] if not path.startswith(V1 + "/") else []
    if path.startswith(V1 + V1 + "/"):
        tries.append(path.removeprefix(V1))
    for candidate in tries:
        if candidate.startswith(V1 + "/") and await _routed(request, candidate):
            return candidate
    return None


def why(request: web.Request, right: str) -> str:
    """The 404's message: the path to use and what to change."""
    head = f"no route {request.method} {request.path}; {right} is one"
    if len(right) > len(request.path):
        return f"{head}: the client's base URL should end in /v1 (http://HOST:PORT/v1)"
    return (
        f"{head}: /v1 is in the path twice, this client adds /v1 itself, so its base URL "
        "should not end in /v1 (http://HOST:PORT)"
    )


@web.middleware
async def wrong_base_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A 404 that names the path with ``/v1`` added or removed (innermost)."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        right = await right_path(request)
        if right is None:
            raise
    answer = json_error(404, why(request, right), "invalid_request_error", code="unknown_url")
    reshape = ERROR_SHAPES.get(right)
    if reshape is not None and isinstance(answer.body, bytes):
        answer.body = reshape(404, answer.body)
    return answer
