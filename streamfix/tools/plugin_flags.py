"""``--transform`` and ``--format``: the plugin flags of ``serve``,
``replay`` and ``probe``, and the loading they ask for (the plugin modules
are imported only then: ``cli.main`` holds signals first)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def add_plugin_flags(p: Any) -> None:
    """``--transform`` and ``--format`` (serve, replay, probe)."""
    p.add_argument(
        "--transform",
        dest="transforms",
        action="append",
        metavar="MODULE:FACTORY",
        help="run this step on every reply, after the built-in repairs (a Transform class "
        "or a factory of one, called with the request's Context); repeatable",
    )
    p.add_argument(
        "--format",
        dest="formats",
        action="append",
        metavar="MODULE:NAME",
        help="register this call shape (a module with FORMATS, or a Format); repeatable. "
        "Installed streamfix.formats entry points need no flag",
    )


def load_plugins(formats: Sequence[str] | None) -> None:
    """The installed format plugins and ``--format``'s, registered once per
    process (a refusal raises ``PluginError``)."""
    from ..formats.registry import load_entry_points
    from ..plugins import register_spec

    load_entry_points(strict=True)
    for spec in formats or ():
        register_spec(spec)
