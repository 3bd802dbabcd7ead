"""End-to-end fixtures: one real llama.cpp server (SmolLM2-135M) for the
session, a recording relay in front of it, and ``streamfix serve`` (the
proxy app, in-process on a free port) in front of the relay::

    client ──► streamfix proxy ──► recording relay ──► llama.cpp server

The server and proxy run for the whole session (starting the model takes
about a second, but every test re-using one server keeps the suite
short). Tests that depend on what the proxy has learned (the context
window) get a fresh proxy from ``make_proxy``.

Without the ``local`` extra these tests are skipped with the install
command, unless ``STREAMFIX_E2E=require`` (CI) turns that into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from streamfix.tools.local import INSTALL_HINT, AppThread, LocalServer, available
from tests.e2e.relay import RecordingRelay

#: Seconds between the server's ``: ping`` comments during the tests (its
#: default is 15 s, longer than any reply here): real pings in every stream
#: longer than this.
PING_INTERVAL = 0.3


def need_local_server() -> None:
    """Skip (fail under ``STREAMFIX_E2E=require``) without llama.cpp's server."""
    if not available():
        if os.environ.get("STREAMFIX_E2E") == "require":
            pytest.fail(f"the local model server is not installed; {INSTALL_HINT}")
        pytest.skip(f"the local model server is not installed; {INSTALL_HINT}")


@pytest.fixture(scope="session")
def llama() -> Iterator[LocalServer]:
    need_local_server()
    with LocalServer(ping_interval=PING_INTERVAL) as server:
        yield server


@pytest.fixture(scope="session")
def relay_thread(llama: LocalServer) -> Iterator[tuple[RecordingRelay, AppThread]]:
    relay = RecordingRelay(llama.root_url)
    with AppThread(relay.app, handler_cancellation=True) as thread:
        yield relay, thread


@pytest.fixture(scope="session")
def relay(relay_thread: tuple[RecordingRelay, AppThread]) -> RecordingRelay:
    return relay_thread[0]


@pytest.fixture(scope="session")
def relay_url(relay_thread: tuple[RecordingRelay, AppThread]) -> str:
    return relay_thread[1].base_url


ProxyFactory = Callable[..., AppThread]


@pytest.fixture(scope="session")
def make_proxy(relay_url: str) -> Iterator[ProxyFactory]:
    """Start a proxy in front of the relay: ``make_proxy(**settings)``."""
    from streamfix.server import ServerConfig, create_app
    from streamfix.server.config import parse_upstream

    started: list[AppThread] = []

    def make(**settings: Any) -> AppThread:
        config = ServerConfig(upstreams=[parse_upstream(relay_url)], **settings)
        thread = AppThread(create_app(config), handler_cancellation=True).start()
        started.append(thread)
        return thread

    yield make
    for thread in reversed(started):
        thread.stop()


@pytest.fixture(scope="session")
def proxy(make_proxy: ProxyFactory) -> AppThread:
    """The session's proxy (``proxy.base_url``)."""
    return make_proxy()


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0)) as client:
        yield client
