"""The operator page (``streamfix serve --ui``) without a browser: who may
see it, the login and its cookie, CSRF refusals, escaping of model output,
no key ever rendered, the views' content, the last hour's bookkeeping.
The same page in a real browser: tests/e2e/test_ui_browser.py."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import orjson
import pytest
from yarl import URL

from streamfix.server.app import create_app
from streamfix.server.config import ConfigError, ServerConfig, build_config, parse_upstream
from streamfix.server.metrics import Metrics
from streamfix.server.probe import CASES
from streamfix.server.proxy import PROXY
from streamfix.server.record import RECORDER
from streamfix.server.ui import activity as act
from streamfix.server.ui.auth import SESSION_SECONDS, FileSessionStore, LoginThrottle, Sessions
from streamfix.server.ui.charts import repairs_chart
from streamfix.server.ui.html import esc, tag
from streamfix.server.ui.routes import UI
from streamfix.server.upstream.table import Table

from .support.ui_scene import (
    ADMIN_KEY,
    TENANT_KEY,
    UPSTREAM_KEY,
    URL_PASSWORD,
    Scene,
    scene,
)
from .support.upstream_fake import AppServer, FakeUpstream, proxy_app

PAGES = ("/ui", "/ui/recordings", "/ui/unrecognised", "/ui/config", "/ui/probe/0")
SECRETS = (ADMIN_KEY, TENANT_KEY, UPSTREAM_KEY, URL_PASSWORD)


def browser() -> aiohttp.ClientSession:
    """A client that keeps cookies from 127.0.0.1 (as a browser does) and
    does not follow redirects unless asked."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def logged_in(s: aiohttp.ClientSession, sc: Scene) -> None:
    async with s.post(sc.root + "/ui/login", data={"key": ADMIN_KEY}, allow_redirects=False) as r:
        assert r.status == 303, await r.text()


async def csrf_of(s: aiohttp.ClientSession, url: str) -> str:
    async with s.get(url) as r:
        text = await r.text()
    m = re.search(r'name="csrf" value="([^"]+)"', text)
    assert m, text
    return m.group(1)


async def get(s: aiohttp.ClientSession, url: str, **kw: str) -> tuple[int, str]:
    async with s.get(url, headers=kw or None, allow_redirects=False) as r:
        return r.status, await r.text()


# -- who may see it -------------------------------------------------------------


async def test_no_key_is_asked_to_log_in_and_a_tenant_key_is_refused(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, aiohttp.ClientSession() as s:
        for path in PAGES:
            status, text = await get(s, sc.root + path)
            assert status == 401, path
            assert 'action="/ui/login"' in text
            status, text = await get(s, sc.root + path, Authorization=f"Bearer {TENANT_KEY}")
            assert status == 403, path
            status, _ = await get(s, sc.root + path, Authorization="Bearer sk-wrong-key-123")
            assert status == 401, path
            status, _ = await get(s, sc.root + path, Authorization=f"Bearer {ADMIN_KEY}")
            assert status == 200, path
        # the login form itself: a tenant's key is refused, a wrong one asked again
        async with s.post(sc.root + "/ui/login", data={"key": TENANT_KEY}) as r:
            assert r.status == 403
            assert "streamfix_ui" not in r.cookies
        async with s.post(sc.root + "/ui/login", data={"key": "nope-nope"}) as r:
            assert r.status == 401
            assert "streamfix_ui" not in r.cookies


async def test_login_sets_a_strict_httponly_cookie_that_is_not_the_key(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        async with s.post(
            sc.root + "/ui/login", data={"key": ADMIN_KEY}, allow_redirects=False
        ) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui"
            header = r.headers["Set-Cookie"]
        assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/ui" in header
        assert ADMIN_KEY not in header
        status, text = await get(s, sc.root + "/ui")
        assert status == 200 and "Models" in text
        # the cookie is only the page's: the API still wants a key
        async with s.get(sc.root + "/v1/models") as r:
            assert r.status == 401


async def test_every_answer_carries_a_strict_csp(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        for path in (*PAGES, "/ui/login", "/ui/static/ui.js", "/ui/static/ui.css"):
            async with s.get(sc.root + path) as r:
                csp = r.headers["Content-Security-Policy"]
                assert "script-src 'self'" in csp and "default-src 'none'" in csp, path
                assert "unsafe-inline" not in csp
                assert r.headers["X-Content-Type-Options"] == "nosniff"
                text = await r.text()
            if path.startswith("/ui/static"):
                continue
            # no inline script, no inline style, no event attribute of ours
            assert re.search(r"<script(?![^>]*\ssrc=)", text) is None, path
            assert " style=" not in text and " onclick=" not in text, path


async def test_a_session_ends_when_its_key_leaves_the_configuration(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        assert (await get(s, sc.root + "/ui"))[0] == 200
        proxy = sc.proxy.app[PROXY]
        cfg = ServerConfig(
            upstreams=[u.cfg for u in proxy.table.upstreams], api_keys=["sk-another-key-42"]
        )
        proxy.table = Table(cfg, previous=proxy.table)
        assert (await get(s, sc.root + "/ui"))[0] == 401


def test_a_token_is_signed_expires_and_can_be_revoked() -> None:
    cfg = ServerConfig(upstreams=[parse_upstream("http://127.0.0.1:9/v1")], api_keys=[ADMIN_KEY])
    table = Table(cfg)
    sessions = Sessions()
    token = sessions.issue(ADMIN_KEY.encode(), now=1000.0)
    assert ADMIN_KEY not in token
    session = sessions.check(token, table, now=1001.0)
    assert session is not None and session.csrf
    nonce, expiry, sig = token.split(".")
    assert sessions.check(f"{nonce}.{int(expiry) + 999}.{sig}", table, now=1001.0) is None
    assert sessions.check(token[:-1] + ("0" if token[-1] != "0" else "1"), table, 1001.0) is None
    assert sessions.check(token, table, now=1000.0 + SESSION_SECONDS + 1) is None
    sessions.revoke(session, now=1002.0)
    assert sessions.check(token, table, now=1003.0) is None


async def test_logout_revokes_the_session(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        cookie = s.cookie_jar.filter_cookies(URL(sc.root + "/ui"))["streamfix_ui"].value
        token = await csrf_of(s, sc.root + "/ui")
        async with s.post(sc.root + "/ui/logout", data={"csrf": token}, allow_redirects=False) as r:
            assert r.status == 303
        async with aiohttp.ClientSession(cookies={"streamfix_ui": cookie}) as other:
            assert (await get(other, sc.root + "/ui"))[0] == 401


async def test_a_logout_is_final_after_a_restart_and_on_every_worker(tmp_path: Path) -> None:
    """Issue 37, item 11: the logged-out cookie is refused by a fresh app
    on the same state directory (a restart) and by a second app sharing it
    while the first runs (another worker), asked to log in; a session not
    logged out still opens both."""
    state = str(tmp_path / "state")
    async with (
        scene(tmp_path / "rec", serve=False, state_dir=state) as sc,
        scene(tmp_path / "rec", serve=False, state_dir=state) as peer,
        browser() as s,
    ):
        await logged_in(s, sc)
        cookie = s.cookie_jar.filter_cookies(URL(sc.root + "/ui"))["streamfix_ui"].value
        async with aiohttp.ClientSession(cookies={"streamfix_ui": cookie}) as other:
            assert (await get(other, peer.root + "/ui"))[0] == 200  # the same keys
            token = await csrf_of(s, sc.root + "/ui")
            async with s.post(
                sc.root + "/ui/logout", data={"csrf": token}, allow_redirects=False
            ) as r:
                assert r.status == 303
            status, text = await get(other, peer.root + "/ui")
            assert status == 401 and 'name="key"' in text
    async with (
        scene(tmp_path / "rec", serve=False, state_dir=state) as restarted,
        aiohttp.ClientSession(cookies={"streamfix_ui": cookie}) as other,
        browser() as fresh,
    ):
        assert (await get(other, restarted.root + "/ui"))[0] == 401
        await logged_in(fresh, restarted)
        assert (await get(fresh, restarted.root + "/ui"))[0] == 200


def test_a_full_session_store_fails_closed(tmp_path: Path) -> None:
    """Past its bound the store revokes every session issued so far (all
    log in again) rather than forget a logout; a new login opens."""
    cfg = ServerConfig(upstreams=[parse_upstream("http://127.0.0.1:9/v1")], api_keys=[ADMIN_KEY])
    table = Table(cfg)
    sessions = Sessions(FileSessionStore(tmp_path / "s", limit=3))
    tokens = [sessions.issue(ADMIN_KEY.encode(), now=1000.0) for _ in range(5)]
    for t in tokens[:4]:
        session = sessions.check(t, table, now=1001.0)
        assert session is not None
        sessions.revoke(session, now=1001.0)
    assert sessions.check(tokens[4], table, now=1002.0) is None  # issued before the overflow
    again = Sessions(FileSessionStore(tmp_path / "s", limit=3))  # another process
    assert again.check(tokens[4], table, now=1002.0) is None
    later = again.issue(ADMIN_KEY.encode(), now=2000.0)
    assert again.check(later, table, now=2001.0) is not None
    assert len((tmp_path / "s").read_text().splitlines()) <= 4


async def test_guessing_keys_is_slowed_then_refused_with_retry_after(tmp_path: Path) -> None:
    """Issue 37, item 12: failed logins from one source wait longer each
    time, then are answered 429 with ``Retry-After`` (the right key too,
    form or bearer); the waits are async: the proxy answers others
    meanwhile."""
    async with scene(tmp_path, serve=False) as sc, aiohttp.ClientSession() as s:
        throttle = sc.proxy.app[UI].throttle
        throttle.base_delay = 0.001  # the growth, not the seconds, is under test
        statuses = []
        for i in range(throttle.limit + 2):
            async with s.post(sc.root + "/ui/login", data={"key": f"guess-{i}"}) as r:
                statuses.append(r.status)
                retry = r.headers.get("Retry-After")
        assert statuses == [401] * throttle.limit + [429, 429]
        assert retry is not None and 0 < int(retry) <= throttle.window
        async with s.post(sc.root + "/ui/login", data={"key": ADMIN_KEY}) as r:
            assert r.status == 429
        assert (await get(s, sc.root + "/ui", Authorization=f"Bearer {ADMIN_KEY}"))[0] == 429
        # the waits are async: a second failure waits, others are served
        throttle.sources.clear()
        throttle.base_delay = 0.5
        assert (await get(s, sc.root + "/ui", Authorization="Bearer wrong-key"))[0] == 401
        slow = asyncio.create_task(get(s, sc.root + "/ui", Authorization="Bearer wrong-key"))
        await asyncio.sleep(0.05)
        async with s.get(sc.root + "/healthz") as r:
            assert r.status == 200
        assert not slow.done()  # still waiting, and it kept no one else waiting
        assert (await slow)[0] == 401


def test_the_login_delay_grows_is_bounded_and_so_is_memory() -> None:
    now = [0.0]
    t = LoginThrottle(limit=5, window=60, max_sources=3, clock=lambda: now[0])
    delays = []
    for _ in range(5):
        assert t.begin("a") is None
        delays.append(t.delay("a"))
    assert delays == sorted(delays) and delays[0] == 0 < delays[1] < delays[-1] <= t.max_delay
    assert t.begin("a") == 60
    now[0] = 45.0
    assert t.begin("a") == 15
    now[0] = 61.0
    assert t.begin("a") is None  # the window ended
    for source in ("b", "c", "d", "e"):
        t.begin(source)
    assert len(t.sources) == 3 and "a" not in t.sources
    t.succeeded("e")
    assert "e" not in t.sources


def test_the_page_needs_one_of_the_proxys_own_keys() -> None:
    with pytest.raises(ConfigError, match="ui"):
        build_config({"upstreams": ["http://127.0.0.1:9/v1"], "ui": True}, env={})
    cfg = build_config(
        {"upstreams": ["http://127.0.0.1:9/v1"], "ui": True, "api_keys": ["sk-k-123"]}, env={}
    )
    assert cfg.ui


async def test_without_ui_there_is_no_page(tmp_path: Path) -> None:
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url, api_keys=[ADMIN_KEY])) as px,
        aiohttp.ClientSession() as s,
    ):
        assert (await get(s, px.root + "/ui"))[0] == 401  # the proxy's own key check
        status, _ = await get(s, px.root + "/ui", Authorization=f"Bearer {ADMIN_KEY}")
        assert status == 404


# -- state-changing actions ---------------------------------------------------------


async def test_reload_needs_the_csrf_token(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        url = sc.root + "/ui/reload"
        async with s.post(url, allow_redirects=False) as r:
            assert r.status == 403
        async with s.post(url, data={"csrf": "x" * 32}, allow_redirects=False) as r:
            assert r.status == 403
        assert sc.reloads == []
        token = await csrf_of(s, sc.root + "/ui/config")
        async with s.post(
            url,
            data={"csrf": token},
            headers={"Origin": "http://evil.example"},
            allow_redirects=False,
        ) as r:
            assert r.status == 403
        assert sc.reloads == []
        async with s.post(url, data={"csrf": token}, allow_redirects=False) as r:
            assert r.status == 303
            assert r.headers["Location"] == "/ui/config?done=reloaded"
        assert sc.reloads == [1]
        async with s.post(sc.root + "/ui/probe/0", allow_redirects=False) as r:
            assert r.status == 403
        async with s.post(sc.root + "/ui/logout", allow_redirects=False) as r:
            assert r.status == 403


async def test_a_script_with_the_key_needs_no_token(tmp_path: Path) -> None:
    async with scene(tmp_path, serve=False) as sc, aiohttp.ClientSession() as s:
        async with s.post(
            sc.root + "/ui/reload",
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            allow_redirects=False,
        ) as r:
            assert r.status == 303
        assert sc.reloads == [1]


async def test_a_probe_from_the_page_runs_off_the_request_and_shows_its_table(
    tmp_path: Path,
) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        token = await csrf_of(s, sc.root + "/ui")
        async with s.post(
            sc.root + "/ui/probe/0", data={"csrf": token}, allow_redirects=False
        ) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui/probe/0"
        for _ in range(200):
            status, text = await get(s, sc.root + "/ui/probe/0")
            if "probing" not in text.lower() or "verdict" in text:
                break
            await asyncio.sleep(0.05)
        assert status == 200
        assert "tools, a call wanted" in text and 'class="verdict"' in text
        asked = sum(r.path.endswith("/chat/completions") for r in sc.upstream.requests)
        assert asked == 2 * len(CASES)  # each case streamed and not
        assert all(s not in text for s in SECRETS)


# -- what the views show ----------------------------------------------------------


async def all_pages(sc: Scene, s: aiohttp.ClientSession) -> dict[str, str]:
    out = {}
    status, listing = await get(s, sc.root + "/ui/recordings")
    assert status == 200
    names = re.findall(r'href="/ui/recordings/([^"]+)"', listing)
    assert names
    for path in (*PAGES, *(f"/ui/recordings/{n}" for n in names)):
        status, text = await get(s, sc.root + path)
        assert status == 200, path
        out[path] = text
    return out


async def test_no_key_is_ever_rendered(tmp_path: Path) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        await logged_in(s, sc)
        for path, text in (await all_pages(sc, s)).items():
            for secret in SECRETS:
                assert secret not in text, (path, secret)


async def test_model_output_is_shown_as_text(tmp_path: Path) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        await logged_in(s, sc)
        pages = await all_pages(sc, s)
        hostile = [p for p, t in pages.items() if "pwned" in t]
        assert hostile
        for path in hostile:
            text = pages[path]
            assert "<script>alert" not in text and 'href="javascript:' not in text, path
            assert "<img src=x" not in text and "</textarea></pre>" not in text, path
            assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in text, path
            assert len(re.findall(r"<script", text)) == 1  # ours, from /ui/static/


async def test_a_recording_shows_the_upstream_the_client_and_today(tmp_path: Path) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        await logged_in(s, sc)
        status, listing = await get(s, sc.root + "/ui/recordings?reason=loop")
        [name] = re.findall(r'href="/ui/recordings/([^"]+)"', listing)
        status, text = await get(s, sc.root + f"/ui/recordings/{name}")
        assert status == 200
        assert "the upstream sent" in text and "the client got" in text
        assert "today&#x27;s chain" in text
        # the loop: 60 lines sent, a few kept; marked as a repair, same today
        row = re.search(r'<tr data-field="content">(.*?)</tr>', text, re.S)
        assert row and row.group(1).count("the cat sat on the mat.") > 10
        assert 'class="side client diff"' in row.group(1)
        assert 'class="side now"' in row.group(1)  # today's chain agrees with then
        finish = re.search(r'<tr data-field="finish reason">(.*?)</tr>', text, re.S)
        assert finish and "length" in finish.group(1)


async def test_recordings_filter_by_model_tenant_and_reason(tmp_path: Path) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        await logged_in(s, sc)

        async def names(query: str) -> list[str]:
            status, text = await get(s, sc.root + "/ui/recordings" + query)
            assert status == 200
            return re.findall(r'href="/ui/recordings/([^"]+)"', text)

        every = await names("")
        assert every == sorted(every, reverse=True)  # newest first
        assert len(every) == 6  # repair x2, loop, unrecognised x2, hostile
        assert len(await names("?tenant=team-a")) == 1
        assert len(await names("?model=other-model")) == 1
        assert len(await names("?reason=unrecognised")) == 2
        assert len(await names("?reason=loop&tenant=team-a")) == 0
        _, listing = await get(s, sc.root + "/ui/recordings?reason=repair")
        assert "repair (lifted.hermes" in listing  # which repair, not only "repair"
        # a name that is not a recording's reaches nothing
        for bad in ("..%2Fsecret.json", "x.json", "%2Fetc%2Fpasswd"):
            assert (await get(s, sc.root + "/ui/recordings/" + bad))[0] == 404


async def test_the_models_view_shows_rows_requests_latency_and_the_last_hour(
    tmp_path: Path,
) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        await logged_in(s, sc)
        status, text = await get(s, sc.root + "/ui")
    assert status == 200
    rows = re.findall(r'<tr data-row="(\d)">(.*?)</tr>', text, re.S)
    assert [i for i, _ in rows] == ["0", "1"]
    named, catch_all = rows[0][1], rows[1][1]
    assert "<strong>m</strong>" in named and "<strong>*</strong>" in catch_all
    assert 'data-kind="lifted.hermes"' in named and 'data-kind="loop_cut"' in named
    assert 'data-kind="calls.' not in text  # every emitted call: not a repair
    assert 'data-kind="unrecognised_markup"' in catch_all
    assert re.search(r'class="num">6<', named)  # six requests for m
    # p50 / p99 from its histogram; the unit follows the time, which a loaded
    # machine stretches past a millisecond
    assert re.search(r"\d (µs|ms) / (<a [^>]*>)?[\d.]+ (µs|ms)", named), named
    assert "user:" not in text  # the catch-all row's URL is shown without its credentials


async def test_the_p99_leads_to_the_requests_of_the_slowest_reads(tmp_path: Path) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        payload = {"model": "m", "messages": [{"role": "user", "content": "plain"}], "stream": True}
        async with s.post(
            sc.proxy.url + "/chat/completions",
            data=orjson.dumps(payload),
            headers={"Authorization": f"Bearer {ADMIN_KEY}", "X-Request-Id": "mine-1"},
        ) as r:
            assert r.status == 200
            await r.read()
            assert r.headers["X-Streamfix-Request-Id"] == "mine-1"  # the client's id kept
        await logged_in(s, sc)
        _, text = await get(s, sc.root + "/ui")
        link = re.search(r'<a href="/ui/slow/0" title="the read at the p99: request ([^"]+)"', text)
        assert link, text
        status, slow = await get(s, sc.root + "/ui/slow/0")
    assert status == 200
    ids = re.findall(r"<code>([^<]+)</code>", slow)
    assert len(ids) == len(set(ids)) == 7  # one row per request: six scripted, one plain
    assert "mine-1" in ids and link.group(1) in ids
    assert 'class="at-p99"' in slow


async def test_the_unrecognised_view_has_the_samples_and_the_count_per_model(
    tmp_path: Path,
) -> None:
    async with scene(tmp_path) as sc, browser() as s:
        await logged_in(s, sc)
        status, text = await get(s, sc.root + "/ui/unrecognised")
        _, metrics = await get(s, sc.root + "/metrics")
    assert status == 200
    assert text.count('<pre class="sample">&lt;tool_call&gt;</pre>') == 2  # one per reply
    # the counts per model add up to the counter's (the chain counts each region)
    per_model = dict(re.findall(r'<tr><td>([^<]+)</td><td class="num">(\d+)</td></tr>', text))
    assert set(per_model) == {"m", "*"} and per_model["m"] == per_model["*"]
    total = re.search(r"^streamfix_unrecognised_markup_total (\S+)$", metrics, re.M)
    assert total and float(total.group(1)) == sum(map(int, per_model.values()))


async def test_a_stripped_token_is_unrecognised_nowhere(tmp_path: Path) -> None:
    """A lifted call and a stripped ``<|im_end|>``: the report, the metrics,
    the page and the recording's reasons say stripped, never unrecognised."""
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        got = await sc.chat("call, then im_end")
        assert await asyncio.to_thread(sc.proxy.app[RECORDER].flush, 5.0)
        await logged_in(s, sc)
        _, models = await get(s, sc.root + "/ui")
        _, unrecognised = await get(s, sc.root + "/ui/unrecognised")
        _, metrics = await get(s, sc.root + "/metrics")
    assert b"im_end" not in got and b'"tool_calls"' in got
    assert 'data-kind="lifted.hermes"' in models
    assert 'data-kind="unrecognised_markup"' not in models
    assert "No unrecognised markup since this process started" in unrecognised
    total = re.search(r"^streamfix_unrecognised_markup_total (\S+)$", metrics, re.M)
    assert total is None or float(total.group(1)) == 0
    assert re.search(r'^streamfix_repairs_total\{[^}]*kind="stripped.special_token"', metrics, re.M)
    [path] = sorted(tmp_path.glob("*.json"))
    doc = orjson.loads(path.read_bytes())
    assert doc["reasons"] == ["repair"]
    [attempt] = doc["attempts"]
    assert attempt["report"]["counts"]["stripped.special_token"] == 1
    assert "unrecognised_markup" not in attempt["report"]["counts"]
    assert attempt["report"]["unrecognised"] == []


async def test_the_config_view_says_whether_keys_are_set_never_what_they_are(
    tmp_path: Path,
) -> None:
    async with scene(tmp_path, serve=False) as sc, browser() as s:
        await logged_in(s, sc)
        status, text = await get(s, sc.root + "/ui/config")
    assert status == 200
    assert "<td>set</td>" in text and "<td>in URL</td>" in text
    assert "team-a" in text and "1 set" in text
    assert 'action="/ui/reload"' in text
    assert all(secret not in text for secret in SECRETS)


def test_a_recordings_repairs_are_its_reports_kinds() -> None:
    from streamfix.server.ui.recordings import repairs_of, summary_of

    report = {"counts": {"calls.hermes": 1, "lifted.hermes": 1, "loop_cut": 1, "json_fence": 2}}
    doc = {"format": "streamfix-recording/1", "reasons": ["repair", "loop"]}
    doc["attempts"] = [{"report": report}, {"report": None}]
    assert repairs_of(doc) == ("json_fence", "lifted.hermes", "asked again")
    words = summary_of("x.json", doc).reasons_words()
    assert words == "repair (json_fence, lifted.hermes, asked again), loop"


def test_the_config_view_says_its_values_in_plain_words() -> None:
    from streamfix.server.ui.pages import config_rows, size_words

    rows = dict(config_rows(ServerConfig(request_timeout=0.0, keepalive_interval=0.0), 2))
    assert rows["request_timeout"] == "no limit"  # its help: "0 = no limit"
    assert rows["keepalive_interval"] == "none"  # its help: "0 = none"
    assert rows["body_limit"] == "8 MiB"
    assert rows["record_max_bytes"] == "256 MiB"
    assert rows["record"] == "not set" and rows["narrow_embedding"] == "not set"
    assert rows["traces"] == "off" and rows["formats"] == "none"
    assert rows["read_timeout"] == "300 s" and rows["api_keys"] == "2 key(s) set"
    assert "None" not in rows.values() and "0.0" not in rows.values()
    assert (size_words(1536), size_words(512)) == ("1.5 KiB", "512 bytes")


async def test_recordings_say_whose_key_they_came_with(tmp_path: Path) -> None:
    async with scene(tmp_path) as sc:
        tenants = sorted(orjson.loads(p.read_bytes())["tenant"] for p in sc.record.glob("*.json"))
    assert tenants == ["-", "-", "-", "-", "-", "team-a"]


# -- the pieces -----------------------------------------------------------------------


def test_html_escapes_every_string() -> None:
    out = tag("a", '<script>"x"</script>', href="javascript:alert('1')\"><b>", class_="c")
    assert out == (
        '<a href="javascript:alert(&#x27;1&#x27;)&quot;&gt;&lt;b&gt;" class="c">'
        "&lt;script&gt;&quot;x&quot;&lt;/script&gt;</a>"
    )
    assert esc(esc("<")) == "&lt;"  # escaped once


def test_the_chart_draws_a_bar_per_kind_and_escapes_kinds() -> None:
    minutes: list[dict[str, int]] = [{} for _ in range(60)]
    minutes[-1] = {"calls.hermes": 2, "loop_cut": 1}
    minutes[0] = {"<b>": 1}
    svg = repairs_chart(minutes, "m")
    assert svg.count("<rect") == 3 + 3  # three bars, three legend swatches
    assert "&lt;b&gt;" in svg and "<b>" not in svg
    assert "no repairs" in repairs_chart([{}] * 60, "m")


def test_a_loop_cut_among_many_json_repairs_has_its_own_series() -> None:
    minutes: list[dict[str, int]] = [{} for _ in range(60)]
    minutes[-1] = {f"stripped.k{i}": 50 + i for i in range(8)}
    minutes[-1] |= {"json_fence": 300, "loop_cut": 1, "lifted.hermes": 1}
    svg = repairs_chart(minutes, "m")
    kinds = re.findall(r'data-kind="([^"]+)"', svg)
    assert {"loop_cut", "lifted.hermes", "json_fence"} <= set(kinds)
    assert "other" in kinds  # the long tail, summed
    assert "stripped.k0" not in kinds  # the least frequent of the tail


def test_the_login_label_names_its_input() -> None:
    from streamfix.server.ui.pages import login_page

    out = login_page()
    assert '<label for="key">' in out and 'id="key"' in out
    assert "for-=" not in out
    assert tag("td", class_="x", data_row=1) == '<td class="x" data-row="1"></td>'


def test_the_slowest_reads_are_bounded_one_per_request() -> None:
    from streamfix.server import requestid
    from streamfix.server.metrics import SlowReads

    slow = SlowReads(size=3)
    for i in range(10):
        token = requestid._CURRENT.set(f"r{i % 5}")
        try:
            slow.offer(0.001 * (i + 1))
        finally:
            requestid._CURRENT.reset(token)
    kept = slow.slowest()
    assert [r.request_id for r in kept] == ["r4", "r3", "r2"]  # each at its slowest read
    assert [round(r.seconds, 3) for r in kept] == [0.01, 0.009, 0.008]
    assert slow.floor == kept[-1].seconds  # a faster read costs one comparison
    assert len(slow.heap) == 3


def test_the_last_hour_is_a_ring_of_minutes() -> None:
    a = act.Activity()
    a.report("m", {"lifted.hermes": 1, "calls.structured": 5}, now=60.0 * 100)
    a.report("m", {"lifted.hermes": 2, "calls.hermes": 2}, now=60.0 * 100 + 30)
    a.report("m", {"loop_cut": 1}, now=60.0 * 130)
    hour = a.last_hour("m", now=60.0 * 130)
    assert len(hour) == act.MINUTES
    assert hour[-31] == {"lifted.hermes": 3}  # calls.* count every call, not repairs
    assert hour[-1] == {"loop_cut": 1}
    # an hour later the old minute's slot is reused, not added to
    a.report("m", {"loop_cut": 1}, now=60.0 * 160)
    hour = a.last_hour("m", now=60.0 * 160)
    assert sum(sum(c.values()) for c in hour) == 2
    assert a.last_hour("m", now=60.0 * 300) == [{}] * act.MINUTES
    assert a.last_hour("nobody") == [{}] * act.MINUTES


def test_samples_are_bounded_newest_first_and_counted_per_model() -> None:
    a = act.Activity()
    for i in range(act.MAX_SAMPLES + 50):
        a.report("m", {"unrecognised_markup": 1}, [f"<x{i}>"], now=float(i))
    assert len(a.samples) == act.MAX_SAMPLES
    assert a.samples[0].text == f"<x{act.MAX_SAMPLES + 49}>"
    assert a.unrecognised == {"m": act.MAX_SAMPLES + 50}


def test_model_labels_are_bounded() -> None:
    a = act.Activity()
    for i in range(act.MAX_MODELS + 10):
        a.report(f"m{i}", {"loop_cut": 1}, now=0.0)
    assert len(a.series) == act.MAX_MODELS + 1
    assert sum(sum(c.values()) for c in a.last_hour(act.OTHER, now=0.0)) == 10


def test_the_chunk_histogram_per_model_is_one_histogram_to_prometheus() -> None:
    m = Metrics()
    m.chunk_seconds.of("a").observe(1e-5)
    m.chunk_seconds.of("b").observe(1e-3)
    m.chunk_seconds.of("b").observe(1e-3)
    m.chunk_seconds.observe(1e-6)
    text = m.render().decode()
    assert "streamfix_chunk_seconds_count 4.0" in text
    assert 'streamfix_chunk_seconds_bucket{le="1e-05"} 2.0' in text
    assert "model=" not in text.split("streamfix_chunk_seconds")[1]
    b = m.chunk_seconds.models["b"]
    assert b.quantile(0.5) is not None and 5e-4 < b.quantile(0.5) <= 1e-3  # type: ignore[operator]
    assert m.chunk_seconds.models["a"].quantile(0.99) == pytest.approx(1e-5, rel=0.02)


async def test_the_ui_off_keeps_no_activity() -> None:
    cfg = ServerConfig(upstreams=[parse_upstream("http://127.0.0.1:9/v1")])
    app = create_app(cfg)
    assert app[PROXY].activity is None


def test_ui_is_a_flag_and_a_toml_setting(tmp_path: Path) -> None:
    from streamfix.tools.cli import build_parser

    args = build_parser().parse_args(
        ["serve", "--upstream", "http://127.0.0.1:9/v1", "--api-key", "sk-k-123", "--ui"]
    )
    assert args.ui is True
    toml = tmp_path / "c.toml"
    toml.write_text(
        'ui = true\napi_key = "sk-k-123"\n[[upstream]]\nurl = "http://127.0.0.1:9/v1"\n'
    )
    assert build_config({}, env={}, config_file=str(toml)).ui
    assert not build_config({"upstreams": ["http://127.0.0.1:9/v1"]}, env={}).ui  # off by default
