"""Slow or early clients (issue 25, item 7).

- A request whose body trickles or stalls is answered 408 and its
  connection closed within ``client_timeout`` (and within
  ``--request-timeout`` when that is shorter), on every route; a client
  that never finishes its headers is dropped after ``client_timeout``.
- ``--request-timeout`` counts from the request's arrival: the time its
  body took is part of it.
- ``streamfix serve`` holds SIGHUP, SIGTERM and SIGINT from its first
  instant until it has handlers for them: a reload asked for while it
  starts is applied once, when it is ready; a stop asked for then stops it
  cleanly (exit 0), workers included.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from streamfix.server import app as app_module
from streamfix.server.config import ServerConfig, parse_upstream

from .support.streamutil import assemble, text_stream
from .support.upstream_fake import FakeUpstream, Reply, free_port, proxy_app

ROOT = Path(__file__).resolve().parent.parent

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}


def run_options(cfg: ServerConfig) -> dict[str, Any]:
    """``app.run_options`` (looked up when called: the tests run, and fail
    on what they check, against code that has none)."""
    options: dict[str, Any] = getattr(
        app_module, "run_options", lambda cfg: {"handler_cancellation": True}
    )(cfg)
    return options


class Runner:
    """The proxy app run with ``run_options`` (as ``streamfix serve`` runs it)."""

    def __init__(self, app: web.Application, cfg: ServerConfig) -> None:
        self.runner = web.AppRunner(app, access_log=None, **run_options(cfg))
        self.port = 0

    async def __aenter__(self) -> Runner:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def _proxy(up: FakeUpstream, **settings: Any) -> tuple[web.Application, ServerConfig]:
    app = proxy_app(up.url, **settings)
    from streamfix.server.proxy import PROXY

    return app, app[PROXY].cfg


async def _slow_client(
    port: int, path: str, body: bytes, every: float | None
) -> tuple[bytes, float]:
    """Send the headers and the first bytes of ``body``, then one more
    byte every ``every`` seconds (None: nothing more, a stall). Returns
    what the proxy sent and when (seconds from the start) it closed."""
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body[:10])

    async def trickle() -> None:
        for i in range(10, len(body) - 1):  # never the last byte
            if every is None:
                return
            await asyncio.sleep(every)
            writer.write(body[i : i + 1])

    task = asyncio.create_task(trickle())
    got = b""
    try:
        while True:
            part = await reader.read(65536)
            if not part:
                break
            got += part
    except ConnectionResetError:
        pass
    finally:
        task.cancel()
        writer.close()
    return got, time.monotonic() - t0


@pytest.mark.parametrize(
    ("settings", "limit"),
    [({"client_timeout": 1.0}, 1.0), ({"request_timeout": 1.0, "client_timeout": 30.0}, 1.0)],
    ids=["client_timeout", "request_timeout"],
)
async def test_slow_bodies_are_answered_408_and_closed(
    settings: dict[str, Any], limit: float
) -> None:
    """Twenty connections whose bodies trickle (a byte every 0.2 s) or
    stall: each gets a 408 and is closed soon after ``limit`` (before: none
    was ever answered or closed)."""
    body = orjson.dumps(CHAT)
    async with FakeUpstream(Reply.stream(text_stream(["ok"]))) as up:
        app, cfg = _proxy(up, **settings)
        async with Runner(app, cfg) as proxy:
            clients = [
                _slow_client(proxy.port, "/v1/chat/completions", body, 0.2 if i % 2 else None)
                for i in range(20)
            ]
            results = await asyncio.wait_for(asyncio.gather(*clients), 20)
            # meanwhile an ordinary request is served
            async with (
                aiohttp.ClientSession() as s,
                s.post(f"http://127.0.0.1:{proxy.port}/v1/chat/completions", json=CHAT) as r,
            ):
                assert assemble(await r.read()).content == "ok"
    for got, closed_after in results:
        assert got.startswith(b"HTTP/1.1 408"), got[:200]
        assert b'"code":"client_timeout"' in got
        # the limit, then at most aiohttp's lingering (2 s) and slack
        assert limit * 0.9 <= closed_after < limit + 8, closed_after
    assert len(up.chat_requests) == 1  # the ordinary one: nothing half-read went upstream


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses", "/v1/completions"])
async def test_every_route_bounds_its_body(path: str) -> None:
    """The front doors and text completions bound the body too (a door
    answers in its own error shape)."""
    async with FakeUpstream() as up:
        app, cfg = _proxy(up, client_timeout=0.5)
        async with Runner(app, cfg) as proxy:
            got, _ = await asyncio.wait_for(_slow_client(proxy.port, path, b"{" * 200, None), 15)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    if path == "/v1/messages":
        assert b'"type":"error"' in got  # Anthropic's shape


async def test_request_timeout_counts_from_arrival() -> None:
    """A body that takes 0.8 s and an upstream that takes 0.5 s more: over
    a 1 s ``--request-timeout``, the request ends with its timeout error
    (before: the body's time was not counted, and the reply came)."""
    body = orjson.dumps(CHAT)
    async with FakeUpstream(Reply.stream(text_stream(["ok"]), delay=0.5)) as up:
        app, cfg = _proxy(up, request_timeout=1.0)
        async with Runner(app, cfg) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body[:5]
            )
            await asyncio.sleep(0.8)
            writer.write(body[5:])
            got = await asyncio.wait_for(reader.read(), 10)
            writer.close()
    assert b'"code":"request_timeout"' in got, got
    assert b'"content":"ok"' not in got


# -- streamfix serve as a process -------------------------------------------------


def _serve(upstream: str, port: int, *extra: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "streamfix", "serve", "--upstream", upstream),
            *("--port", str(port), "--probe-interval", "0", *extra),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


class Stderr:
    """What a process writes to its stderr, read as it comes (a thread)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        self.stream = proc.stderr
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.stream:
            self.data += line

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")

    async def wait_for(self, word: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.text.count(word) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


def _finish(proc: subprocess.Popen[bytes], err: Stderr | None = None) -> tuple[int, str]:
    """Stop ``proc`` if it still runs: (its exit status, its stderr)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if err is None:
        assert proc.stderr is not None
        text = proc.stderr.read().decode("utf-8", "replace")
    else:
        err.thread.join(10)
        text = err.text
    assert proc.stderr is not None
    proc.stderr.close()
    return proc.returncode, text


async def _serves(port: int, deadline: float) -> bool:
    """Whether the proxy on ``port`` answers a chat request before ``deadline``."""
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            try:
                async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT) as r:
                    if r.status == 200 and assemble(await r.read()).content == "ok":
                        return True
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    return False


@pytest.mark.parametrize(("workers", "after"), [(1, 0.3), (2, 0.3), (2, 0.8)])
async def test_a_reload_while_starting_is_applied_once_ready(workers: int, after: float) -> None:
    """SIGHUP ``after`` seconds after start (before: the process died of
    it, and with workers the service ended, exit 255): the proxy comes up,
    serves, and each process reloads once."""
    async with FakeUpstream(Reply.stream(text_stream(["ok"]))) as up:
        port = free_port()
        proc = _serve(up.url, port, "--workers", str(workers), "--log-level", "info")
        log = Stderr(proc)
        try:
            await asyncio.sleep(after)
            proc.send_signal(signal.SIGHUP)
            serving = await _serves(port, time.monotonic() + 40)
            await log.wait_for("reloaded:", workers, 30)  # every worker ready
            alive = proc.poll() is None
        finally:
            status, err = _finish(proc, log)
    assert alive and serving, (status, err[-2000:])
    assert status == 0, err[-2000:]
    assert err.count("reloaded:") == workers, err[-2000:]


@pytest.mark.parametrize(("workers", "sig"), [(1, "SIGTERM"), (2, "SIGTERM"), (2, "SIGINT")])
async def test_a_stop_while_starting_stops_cleanly(workers: int, sig: str) -> None:
    """SIGTERM (or SIGINT) as it starts: the process stops cleanly,
    exit 0, workers and all (before: it died of the signal)."""
    async with FakeUpstream() as up:
        proc = _serve(up.url, free_port(), "--workers", str(workers))
        # Its first line says the command has begun (signals held since its
        # first instant); before that the interpreter itself is starting,
        # which a loaded machine can stretch past any fixed delay.
        assert proc.stderr is not None
        first = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 60)
        assert first.startswith(b"streamfix"), first
        await asyncio.sleep(0.05)
        proc.send_signal(getattr(signal, sig))
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 40:
            await asyncio.sleep(0.05)
        status, err = _finish(proc)
    assert status == 0, err[-2000:]
    assert "Traceback" not in err, err[-2000:]


async def test_half_sent_headers_are_dropped_after_client_timeout() -> None:
    """A client that opens a connection and sends half its request line and
    headers is disconnected after ``--client-timeout`` (before: aiohttp's
    75 s keep-alive timeout)."""
    async with FakeUpstream(Reply.stream(text_stream(["ok"]))) as up:
        port = free_port()
        proc = _serve(up.url, port, "--client-timeout", "1", "--log-level", "warning")
        try:
            assert await _serves(port, time.monotonic() + 40)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")
            t0 = time.monotonic()
            got = await asyncio.wait_for(reader.read(), 15)
            closed_after = time.monotonic() - t0
            writer.close()
        finally:
            _finish(proc)
    assert got == b"" and closed_after < 10, (got, closed_after)


def test_client_timeout_is_a_setting() -> None:
    """A flag, an environment variable and a TOML key, like every setting."""
    from streamfix.tools.cli import build_parser, config_from_args

    args = build_parser().parse_args(["serve", "--upstream", "http://h/v1"])
    assert config_from_args(args, {}).client_timeout == 30.0
    env = {"STREAMFIX_CLIENT_TIMEOUT": "7"}
    assert config_from_args(args, env).client_timeout == 7.0
    argv = ["serve", "--upstream", "http://h/v1", "--client-timeout", "0"]
    cfg = config_from_args(build_parser().parse_args(argv), env)
    assert cfg.client_timeout == 0.0
    assert run_options(cfg)["keepalive_timeout"] == 75.0
    cfg = ServerConfig(upstreams=[parse_upstream("http://h/v1")], client_timeout=5)
    assert run_options(cfg)["keepalive_timeout"] == 5
