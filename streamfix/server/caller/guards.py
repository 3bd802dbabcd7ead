"""The proxy's own middlewares: every error in OpenAI's shape with no
upstream key in it, and the inbound key check (which also says whose key
it was: the request's tenant)."""

from __future__ import annotations

import logging

from aiohttp import web

from ...errors import RequestError
from ...middleware import Handler
from ..proxy import PROXY
from ..upstream.table import TABLE, TENANT
from .replies import STATUS_TYPES, json_error
from .validate import arrived

#: Routes open without a key unless ``protect_status`` is set.
STATUS_PATHS = frozenset({"/healthz", "/metrics"})

log = logging.getLogger("streamfix.server")


@web.middleware
async def errors_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as OpenAI-shaped JSON (a RequestError, aiohttp's HTTP errors,
    a bug of ours), and upstream keys redacted from every error body. The
    routing table in force is noted on the request here, on arrival: the
    request keeps it to its end, whatever a reload does meanwhile; and so
    is the arrival's time (``validate.ARRIVED``)."""
    proxy = request.app[PROXY]
    table = request[TABLE] = proxy.table
    arrived(request)
    try:
        resp = await handler(request)
        if resp.status >= 400 and isinstance(resp, web.Response):
            body = resp.body
            if isinstance(body, bytes) and table.secrets:
                out = table.redact(body)
                if out != body:
                    resp.body = out
        return resp
    except RequestError as exc:
        error = json_error(
            exc.status,
            str(exc),
            exc.type or STATUS_TYPES.get(exc.status, "invalid_request_error"),
            code=exc.code,
            param=exc.param,
        )
        if exc.status == 408:  # a client too slow to send its request: not kept
            error.force_close()
        return error
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.text or exc.reason
        if exc.status == 413:
            message = f"request body too large (limit {proxy.cfg.body_limit} bytes)"
        return json_error(
            exc.status, message, STATUS_TYPES.get(exc.status, "invalid_request_error")
        )
    except Exception:
        # A bug of ours: an OpenAI-shaped 500 rather than aiohttp's plain
        # text one (a streamed reply already begun ends in ``exchange.Exchange.pump``).
        if request.writer.output_size > 0:
            raise
        log.exception("internal error on %s %s", request.method, request.path)
        return json_error(500, "streamfix internal error (see the proxy log)", "internal_error")


@web.middleware
async def auth_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With ``--api-key`` or tenants, every route needs one of the keys
    (``Authorization: Bearer`` or Anthropic's ``x-api-key``); /healthz and
    /metrics only with ``protect_status``, and then one of the proxy's own
    keys: they show every tenant's models and upstreams."""
    table = request[TABLE]
    status_route = request.path in STATUS_PATHS
    if not table.keys or (status_route and not table.protect_status):
        return await handler(request)
    header = request.headers.get("Authorization", "")
    token = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
    if not token:  # Anthropic clients send their key as x-api-key
        token = request.headers.get("x-api-key", "").strip().encode()
    ok, tenant = table.authenticate(token)
    if not ok:
        return json_error(
            401, "invalid or missing API key", "authentication_error", "invalid_api_key"
        )
    if status_route and tenant is not None:
        return json_error(403, "this route needs one of the proxy's own keys", "permission_error")
    if tenant is not None:
        request[TENANT] = tenant
    return await handler(request)
