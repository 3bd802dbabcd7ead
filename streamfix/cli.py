"""The ``streamfix`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamfix",
        description=(
            "Repair OpenAI-style chat streams from small open models: tool calls "
            "written as text, split tool-call deltas, repetition loops, leftover markup."
        ),
    )
    parser.add_argument("--version", action="version", version=f"streamfix {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0
