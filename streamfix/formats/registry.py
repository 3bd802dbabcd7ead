"""The format registry: every format module of this package, discovered.

Each module of ``streamfix.formats`` (except ``base``, ``scan``,
``registry`` and private ``_x`` modules) may define a module-level
``FORMATS: list[Format]``; they are collected once, ordered by
``priority`` (lower first) then ``name``; likewise a module's
``REASONING: list[Reasoning]`` (its reasoning markup, for the reasoning
splitter) and ``RESIDUE: list[Residue]`` (its leftover markup, for the
residue stripper). Adding a model family is one new module: nothing shared is
edited.

A user's shape joins the same lists without a fork: ``register(...)`` (a
module with those lists, or ``Format``/``Reasoning``/``Residue`` objects),
or an installed package's ``streamfix.formats`` entry point, loaded before
the first request (``load_entry_points``). A registered format is treated
exactly as a built-in one; it is checked first (``rules.py``, and
the measured checks the chain hands in, ``measure_with``): a
format that breaks an invariant is refused with a ``PluginError`` that
says which and why. Registering clears every cache built from the lists
(the ones here, and those the steps registered with ``on_change``).

``markers_for(tools)`` turns the formats into what the detector's matcher
needs for one request: every marker with the formats that share it (in
priority order: they share the first one's end rule and are parsed in
turn), split into markers that count anywhere and markers that count
only at the start of the reply.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from types import ModuleType
from typing import Any

from ..errors import PluginError
from ..spec import ToolSpec
from .base import Format, Plugin, Reasoning, Residue
from .rules import check_static

_SKIP = frozenset({"base", "scan", "registry", "rules"})

log = logging.getLogger("streamfix.plugins")

#: The entry point group of installed format plugins.
ENTRY_POINTS = "streamfix.formats"


@lru_cache(maxsize=1)
def _modules() -> tuple[object, ...]:
    return tuple(
        importlib.import_module(f"{__package__}.{info.name}")
        for info in pkgutil.iter_modules([os.path.dirname(__file__)])
        if info.name not in _SKIP and not info.name.startswith("_")
    )


_plugins: list[Plugin] = []
_hooks: list[Callable[[], None]] = []
#: The measured checks of a plugin, run with it in effect (``register``'s
#: ``check``). The chain they run sits above the registry, so it hands
#: them in (``plugins.py``, ``measure_with``) rather than being imported.
_measures: list[Callable[[Plugin], None]] = []


def _sources() -> tuple[object, ...]:
    return (*_modules(), *_plugins)


def on_change(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever the lists change (a cache built from them)."""
    _hooks.append(hook)


def measure_with(check: Callable[[Plugin], None]) -> None:
    """Run ``check`` on each plugin registered with ``check=True``, with
    it in effect; a ``PluginError`` it raises takes the plugin back."""
    if check not in _measures:
        _measures.append(check)


def _changed() -> None:
    caches = (
        all_formats,
        all_reasoning,
        all_residue,
        reasoning_models,
        prompt_opening_models,
        prompt_closed_models,
        _prompt_markers,
    )
    for cached in caches:
        cached.cache_clear()
    for hook in _hooks:
        hook()


def _plugin_of(items: Iterable[Any], name: str | None) -> Plugin:
    """The ``Plugin`` of ``register``'s arguments (see there)."""
    formats: list[Format] = []
    reasoning: list[Reasoning] = []
    residue: list[Residue] = []
    models: list[str] = []

    def add(item: Any) -> None:
        if isinstance(item, ModuleType):
            for x in getattr(item, "FORMATS", ()):
                add(x)
            for x in getattr(item, "REASONING", ()):
                add(x)
            for x in getattr(item, "RESIDUE", ()):
                add(x)
            models.extend(getattr(item, "REASONING_MODELS", ()))
        elif isinstance(item, type) and issubclass(item, Format):
            formats.append(item())
        elif isinstance(item, Format):
            formats.append(item)
        elif isinstance(item, Reasoning):
            reasoning.append(item)
        elif isinstance(item, Residue):
            residue.append(item)
        elif isinstance(item, (list, tuple)):
            for x in item:
                add(x)
        else:
            raise PluginError(
                f"cannot register {item!r}: expected a module with FORMATS/REASONING/"
                "RESIDUE lists, or Format, Reasoning or Residue objects"
            )

    mods = []
    for item in items:
        add(item)
        if isinstance(item, ModuleType):
            mods.append(item.__name__)
    if name is None:
        name = mods[0] if mods else (formats[0].name if formats else "plugin")
    if not (formats or reasoning or residue or models):
        raise PluginError(f"plugin {name}: nothing to register (no FORMATS, REASONING, RESIDUE)")
    return Plugin(name, tuple(formats), tuple(reasoning), tuple(residue), tuple(models))


def register(*items: Any, name: str | None = None, check: bool = True) -> Plugin:
    """Teach the chain a shape: ``items`` are modules laid out like a
    built-in format module (``FORMATS``, ``REASONING``, ``RESIDUE``,
    ``REASONING_MODELS``), or ``Format`` objects (or classes), ``Reasoning``
    and ``Residue`` objects. Checked before it takes effect (``check``:
    also against plain prose and code, ``plugins.check_prose``); a refusal
    raises ``PluginError`` and changes nothing. Returns what was added."""
    plugin = _plugin_of(items, name)
    check_static(plugin, all_formats())
    _plugins.append(plugin)
    _changed()
    if check:
        try:
            for measure in _measures:
                measure(plugin)
        except BaseException:
            unregister(plugin)
            raise
    return plugin


def unregister(plugin: Plugin) -> None:
    """Take back what ``register`` added (tests; a reload)."""
    if plugin in _plugins:
        _plugins.remove(plugin)
        _changed()


def registered() -> tuple[Plugin, ...]:
    """What was registered, in order (entry points included)."""
    return tuple(_plugins)


_loaded_entry_points: set[str] = set()


def load_entry_points(strict: bool = True) -> list[Plugin]:
    """Register every installed ``streamfix.formats`` entry point not yet
    registered (``STREAMFIX_PLUGINS=0`` turns this off). An entry point
    names a module (or a Format, a list …) as ``register`` takes it. One
    that fails to load or is refused raises ``PluginError`` (``strict``,
    ``streamfix serve``) or is logged and skipped (the library)."""
    if os.environ.get("STREAMFIX_PLUGINS", "1").strip().lower() in ("0", "false", "no", "off"):
        return []
    from importlib.metadata import entry_points

    added: list[Plugin] = []
    for ep in entry_points(group=ENTRY_POINTS):
        key = f"{ep.name}={ep.value}"
        if key in _loaded_entry_points:
            continue
        _loaded_entry_points.add(key)
        try:
            try:
                obj = ep.load()
            except Exception as exc:
                raise PluginError(f"format plugin {ep.name} ({ep.value}): {exc}") from exc
            added.append(register(obj, name=ep.name))
        except PluginError as exc:
            if strict:
                raise
            log.warning("format plugin %s skipped: %s", ep.name, exc)
    return added


@lru_cache(maxsize=1)
def all_formats() -> tuple[Format, ...]:
    """Every registered format, in priority order."""
    found: list[Format] = []
    for module in _sources():
        found.extend(getattr(module, "FORMATS", ()))
    return tuple(sorted(found, key=lambda f: (f.priority, f.name)))


@lru_cache(maxsize=1)
def all_reasoning() -> tuple[Reasoning, ...]:
    """Every family's reasoning markup (the modules' ``REASONING``), by name."""
    found: list[Reasoning] = []
    for module in _sources():
        found.extend(getattr(module, "REASONING", ()))
    return tuple(sorted(found, key=lambda r: r.name))


@lru_cache(maxsize=1)
def all_residue() -> Residue:
    """Every family's leftover markup (the modules' ``RESIDUE``), merged."""
    found: list[Residue] = []
    for module in _sources():
        found.extend(getattr(module, "RESIDUE", ()))

    def union(field: str) -> tuple[str, ...]:
        return tuple(sorted({x for r in found for x in getattr(r, field)}))

    return Residue(**{f.name: union(f.name) for f in fields(Residue)})


def _models(attr: str) -> re.Pattern[str]:
    """One case-insensitive pattern over the model names every module
    declares under ``attr`` (matching nothing when none does)."""
    names = sorted({m for module in _sources() for m in getattr(module, attr, ())})
    return re.compile("|".join(names) or r"(?!)", re.IGNORECASE)


@lru_cache(maxsize=1)
def reasoning_models() -> re.Pattern[str]:
    """One pattern over every family's reasoning model names (the modules'
    ``REASONING_MODELS``): a model so named reasons before answering."""
    return _models("REASONING_MODELS")


@lru_cache(maxsize=1)
def prompt_opening_models() -> re.Pattern[str]:
    """One pattern over the models whose chat templates open the reasoning
    in the prompt by default (the modules' ``PROMPT_OPENS_MODELS``): their
    replies start inside it, so a call may end it with no close."""
    return _models("PROMPT_OPENS_MODELS")


@lru_cache(maxsize=1)
def prompt_closed_models() -> re.Pattern[str]:
    """One pattern over the models whose chat templates never open the
    reasoning in the prompt, thinking on or off (the modules'
    ``PROMPT_NEVER_OPENS_MODELS``): they write the open themselves when they
    reason, so a call before any close is the answer's, not reasoning's."""
    return _models("PROMPT_NEVER_OPENS_MODELS")


@lru_cache(maxsize=1)
def _prompt_markers() -> tuple[tuple[re.Pattern[str], Format], ...]:
    return tuple(
        (re.compile("|".join(f"(?:{m})" for m in f.prompt_models), re.IGNORECASE), f)
        for f in all_formats()
        if f.prompt_marker and f.prompt_models
    )


def prompt_marker_format(model: str) -> Format | None:
    """The format whose marker ``model``'s chat template ends the prompt
    with (``Format.prompt_marker``), or None."""
    if model:
        for rx, f in _prompt_markers():
            if rx.search(model):
                return f
    return None


def by_name(name: str) -> Format:
    """One registered format by its ``name`` (KeyError if none)."""
    for f in all_formats():
        if f.name == name:
            return f
    raise KeyError(name)


@dataclass(frozen=True, slots=True)
class Markers:
    """The markers that apply to one request.

    ``groups`` maps each marker to the formats that use it, in priority
    order; ``anywhere`` and ``leading`` are the marker strings by where they
    count (a marker can be in both lists when formats disagree)."""

    groups: Mapping[str, tuple[Format, ...]]
    anywhere: tuple[str, ...]
    leading: tuple[str, ...]


def markers_for(
    tools: Mapping[str, ToolSpec], formats: tuple[Format, ...] | None = None
) -> Markers:
    """Collect the markers of ``formats`` (default: all) for ``tools``."""
    groups: dict[str, list[Format]] = {}
    anywhere: dict[str, None] = {}
    leading: dict[str, None] = {}
    for f in all_formats() if formats is None else formats:
        for m in (*f.markers, *f.tool_markers(tools)):
            if m:
                groups.setdefault(m, []).append(f)
                anywhere[m] = None
        for m in f.leading:
            if m:
                if f not in groups.setdefault(m, []):
                    groups[m].append(f)
                leading[m] = None
    return Markers(
        groups={m: tuple(fs) for m, fs in groups.items()},
        anywhere=tuple(anywhere),
        leading=tuple(leading),
    )
