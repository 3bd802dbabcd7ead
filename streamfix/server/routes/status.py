"""``GET /healthz`` (the upstream rows, what was probed and learned, and
each row's state) and ``GET /metrics`` (Prometheus text format). Both are
open unless ``protect_status`` (``caller.guards.auth_mw``).

``/healthz``'s ``status``: ``ok`` when every row can serve (its last check
found it up, or it was not checked yet), ``degraded`` when some cannot,
``down`` with HTTP 503 when none can: what a readiness check should see.
Each row carries its ``state`` (``upstream.diagnose.RowCheck``) and, when
something is wrong, the ``problem`` in words with its hint."""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from ..metrics import CONTENT_TYPE_LATEST
from ..proxy import PROXY
from ..scope import Scope


async def healthz(request: web.Request) -> web.Response:
    now = time.monotonic()
    proxy = request.app[PROXY]
    rows = Scope.of(request, "healthz").table.upstreams
    checks = [proxy.check_of(u) for u in rows]
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
            "state": c.state,
            **({"problem": c.problem} if c.problem else {}),
            **({"serves": list(c.models)} if c.models else {}),
        }
        for u, c in zip(rows, checks, strict=True)
    ]
    serving = sum(c.can_serve for c in checks)
    status = "ok" if serving == len(checks) else "degraded" if serving else "down"
    return web.json_response(
        {"status": status, "upstreams": ups},
        status=503 if status == "down" else 200,
        dumps=lambda o: orjson.dumps(o).decode(),
    )


async def metrics(request: web.Request) -> web.Response:
    resp = web.Response(body=request.app[PROXY].metrics.render())
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp
