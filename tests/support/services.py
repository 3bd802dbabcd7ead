"""Real ``redis-server`` and ``haproxy`` processes on free loopback ports,
for the fleet's tests (skipped with a reason when the binary is missing,
unless ``STREAMFIX_E2E=require``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def need(binary: str) -> str:
    path = shutil.which(binary) or next(
        (p for p in (f"/usr/bin/{binary}", f"/usr/sbin/{binary}") if os.path.exists(p)), None
    )
    if path is None:
        why = f"{binary} is not installed (apt-get install {binary})"
        if os.environ.get("STREAMFIX_E2E") == "require":
            pytest.fail(why)
        pytest.skip(why)
    return path


def wait_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class Redis:
    """One ``redis-server`` without persistence; ``stop``/``start`` again on
    the same port (the store going down and coming back)."""

    def __init__(self, binary: str, port: int) -> None:
        self.binary, self.port = binary, port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""),
                *("--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@contextmanager
def redis_server() -> Iterator[Redis]:
    server = Redis(need("redis-server"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def haproxy(config: str, port: int, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    path = workdir / "haproxy.cfg"
    path.write_text(config)
    proc = subprocess.Popen(
        [need("haproxy"), "-db", "-f", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_port(port)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)
