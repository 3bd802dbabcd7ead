"""The proxy's own middlewares: every error in OpenAI's shape, no upstream
key in any whole reply (whatever its status: an upstream may echo its key
in an error object it sends with a 200), and the inbound key check (which
also says whose key it was: the request's tenant)."""

from __future__ import annotations

import logging

from aiohttp import web

from ...errors import RequestError
from ...middleware import Handler
from ..proxy import PROXY
from ..upstream.table import TABLE, TENANT
from .replies import error_type, json_error
from .validate import arrived

#: Headers of the proxy's own HTTP errors kept on the OpenAI-shaped body
#: that replaces aiohttp's (the pool-full 503's ``Retry-After``, a 405's
#: ``Allow``).
KEPT_ERROR_HEADERS = ("Retry-After", "Allow")

#: Routes open without a key unless ``protect_status`` is set.
STATUS_PATHS = frozenset({"/healthz", "/metrics"})

#: Routes always open: an orchestrator's probes carry no key, and they
#: say no more than whether to send requests.
HEALTH_PATHS = frozenset({"/livez", "/readyz"})

#: The operator page (``--ui``) checks keys itself: a browser sends a
#: session cookie, not a bearer key (``server/ui/auth.py``).
UI_PREFIX = "/ui"

log = logging.getLogger("streamfix.server")


@web.middleware
async def errors_mw(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as OpenAI-shaped JSON (a RequestError, aiohttp's HTTP errors,
    a bug of ours), and upstream keys redacted from every whole reply (a
    streamed one is redacted as it is written, ``ClientStream``). The
    routing table in force is noted on the request here, on arrival: the
    request keeps it to its end, whatever a reload does meanwhile; and so
    is the arrival's time (``validate.ARRIVED``)."""
    proxy = request.app[PROXY]
    table = request[TABLE] = proxy.table
    arrived(request)
    try:
        resp = await handler(request)
        if isinstance(resp, web.Response) and table.secrets:
            body = resp.body
            if isinstance(body, bytes):
                out = table.redact(body)
                if out is not body:
                    resp.body = out
        return resp
    except RequestError as exc:
        error = json_error(
            exc.status,
            str(exc),
            exc.type or error_type(exc.status),
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
        answer = json_error(exc.status, message, error_type(exc.status))
        for name in KEPT_ERROR_HEADERS:
            if name in exc.headers:
                answer.headers[name] = exc.headers[name]
        return answer
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
    keys: they show every tenant's models and upstreams. The operator
    page's paths (``--ui``) are left to its own check (``UI_PREFIX``)."""
    path = request.path
    if (path == UI_PREFIX or path.startswith(UI_PREFIX + "/")) and request.app[PROXY].cfg.ui:
        return await handler(request)
    if path in HEALTH_PATHS:
        return await handler(request)
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
