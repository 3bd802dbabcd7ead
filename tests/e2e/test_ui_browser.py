"""The operator page (``--ui``) in a real headless browser: Debian's
Chromium driven by Playwright (``tests/support/ui_browser.py``), against a
proxy that has served scripted repairs, a loop, an unrecognised shape and
a reply full of markup and ``<script>`` (``tests/support/ui_scene.py``).

Every view loads with no console error (a CSP violation is one); a
recording shows what the upstream sent beside what the client got; a
hostile reply is text (no dialog, no element made from it); a tenant key
and no key are refused; reload, probe and the filters work from the page.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from streamfix.server.probe import CASES
from tests.support.ui_browser import launch, need_browser
from tests.support.ui_scene import ADMIN_KEY, TENANT_KEY, Scene, scene

pytestmark = pytest.mark.timeout(180)


class Watched:
    """A page whose console errors, script errors and dialogs are kept."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("dialog", self._dialog)

    def _console(self, msg: Any) -> None:
        if msg.type in ("error", "warning"):
            self.errors.append(f"{msg.type}: {msg.text}")

    async def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        await dialog.dismiss()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    need_browser()
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await launch(pw)
        try:
            yield b
        finally:
            await b.close()


async def log_in(page: Any, sc: Scene, key: str = ADMIN_KEY) -> Any:
    await page.goto(sc.root + "/ui/login")
    await page.fill("input[name=key]", key)
    async with page.expect_navigation():
        await page.click("form.login button")
    return page


async def test_every_view_loads_with_no_console_error(tmp_path: Path, browser: Any) -> None:
    async with scene(tmp_path) as sc:
        w = Watched(await browser.new_page())
        await log_in(w.page, sc)
        assert w.page.url == sc.root + "/ui"
        assert await w.page.locator("tr[data-row]").count() == 2
        assert await w.page.locator("svg.chart rect[data-kind=loop_cut]").count() == 1
        for link in ("Recordings", "Unrecognised markup", "Config", "Models"):
            async with w.page.expect_navigation():
                await w.page.click(f"nav a:text-is('{link}')")
            assert await w.page.locator("h1").count() == 1
        await w.page.goto(sc.root + "/ui/recordings")
        names = await w.page.locator("table.recordings a").all()
        assert len(names) == 6
        for i in range(6):
            await w.page.goto(sc.root + "/ui/recordings")
            async with w.page.expect_navigation():
                await w.page.locator("table.recordings a").nth(i).click()
            assert await w.page.locator("table.sides").count() == 1
        assert w.errors == [] and w.dialogs == []


async def test_a_recording_shows_what_was_sent_and_what_was_received(
    tmp_path: Path, browser: Any
) -> None:
    async with scene(tmp_path) as sc:
        w = Watched(await browser.new_page())
        await log_in(w.page, sc)
        await w.page.goto(sc.root + "/ui/recordings?reason=repair&tenant=team-a")
        async with w.page.expect_navigation():
            await w.page.locator("table.recordings a").first.click()
        content = w.page.locator("tr[data-field=content]")
        sent = await content.locator("td.upstream").inner_text()
        got = await content.locator("td.client").inner_text()
        assert '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}' in sent
        assert "<tool_call>" not in got and "Let me check." in got
        calls = w.page.locator("tr[data-field='tool calls']")
        assert "(none)" in await calls.locator("td.upstream").inner_text()
        assert 'lookup_order({"order_id":"A1"})' in await calls.locator("td.client").inner_text()
        assert 'lookup_order({"order_id":"A1"})' in await calls.locator("td.now").inner_text()
        finish = w.page.locator("tr[data-field='finish reason']")
        assert "stop" in await finish.locator("td.upstream").inner_text()
        assert "tool_calls" in await finish.locator("td.client").inner_text()
        assert await w.page.locator("td.client.diff").count() >= 3  # marked as repaired
        assert await w.page.locator("td.now.changed").count() == 0  # the same today
        assert w.errors == []


async def test_a_reply_with_markup_and_script_is_shown_as_text(
    tmp_path: Path, browser: Any
) -> None:
    async with scene(tmp_path) as sc:
        w = Watched(await browser.new_page())
        await log_in(w.page, sc)
        await w.page.goto(sc.root + "/ui/recordings")
        hrefs = [
            await a.get_attribute("href") for a in await w.page.locator("table.recordings a").all()
        ]
        shown = []
        for href in hrefs:
            await w.page.goto(sc.root + href)
            text = await w.page.locator("tr[data-field=content] td.upstream").inner_text()
            if "pwned" in text:
                shown.append(text)
                assert '<script>alert("pwned")</script>' in text
                assert '<a href="javascript:alert(1)">click</a>' in text
                assert '<img src=x onerror="alert(2)">' in text
                # nothing of it became an element
                assert await w.page.locator("main img, main a[href^=javascript]").count() == 0
                assert await w.page.locator("script").count() == 1  # ours
                await w.page.click("details summary >> nth=0")  # the raw bytes, opened
                raw = await w.page.locator("pre.raw").first.inner_text()
                assert "alert" in raw
        assert len(shown) == 1
        assert w.dialogs == [] and w.errors == []
        assert await w.page.evaluate("typeof window.pwned") == "undefined"


async def test_a_tenant_key_and_no_key_are_refused(tmp_path: Path, browser: Any) -> None:
    async with scene(tmp_path, serve=False) as sc:
        page = await browser.new_page()
        for path in ("/ui", "/ui/recordings", "/ui/config"):
            resp = await page.goto(sc.root + path)
            assert resp.status == 401
            assert await page.locator("form.login").count() == 1
        await page.fill("input[name=key]", TENANT_KEY)
        async with page.expect_navigation() as nav:
            await page.click("form.login button")
        assert (await nav.value).status == 403
        assert "own keys" in await page.locator("main").inner_text()
        resp = await page.goto(sc.root + "/ui")
        assert resp.status == 401  # no session was made
        await page.fill("input[name=key]", "sk-not-a-key-at-all")
        async with page.expect_navigation() as nav:
            await page.click("form.login button")
        assert (await nav.value).status == 401
        assert not await page.context.cookies()


async def test_reload_probe_and_filters_work_from_the_page(tmp_path: Path, browser: Any) -> None:
    async with scene(tmp_path) as sc:
        w = Watched(await browser.new_page())
        await log_in(w.page, sc)
        await w.page.goto(sc.root + "/ui/config")
        async with w.page.expect_navigation():
            await w.page.click("form.reload button")
        assert "Reloaded" in await w.page.locator("p.status").inner_text()
        assert sc.reloads == [1]
        # a probe: started by POST, the page refreshes itself until it ends
        await w.page.goto(sc.root + "/ui")
        async with w.page.expect_navigation():
            await w.page.click("tr[data-row='0'] form button")
        assert re.search(r"/ui/probe/0$", w.page.url)
        await w.page.wait_for_selector("p.verdict", timeout=60_000)
        assert await w.page.locator("table.probe tbody tr").count() == 2 * len(CASES)
        # the filters submit themselves when one is chosen (our script)
        await w.page.goto(sc.root + "/ui/recordings")
        async with w.page.expect_navigation():
            await w.page.select_option("select[name=reason]", "loop")
        assert "reason=loop" in w.page.url
        assert await w.page.locator("table.recordings tbody tr").count() == 1
        assert w.errors == [] and w.dialogs == []
        # logging out ends the session (the 401 that follows is the browser's
        # one console error: a page answered 401)
        async with w.page.expect_navigation():
            await w.page.click("nav form.logout button")
        resp = await w.page.goto(sc.root + "/ui")
        assert resp.status == 401


async def test_a_loop_cut_among_many_json_repairs_is_visible_in_the_chart(
    tmp_path: Path, browser: Any
) -> None:
    async with scene(tmp_path) as sc:
        await sc.json_repairs(20)  # five json_* kinds, each far more than the one loop cut
        w = Watched(await browser.new_page())
        await log_in(w.page, sc)
        chart = w.page.locator("tr[data-row='0'] svg.chart")
        cut = chart.locator("rect[data-kind=loop_cut]")
        assert await cut.count() == 1
        assert await cut.is_visible()
        box = await cut.bounding_box()
        assert box is not None and box["height"] > 0 and box["width"] > 0
        assert await chart.locator("rect[data-kind=json_quote]").count() == 1
        legend = await w.page.locator("tr[data-row='0'] ul.legend").inner_text()
        assert "loop_cut 1" in legend and "lifted.hermes" in legend
        # the p99 leads to the requests of the slowest reads
        async with w.page.expect_navigation():
            await w.page.click("tr[data-row='0'] a.p99")
        assert await w.page.locator("table.slow tr.at-p99 code").count() == 1
        await w.page.goto(sc.root + "/ui/config")
        settings = await w.page.locator("table.settings").inner_text()
        assert "no limit" in settings and "8 MiB" in settings and "None" not in settings
        assert w.errors == [] and w.dialogs == []
