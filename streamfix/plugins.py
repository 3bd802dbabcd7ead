"""Plugins: loading a user's step or shape by name, and checking a shape.

``load_spec("package.module:attr")`` imports what ``--transform`` and
``--format`` name (``streamfix serve``, ``replay``, ``probe``; the TOML's
``transform``/``format``). ``factories(specs)`` is the cached tuple of step
factories for ``Options.transforms`` (a proxy row asks for it per request).

A format registered by a user (``formats.register``, an entry point) is
checked before it takes effect, so that no plugin can silently make the
chain worse for every reply:

- static (``formats/rules.py``, run by the registry itself): its name is
  free, its markers are strings and long enough, it has an end finder for
  each marker and a parser.
- ``check_prose`` (measured): with the format registered, plain prose and
  code (``passthrough.PROSE``) must pass byte-identical, cut anywhere, with
  tools offered; a format whose parser lifts calls from ordinary text, or
  whose residue strips it, is refused with the sample it changed. It runs
  the chain, which stands above the registry: this module hands it to the
  registry (``registry.measure_with``) when it is imported, and the
  engine's entry points (``api``, ``middleware``, ``testing``, the
  server and the command) import it.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import passthrough
from .errors import PluginError
from .formats import registry
from .formats.base import Plugin
from .formats.rules import refusal

if TYPE_CHECKING:
    from .context import TransformFactory


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
    plugin = _by_spec.get(spec)
    if plugin is None or plugin not in registry.registered():
        plugin = _by_spec[spec] = registry.register(load_spec(spec), name=spec)
    return plugin


def check_prose(plugin: Plugin) -> None:
    """Plain prose and code pass byte-identical with ``plugin`` registered
    (see the module docstring). Raises ``PluginError``."""
    bad = passthrough.passthrough_failures(
        passthrough.PROSE, passthrough.CHECK_REQUEST, cuts="words"
    )
    if bad:
        text, got = bad[0]
        raise refusal(
            plugin,
            "with it, plain text no longer passes unchanged: "
            f"{text[:80]!r} came out as {got[:120]!r}",
        )


registry.measure_with(check_prose)
