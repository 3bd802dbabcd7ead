"""Tool-call formats: one module per shape or model family (see ``base``
for the contract and ``registry`` for how modules are found)."""

from .base import ABORT, OPAQUE, EndFinder, Format, RawCall, calls_from_value
from .registry import Markers, all_formats, by_name, markers_for

__all__ = [
    "ABORT",
    "OPAQUE",
    "EndFinder",
    "Format",
    "Markers",
    "RawCall",
    "all_formats",
    "by_name",
    "calls_from_value",
    "markers_for",
]
