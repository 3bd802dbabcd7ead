"""``GET /healthz`` (the upstream rows, what was probed and learned) and ``GET
/metrics`` (Prometheus text format). Both are open unless
``protect_status`` (``caller.guards.auth_mw``)."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from ..metrics import CONTENT_TYPE_LATEST
from ..proxy import PROXY
from ..scope import Scope


async def healthz(request: web.Request) -> web.Response:
    now = time.monotonic()
    ups = [
        {
            "url": u.name,
            "model": u.cfg.model,
            "name": u.cfg.served,
            "kind": u.cfg.kind,
            "resting": u.resting(now),
            # a named row: what is known of its model; a catch-all row:
            # what was configured or probed (what it learned is per client
            # name, and those names are not listed here)
            "window": u.window if u.cfg.model is None else u.window_for(u.cfg.model),
            "engine": u.info.engine,
            "reasoning": u.info.reasoning if u.cfg.model is None else u.reasons(u.cfg.model),
            "learned_models": len(u.learned),
            **({"dimensions": u.dimensions} if u.cfg.kind == "embedding" else {}),
        }
        for u in Scope.of(request, "healthz").table.upstreams
    ]
    return web.json_response(
        {"status": "ok", "upstreams": ups}, dumps=lambda o: orjson.dumps(o).decode()
    )


async def metrics(request: web.Request) -> web.Response:
    resp = web.Response(body=request.app[PROXY].metrics.render())
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp
