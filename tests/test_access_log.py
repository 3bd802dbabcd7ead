"""The access log (``server/access.py``): one short line per request on
``streamfix.access``, without the query string, with the request id."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from aiohttp import web

from streamfix.server.access import AccessLog
from streamfix.server.app import run_options
from streamfix.server.proxy import PROXY
from streamfix.server.requestid import OWN_HEADER

from .support.upstream_fake import FakeUpstream, proxy_app

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}


async def _serve(app: web.Application, logger: logging.Logger) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=logger, **run_options(app[PROXY].cfg))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


@pytest.mark.asyncio
async def test_a_line_per_request_without_the_query(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("streamfix.access")
    caplog.set_level(logging.INFO, logger="streamfix.access")
    async with FakeUpstream() as up:
        runner = await _serve(proxy_app(up.url), logger)
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as s:
                url = f"http://127.0.0.1:{port}/v1/chat/completions?key=sk-secret-in-query"
                headers = {"User-Agent": "agent/1.0"}
                async with s.post(url, json=CHAT, headers=headers) as r:
                    await r.read()
                    rid = r.headers[OWN_HEADER]
                    status = r.status
        finally:
            await runner.cleanup()
    lines = [r.getMessage() for r in caplog.records if r.name == "streamfix.access"]
    assert len(lines) == 1
    line = lines[0]
    assert '"POST /v1/chat/completions HTTP/1.1"' in line
    assert f" {status} " in line
    assert rid in line and '"agent/1.0"' in line
    assert "sk-secret" not in line and "?" not in line
    assert "ms " in line  # the time taken


@pytest.mark.asyncio
async def test_nothing_made_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("streamfix.access.quiet")
    logger.setLevel(logging.WARNING)
    async with FakeUpstream() as up:
        runner = await _serve(proxy_app(up.url), logger)
        port = runner.addresses[0][1]
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{port}/healthz") as r,
            ):
                await r.read()
        finally:
            await runner.cleanup()
    assert not [r for r in caplog.records if r.name.startswith("streamfix.access")]
    # the line is not even made (the base class says enabled always)
    assert not AccessLog(logger, "").enabled
    logger.setLevel(logging.INFO)
    assert AccessLog(logger, "").enabled
