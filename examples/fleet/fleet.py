"""A fleet on loopback: three streamfix replicas sharing one Redis, behind
HAProxy. One command starts it all on free ports and stops it all::

    python examples/fleet/fleet.py --upstream http://127.0.0.1:8080/v1 [--config FILE.toml]

Clients talk to the printed HAProxy address. Stop with Ctrl-C (or SIGTERM).
Needs ``redis-server`` and ``haproxy`` (Debian: ``apt-get install
redis-server haproxy``) and ``pip install 'streamfix[state]'``. The
fleet's tests (``tests/e2e/test_fleet.py``) drive the same ``Fleet``.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def binary(name: str) -> str:
    for path in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if path and Path(path).exists():
            return path
    raise SystemExit(f"{name} is not installed (Debian: apt-get install {name})")


def ready(url: str, timeout: float = 30.0) -> None:
    """Wait for ``url`` to answer 200."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 in {timeout:g} s")


class Fleet:
    """Redis, ``replicas`` streamfix processes and HAProxy, each on a free
    loopback port; ``args`` are given to every replica."""

    def __init__(self, upstream: str, replicas: int = 3, args: tuple[str, ...] = ()) -> None:
        self.upstream, self.args = upstream, args
        self.dir = Path(tempfile.mkdtemp(prefix="streamfix-fleet-"))
        self.redis_port = free_port()
        self.ports = [free_port() for _ in range(replicas)]
        self.port = free_port()
        self.redis: subprocess.Popen[bytes] | None = None
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * replicas
        self.haproxy: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Where clients go: HAProxy."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [
                *(binary("redis-server"), "--port", str(self.redis_port)),
                *("--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            ],
            stdout=subprocess.DEVNULL,
        )
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.redis_port)) == 0:
                    return
            time.sleep(0.02)
        raise TimeoutError("redis-server did not start")

    def stop_redis(self) -> None:
        if self.redis is not None:
            self.redis.terminate()
            self.redis.wait(10)
            self.redis = None

    def start_replica(self, i: int, wait: bool = True) -> None:
        cmd = [sys.executable, "-m", "streamfix", "serve", "--port", str(self.ports[i])]
        cmd += ["--upstream", self.upstream, "--state", self.state, *self.args]
        with (self.dir / f"replica{i}.log").open("ab") as log:  # the child keeps its own
            self.procs[i] = subprocess.Popen(cmd, stderr=log)
        if wait:
            ready(f"http://127.0.0.1:{self.ports[i]}/readyz")

    def start(self) -> Fleet:
        self.start_redis()
        for i in range(len(self.ports)):
            self.start_replica(i, wait=False)
        for port in self.ports:
            ready(f"http://127.0.0.1:{port}/readyz")
        servers = "\n".join(
            f"    server r{i} 127.0.0.1:{p} check" for i, p in enumerate(self.ports)
        )
        cfg = (HERE / "haproxy.cfg.in").read_text()
        cfg = cfg.replace("@PORT@", str(self.port)).replace("@SERVERS@", servers)
        (self.dir / "haproxy.cfg").write_text(cfg)
        with (self.dir / "haproxy.log").open("ab") as log:
            self.haproxy = subprocess.Popen(
                [binary("haproxy"), "-db", "-f", str(self.dir / "haproxy.cfg")],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        ready(self.url + "/readyz")
        return self

    def signal(self, i: int, sig: int) -> subprocess.Popen[bytes]:
        proc = self.procs[i]
        assert proc is not None
        proc.send_signal(sig)
        return proc

    def stop(self) -> None:
        procs = [p for p in (self.haproxy, *self.procs) if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)  # at once, no drain
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        self.stop_redis()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Fleet:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the model server's /v1 URL")
    parser.add_argument("--config", help="a TOML file for every replica (tenants, limits)")
    parser.add_argument("--replicas", type=int, default=3)
    opts = parser.parse_args()
    args = ("--config", opts.config) if opts.config else ()
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with Fleet(opts.upstream, opts.replicas, args) as fleet:
        print(f"fleet ready: {fleet.url}/v1 (HAProxy)", flush=True)
        for i, port in enumerate(fleet.ports):
            print(f"  replica {i}: http://127.0.0.1:{port}", flush=True)
        print(f"  shared state: {fleet.state}; logs in {fleet.dir}", flush=True)
        while not stop:
            time.sleep(0.2)
        print("stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
