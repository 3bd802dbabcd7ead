"""The store's interface: what one request asks of it as it starts
(``Begin``) and tells it as it ends (``End``), each one round trip.

The limits are counted in fixed windows of one minute (``WINDOW``): the
requests and the tokens a tenant used in the current minute, and its
requests in flight. A request in flight is an entry that expires after
``IN_FLIGHT_TTL`` seconds even if its process died holding it (the
safety net: a crashed replica does not hold a tenant's slots forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Seconds of one limits window (requests and tokens per minute).
WINDOW = 60
#: Seconds an entry of a request in flight outlives a process that died
#: holding it.
IN_FLIGHT_TTL = 900
#: Seconds what was learned about a row stays in the store unread.
LEARNED_TTL = 24 * 3600


class StoreDown(Exception):
    """The store could not be reached (or answered nonsense) in time."""


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's limits; 0 is no limit."""

    max_concurrent: int = 0
    rpm: int = 0
    tpm: int = 0

    def __bool__(self) -> bool:
        return bool(self.max_concurrent or self.rpm or self.tpm)


@dataclass(frozen=True, slots=True)
class Admission:
    """The limits' answer to one request. ``refused``: which limit said no
    (``requests``, ``tokens``, ``concurrency``; None: admitted). The counts
    are this window's after the request (before it, when refused)."""

    refused: str | None
    window: int
    requests: int
    tokens: int
    in_flight: int


@dataclass(slots=True)
class Begin:
    """What a request asks of the store as it starts."""

    tenant: str
    limits: Limits
    #: Tokens the request may use (its prompt's estimate and max_tokens).
    tokens: int
    #: This request's entry among the tenant's requests in flight.
    member: str
    now: float
    #: Learned facts to read (``fact_key``) and rows whose rest to read.
    facts: list[str] = field(default_factory=list)
    rests: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Began:
    admission: Admission | None
    #: One per ``Begin.facts``: the fields stored, or None.
    facts: list[dict[str, str] | None]
    #: One per ``Begin.rests``: the wall-clock time the row rests until.
    rests: list[float | None]


@dataclass(slots=True)
class End:
    """What a request tells the store as it ends."""

    tenant: str
    #: None: the request was not counted (no limits).
    member: str | None = None
    window: int = 0
    #: Tokens used beyond (or, negative, below) what was counted at the start.
    tokens: int = 0
    #: Facts learned during the request: (``fact_key``, fields).
    learned: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    #: Rows rested during the request: (row, for how many seconds).
    rested: list[tuple[str, float]] = field(default_factory=list)
    #: Rows that served again after a rest.
    recovered: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.member or self.learned or self.rested or self.recovered)


class Store(Protocol):
    """Where the fleet's state lives (``local.LocalStore``, ``shared.RedisStore``)."""

    #: Whether other processes see what this store holds.
    shared: bool

    async def begin(self, ask: Begin) -> Began: ...

    async def end(self, told: End) -> None: ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


def row_id(url: str, model: str | None, kind: str) -> str:
    """A row's name in the store: its identity hashed (the URL may carry a
    password), the same in every process that configures the same row."""
    raw = f"{url}\0{model or ''}\0{kind}".encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def fact_key(row: str, model: str) -> str:
    return f"{row}:{model}"


async def wind_down(
    task: asyncio.Task[None], pending: bool, sync: Callable[[], Awaitable[None]], redis: Any
) -> None:
    """The end of a background sync with the shared store, as the app stops:
    the loop cancelled, what is still pending sent once more (a second at
    most; the store may be down), the client closed."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    if pending:
        with contextlib.suppress(StoreDown, TimeoutError):
            await asyncio.wait_for(sync(), 1.0)
    with contextlib.suppress(Exception):
        await redis.close()
