"""Every response names its request (``server/requestid.py``): the
client's sane ``X-Request-Id`` kept, another made; an upstream's own id,
relayed, stays in ``X-Request-Id`` (``test_proxy``)."""

from __future__ import annotations

import re

import aiohttp

from .support.upstream_fake import AppServer, FakeUpstream, proxy_app


async def test_each_response_carries_the_request_id() -> None:
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url)) as px,
        aiohttp.ClientSession() as s,
    ):
        async with s.get(px.root + "/healthz") as r:
            made = r.headers["X-Streamfix-Request-Id"]
            assert re.fullmatch(r"req_[0-9a-f]{16}", made)
            assert r.headers["X-Request-Id"] == made
        async with s.get(px.root + "/healthz", headers={"X-Request-Id": "abc-1"}) as r:
            assert r.headers["X-Streamfix-Request-Id"] == "abc-1"
        async with s.get(px.root + "/nowhere", headers={"X-Request-Id": "<x>" * 30}) as r:
            assert r.status == 404
            assert r.headers["X-Streamfix-Request-Id"].startswith("req_")  # not the client's
