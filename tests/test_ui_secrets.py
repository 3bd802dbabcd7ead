"""The operator page never shows an upstream key, whatever characters it
holds (issue 37, defect 16): a probe's result is redacted before it is
escaped for HTML, and a key escaped as the page escapes it is redacted too.

The proxy is the real app on loopback with ``--ui``.
"""

from __future__ import annotations

import dataclasses
import html
import time

import aiohttp
import pytest

from streamfix.server.app import create_app
from streamfix.server.config import ServerConfig, parse_upstream
from streamfix.server.proxy import PROXY
from streamfix.server.ui.probes import ProbeRun
from streamfix.server.ui.routes import UI
from streamfix.server.upstream.secrets import Secrets

from .support.upstream_fake import AppServer, FakeUpstream

ADMIN = "sk-admin-0123456789"
KEYS = ["sk-a&b1234567890", "sk-c'd1234567890", "sk-e<f>1234567890", 'sk-g"h1234567890']


@pytest.mark.parametrize("key", KEYS)
async def test_the_probe_view_never_shows_the_key(key: str) -> None:
    async with FakeUpstream() as up:
        # the key set on the row itself (a URL fragment cannot hold ``&``)
        row = dataclasses.replace(parse_upstream(f"{up.url}#model=m"), api_key=key)
        cfg = ServerConfig(upstreams=[row], api_keys=[ADMIN], ui=True, probe_interval=0)
        app = create_app(cfg)
        async with AppServer(app) as px:
            identity = app[PROXY].table.upstreams[0].cfg.identity
            run = ProbeRun("row", time.time(), error=f"the upstream said: Incorrect API key {key}")
            run.ended = time.time()
            app[UI].probes.runs[identity] = run
            jar = aiohttp.CookieJar(unsafe=True)
            async with aiohttp.ClientSession(cookie_jar=jar) as s:
                async with s.post(px.root + "/ui/login", data={"key": ADMIN}) as r:
                    assert r.status == 200
                async with s.get(px.root + "/ui/probe/0") as r:
                    status, text = r.status, await r.text()
    assert status == 200 and "Incorrect API key [redacted]" in text
    assert key not in text and html.escape(key, quote=True) not in text


@pytest.mark.parametrize("key", KEYS)
def test_a_key_escaped_for_html_is_redacted(key: str) -> None:
    page = f"<p>{html.escape('key ' + key, quote=True)}</p>".encode()
    assert Secrets([key.encode()])(page) == b"<p>key [redacted]</p>"
