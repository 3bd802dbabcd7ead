"""Plugins: loading a user's step or shape by name, and checking a shape.

``load_spec("package.module:attr")`` imports what ``--transform`` and
``--format`` name (``streamfix serve``, ``replay``, ``probe``; the TOML's
``transform``/``format``). ``factories(specs)`` is the cached tuple of step
factories for ``Options.transforms`` (a proxy row asks for it per request).

A format registered by a user (``formats.register``, an entry point) is
checked before it takes effect, so that no plugin can silently make the
chain worse for every reply:

- ``check_static``: its name is free, its markers are strings, it has an
  end finder for each marker and a parser, and every marker it looks for
  *anywhere* in the content is at least ``MIN_MARKER`` characters long. A
  one- or two-character marker (``{``, ``[``, ``<<``) would open a region,
  and hold text, at each occurrence in prose and code; such openers
  belong in ``leading`` (they count only at the start of a reply, as the
  built-in bare JSON's do).
- ``check_prose`` (measured): with the format registered, plain prose and
  code (``testing.PROSE``) must pass byte-identical, cut anywhere, with
  tools offered; a format whose parser lifts calls from ordinary text, or
  whose residue strips it, is refused with the sample it changed.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .errors import PluginError

if TYPE_CHECKING:
    from .context import TransformFactory
    from .formats.base import Format
    from .formats.registry import Plugin

#: Shortest marker a registered format may look for anywhere in content.
MIN_MARKER = 3


def load_spec(spec: str) -> Any:
    """The object ``module:attr`` (or ``module`` alone) names."""
    module_name, _, attr = spec.strip().partition(":")
    if not module_name:
        raise PluginError(f"{spec!r}: expected module:name")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"{spec}: cannot import {module_name}: {exc}") from exc
    for part in filter(None, attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PluginError(f"{spec}: {module_name} has no {attr}") from None
    return obj


@lru_cache(maxsize=64)
def factories(specs: tuple[str, ...]) -> tuple[TransformFactory, ...]:
    """The step factories ``specs`` name (``--transform``), loaded once."""
    out = []
    for spec in specs:
        obj = load_spec(spec)
        if not callable(obj):
            raise PluginError(f"--transform {spec}: not callable (a Transform class or factory)")
        out.append(obj)
    return tuple(out)


_by_spec: dict[str, Plugin] = {}


def register_spec(spec: str) -> Plugin:
    """``--format module:NAME``: register what it names (a module, a
    ``Format`` or a list, as ``formats.register`` takes them), once per
    process."""
    from .formats.registry import register, registered

    plugin = _by_spec.get(spec)
    if plugin is None or plugin not in registered():
        plugin = _by_spec[spec] = register(load_spec(spec), name=spec)
    return plugin


def _refuse(plugin: Plugin, why: str) -> PluginError:
    return PluginError(f"format plugin {plugin.name} refused: {why}")


def check_static(plugin: Plugin, existing: tuple[Format, ...]) -> None:
    """The rules a registered format is held to before it is used (see
    the module docstring). Raises ``PluginError``."""
    from .formats.base import Format

    taken = {f.name for f in existing}
    names: set[str] = set()
    for f in plugin.FORMATS:
        if not isinstance(f.name, str) or not f.name.strip():
            raise _refuse(plugin, f"{type(f).__name__} has no name")
        if f.name in taken or f.name in names:
            raise _refuse(plugin, f"the format name {f.name!r} is already registered")
        names.add(f.name)
        for field in ("markers", "leading"):
            value = getattr(f, field)
            if not isinstance(value, tuple) or not all(isinstance(m, str) and m for m in value):
                raise _refuse(plugin, f"{f.name}.{field} must be a tuple of non-empty strings")
        for m in f.markers:
            if len(m.strip()) < MIN_MARKER:
                raise _refuse(
                    plugin,
                    f"{f.name} looks for {m!r} anywhere in the content: a marker that short "
                    "opens a region (and holds the text) at each place it occurs in prose "
                    f"and code. Use a marker of at least {MIN_MARKER} characters, or put it "
                    "in `leading` (counted only at the start of a reply).",
                )
        if type(f).parse is Format.parse:
            raise _refuse(plugin, f"{f.name} has no parse()")
        for m in (*f.markers, *f.leading):
            try:
                finder = f.end_finder(m)
            except NotImplementedError:
                raise _refuse(plugin, f"{f.name} has no end_finder() for {m!r}") from None
            if not callable(getattr(finder, "feed", None)):
                raise _refuse(plugin, f"{f.name}.end_finder({m!r}) has no feed()")
    for r in plugin.REASONING:
        for m in (*r.opens, *r.closes, *r.answer):
            if not isinstance(m, str) or len(m.strip()) < MIN_MARKER:
                raise _refuse(plugin, f"reasoning {r.name}: marker {m!r} is too short")
    for res in plugin.RESIDUE:
        import re

        for t in (*res.tokens, *res.partials):
            try:
                groups = re.compile(t).groups
            except re.error as exc:
                raise _refuse(plugin, f"residue token {t!r}: {exc}") from None
            if groups:
                raise _refuse(plugin, f"residue token {t!r} has groups; use (?:...)")


def check_prose(plugin: Plugin) -> None:
    """Plain prose and code pass byte-identical with ``plugin`` registered
    (see the module docstring). Raises ``PluginError``."""
    from . import testing

    bad = testing.passthrough_failures(testing.PROSE, testing.CHECK_REQUEST, cuts="words")
    if bad:
        text, got = bad[0]
        raise _refuse(
            plugin,
            "with it, plain text no longer passes unchanged: "
            f"{text[:80]!r} came out as {got[:120]!r}",
        )
