"""The OpenAI-compatible proxy: ``create_app(config) -> web.Application``.

The layers, in the order a request moves through them:

- ``caller/``: the key check and errors in OpenAI's shape (``guards``),
  the body read and checked (``validate``);
- ``routes/``: one module per endpoint (``chat``, ``doors`` for
  ``/v1/messages`` and ``/v1/responses``, ``embeddings``, ``completions``,
  ``models``, ``status``), each building the request's ``scope.Scope``;
- ``plan.py``: a chat request's side as ordered steps, what goes upstream
  and why;
- ``exchange.py``: one upstream exchange (the plan through the row's
  steps, send, record, read or pump, how it ended), with ``reask.py``
  deciding whether to ask again;
- ``upstream/``: the rows for a model (``table``), choosing and sending
  (``pool``), token arithmetic (``budget``), engines' probes and error
  texts (``engines``), reading a body (``body``);
- back to the caller: its streamed response and hold-back
  (``caller/stream``), error bodies and relayed errors (``caller/replies``).

``proxy.py`` is the app's state (config, the table in force, probes,
reloading, slots, metrics, the tracer); ``record.py``, ``metrics.py`` and
``tracing.py`` (OpenTelemetry spans, with ``--traces``) observe; ``ui/``
is the operator page (``--ui``), which reads that state.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..middleware import Handler
from . import record
from .access import AccessLog
from .caller.guards import auth_mw, errors_mw
from .config import ServerConfig
from .proxy import PROXY, ConfigSource, Proxy
from .requestid import add_request_ids, request_id_mw
from .routes.chat import chat
from .routes.completions import completions
from .routes.doors import add_doors, door_errors_mw
from .routes.embeddings import embeddings
from .routes.misroute import wrong_base_mw
from .routes.models import models
from .routes.status import healthz, livez, metrics, readyz
from .upstream.table import TABLE

#: aiohttp's keep-alive timeout when ``client_timeout`` allows more (its
#: ``web.run_app`` default): an idle kept-alive connection is closed then.
KEEPALIVE_TIMEOUT = 75.0

#: Seconds a client answered before its whole body was read (a 408, a 413,
#: a refused key) has to take that answer before its connection is closed;
#: aiohttp reads and discards the rest meanwhile (its default is 10 s, each
#: slow client holding a connection that much longer).
LINGERING_TIME = 2.0


def run_options(config: ServerConfig) -> dict[str, Any]:
    """The keywords to run the app with (``web.run_app``, ``web.AppRunner``):
    handlers cancelled when their client disconnects, and the time a client
    has for a request's headers. aiohttp has no header-read timeout of its
    own; its keep-alive timeout closes a connection on which no complete
    request has arrived in that time, the first included, so it is set to
    ``client_timeout`` (at most ``KEEPALIVE_TIMEOUT``). The body's time is
    bounded by the handlers (``caller.validate.read_body``). The access
    log's line is ``access.AccessLog``'s."""
    limit = config.client_timeout
    return {
        "access_log_class": AccessLog,
        "handler_cancellation": True,
        "keepalive_timeout": min(limit, KEEPALIVE_TIMEOUT) if limit > 0 else KEEPALIVE_TIMEOUT,
        "lingering_time": LINGERING_TIME,
    }


async def redact_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Upstream keys out of every header the proxy writes, whoever wrote
    it (a relayed upstream header, a relayed error's, the proxy's own
    answer): the last moment before the headers leave."""
    table = request.get(TABLE)
    redact = table.redact if table is not None else None
    if not redact:
        return
    headers = response.headers
    if all(redact.text(v) is v for v in headers.values()):
        return
    kept = [(k, redact.text(v)) for k, v in headers.items()]
    headers.clear()
    for k, v in kept:
        headers.add(k, v)


def create_app(config: ServerConfig, source: ConfigSource | None = None) -> web.Application:
    """The proxy as an aiohttp application. Run it with ``run_options``
    (``web.run_app`` / ``AppRunner`` keywords): ``handler_cancellation=True``
    so that a client disconnect cancels the upstream request at once, and
    the bound on a client's request headers.
    ``source`` reads the configuration again: given, SIGHUP reloads the
    routing table from it (``Proxy.reload``)."""
    proxy = Proxy(config, source)
    app = web.Application(
        client_max_size=config.body_limit,
        middlewares=[request_id_mw, door_errors_mw, errors_mw, auth_mw, wrong_base_mw],
    )
    add_request_ids(app)
    app[PROXY] = proxy
    app.cleanup_ctx.append(proxy.lifecycle)
    app.cleanup_ctx.append(proxy.fleet.lifecycle)
    app.on_response_prepare.append(redact_headers)
    lifecycle = getattr(proxy.activity, "lifecycle", None)  # --ui with --state
    if lifecycle is not None:
        app.cleanup_ctx.append(lifecycle)
    recorder = record.Recorder.of(config, proxy.metrics)

    def recorded(handler: Handler) -> Handler:
        return handler if recorder is None else recorder.wrap(handler)

    if recorder is not None:  # --record DIR: every route that reaches an upstream
        app[record.RECORDER] = recorder
        app.cleanup_ctx.append(recorder.lifecycle)
    app.router.add_post("/v1/chat/completions", recorded(chat))
    add_doors(app, recorded)
    app.router.add_post("/v1/embeddings", recorded(embeddings))
    app.router.add_post("/v1/completions", recorded(completions))
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    if config.ui:  # --ui: the operator page (its own key check, ui/auth.py)
        from .ui.routes import add_ui

        add_ui(app, proxy)
    return app


def app_from_env() -> web.Application:
    """The proxy configured from ``STREAMFIX_*`` variables (and
    ``STREAMFIX_CONFIG``), for process managers that import an app::

        STREAMFIX_UPSTREAM=http://127.0.0.1:8080/v1 gunicorn \\
            'streamfix.server.app:app_from_env()' \\
            --worker-class aiohttp.GunicornWebWorker --workers 4 --bind 127.0.0.1:8787

    (gunicorn's aiohttp worker does not cancel handlers on disconnect; the
    proxy then notices a gone client at the next upstream read.)
    """
    import os

    from .config import ConfigError, build_config

    cfg = build_config({}, os.environ)
    if not cfg.upstreams:
        raise ConfigError("no upstream: set STREAMFIX_UPSTREAM or [[upstream]] in STREAMFIX_CONFIG")
    return create_app(cfg)
