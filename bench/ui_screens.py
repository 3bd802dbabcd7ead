"""Screenshots of the operator page's views, for docs/operations.md (docs/ui/*.png).

    .venv/bin/python -m bench.ui_screens [--out docs/ui]

The same setup as the browser tests (tests/support/ui_browser.py: the
system's Chromium, headless, driven by Playwright; nothing downloaded)
against the same scene (tests/support/ui_scene.py: a proxy with ``--ui``
that has served scripted repairs, a loop, an unrecognised shape and a
reply full of markup and ``<script>``; a probe of its first row run from
the page). What the pictures show is what the page showed: nothing is
drawn for them.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from tests.support.ui_browser import launch, missing
from tests.support.ui_scene import ADMIN_KEY, scene

WIDTH = 1360


async def shoot(page: Any, url: str, path: Path) -> None:
    await page.goto(url)
    await page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path}")


async def main(out: Path) -> int:
    why = missing()
    if why is not None:
        print(f"cannot take screenshots: {why}")
        return 2
    from playwright.async_api import async_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as record:
        async with scene(Path(record)) as sc, async_playwright() as pw:
            browser = await launch(pw)
            page = await browser.new_page(viewport={"width": WIDTH, "height": 700})
            await shoot(page, sc.root + "/ui/login", out / "login.png")
            await page.fill("input[name=key]", ADMIN_KEY)
            async with page.expect_navigation():
                await page.click("form.login button")
            async with page.expect_navigation():
                await page.click("tr[data-row='0'] form button")  # a probe, from the page
            await page.wait_for_selector("p.verdict", timeout=60_000)
            await shoot(page, sc.root + "/ui/probe/0", out / "probe.png")
            await shoot(page, sc.root + "/ui", out / "models.png")
            await shoot(page, sc.root + "/ui/recordings", out / "recordings.png")
            for name, query in (
                ("recording", "reason=repair&tenant=team-a"),
                ("recording-hostile", "model=m&reason=repair"),
            ):
                await page.goto(sc.root + "/ui/recordings?" + query)
                links = page.locator("table.recordings a")
                href = None
                for link in await links.all():
                    candidate = await link.get_attribute("href")
                    await page.goto(sc.root + str(candidate))
                    text = await page.locator("main").inner_text()
                    if (name == "recording-hostile") == ("pwned" in text):
                        href = candidate
                        break
                    await page.go_back()
                assert href is not None, name
                await shoot(page, sc.root + href, out / f"{name}.png")
            await shoot(page, sc.root + "/ui/unrecognised", out / "unrecognised.png")
            await shoot(page, sc.root + "/ui/config", out / "config.png")
            await browser.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/ui"))
    raise SystemExit(asyncio.run(main(parser.parse_args().out)))
