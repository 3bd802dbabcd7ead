"""``GET /v1/models`` and ``GET /v1/models/{model}``: passed through to an
upstream."""

from __future__ import annotations

from urllib.parse import quote

import aiohttp
from aiohttp import web

from .proxy import PROXY
from .replies import failure_response, json_error, read_reply
from .upstreams import UpstreamFailure, response_headers


async def models(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    model = request.match_info.get("model")
    path = "/models"
    if model is not None:
        # The model id is data, not a path: ``..`` segments (raw or
        # percent-encoded) would reach any GET endpoint of the upstream
        # host (llama.cpp's /slots shows other users' prompts).
        if any(seg in ("", ".", "..") for seg in model.split("/")):
            raise web.HTTPNotFound(text=f"no model {model!r}")
        path += "/" + quote(model, safe="/:@")
    async with proxy.slot():
        try:
            up, resp = await proxy.send("GET", path, request, lambda up: None)
        except UpstreamFailure as f:
            return failure_response(f)
        try:
            body = await read_reply(resp)
            out = web.Response(
                status=resp.status, body=body, headers=response_headers(resp.headers)
            )
            out.content_type = resp.content_type
            proxy.count("models", False, resp.status)
            return out
        except (TimeoutError, aiohttp.ClientError) as exc:
            proxy.upstream_error(up, "died_midstream")
            return json_error(
                502, f"upstream {up.name} failed: {type(exc).__name__}", "upstream_error"
            )
        finally:
            resp.close()
