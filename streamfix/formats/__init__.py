"""Tool-call formats: one module per shape or model family (see ``base``
for the contract and ``registry`` for how modules are found). A user's shape
is registered with ``register`` or a ``streamfix.formats`` entry point
(docs/extending.md); ``UntilMarker`` and ``Balanced`` are the end finders
the built-in formats are made of."""

from .base import (
    ABORT,
    OPAQUE,
    UNREADABLE,
    EndFinder,
    Format,
    Plugin,
    RawCall,
    Reasoning,
    Residue,
    calls_from_value,
)
from .registry import (
    Markers,
    all_formats,
    by_name,
    markers_for,
    register,
    registered,
    unregister,
)
from .scan import Balanced, UntilMarker

__all__ = [
    "ABORT",
    "OPAQUE",
    "UNREADABLE",
    "Balanced",
    "EndFinder",
    "Format",
    "Markers",
    "Plugin",
    "RawCall",
    "Reasoning",
    "Residue",
    "UntilMarker",
    "all_formats",
    "by_name",
    "calls_from_value",
    "markers_for",
    "register",
    "registered",
    "unregister",
]
