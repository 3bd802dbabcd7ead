"""The ``streamfix`` command: ``serve`` (the proxy), ``demo``, ``replay``,
``probe``, ``model`` (the bundled small model on a port, ``tools/model.py``).

Before ``serve`` starts, what would fail at once is checked and said in
one line each, exit status 2 (``start_problems``): the port in use, a
``--record`` directory that cannot be written; bad settings (a zero or
negative timeout) are refused by ``config.validate``, with ``serve``'s own
usage. The upstreams are checked by the proxy as it starts, without
refusing to start (``Proxy.probe_all``).

``streamfix serve`` reads its settings from the command line, then
``STREAMFIX_*`` environment variables, then a TOML file, then defaults
(``streamfix.server.config`` declares each one once). ``--workers N``
starts N processes that listen on the same port with ``SO_REUSEPORT``
(Linux, BSD); the kernel spreads connections between them. The proxy
keeps no state between requests, so replicas behind any load balancer
work too (turn response buffering off there: nginx
``proxy_buffering off``; streamfix also sends ``X-Accel-Buffering: no``).
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
from typing import Any

from .. import __version__
from ..server.config import SETTINGS, ConfigError, ServerConfig, build_config, settings_epilog


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
    parser = argparse.ArgumentParser(
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


def _run(
    cfg: ServerConfig, reuse_port: bool, source: Callable[[], ServerConfig] | None = None
) -> None:
    from aiohttp import web

    from ..server.app import create_app

    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if source is not None and hasattr(signal, "SIGHUP"):
        # until the app listens for it (Proxy.lifecycle), a reload must not
        # end the process, SIGHUP's default
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    web.run_app(
        create_app(cfg, source),
        host=cfg.host,
        port=cfg.port,
        handler_cancellation=True,
        reuse_port=reuse_port or None,
        print=None,
        access_log=logging.getLogger("streamfix.access"),
    )


def _worker(cfg: ServerConfig, source: Callable[[], ServerConfig] | None) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        _run(cfg, reuse_port=True, source=source)


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
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker, args=(cfg, source), daemon=False) for _ in range(cfg.workers)
    ]
    for p in procs:
        p.start()

    def stop(signum: int, frame: object) -> None:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGINT)

    def reload(signum: int, frame: object) -> None:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGHUP)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, reload)
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        stop(signal.SIGINT, None)
        for p in procs:
            p.join()
    return max((p.exitcode or 0) for p in procs)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of one command (its errors print its own usage)."""
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
    return problems


def port_problem(host: str, port: int) -> str | None:
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"--host {host}: cannot listen there ({exc})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        # as aiohttp binds: SO_REUSEADDR (a port in TIME_WAIT is free)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            return _listen_problem(host, port, exc)
    return None


def _listen_problem(host: str, port: int, exc: OSError) -> str:
    import errno as errno_module

    if exc.errno == errno_module.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another streamfix?): "
            "stop it or give --port N"
        )
    if exc.errno == errno_module.EACCES:
        return f"port {port} on {host} needs privileges: give --port N above 1023"
    if exc.errno == errno_module.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


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
    parser = build_parser()
    args = parser.parse_args(argv)
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
    if args.command == "model":
        from .model import run_model

        return run_model(args)
    serve_parser = _subparser(parser, "serve")
    source = config_source(args)
    try:
        cfg = source()
    except ConfigError as exc:
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
        print(f"streamfix serve: {_listen_problem(cfg.host, cfg.port, exc)}", file=sys.stderr)
        return 2
