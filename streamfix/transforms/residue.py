"""Placeholder: passes every delta through unchanged (filled in by its issue)."""

from __future__ import annotations

from ..context import Context
from ..delta import Delta


class ResidueStripper:
    __slots__ = ("ctx",)

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def feed(self, d: Delta) -> None:
        return None

    def close(self, d: Delta) -> None:
        return None
