"""The fleet as operators break it: three ``streamfix serve`` replicas
sharing a real ``redis-server``, behind a real HAProxy
(``examples/fleet/``), in front of a scripted upstream whose streams
last about a second. Skipped with the reason when ``redis-server`` or
``haproxy`` is missing; under ``STREAMFIX_E2E=require`` (CI) they run.
"""

from __future__ import annotations

import asyncio
import importlib.util
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.services import need
from tests.support.streamutil import text_stream
from tests.support.upstream_fake import FakeUpstream, Received, Reply, completion
from tests.test_learned import overflow_400

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fleet_example", ROOT / "examples/fleet/fleet.py")
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

#: One streamed reply: about 1.3 s, an event every 0.1 s.
STREAM = Reply.events(text_stream([f"w{i} " for i in range(10)]), delay=0.1)
HI = [{"role": "user", "content": "hi"}]


def handler(rec: Received) -> Reply:
    if rec.body.get("stream"):
        return STREAM
    return Reply.json(completion("ok"))


async def fleet_of(up: FakeUpstream, *args: str) -> Any:
    need("redis-server")
    need("haproxy")
    fleet = example.Fleet(up.url, 3, ("--probe-interval", "0", "--drain-grace", "1", *args))
    await asyncio.to_thread(fleet.start)
    return fleet


async def one(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> str:
    """How one request ended: ok, refused (before its reply began: a status
    other than 200, or no answer), broken (the reply began and ended in an
    error event or a closed connection) or hang."""
    try:
        async with asyncio.timeout(20):
            try:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    if r.status != 200:
                        return f"refused {r.status}"
                    try:
                        data = await r.read()
                    except aiohttp.ClientError:
                        return "broken"
                    return "ok" if data.rstrip().endswith(b"[DONE]") else "broken"
            except aiohttp.ClientError:
                return "refused"
    except TimeoutError:
        return "hang"


async def load(url: str, stop: asyncio.Event, concurrency: int = 8) -> Counter[str]:
    """Streamed requests, ``concurrency`` at once, until ``stop``."""
    outcomes: Counter[str] = Counter()
    body = {"model": "m", "messages": HI, "stream": True}

    async def worker() -> None:
        async with aiohttp.ClientSession() as s:
            while not stop.is_set():
                outcomes[await one(s, url, body)] += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


async def stopped(fleet: Any) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await asyncio.to_thread(fleet.stop)


async def test_a_window_learned_on_one_replica_clamps_the_next_request_on_another() -> None:
    overflows = 0

    def window(rec: Received) -> Reply:
        nonlocal overflows
        if rec.body.get("max_tokens", 0) > 2048:
            overflows += 1
            return overflow_400(2048, 300)
        return Reply.json(completion("ok"))

    body = {"model": "m", "messages": HI, "max_tokens": 4096}
    async with FakeUpstream(handler=window) as up:
        fleet = await fleet_of(up)
        try:
            a, b = (f"http://127.0.0.1:{p}" for p in fleet.ports[:2])
            async with aiohttp.ClientSession() as s:
                async with s.post(a + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                await asyncio.sleep(0.2)
                async with s.post(b + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
        finally:
            await asyncio.to_thread(fleet.stop)
    assert overflows == 1  # on A; B clamped its first request with what A learned
    assert [r.body["max_tokens"] < 2048 for r in up.chat_requests] == [False, True, True]


async def test_rpm_5_refuses_the_sixth_whichever_replicas_served_the_first_five(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "limits.toml"
    toml.write_text("[limits]\nrpm = 5\n")
    async with FakeUpstream(handler=handler) as up:
        fleet = await fleet_of(up, "--config", str(toml))
        try:
            statuses = []
            for i in range(6):  # each on a new connection: HAProxy spreads them
                async with (
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s,
                    s.post(
                        fleet.url + "/v1/chat/completions", json={"model": "m", "messages": HI}
                    ) as r,
                ):
                    statuses.append(r.status)
                    if i == 5:
                        assert r.headers["x-ratelimit-remaining-requests"] == "0"
        finally:
            await asyncio.to_thread(fleet.stop)
    assert statuses == [200] * 5 + [429]


async def test_a_replica_killed_under_load_fails_no_request_that_had_not_started() -> None:
    async with FakeUpstream(handler=handler) as up:
        fleet = await fleet_of(up)
        try:
            stop = asyncio.Event()
            running = asyncio.create_task(load(fleet.url, stop, concurrency=9))
            await asyncio.sleep(1.5)
            fleet.signal(0, signal.SIGKILL)
            await asyncio.sleep(3.0)
            stop.set()
            outcomes = await running
        finally:
            await asyncio.to_thread(fleet.stop)
    print("SIGKILL under load:", dict(outcomes))
    assert outcomes["ok"] >= 10
    assert set(outcomes) <= {"ok", "broken"}, outcomes  # nothing refused, nothing hung
    assert outcomes["broken"] <= 9  # at most the streams the dead replica carried


async def test_a_rolling_restart_under_load_fails_no_request() -> None:
    async with FakeUpstream(handler=handler) as up:
        fleet = await fleet_of(up)
        try:
            stop = asyncio.Event()
            running = asyncio.create_task(load(fleet.url, stop, concurrency=6))
            await asyncio.sleep(1.0)
            codes = []
            t0 = time.monotonic()
            for i in range(3):
                proc = fleet.signal(i, signal.SIGTERM)
                codes.append(await asyncio.to_thread(proc.wait, 30))
                await asyncio.to_thread(fleet.start_replica, i)
                await asyncio.sleep(1.0)  # HAProxy's two checks bring it back
            took = time.monotonic() - t0
            stop.set()
            outcomes = await running
        finally:
            await asyncio.to_thread(fleet.stop)
    print(f"rolling restart under load ({took:.1f} s):", dict(outcomes))
    assert codes == [0, 0, 0]
    assert set(outcomes) == {"ok"}, outcomes
    assert outcomes["ok"] >= 10


async def test_redis_stopped_mid_run_requests_go_on(tmp_path: Path) -> None:
    toml = tmp_path / "limits.toml"
    toml.write_text("[limits]\nrpm = 100000\n")
    async with FakeUpstream(handler=handler) as up:
        fleet = await fleet_of(up, "--config", str(toml))
        try:
            stop = asyncio.Event()
            running = asyncio.create_task(load(fleet.url, stop, concurrency=6))
            await asyncio.sleep(1.0)
            await asyncio.to_thread(fleet.stop_redis)
            await asyncio.sleep(3.0)
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://127.0.0.1:{fleet.ports[0]}/readyz") as r,
            ):
                ready = r.status, (await r.json())["status"]
            stop.set()
            outcomes = await running
        finally:
            await asyncio.to_thread(fleet.stop)
    print("redis stopped mid-run:", dict(outcomes))
    assert ready == (200, "degraded")
    assert set(outcomes) == {"ok"}, outcomes
