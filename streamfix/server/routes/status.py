"""``GET /healthz`` (the upstream rows, what was probed and learned, and
each row's state) and ``GET /metrics`` (Prometheus text format). Both are
open unless ``protect_status`` (``caller.guards.auth_mw``).

``/healthz``'s ``status``: ``ok`` when every row can serve (its last check
found it up, or it was not checked yet), ``degraded`` when some cannot,
``down`` with HTTP 503 when none can: what a readiness check should see.
Each row carries its ``state`` (``upstream.diagnose.RowCheck``) and, when
something is wrong, the ``problem`` in words with its hint.

For orchestrators and load balancers: ``GET /livez`` answers 200 while the
process answers at all (an upstream that is down is no reason to restart
the proxy); ``GET /readyz`` answers 200 when the proxy should be sent
requests (a table loaded, not draining, at least one row that can serve)
and 503 with the ``reason`` otherwise; while the shared state (``--state``)
is unreachable it says ``degraded`` with a 200 (requests are still
served, with this process's own facts and limits)."""

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


async def livez(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    proxy = request.app[PROXY]
    rows = proxy.table.upstreams
    reason = None
    if proxy.draining is not None:
        reason = f"draining ({proxy.draining})"
    elif not rows:
        reason = "no upstream row"
    elif not any(proxy.check_of(u).can_serve for u in rows):
        reason = "no upstream row can serve"
    if reason is not None:
        return web.json_response({"status": "unready", "reason": reason}, status=503)
    down = proxy.fleet.down
    if down is not None:
        return web.json_response({"status": "degraded", "reason": f"shared state: {down}"})
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    resp = web.Response(body=request.app[PROXY].metrics.render())
    resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return resp
