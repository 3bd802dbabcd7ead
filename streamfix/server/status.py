"""``GET /healthz`` (the upstreams and what was probed) and ``GET /metrics``
(Prometheus text format)."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from .metrics import CONTENT_TYPE_LATEST
from .proxy import PROXY


async def healthz(request: web.Request) -> web.Response:
    proxy = request.app[PROXY]
    now = time.monotonic()
    ups = [
        {
            "url": u.name,
            "resting": u.resting(now),
            "window": u.window,
            "engine": u.info.engine,
            "reasoning": u.info.reasoning,
        }
        for u in proxy.pool.upstreams
    ]
    return web.json_response(
        {"status": "ok", "upstreams": ups}, dumps=lambda o: orjson.dumps(o).decode()
    )


async def metrics(request: web.Request) -> web.Response:
    resp = web.Response(body=request.app[PROXY].metrics.render())
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp
