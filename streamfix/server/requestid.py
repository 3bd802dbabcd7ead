"""Each request's id: the client's ``X-Request-Id`` when it sent a sane
one, else one made here; answered as ``X-Streamfix-Request-Id`` on every
response, and as ``X-Request-Id`` too when the response has none (an
upstream's own, relayed, stays: the OpenAI SDK shows that header as
``_request_id``); current for the request's task (``current()``), so that
what is observed deep in a reply (the slowest reads, ``metrics.SlowReads``)
can say which request it was.
"""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar
from typing import Final

from aiohttp import web

from ..middleware import Handler

HEADER: Final = "X-Request-Id"
OWN_HEADER: Final = "X-Streamfix-Request-Id"

#: A client's id is kept only when it is this (no header or page can be
#: hurt by it; longer or stranger ones are replaced).
SANE: Final = re.compile(r"[A-Za-z0-9._:-]{1,64}")

KEY: Final = web.RequestKey("streamfix_request_id", str)

_CURRENT: ContextVar[str | None] = ContextVar("streamfix_request_id", default=None)


def current() -> str | None:
    """The id of the request being served in this task, if any."""
    return _CURRENT.get()


def made() -> str:
    return "req_" + secrets.token_hex(8)


@web.middleware
async def request_id_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request's id set for its task (outermost middleware)."""
    given = request.headers.get(HEADER, "")
    rid = request[KEY] = given if SANE.fullmatch(given) else made()
    token = _CURRENT.set(rid)
    try:
        return await handler(request)
    finally:
        _CURRENT.reset(token)


async def answer_with_id(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the id on every response, streamed ones too."""
    rid = request.get(KEY)
    if rid is not None:
        response.headers[OWN_HEADER] = rid
        response.headers.setdefault(HEADER, rid)


def add_request_ids(app: web.Application) -> None:
    """The header on ``app``'s responses (``request_id_mw`` must be among
    its middlewares, outermost)."""
    app.on_response_prepare.append(answer_with_id)
