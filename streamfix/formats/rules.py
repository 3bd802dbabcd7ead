"""The rules a registered format is held to before it takes effect (the
static half of ``register``'s check; the measured half runs the chain and
lives above it, ``plugins.check_prose``).

Its name is free, its markers are strings, it has an end finder for each
marker and a parser, and every marker it looks for *anywhere* in the
content is at least ``MIN_MARKER`` characters long: a one- or
two-character marker (``{``, ``[``, ``<<``) would open a region, and hold
text, at each occurrence in prose and code; such openers belong in
``leading`` (they count only at the start of a reply, as the built-in
bare JSON's do).
"""

from __future__ import annotations

import re

from ..errors import PluginError
from .base import Format, Plugin

#: Shortest marker a registered format may look for anywhere in content.
MIN_MARKER = 3


def refusal(plugin: Plugin, why: str) -> PluginError:
    return PluginError(f"format plugin {plugin.name} refused: {why}")


def check_static(plugin: Plugin, existing: tuple[Format, ...]) -> None:
    """The rules a registered format is held to before it is used (see
    the module docstring). Raises ``PluginError``."""
    taken = {f.name for f in existing}
    names: set[str] = set()
    for f in plugin.FORMATS:
        if not isinstance(f.name, str) or not f.name.strip():
            raise refusal(plugin, f"{type(f).__name__} has no name")
        if f.name in taken or f.name in names:
            raise refusal(plugin, f"the format name {f.name!r} is already registered")
        names.add(f.name)
        for field in ("markers", "leading"):
            value = getattr(f, field)
            if not isinstance(value, tuple) or not all(isinstance(m, str) and m for m in value):
                raise refusal(plugin, f"{f.name}.{field} must be a tuple of non-empty strings")
        for m in f.markers:
            if len(m.strip()) < MIN_MARKER:
                raise refusal(
                    plugin,
                    f"{f.name} looks for {m!r} anywhere in the content: a marker that short "
                    "opens a region (and holds the text) at each place it occurs in prose "
                    f"and code. Use a marker of at least {MIN_MARKER} characters, or put it "
                    "in `leading` (counted only at the start of a reply).",
                )
        if type(f).parse is Format.parse:
            raise refusal(plugin, f"{f.name} has no parse()")
        for m in (*f.markers, *f.leading):
            try:
                finder = f.end_finder(m)
            except NotImplementedError:
                raise refusal(plugin, f"{f.name} has no end_finder() for {m!r}") from None
            if not callable(getattr(finder, "feed", None)):
                raise refusal(plugin, f"{f.name}.end_finder({m!r}) has no feed()")
    for r in plugin.REASONING:
        for m in (*r.opens, *r.closes, *r.answer):
            if not isinstance(m, str) or len(m.strip()) < MIN_MARKER:
                raise refusal(plugin, f"reasoning {r.name}: marker {m!r} is too short")
    for res in plugin.RESIDUE:
        for b in res.bars:
            if not isinstance(b, str) or len(b) != 1 or b.isspace() or b in "<>":
                raise refusal(plugin, f"residue bar {b!r}: one character, not a blank, < or >")
        for t in (*res.tokens, *res.partials, *res.in_reasoning, *res.in_reasoning_partials):
            try:
                groups = re.compile(t).groups
            except re.error as exc:
                raise refusal(plugin, f"residue token {t!r}: {exc}") from None
            if groups:
                raise refusal(plugin, f"residue token {t!r} has groups; use (?:...)")
