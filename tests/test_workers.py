"""``streamfix serve --workers 2`` as a real process group (issue 37,
items 13 and 17), on loopback against a scripted upstream, bounded in
time, every process killed in ``finally``:

- a stop sent to the whole group (what ``systemctl stop`` and Ctrl-C do)
  lets every stream in flight end whole, and the parent exits 0;
- a worker that dies is replaced (logged), the service keeps its N
  workers; past ``MAX_RESTARTS`` in the window the parent exits non-zero;
- SIGTERM to the parent drains every worker (``/readyz`` 503 on each
  during the grace, the stream in flight whole, exit 0); a second SIGTERM
  to the parent ends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import aiohttp
import pytest

from streamfix.tools.cli import GAVE_UP, MAX_RESTARTS
from streamfix.tools.local import free_port

from .support.streamutil import assemble, text_stream
from .support.upstream_fake import FakeUpstream, Reply

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc for the workers")

ROOT = Path(__file__).resolve().parent.parent
PIECES = [f"piece {i}. " for i in range(12)]
STREAM = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}


class Served:
    """The parent process, its log, the URL."""

    def __init__(self, proc: subprocess.Popen[bytes], log: IO[bytes], root: str) -> None:
        self.proc = proc
        self.log = log
        self.root = root

    def workers(self) -> list[int]:
        """The parent's worker processes (not multiprocessing's tracker)."""
        pids = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (task / "children").read_text().split()]
        out = []
        for pid in pids:
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(pid)
        return out

    def text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@asynccontextmanager
async def serve(upstream: str, workers: int = 2, *extra: str) -> AsyncIterator[Served]:
    """``streamfix serve --workers N`` in a session of its own (its own
    process group, as a service manager starts it); killed at the end."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    port = free_port()
    options = ["--port", str(port), "--workers", str(workers), "--log-level", "warning", *extra]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamfix", "serve", "--upstream", upstream, *options],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        try:
            served = Served(proc, log, f"http://127.0.0.1:{port}")
            await _until(lambda: len(served.workers()) == workers, 30)
            await _healthy(served.root, 30)
            yield served
        finally:
            _kill_group(proc.pid)
            proc.wait(10)


async def _until(done: Callable[[], object], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition did not come in time")
        await asyncio.sleep(0.05)


async def _healthy(root: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as s:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(root + "/healthz") as r:
                    if r.status == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError("streamfix serve did not start")
            await asyncio.sleep(0.05)


async def _exited(proc: subprocess.Popen[bytes], seconds: float) -> int:
    await _until(lambda: proc.poll() is not None, seconds)
    return proc.returncode


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_group_stop_lets_every_stream_end_whole(sig: signal.Signals) -> None:
    """20 streams in flight over both workers; the stop to the whole group
    (each worker gets it, then the parent's forward): 20 of 20 end whole
    (before: 0 of 20), the parent exits 0."""
    reply = Reply.events(text_stream(PIECES), delay=0.15)
    async with FakeUpstream(reply) as up, serve(up.url) as served:
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as s:

            async def one() -> bytes:
                async with s.post(served.root + "/v1/chat/completions", json=STREAM) as r:
                    return await r.read()

            tasks = [asyncio.create_task(one()) for _ in range(20)]
            await _until(lambda: len(up.chat_requests) == 20, 20)
            await asyncio.sleep(0.3)  # each stream has begun
            os.killpg(served.proc.pid, sig)
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        whole = [
            r for r in results if isinstance(r, bytes) and assemble(r).content == "".join(PIECES)
        ]
        assert len(whole) == 20, served.text()[-2000:]
        assert await _exited(served.proc, 30) == 0


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def test_a_dead_worker_is_replaced_and_too_many_deaths_exit_non_zero() -> None:
    reply = Reply.stream(text_stream(["ok"]))
    async with FakeUpstream(reply) as up, serve(up.url) as served:
        first = served.workers()
        _kill(first[0])
        await _until(lambda: len(set(served.workers()) - set(first)) == 1, 30)
        assert len(served.workers()) == 2 and served.proc.poll() is None
        await _healthy(served.root, 30)
        async with aiohttp.ClientSession() as s:
            for _ in range(4):  # every worker serves
                async with s.post(served.root + "/v1/chat/completions", json=STREAM) as r:
                    assert assemble(await r.read()).content == "ok"
        assert "replaced by" in served.text()
        # replacements past the bound: the parent gives up, non-zero
        for _ in range(MAX_RESTARTS + 2):
            if served.proc.poll() is not None:
                break
            before = served.workers()
            if before:
                _kill(before[0])
            with contextlib.suppress(TimeoutError):
                await _until(
                    lambda b=before: (
                        served.proc.poll() is not None or set(served.workers()) - set(b)
                    ),
                    20,
                )
        assert await _exited(served.proc, 30) == GAVE_UP
        assert "giving up" in served.text()


def test_a_worker_stops_once_and_a_second_ctrl_c_stops_it_at_once() -> None:
    """The worker's rule (``cli._WorkerStop``): the first stop drains, a
    duplicate (any SIGTERM, the first SIGINT) is ignored, a second SIGINT
    stops at once."""
    from aiohttp.web import GracefulExit

    from streamfix.tools.cli import _WorkerStop

    stop = _WorkerStop()
    with pytest.raises(GracefulExit):
        stop(signal.SIGINT)  # Ctrl-C at the terminal
    assert stop(signal.SIGTERM) is None  # the parent's forward
    assert stop(signal.SIGTERM) is None
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGINT)  # Ctrl-C again
    term = _WorkerStop()
    with pytest.raises(GracefulExit):
        term(signal.SIGTERM)  # systemctl stop: to every process
    assert term(signal.SIGTERM) is None and term(signal.SIGINT) is None


async def _readyz_statuses(root: str, n: int) -> list[int]:
    """``/readyz`` on ``n`` new connections (the kernel spreads them over
    the workers)."""
    out = []
    for _ in range(n):
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as s, s.get(root + "/readyz") as r:
            out.append(r.status)
    return out


async def test_sigterm_to_the_parent_drains_every_worker_with_the_grace() -> None:
    """``--drain-grace 1``: right after SIGTERM every worker answers
    ``/readyz`` 503 while still listening, the stream in flight ends
    whole, the parent exits 0."""
    reply = Reply.events(text_stream(PIECES), delay=0.2)
    async with FakeUpstream(reply) as up, serve(up.url, 2, "--drain-grace", "1") as served:
        assert set(await _readyz_statuses(served.root, 8)) == {200}
        async with aiohttp.ClientSession() as s:

            async def one() -> bytes:
                async with s.post(served.root + "/v1/chat/completions", json=STREAM) as r:
                    return await r.read()

            task = asyncio.create_task(one())
            await _until(lambda: len(up.chat_requests) == 1, 20)
            t0 = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.2)  # the parent's forward reaches both workers
            statuses = await _readyz_statuses(served.root, 12)
            assert time.monotonic() - t0 < 1.0  # all asked within the grace
            assert set(statuses) == {503}, statuses
            body = await asyncio.wait_for(task, 30)
        assert assemble(body).content == "".join(PIECES)
        assert await _exited(served.proc, 30) == 0


async def test_a_second_sigterm_to_the_parent_ends_at_once() -> None:
    reply = Reply.events(text_stream(PIECES * 20), delay=0.2)  # a stream of 48 s
    async with FakeUpstream(reply) as up, serve(up.url) as served:
        async with aiohttp.ClientSession() as s:

            async def one() -> bytes:
                async with s.post(served.root + "/v1/chat/completions", json=STREAM) as r:
                    return await r.read()

            task = asyncio.create_task(one())
            await _until(lambda: len(up.chat_requests) == 1, 20)
            workers = served.workers()
            served.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            assert served.proc.poll() is None  # draining: the grace, the stream
            t0 = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            assert await _exited(served.proc, 5) == 0
            assert time.monotonic() - t0 < 2.0
            await asyncio.gather(task, return_exceptions=True)
        assert len(workers) == 2 and not [p for p in workers if Path(f"/proc/{p}").exists()]


def test_a_workers_first_sigterm_runs_its_drain_and_repeats_are_ignored() -> None:
    from streamfix.tools.cli import _WorkerStop

    drained: list[int] = []
    stop = _WorkerStop(lambda: drained.append(1))
    assert stop(signal.SIGTERM) is None  # draining, no GracefulExit yet
    assert stop(signal.SIGTERM) is None and stop(signal.SIGINT) is None
    assert drained == [1]
    with pytest.raises(KeyboardInterrupt):
        stop(signal.SIGINT)
