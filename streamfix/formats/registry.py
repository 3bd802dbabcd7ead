"""The format registry: every format module of this package, discovered.

Each module of ``streamfix.formats`` (except ``base``, ``scan``,
``registry`` and private ``_x`` modules) may define a module-level
``FORMATS: list[Format]``; they are collected once, ordered by
``priority`` (lower first) then ``name``; likewise a module's
``REASONING: list[Reasoning]`` (its reasoning markup, for the reasoning
splitter) and ``RESIDUE: list[Residue]`` (its leftover markup, for the
residue stripper). Adding a model family is one new module: nothing shared is
edited.

``markers_for(tools)`` turns the formats into what the detector's matcher
needs for one request: every marker with the formats that share it (in
priority order: they share the first one's end rule and are parsed in
turn), split into markers that count anywhere and markers that count
only at the start of the reply.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache

from ..context import ToolSpec
from .base import Format, Reasoning, Residue

_SKIP = frozenset({"base", "scan", "registry"})


@lru_cache(maxsize=1)
def _modules() -> tuple[object, ...]:
    from . import __path__ as pkg_path

    return tuple(
        importlib.import_module(f"{__package__}.{info.name}")
        for info in pkgutil.iter_modules(pkg_path)
        if info.name not in _SKIP and not info.name.startswith("_")
    )


@lru_cache(maxsize=1)
def all_formats() -> tuple[Format, ...]:
    """Every registered format, in priority order."""
    found: list[Format] = []
    for module in _modules():
        found.extend(getattr(module, "FORMATS", ()))
    return tuple(sorted(found, key=lambda f: (f.priority, f.name)))


@lru_cache(maxsize=1)
def all_reasoning() -> tuple[Reasoning, ...]:
    """Every family's reasoning markup (the modules' ``REASONING``), by name."""
    found: list[Reasoning] = []
    for module in _modules():
        found.extend(getattr(module, "REASONING", ()))
    return tuple(sorted(found, key=lambda r: r.name))


@lru_cache(maxsize=1)
def all_residue() -> Residue:
    """Every family's leftover markup (the modules' ``RESIDUE``), merged."""
    found: list[Residue] = []
    for module in _modules():
        found.extend(getattr(module, "RESIDUE", ()))

    def union(field: str) -> tuple[str, ...]:
        return tuple(sorted({x for r in found for x in getattr(r, field)}))

    return Residue(**{f.name: union(f.name) for f in fields(Residue)})


@lru_cache(maxsize=1)
def reasoning_models() -> re.Pattern[str]:
    """One pattern over every family's reasoning model names (the modules'
    ``REASONING_MODELS``): a model so named reasons before answering."""
    names = sorted({m for module in _modules() for m in getattr(module, "REASONING_MODELS", ())})
    return re.compile("|".join(names) or r"(?!)", re.IGNORECASE)


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
