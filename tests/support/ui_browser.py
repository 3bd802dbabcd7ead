"""Chromium from the system's packages, driven by Playwright, for the
operator page's browser tests and screenshots. Nothing is downloaded
from a browser vendor: ``playwright install`` is never run; the browser
is Debian's ``chromium`` (``.ci/run`` installs it), launched headless
with no network of its own (no sync, no component updates, no QUIC).

Without Playwright or Chromium the browser tests skip with the install
command, unless ``STREAMFIX_E2E=require`` (CI), which makes it a failure.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

CHROMIUM = os.environ.get("STREAMFIX_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL_HINT = (
    "install Chromium from the system's packages (apt-get install chromium) and "
    "Playwright for Python (pip install -e '.[dev]'); never 'playwright install'"
)


def missing() -> str | None:
    """What is missing to run the browser tests, or None."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed"
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM}"
    return None


def need_browser() -> None:
    """Skip (fail under ``STREAMFIX_E2E=require``) without a browser."""
    why = missing()
    if why is None:
        return
    if os.environ.get("STREAMFIX_E2E") == "require":
        pytest.fail(f"{why}; {INSTALL_HINT}")
    pytest.skip(f"{why}; {INSTALL_HINT}")


async def launch(pw: Any) -> Any:
    """The system's Chromium, headless (a Playwright ``Browser``)."""
    return await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
