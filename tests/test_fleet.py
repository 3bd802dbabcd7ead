"""The fleet's state (``server/state/``): tenants' limits in process and in
a real ``redis-server``, learned facts and rests shared between two
proxies, the store going down, ``/livez`` and ``/readyz``, the drain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from streamfix.server.app import create_app
from streamfix.server.config import ConfigError, ServerConfig, TenantConfig, build_config
from streamfix.server.proxy import PROXY
from streamfix.server.state.fleet import Fleet, stream_usage
from streamfix.server.state.store import Limits, StoreDown

from .support.services import Redis, redis_server
from .support.streamutil import chunk, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Received, Reply, completion
from .test_learned import overflow_400

HI = [{"role": "user", "content": "hi"}]


def config(url: str, **kw: Any) -> ServerConfig:
    from streamfix.server.config import parse_upstream

    kw.setdefault("probe_interval", 0)
    kw.setdefault("backoff", 0.01)
    return ServerConfig(upstreams=[parse_upstream(url)], **kw)


def whole() -> Reply:
    return Reply.json(completion("ok", usage={"prompt_tokens": 3, "completion_tokens": 2}))


async def post(
    px: AppServer, body: dict[str, Any], path: str = "/v1/chat/completions", key: str = ""
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.root + path, json=body, headers=headers) as r,
    ):
        return r.status, dict(r.headers), await r.read()


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": HI, **kw}


# -- limits in process -------------------------------------------------------------------------


async def test_rpm_refuses_the_request_past_the_limit_with_openai_headers() -> None:
    async with (
        FakeUpstream(whole()) as up,
        AppServer(create_app(config(up.url, limits=Limits(rpm=2)))) as px,
    ):
        answers = [await post(px, chat()) for _ in range(3)]
        assert [a[0] for a in answers] == [200, 200, 429]
        _, headers, body = answers[2]
        error = orjson.loads(body)["error"]
        assert error["code"] == "rate_limit_exceeded"
        assert headers["x-ratelimit-limit-requests"] == "2"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-reset-requests"].endswith("s")
        assert 1 <= int(headers["Retry-After"]) <= 60
        assert len(up.chat_requests) == 2  # the refused one never went upstream
        metrics = px.app[PROXY].metrics.render().decode()
        assert 'streamfix_limited_total{limit="requests",tenant="-"} 1.0' in metrics
        assert 'status="429"' in metrics


async def test_each_door_refuses_in_its_own_error_shape() -> None:
    async with (
        FakeUpstream(whole()) as up,
        AppServer(create_app(config(up.url, limits=Limits(rpm=1)))) as px,
    ):
        assert (await post(px, chat()))[0] == 200
        status, headers, body = await post(px, chat(max_tokens=5), "/v1/messages")
        assert status == 429 and "Retry-After" in headers
        assert orjson.loads(body)["type"] == "error"  # Anthropic's shape
        assert orjson.loads(body)["error"]["type"] == "rate_limit_error"
        status, headers, body = await post(px, {"model": "m", "input": "hi"}, "/v1/responses")
        assert status == 429 and headers["x-ratelimit-limit-requests"] == "1"
        assert orjson.loads(body)["error"]["code"] == "rate_limit_exceeded"


def tenants(url: str, **limits: Any) -> ServerConfig:
    return config(
        url,
        tenants=[
            TenantConfig("a", ("sk-aaaaaaaa",), ("*",), limits=Limits(**limits)),
            TenantConfig("b", ("sk-bbbbbbbb",), ("*",)),
        ],
    )


async def test_max_concurrent_is_per_tenant_and_freed_at_the_end() -> None:
    slow = Reply.stream(text_stream(["a", "b", "c"]), delay=0.3)
    async with (
        FakeUpstream(slow) as up,
        AppServer(create_app(tenants(up.url, max_concurrent=1))) as px,
    ):
        first = asyncio.create_task(post(px, chat(stream=True), key="sk-aaaaaaaa"))
        while not up.chat_requests:
            await asyncio.sleep(0.01)
        status, headers, _ = await post(px, chat(stream=True), key="sk-aaaaaaaa")
        assert status == 429 and headers["Retry-After"] == "1"
        other = await post(px, chat(stream=True), key="sk-bbbbbbbb")  # another tenant
        assert other[0] == 200
        assert (await first)[0] == 200
        assert (await post(px, chat(stream=True), key="sk-aaaaaaaa"))[0] == 200


async def test_a_tenant_holding_its_slots_is_refused_before_its_body_is_read() -> None:
    """``Fleet.precheck``: the body is not read (one that is not JSON is
    refused 429, not 400), in each door's shape, counted in the metrics."""
    slow = Reply.stream(text_stream(["a", "b", "c"]), delay=0.3)
    async with (
        FakeUpstream(slow) as up,
        AppServer(create_app(tenants(up.url, max_concurrent=1))) as px,
    ):
        first = asyncio.create_task(post(px, chat(stream=True), key="sk-aaaaaaaa"))
        while not up.chat_requests:
            await asyncio.sleep(0.01)
        headers = {"Authorization": "Bearer sk-aaaaaaaa", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as s:
            for path, shape in (("/v1/chat/completions", "error"), ("/v1/messages", "type")):
                async with s.post(px.root + path, data=b"{not json", headers=headers) as r:
                    assert r.status == 429 and r.headers["Retry-After"] == "1"
                    assert shape in orjson.loads(await r.read())
                    assert "x-ratelimit-remaining-requests" not in r.headers
            async with s.get(px.root + "/metrics") as r:
                metrics = await r.text()
        assert (await first)[0] == 200
        assert len(up.chat_requests) == 1
    assert 'streamfix_limited_total{limit="concurrency",tenant="a"} 2.0' in metrics


async def test_tpm_counts_the_estimate_and_is_corrected_by_the_usage() -> None:
    # max_tokens 500 reserves more than the 600 a minute allow twice; the
    # reply's usage (5 tokens) gives the rest back.
    async with FakeUpstream(whole()) as up:
        async with AppServer(create_app(tenants(up.url, tpm=600))) as px:
            for _ in range(3):
                assert (await post(px, chat(max_tokens=500), key="sk-aaaaaaaa"))[0] == 200
        up.default = Reply.json(completion("ok"))  # no usage: the estimate stays counted
        async with AppServer(create_app(tenants(up.url, tpm=600))) as px:
            assert (await post(px, chat(max_tokens=500), key="sk-aaaaaaaa"))[0] == 200
            status, headers, _ = await post(px, chat(max_tokens=500), key="sk-aaaaaaaa")
            assert status == 429 and headers["x-ratelimit-limit-tokens"] == "600"


def test_a_streams_usage_is_found_in_its_last_reads() -> None:
    last = b'data: {"choices":[],"usage":{"total_tokens":7}}\n\ndata: [DONE]\n\n'
    assert stream_usage([sse([chunk("x", finish="stop")], done=False), last]) == {"total_tokens": 7}
    assert stream_usage([b"data: [DONE]\n\n"]) is None


async def test_without_state_or_limits_nothing_is_asked() -> None:
    fleet = Fleet(ServerConfig(), metrics=None)  # type: ignore[arg-type]
    assert await fleet.admit(None, [], "m", 10) is None


def test_limits_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'upstream = [{url = "http://127.0.0.1:9/v1"}]\n[limits]\nrpm = 60\n'
        '[[tenant]]\nname = "a"\napi_key = "sk-aaaaaaaa"\nmodels = ["*"]\n'
        "max_concurrent = 2\ntpm = 1000\n"
    )
    cfg = build_config({}, {}, str(path))
    assert cfg.limits == Limits(rpm=60)
    assert cfg.tenants[0].limits == Limits(max_concurrent=2, tpm=1000)
    path.write_text(path.read_text() + "rpm = -1\n")
    with pytest.raises(ConfigError, match="rpm must be"):
        build_config({}, {}, str(path))
    with pytest.raises(ConfigError, match="state"):
        build_config({"state": "http://x"}, {"STREAMFIX_UPSTREAM": "http://h:1/v1"})


# -- health and drain --------------------------------------------------------------------------


async def get(px: AppServer, path: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(px.root + path) as r:
        return r.status, await r.json()


async def test_livez_and_readyz_and_draining() -> None:
    async with FakeUpstream(whole()) as up, AppServer(create_app(config(up.url))) as px:
        assert await get(px, "/livez") == (200, {"status": "ok"})
        assert await get(px, "/readyz") == (200, {"status": "ready"})
        px.app[PROXY].draining = "SIGTERM"
        status, body = await get(px, "/readyz")
        assert status == 503 and body["reason"] == "draining (SIGTERM)"
        assert (await get(px, "/livez"))[0] == 200


async def test_readyz_is_503_when_no_row_can_serve_and_open_without_a_key() -> None:
    async with AppServer(
        create_app(config("http://127.0.0.1:9/v1", probe_interval=300, api_keys=["sk-own-key"]))
    ) as px:
        status, body = await get(px, "/readyz")
        assert status == 503 and body["reason"] == "no upstream row can serve"
        assert (await get(px, "/livez"))[0] == 200


# -- shared in Redis ---------------------------------------------------------------------------


@pytest.fixture
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


async def test_rpm_is_shared_by_two_proxies_naming_one_store(redis: Redis) -> None:
    async with FakeUpstream(whole()) as up:
        cfg = config(up.url, limits=Limits(rpm=5), state=redis.url)
        async with AppServer(create_app(cfg)) as a, AppServer(create_app(cfg)) as b:
            statuses = [(await post((a, b)[i % 2], chat()))[0] for i in range(6)]
    assert statuses == [200] * 5 + [429]


async def test_prefixes_keep_two_fleets_apart(redis: Redis) -> None:
    async with FakeUpstream(whole()) as up:
        one = config(up.url, limits=Limits(rpm=1), state=redis.url, state_prefix="one:")
        two = config(up.url, limits=Limits(rpm=1), state=redis.url, state_prefix="two:")
        async with AppServer(create_app(one)) as a, AppServer(create_app(two)) as b:
            assert (await post(a, chat()))[0] == (await post(b, chat()))[0] == 200


async def test_a_window_learned_by_one_proxy_clamps_the_other(redis: Redis) -> None:
    messages = [{"role": "user", "content": "A line of the conversation. " * 40}]
    first = True

    def handler(rec: Received) -> Reply:
        nonlocal first
        if first:
            first = False
            return overflow_400(2048, 2400)
        return whole()

    async with FakeUpstream(handler=handler) as up:
        cfg = config(up.url, state=redis.url)
        async with AppServer(create_app(cfg)) as a, AppServer(create_app(cfg)) as b:
            body = {"model": "m", "messages": messages, "max_tokens": 4096}
            assert (await post(a, body))[0] == 200
            await asyncio.sleep(0.1)  # A's end is written in the background
            assert (await post(b, body))[0] == 200
    sent = [r.body["max_tokens"] for r in up.chat_requests]
    assert sent[0] == 4096 and sent[1] < 2048  # A: overflow, then clamped
    assert sent[2] < 2048  # B: clamped at once, no overflow of its own
    assert len(sent) == 3


async def test_a_rest_is_shared(redis: Redis) -> None:
    async with FakeUpstream(Reply.error(503)) as bad, FakeUpstream(whole()) as good:
        from streamfix.server.config import parse_upstream

        cfg = ServerConfig(
            upstreams=[parse_upstream(bad.url), parse_upstream(good.url)],
            probe_interval=0,
            retries=0,
            state=redis.url,
        )
        async with AppServer(create_app(cfg)) as a, AppServer(create_app(cfg)) as b:
            while not bad.chat_requests:  # A meets the failing row once
                assert (await post(a, chat()))[0] == 200
            await asyncio.sleep(0.1)
            for _ in range(5):
                assert (await post(b, chat()))[0] == 200
    assert len(bad.chat_requests) == 1  # B never tried the resting row


async def test_the_store_down_requests_go_on_and_readyz_says_degraded(redis: Redis) -> None:
    async with FakeUpstream(whole()) as up:
        cfg = config(up.url, limits=Limits(rpm=100), state=redis.url)
        async with AppServer(create_app(cfg)) as px:
            assert (await post(px, chat()))[0] == 200
            redis.stop()
            t0 = time.perf_counter()
            assert [(await post(px, chat()))[0] for _ in range(3)] == [200] * 3
            assert time.perf_counter() - t0 < 3
            status, body = await get(px, "/readyz")
            assert status == 200 and body["status"] == "degraded"
            redis.start()
            for _ in range(100):  # the watch sees it back within a few seconds
                if (await get(px, "/readyz"))[1]["status"] == "ready":
                    break
                await asyncio.sleep(0.1)
            assert (await get(px, "/readyz"))[1]["status"] == "ready"


async def test_failing_closed_refuses_limited_tenants_while_the_store_is_down(
    redis: Redis,
) -> None:
    async with FakeUpstream(whole()) as up:
        cfg = config(up.url, limits=Limits(rpm=100), state=redis.url, state_failure="closed")
        async with AppServer(create_app(cfg)) as px:
            redis.stop()
            status, headers, body = await post(px, chat())
            assert status == 503 and headers["Retry-After"] == "1"
            assert orjson.loads(body)["error"]["code"] == "state_unavailable"


# -- metrics of every worker -------------------------------------------------------------------


async def test_one_scrape_counts_every_request_of_four_workers(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from .support.services import free_port

    async with FakeUpstream(whole()) as up:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROMETHEUS")}
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "streamfix", "serve", "--workers", "4"),
                *("--port", str(port), "--upstream", up.url, "--probe-interval", "0"),
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        try:
            root = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as s:
                for _ in range(300):  # every worker up (each answers /livez)
                    try:
                        async with s.get(root + "/livez") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.1)
                await asyncio.sleep(2.0)  # the other workers finish starting
            n = 40
            for _ in range(n):  # a new connection each: the kernel spreads them
                connector = aiohttp.TCPConnector(force_close=True)
                async with (
                    aiohttp.ClientSession(connector=connector) as s,
                    s.post(root + "/v1/chat/completions", json=chat()) as r,
                ):
                    assert r.status == 200
            async with aiohttp.ClientSession() as s, s.get(root + "/metrics") as r:
                text = await r.text()
        finally:
            proc.terminate()
            proc.wait(30)
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("streamfix_requests_total{") and 'endpoint="chat"' in line
    )
    assert counted == n


# -- the operator page's sessions and counts ---------------------------------------------------


async def test_a_logout_on_one_replica_is_final_on_the_other_through_the_store(
    tmp_path: Path, redis: Redis
) -> None:
    """Two apps sharing no state directory, only the store: a cookie of A
    opens B; logged out on A, B refuses it within ``REFRESH`` seconds (and
    A at once); a session not logged out still opens both."""
    import re

    from yarl import URL

    from streamfix.server.state.sessions import REFRESH

    from .support.ui_scene import ADMIN_KEY, scene

    def browser() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def status(cookie: str, root: str) -> int:
        async with (
            aiohttp.ClientSession(cookies={"streamfix_ui": cookie}) as s,
            s.get(root + "/ui", allow_redirects=False) as r,
        ):
            return r.status

    async def login(s: aiohttp.ClientSession, root: str) -> str:
        async with s.post(root + "/ui/login", data={"key": ADMIN_KEY}, allow_redirects=False) as r:
            assert r.status == 303
        return s.cookie_jar.filter_cookies(URL(root + "/ui"))["streamfix_ui"].value

    async with (
        scene(tmp_path / "a", serve=False, state_dir=str(tmp_path / "sa"), state=redis.url) as a,
        scene(tmp_path / "b", serve=False, state_dir=str(tmp_path / "sb"), state=redis.url) as b,
        browser() as s,
        browser() as kept,
    ):
        cookie = await login(s, a.root)
        other = await login(kept, b.root)
        assert await status(cookie, b.root) == 200
        async with s.get(a.root + "/ui") as r:
            found = re.search(r'name="csrf" value="([^"]+)"', await r.text())
        assert found
        async with s.post(
            a.root + "/ui/logout", data={"csrf": found.group(1)}, allow_redirects=False
        ) as r:
            assert r.status == 303
        assert await status(cookie, a.root) == 401  # here at once
        t0 = time.monotonic()
        while await status(cookie, b.root) == 200:
            assert time.monotonic() - t0 < REFRESH + 1.0
            await asyncio.sleep(0.05)
        assert await status(cookie, b.root) == 401
        assert await status(other, a.root) == await status(other, b.root) == 200
    # the logout outlives both apps: a new replica has read it as it starts
    async with scene(
        tmp_path / "c", serve=False, state_dir=str(tmp_path / "sc"), state=redis.url
    ) as c:
        assert await status(cookie, c.root) == 401  # read before it serves
        assert await status(other, c.root) == 200


async def test_the_page_shows_the_fleets_counts_and_refusals(redis: Redis) -> None:
    """Two processes' page counts (``state/activity.FleetActivity``) on one
    store: each page shows the sum of both, refusals included; what one
    counted since its last push shows on its own page at once."""
    from streamfix.server.state.activity import FleetActivity
    from streamfix.server.ui.pages import limited_view

    a, b = FleetActivity(redis.url), FleetActivity(redis.url)
    now = time.time()
    a.report("m", {"lifted.hermes": 2, "calls.hermes": 9}, now=now)
    b.report("m", {"lifted.hermes": 3}, now=now)
    b.refused("t", "concurrency", now=now)
    b.refused("t", "requests", now=now)
    assert a.last_hour("m", now)[-1] == {"lifted.hermes": 2}  # before any push: its own
    await a.sync(now)
    await b.sync(now)
    await a.sync(now)
    for side in (a, b):
        assert side.last_hour("m", now)[-1] == {"lifted.hermes": 5}
        assert side.limited_last_hour(now) == {"t": {"concurrency": 1, "requests": 1}}
    a.report("m", {"lifted.hermes": 1}, now=now)
    assert a.last_hour("m", now)[-1] == {"lifted.hermes": 6}  # not pushed yet, shown
    assert "Refused by limits" in str(limited_view(a.limited_last_hour(now)))
    redis.stop()  # the store down: each page shows its own counts again
    with pytest.raises(StoreDown):
        await a.sync(now)
    assert a.last_hour("m", now)[-1] == {"lifted.hermes": 3}
    assert a.pending  # kept for the next push
    for side in (a, b):
        await side._redis.close()


async def test_a_refusal_is_counted_on_the_page(tmp_path: Path) -> None:
    """``Fleet`` tells the page's last hour of each refusal (without
    ``--state`` too)."""
    async with FakeUpstream(whole()) as up:
        cfg = config(up.url, limits=Limits(rpm=1), ui=True, api_keys=["sk-own-key-1234"])
        app = create_app(cfg)
        async with AppServer(app) as px:
            assert (await post(px, chat(), key="sk-own-key-1234"))[0] == 200
            assert (await post(px, chat(), key="sk-own-key-1234"))[0] == 429
    activity = app[PROXY].activity
    assert activity is not None and activity.limited_last_hour() == {"-": {"requests": 1}}
