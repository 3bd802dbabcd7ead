"""``streamfix replay FILE|DIR``: recorded replies through today's chain.

Each recording named (a folder is searched for ``*.json``) is replayed by
``server/replay.py``, which says what it compares and how; this prints one
line per recording, then and now side by side for a difference
(``-v``: for every recording), and a tally. ``--without REPAIR`` replays with
a repair switched off.

``--check`` exits 1 on any difference (or a file that cannot be read), so
recordings are regression tests: ``tests/recordings`` is replayed in CI.

Plugins: installed ``streamfix.formats`` entry points are registered as in
``streamfix serve``, and so are the ``--format`` plugins the recording was
made with (kept by name in it, as its steps are); ``--format module:NAME``
registers one more, and ``--transform module:factory`` runs a step after
those the recording was made with (kept by name in its options); a
recording made through a plugin then replays the same only with it.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..context import Options
from ..errors import PluginError
from ..plugins import factories
from ..seen import describe
from ..server.replay import Outcome, replay_file

#: The repairs ``--without`` can switch off (``Options``' switches).
REPAIRS = ("lift", "strip", "split_reasoning", "repetition")


def recordings(paths: Sequence[str | Path]) -> Iterator[Path]:
    """The recording files named, directories searched (sorted, ``*.json``)."""
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.json") if not q.name.startswith("."))
        else:
            yield p


def render(outcome: Outcome, out: TextIO, verbose: bool = False, width: int = 100) -> None:
    reasons = ",".join(outcome.reasons) or "-"
    print(f"{outcome.verdict.upper():<10} {outcome.path}  [{reasons}]", file=out)
    for note in outcome.notes:
        print(f"           {note}", file=out)
    if outcome.then is None or outcome.now is None:
        return
    if outcome.verdict != "changed" and not verbose:
        return
    col = max(30, (width - 14) // 2)
    print(f"           {'then':<{col}} │ now", file=out)
    left = [w for line in describe(outcome.then) for w in textwrap.wrap(line, col) or [""]]
    right = [w for line in describe(outcome.now) for w in textwrap.wrap(line, col) or [""]]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        mark = " " if a == b else "!"
        print(f"         {mark} {a:<{col}} │ {b}", file=out)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="replay recorded upstream replies through today's chain",
        description=(
            "Feed the upstream reads kept by 'streamfix serve --record DIR' to today's "
            "chain, with the request they came with, and show per recording what a "
            "client gets now against what it got then."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="recordings, or folders of them")
    p.add_argument("--check", action="store_true", help="exit 1 on any difference")
    p.add_argument(
        "--without",
        action="append",
        choices=REPAIRS,
        default=[],
        metavar="REPAIR",
        help=f"replay with this repair switched off ({', '.join(REPAIRS)}); repeatable",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show what did not change too")
    from .plugin_flags import add_plugin_flags

    add_plugin_flags(p)


def run(args: argparse.Namespace, out: TextIO) -> int:
    switches = {name: False for name in args.without}
    assert set(switches) <= set(Options.__dataclass_fields__)
    from .plugin_flags import load_plugins

    try:
        load_plugins(args.formats)
        steps = tuple(args.transforms or ())
        factories(steps)
    except PluginError as exc:
        print(f"streamfix replay: {exc}", file=out)
        return 2
    outcomes = [replay_file(p, steps, **switches) for p in recordings(args.paths)]
    if not outcomes:
        print("no recordings found", file=out)
        return 2
    for outcome in outcomes:
        render(outcome, out, args.verbose)
    tally: dict[str, int] = {}
    for outcome in outcomes:
        tally[outcome.verdict] = tally.get(outcome.verdict, 0) + 1
    print(
        f"{len(outcomes)} recording(s): " + ", ".join(f"{n} {v}" for v, n in sorted(tally.items())),
        file=out,
    )
    return 1 if args.check and any(o.failed for o in outcomes) else 0
