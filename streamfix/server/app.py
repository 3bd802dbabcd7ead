"""The OpenAI-compatible proxy: ``create_app(config) -> web.Application``.

Routes: ``POST /v1/chat/completions`` (``chat.py``), the front doors
``/v1/messages`` and ``/v1/responses`` (``doors.py``, served by the chat
path with the reply encoded by the door), ``POST /v1/embeddings``
(``embeddings.py``), ``POST /v1/completions`` (``completions.py``),
``GET /v1/models`` (``models.py``), ``GET /healthz`` and ``GET /metrics``
(``status.py``). Choosing the rows for a request's model is the routing
table (``table.py``); what the endpoints share, the table in force,
slots, metrics and sending, is the ``Proxy`` (``proxy.py``); asking
again is ``attempts.py``; the client's
response with its hold-back buffer is ``client.py``; error bodies and
relayed errors are ``replies.py``; the middlewares are ``guards.py``.
"""

from __future__ import annotations

from aiohttp import web

from . import record
from .chat import chat
from .completions import completions
from .config import ServerConfig
from .doors import add_doors, door_errors_mw
from .embeddings import embeddings
from .guards import auth_mw, errors_mw
from .models import models
from .proxy import PROXY, ConfigSource, Handler, Proxy
from .status import healthz, metrics


def create_app(config: ServerConfig, source: ConfigSource | None = None) -> web.Application:
    """The proxy as an aiohttp application. Run it with
    ``handler_cancellation=True`` (``web.run_app`` / ``AppRunner`` keyword)
    so that a client disconnect cancels the upstream request at once.
    ``source`` reads the configuration again: given, SIGHUP reloads the
    routing table from it (``Proxy.reload``)."""
    proxy = Proxy(config, source)
    app = web.Application(
        client_max_size=config.body_limit, middlewares=[door_errors_mw, errors_mw, auth_mw]
    )
    app[PROXY] = proxy
    app.cleanup_ctx.append(proxy.lifecycle)
    recorder = record.Recorder.of(config, proxy.metrics)
    handler: Handler = chat
    if recorder is not None:  # --record DIR
        app[record.RECORDER] = recorder
        app.cleanup_ctx.append(recorder.lifecycle)
        handler = recorder.wrap(handler)
    app.router.add_post("/v1/chat/completions", handler)
    add_doors(app)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
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
