"""``streamfix probe --upstream URL``: what a backend gets wrong, before agents meet it.

The requests, and what is read of each reply, are ``server/probe.py``'s.
The printed table has one row per request and mode: what the backend did,
and what a client behind streamfix gets instead; each row is printed to
stderr as it is done, the table and the summary to stdout. Exit status: 0
when the replies that came needed no repair, 1 when streamfix repaired
something (the backend needs it), 2 when nothing answered (the backend
could not be probed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from ..errors import PluginError
from ..server.probe import Probe, cells, probe, verdict


def render(result: Probe, out: TextIO) -> None:
    """The table (Markdown, so it reads as text and pastes into a README)."""
    print(
        f"backend {result.url}  model {result.model or '?'}  "
        f"engine {result.engine or 'not recognised'}  "
        f"window {result.window or 'not found (learned from the first overflow error)'}  "
        f"({result.seconds:.0f} s)",
        file=out,
    )
    print("", file=out)
    print("| request | mode | the backend did | behind streamfix |", file=out)
    print("|---|---|---|---|", file=out)
    for title, mode, did, behind in cells(result):
        print(f"| {title} | {mode} | {_cell(did)} | {_cell(behind)} |", file=out)
    print("", file=out)
    print(verdict(result), file=out)


def _cell(text: str) -> str:
    """A table cell: one line; a ``|`` in it (``<|im_end|>``) escaped as
    Markdown escapes it, so the cell shows what was sent."""
    return " ".join(text.split()).replace("|", "\\|")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="find out what a backend gets wrong, and what streamfix repairs",
        description=(
            "Send a short scripted set of chat requests straight to a backend, streamed "
            "and not, and print what it did and what streamfix makes of each reply. "
            "Exit status: 0 no repair needed, 1 the backend needs streamfix, "
            "2 nothing answered (the backend could not be probed)."
        ),
    )
    p.add_argument("url", nargs="?", metavar="URL", help="the backend's base URL ending in /v1")
    p.add_argument("--upstream", metavar="URL", help="the same as URL")
    p.add_argument("--model", metavar="M", help="model name (default: the first /v1/models lists)")
    p.add_argument("--api-key", metavar="KEY", help="sent as 'Authorization: Bearer KEY'")
    from .plugin_flags import add_plugin_flags

    add_plugin_flags(p)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..plugins import factories
    from ..server.config import ConfigError, check_url
    from .plugin_flags import load_plugins

    given = [u for u in (args.url, args.upstream) if u]
    if len(given) != 1:
        print(
            "streamfix probe: give the backend's URL once (URL or --upstream URL)", file=sys.stderr
        )
        return 2
    try:
        # as serve checks its rows; a row's options (``#window=…``) are serve's
        url = check_url(given[0].partition("#")[0])
        load_plugins(args.formats)
        steps = factories(tuple(args.transforms or ()))
    except (ConfigError, PluginError) as exc:
        print(f"streamfix probe: {exc}", file=sys.stderr)
        return 2
    options: dict[str, Any] = {"transforms": steps} if steps else {}
    print(f"probing {url} ...", file=sys.stderr, flush=True)
    result = asyncio.run(probe(url, args.model, args.api_key, sys.stderr, options))
    render(result, out)
    if result.answered == 0:
        return 2
    return 1 if result.needs_streamfix else 0
