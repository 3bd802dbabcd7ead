"""The ``streamfix`` command: ``serve`` (the proxy), ``demo``, ``replay``,
``probe``, ``learn`` (a call shape from recordings, ``tools/learn.py``),
``model`` (the bundled small model on a port, ``tools/model.py``).

Before ``serve`` starts, what would fail at once is checked and said in
one line each, exit status 2 (``start_problems``): the port in use, a
``--record`` directory that cannot be written; bad settings (a zero or
negative timeout) are refused by ``config.validate``. Every flag or
configuration error is one line, ``streamfix serve: error: …`` and a
pointer to ``--help`` (``OneLineParser``: the usage only with ``--help``).
The upstreams are checked by the proxy as it starts, without
refusing to start (``Proxy.probe_all``).

``streamfix serve`` reads its settings from the command line, then
``STREAMFIX_*`` environment variables, then a TOML file, then defaults
(``streamfix.server.config`` declares each one once). ``--workers N``
starts N processes that listen on the same port with ``SO_REUSEPORT``
(Linux, BSD); the kernel spreads connections between them. The proxy
keeps no state between requests, so replicas behind any load balancer
work too (turn response buffering off there: nginx
``proxy_buffering off``; streamfix also sends ``X-Accel-Buffering: no``).

*Signals from the first instant.* ``main`` blocks SIGHUP, SIGTERM and
SIGINT before anything else (``hold_signals``; ``import streamfix`` loads
nothing, so that is a few tens of milliseconds after the interpreter
starts), and each process unblocks them once it has handlers for them: a
signal that arrives meanwhile waits, it never kills a process half
started. With ``--workers``, the workers are started with the signals
blocked (a blocked mask survives ``exec``), so they are covered from their
first instruction too. What a waiting signal does once unblocked:

- SIGTERM, SIGINT: unblocked as soon as aiohttp's handlers are in
  (``web.run_app``, before the app's start-up), then the process stops
  cleanly (exit 0); the parent of workers stops them all.
- SIGHUP: unblocked once the proxy listens for it (after the start-up
  probes, ``Proxy.lifecycle``), so a reload asked for during start-up is
  applied once, when ready. With ``--workers`` the parent passes it on; a
  worker still starting holds it the same way.

*Workers stop once* (``_WorkerStop``). A stop sent to the whole process
group (``systemctl stop``, which signals every process of the unit, and
Ctrl-C at a terminal) reaches each worker twice: the signal itself, then
the parent's forward. A worker drains on the first (streams in flight
finish, ``shutdown_timeout``) and ignores what follows: any SIGTERM, and
the first SIGINT; only a second SIGINT (Ctrl-C pressed again) stops it
at once. A worker's SIGTERM drains as a single process's does
(``server/drain.py``: ``/readyz`` 503 at once, the listener open
``--drain-grace`` seconds more, the streams in flight finished); its
SIGINT stops without the grace. The parent forwards SIGTERM, once per
worker; a second stop signal to the parent itself (it counts its own)
ends every worker at once (SIGKILL) and the parent exits 0.

*Workers are replaced* (``_Supervisor``). A worker that exits while the
parent is not stopping (killed, crashed) is logged and replaced by a new
one; past ``MAX_RESTARTS`` replacements within ``RESTART_WINDOW``
seconds the parent stops the others and exits with status 3, so that its
own supervisor (systemd, a container runtime) restarts the whole
service rather than it running on fewer workers.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .. import __version__
from ..server.config import SETTINGS, ConfigError, ServerConfig, build_config, settings_epilog
from .plugin_flags import add_plugin_flags, load_plugins
from .ports import listen_problem, port_problem


class OneLineParser(argparse.ArgumentParser):
    """An error in one line and exit 2, without the usage (``serve``'s is
    seventeen lines; ``--help`` prints it). Sub-commands' parsers are of
    this class too (``add_subparsers`` makes its parent's kind)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the OpenAI-compatible repairing proxy",
        description=(
            "An OpenAI-compatible proxy in front of one or more chat backends "
            "(vLLM, llama.cpp, Ollama, LM Studio, SGLang, any /v1 API) that repairs "
            "their streams: POST /v1/chat/completions, /v1/messages, /v1/responses, "
            "/v1/completions, /v1/embeddings, GET /v1/models, /healthz, /metrics."
        ),
        epilog=settings_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--upstream",
        dest="upstreams",
        action="append",
        metavar="URL",
        help="upstream base URL ending in /v1; repeat for several "
        "(options after '#': weight=, window=, api_key=, reasoning=, model=, name=, kind=)",
    )
    p.add_argument("--config", metavar="FILE.toml", help="TOML settings file")
    p.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' from clients; repeat for several "
        "(then the client's header is not forwarded upstream)",
    )
    add_plugin_flags(p)
    for s in SETTINGS:
        kwargs: dict[str, Any] = {"dest": s.name, "help": s.help, "default": None, "type": s.type}
        if s.type is bool:  # a switch: given means on
            kwargs = {"dest": s.name, "help": s.help, "default": None, "action": "store_true"}
        elif s.choices:
            kwargs["choices"] = s.choices
        elif s.metavar:
            kwargs["metavar"] = s.metavar
        p.add_argument(s.flag, **kwargs)


def _add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="show, side by side, a misbehaving stream and what streamfix makes of it",
        description=(
            "Starts a scripted upstream on loopback that misbehaves in each way "
            "streamfix repairs, puts the proxy in front of it, and prints what a "
            "client receives directly and through streamfix. No model, no network."
        ),
    )
    p.add_argument("--width", type=int, default=None, help="total output width (default: terminal)")
    p.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="streamfix",
        description=(
            "Repair OpenAI-style chat streams from small open models: tool calls "
            "written as text, split tool-call deltas, repetition loops, leftover markup."
        ),
    )
    parser.add_argument("--version", action="version", version=f"streamfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(sub)
    _add_demo(sub)
    from . import probe, replay

    replay.add_parser(sub)
    probe.add_parser(sub)
    from . import learn

    learn.add_parser(sub)
    from . import model

    model.add_parser(sub)
    return parser


def config_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> ServerConfig:
    return config_source(args, env)()


def config_source(
    args: argparse.Namespace, env: dict[str, str] | None = None
) -> Callable[[], ServerConfig]:
    """Reads the configuration from the flags, the environment and the TOML
    file, each time it is called: what SIGHUP reloads from (the file is
    read again; flags and environment are as they were at start)."""
    cli = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    return functools.partial(
        build_config, cli, os.environ.copy() if env is None else env, args.config
    )


#: The signals held from the start of ``main`` until a handler is in.
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT") if hasattr(signal, n))
_HUP = getattr(signal, "SIGHUP", None)
HELD_SIGNALS = (*_STOP_SIGNALS, *((_HUP,) if _HUP is not None else ()))


def hold_signals() -> None:
    """Block ``HELD_SIGNALS`` in this thread (and in what it starts): each
    waits, undelivered, until ``release_signals``."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)


def release_signals(*signals: int) -> None:
    """Unblock ``signals``: one that arrived meanwhile is delivered now."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals or HELD_SIGNALS)


async def _stoppable(app: Any) -> None:
    """First of the app's start-up: ``web.run_app`` has its SIGTERM and
    SIGINT handlers in (a graceful stop), so those may come now."""
    release_signals(*_STOP_SIGNALS)


async def _reloadable(app: Any) -> None:
    """Last of the app's start-up: the proxy listens for SIGHUP (where it
    cannot, SIGHUP is ignored from now on), so it may come now; one that
    came meanwhile is a reload, now."""
    if _HUP is not None:
        if signal.getsignal(_HUP) in (signal.SIG_DFL, None):
            signal.signal(_HUP, signal.SIG_IGN)
        release_signals(_HUP)


async def _stopping(app: Any) -> None:
    """First of the app's shutdown: the proxy stops listening for SIGHUP
    (asyncio then puts SIGHUP's default back, the end of the process), so
    SIGHUP is held again, for good."""
    if _HUP is not None and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, (_HUP,))


class _WorkerStop:
    """A worker's SIGTERM/SIGINT handler (see the module doc): the first
    stop drains, what follows is ignored but for a second SIGINT, which
    stops at once. A first SIGTERM runs ``drain`` when there is one (the
    app's ``server/drain.Drain.begin``: ``/readyz`` 503, the grace, then
    aiohttp's ``GracefulExit``); a first SIGINT, or a SIGTERM without a
    ``drain``, is the ``GracefulExit`` at once."""

    def __init__(self, drain: Callable[[], None] | None = None) -> None:
        self.first: int | None = None
        self.interrupts = 0
        self.drain = drain

    def __call__(self, signum: int) -> None:
        from aiohttp.web import GracefulExit

        self.interrupts += signum == signal.SIGINT
        if self.first is None:
            self.first = signum
            if signum == signal.SIGTERM and self.drain is not None:
                self.drain()
                return
            raise GracefulExit()
        if self.interrupts >= 2:
            raise KeyboardInterrupt
        logging.getLogger("streamfix.server").info(
            "worker %d: already stopping; signal %d ignored", os.getpid(), signum
        )

    async def install(self, app: Any) -> None:
        """First of the app's start-up, instead of aiohttp's handlers."""
        import asyncio

        from ..server.drain import Drain

        if self.drain is None:
            self.drain = Drain(app).begin
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, self, sig)


def _run(
    cfg: ServerConfig,
    reuse_port: bool,
    source: Callable[[], ServerConfig] | None = None,
    worker: bool = False,
) -> None:
    from aiohttp import web

    from ..server.app import create_app, run_options

    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    load_plugins(cfg.formats)  # again in a worker process: its own registry
    app = create_app(cfg, source)
    app.on_startup.insert(0, _stoppable)
    if worker:
        app.on_startup.insert(0, _WorkerStop().install)
    app.on_startup.append(_reloadable)
    app.on_shutdown.append(_stopping)
    if not worker:
        from ..server.drain import on_sigterm

        app.on_startup.append(on_sigterm)  # SIGTERM drains with a grace (server/drain.py)
    web.run_app(
        app,
        host=cfg.host,
        port=cfg.port,
        reuse_port=reuse_port or None,
        print=None,
        shutdown_timeout=cfg.drain_timeout,
        access_log=logging.getLogger("streamfix.access"),
        handle_signals=not worker,
        **run_options(cfg),
    )


def _worker(cfg: ServerConfig, source: Callable[[], ServerConfig] | None) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        _run(cfg, reuse_port=True, source=source, worker=True)


#: Replacements of dead workers allowed within ``RESTART_WINDOW`` seconds;
#: one more and the parent exits ``GAVE_UP`` (see the module doc).
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
GAVE_UP = 3


class _Supervisor:
    """The parent of ``--workers N``: starts them, passes signals on, and
    replaces a worker that dies (bounded: ``MAX_RESTARTS``)."""

    def __init__(self, cfg: ServerConfig, source: Callable[[], ServerConfig] | None) -> None:
        self.cfg = cfg
        self.source = source
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: list[Any] = []
        self.stopping = False
        self.forced = False  # a second stop: the workers killed
        self.told: set[int] = set()  # the workers sent SIGTERM
        self.restarts: list[float] = []  # when each replacement was started
        self.replaced = 0
        self.log = logging.getLogger("streamfix.server")

    def start_one(self) -> Any:
        """A worker; the caller holds the signals (``hold_signals``): the
        worker inherits them held and unblocks them itself, and the
        parent's handlers run once it is in ``procs``."""
        p = self.ctx.Process(target=_worker, args=(self.cfg, self.source), daemon=False)
        p.start()
        return p

    def stop(self, signum: int, frame: object) -> None:
        if self.stopping:
            self.forced = True
            self.log.warning("second stop: ending the workers now")
            for p in self.procs:
                if p.pid is not None and p.is_alive():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGKILL)
            return
        self.stopping = True
        self.tell()

    def tell(self) -> None:
        """SIGTERM to each live worker not told yet: once each (a group
        signal reached it already; a second stop from us is no news)."""
        for p in self.procs:
            if p.pid is not None and p.pid not in self.told and p.is_alive():
                self.told.add(p.pid)
                os.kill(p.pid, signal.SIGTERM)

    def reload(self, signum: int, frame: object) -> None:
        # a worker not started yet reads the configuration as it starts
        for p in self.procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGHUP)

    def watch(self) -> int:
        """Until every worker has ended after a stop; replaces the dead."""
        import time
        from multiprocessing.connection import wait

        while True:
            live = [p for p in self.procs if p.exitcode is None]
            if self.stopping and not live:
                return 0 if self.forced else max((p.exitcode or 0) for p in self.procs)
            wait([p.sentinel for p in live], timeout=0.5)
            if self.stopping:
                self.tell()  # one started as the stop came
                continue
            for i, p in enumerate(self.procs):
                if p.exitcode is None:
                    continue
                p.join()
                now = time.monotonic()
                self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW]
                if len(self.restarts) >= MAX_RESTARTS:
                    self.log.error(
                        "worker %d exited (status %s); %d replaced in the last %ds: giving up",
                        p.pid,
                        p.exitcode,
                        len(self.restarts),
                        RESTART_WINDOW,
                    )
                    self.stop(signal.SIGTERM, None)
                    for q in self.procs:
                        q.join()
                    return GAVE_UP
                self.restarts.append(now)
                self.replaced += 1
                hold_signals()
                try:
                    self.procs[i] = self.start_one()
                finally:
                    release_signals()
                self.log.error(
                    "worker %d exited unexpectedly (status %s): replaced by %d "
                    "(%d replaced since the start)",
                    p.pid,
                    p.exitcode,
                    self.procs[i].pid,
                    self.replaced,
                )


def serve(cfg: ServerConfig, source: Callable[[], ServerConfig] | None = None) -> int:
    """Serve until interrupted. With ``source``, SIGHUP reloads the routing
    table from it (with ``--workers``, the parent passes SIGHUP on to each
    worker)."""
    ups = ", ".join(u.name for u in cfg.upstreams)
    print(
        f"streamfix {__version__}: http://{cfg.host}:{cfg.port}/v1 -> {ups}"
        + (f" ({cfg.workers} workers)" if cfg.workers > 1 else ""),
        file=sys.stderr,
        flush=True,
    )
    if cfg.workers == 1:
        _run(cfg, reuse_port=False, source=source)
        return 0
    if not hasattr(__import__("socket"), "SO_REUSEPORT"):
        print("--workers needs SO_REUSEPORT (Linux, BSD, macOS)", file=sys.stderr)
        return 2
    import tempfile

    from ..server.metrics import MULTIPROC_ENV

    # one scrape sums every worker's counters (server/metrics.py)
    metrics_dir = tempfile.TemporaryDirectory(prefix="streamfix-metrics-")
    os.environ.setdefault(MULTIPROC_ENV, metrics_dir.name)
    sup = _Supervisor(cfg, source)
    # The handlers first: starting multiprocessing's resource tracker
    # unblocks SIGTERM and SIGINT behind our back (a stop that came
    # meanwhile is taken now). The workers must inherit the signals
    # blocked: the tracker is started, the signals blocked again, and only
    # then the workers started.
    for sig in _STOP_SIGNALS:
        signal.signal(sig, sup.stop)
    if _HUP is not None:
        signal.signal(_HUP, sup.reload)
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    hold_signals()
    for _ in range(cfg.workers):
        sup.procs.append(sup.start_one())
    release_signals()  # a signal held until now is handled here, for every worker
    try:
        return sup.watch()
    finally:
        metrics_dir.cleanup()


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of one command (its errors name it)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    return parser


def start_problems(cfg: ServerConfig) -> list[str]:
    """What would make ``serve`` fail at once or at its first write, each
    in one line: the port taken (or not ours to take), a ``--record``
    directory that cannot be written. (The upstreams are not checked
    here: one that is down may come up later; the proxy's start-up check
    says what it found, ``Proxy.probe_all``.)"""
    problems = []
    taken = port_problem(cfg.host, cfg.port)
    if taken:
        problems.append(taken)
    if cfg.record:
        record_problem = _record_problem(cfg.record)
        if record_problem:
            problems.append(record_problem)
    from ..server.tracing import problem as traces_problem

    traces = traces_problem(cfg)
    if traces:
        problems.append(traces)
    return problems


def _record_problem(directory: str) -> str | None:
    import tempfile
    from pathlib import Path

    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"--record {directory}: cannot write there ({exc.strerror or exc})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    hold_signals()  # before anything else: see the module doc
    try:
        return _main(argv)
    finally:
        pending = signal.sigpending() if hasattr(signal, "sigpending") else set()
        if _HUP is not None and _HUP in pending and signal.getsignal(_HUP) == signal.SIG_DFL:
            # a reload asked for as the proxy stopped: nothing to reload
            signal.signal(_HUP, signal.SIG_IGN)
        release_signals()  # ``serve`` released them earlier; other commands now


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "serve":
        release_signals()  # only ``serve`` holds them until its handlers are in
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        from .demo import run_demo

        try:
            status = run_demo(width=args.width, scenarios=args.scenario)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            return status
        except BrokenPipeError:
            # ``streamfix demo | head``: the reader left; not an error.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    if args.command in ("replay", "probe"):
        from . import probe, replay

        if args.command == "replay":
            return replay.run(args, sys.stdout)
        return probe.run(args, sys.stdout)
    if args.command == "learn":
        from .learn import run as run_learn

        return run_learn(args, sys.stdout, sys.stderr)
    if args.command == "model":
        from .model import run_model

        return run_model(args)
    serve_parser = _subparser(parser, "serve")
    source = config_source(args)
    from ..errors import PluginError

    try:
        cfg = source()
        load_plugins(cfg.formats)
        if cfg.shapes:
            from ..shapes import use_shapes

            use_shapes(cfg.shapes)  # a bad file stops the start with its one line
    except (ConfigError, PluginError) as exc:
        serve_parser.error(str(exc))
    if not cfg.upstreams:
        serve_parser.error(
            "no upstream: give --upstream URL (or STREAMFIX_UPSTREAM, or [[upstream]])"
        )
    problems = start_problems(cfg)
    if problems:
        for line in problems:
            print(f"streamfix serve: {line}", file=sys.stderr)
        return 2
    try:
        return serve(cfg, source)
    except OSError as exc:  # the port was taken after the check
        print(f"streamfix serve: {listen_problem(cfg.host, cfg.port, exc)}", file=sys.stderr)
        return 2
