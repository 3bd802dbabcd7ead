"""``streamfix learn DIR``: the next call shape, from the recordings of
replies that went out badly (``server/learn.py`` infers and proves it).

Prints each shape offered as a ``[shapes.…]`` table (TOML on standard
output, what ``--shapes FILE`` reads), each preceded by comment lines
saying which replies it came from, which calls they now lift and which
other replies it changes; a rejected shape is printed as comments only,
with why. ``--write FILE`` adds the offered shapes to a shapes file.
Exit status: 0 when a shape is offered, 1 when none is, 2 on an error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..errors import PluginError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "learn",
        help="infer a call shape from recorded replies that went out badly",
        description=(
            "Read the recordings of 'streamfix serve --record DIR' made as 'missed' or "
            "'unrecognised', infer the call shape their markup shares around an offered "
            "tool's name and arguments, prove it by replaying every recording, and print "
            "it as TOML for --shapes."
        ),
    )
    p.add_argument("directory", metavar="DIR", help="a folder of recordings")
    p.add_argument(
        "--min-replies",
        type=int,
        default=2,
        metavar="N",
        help="fewest agreeing replies a shape is learned from (default 2, at least 2)",
    )
    p.add_argument("--write", metavar="FILE", help="add the shapes offered to this shapes file")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..server.learn import learn, report_lines
    from ..shapes import add_to_file
    from .plugin_flags import load_plugins

    directory = Path(args.directory)
    if not directory.is_dir():
        print(f"streamfix learn: {directory} is not a directory", file=err)
        return 2
    if args.min_replies < 2:
        print("streamfix learn: --min-replies must be at least 2", file=err)
        return 2
    try:
        load_plugins(None)
        found = learn(directory, args.min_replies)
    except PluginError as exc:
        print(f"streamfix learn: {exc}", file=err)
        return 2
    offered = [x for x in found if x.rejected is None]
    for x in found:
        print("\n".join(report_lines(x)), file=out)
        if x.rejected is None:
            print(x.toml, file=out)
        else:
            print("\n".join("# " + line for line in x.toml.splitlines()) + "\n", file=out)
    if not found:
        print("# no shape: no two recorded replies agree on markup around a call", file=out)
    if offered and args.write:
        try:
            add_to_file(args.write, "\n".join(x.toml for x in offered))
        except PluginError as exc:
            print(f"streamfix learn: {exc}", file=err)
            return 2
        print(f"# added {len(offered)} shape(s) to {args.write}", file=err)
    return 0 if offered else 1
