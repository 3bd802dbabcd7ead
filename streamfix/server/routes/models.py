"""``GET /v1/models`` and ``GET /v1/models/{model}``.

With public names in the table (``model=`` rows), the proxy answers
itself: the names the key may use, each with what was probed of its rows
(``context_window``; an embedding model's ``dimensions``) under a
``streamfix`` field. Without any (the one-upstream setup), the request is
passed through to an upstream as before.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from ...errors import RequestError
from ..exchange import Exchange
from ..scope import Scope
from ..upstream.pool import Upstream
from ..upstream.table import model_not_found

#: The ``created`` of every listed model: the proxy does not know when the
#: upstream's model was made, and a made-up time would be worse than none.
CREATED = 0


def model_card(name: str, kind: str, rows: list[Upstream]) -> dict[str, Any]:
    """One public name as OpenAI lists a model, with what was probed: the
    smallest window among its rows (a request may go to any of them)."""
    windows = [w for u in rows if (w := u.window_for(u.served(name))) is not None]
    dims = [u.dimensions for u in rows if u.dimensions is not None]
    info: dict[str, Any] = {"kind": kind, "context_window": min(windows) if windows else None}
    if kind == "embedding":
        info["dimensions"] = dims[0] if dims else None
    return {
        "id": name,
        "object": "model",
        "created": CREATED,
        "owned_by": "streamfix",
        "streamfix": info,
    }


def _listed(scope: Scope, model: str | None) -> web.Response:
    cards = [model_card(n, k, rows) for n, k, rows in scope.table.visible(scope.tenant)]
    if model is None:
        body: dict[str, Any] = {"object": "list", "data": cards}
    else:
        found = [c for c in cards if c["id"] == model]
        if not found:
            raise model_not_found(model)
        body = found[0]
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def models(request: web.Request) -> web.StreamResponse:
    scope = Scope.of(request, "models")
    model = request.match_info.get("model")
    if scope.table.has_names:
        try:
            out = _listed(scope, model)
        except RequestError as exc:
            scope.count(exc.status)
            raise
        scope.count(200)
        return out
    path = "/models"
    if model is not None:
        # The model id is data, not a path: ``..`` segments (raw or
        # percent-encoded) would reach any GET endpoint of the upstream
        # host (llama.cpp's /slots shows other users' prompts).
        if any(seg in ("", ".", "..") for seg in model.split("/")):
            raise web.HTTPNotFound(text=f"no model {model!r}")
        path += "/" + quote(model, safe="/:@")
    async with scope.proxy.slot():
        return await scope.answer(_relay(scope, path))


async def _relay(scope: Scope, path: str) -> web.StreamResponse:
    ex = await Exchange.open(
        scope, path, None, method="GET", rows=scope.table.catch_all.get("chat")
    )
    body = await ex.whole()
    out = web.Response(status=ex.resp.status, body=body, headers=ex.headers)
    out.content_type = ex.resp.content_type
    return out
