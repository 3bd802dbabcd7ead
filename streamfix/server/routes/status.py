"""``GET /healthz`` (the upstream rows and what was probed) and ``GET
/metrics`` (Prometheus text format). Both are open unless
``protect_status`` (``guards.auth_mw``)."""

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
            "window": u.window,
            "engine": u.info.engine,
            "reasoning": u.info.reasoning,
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
