"""The in-process store: the default, nothing to run.

The limits' counters of this process only (``--workers N`` and replicas
each count their own). What was learned about the rows needs nothing here:
the process's ``Upstream`` objects hold it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .store import IN_FLIGHT_TTL, WINDOW, Admission, Began, Begin, End

#: Most tenants' counters kept (the config allows 256 tenants and '-').
MAX_TENANTS = 512


@dataclass(slots=True)
class _Counts:
    window: int = -1
    requests: int = 0
    tokens: int = 0
    #: Requests in flight: entry -> when it expires.
    in_flight: dict[str, float] = field(default_factory=dict)


class LocalStore:
    shared = False

    def __init__(self) -> None:
        self._tenants: dict[str, _Counts] = {}

    def admit(self, ask: Begin) -> Admission:
        """The limits' answer, counted (synchronous: nothing to wait for)."""
        counts = self._tenants.get(ask.tenant)
        if counts is None:
            if len(self._tenants) >= MAX_TENANTS:
                self._tenants.clear()
            counts = self._tenants[ask.tenant] = _Counts()
        window = int(ask.now // WINDOW)
        if counts.window != window:
            counts.window, counts.requests, counts.tokens = window, 0, 0
        if counts.in_flight and ask.limits.max_concurrent:
            now = ask.now
            for m in [m for m, t in counts.in_flight.items() if t <= now]:
                del counts.in_flight[m]
        lim = ask.limits
        refused = None
        if lim.rpm and counts.requests + 1 > lim.rpm:
            refused = "requests"
        elif lim.tpm and counts.tokens and counts.tokens + ask.tokens > lim.tpm:
            refused = "tokens"
        elif lim.max_concurrent and len(counts.in_flight) + 1 > lim.max_concurrent:
            refused = "concurrency"
        if refused is None:
            counts.requests += 1
            counts.tokens += ask.tokens
            if lim.max_concurrent:
                counts.in_flight[ask.member] = ask.now + IN_FLIGHT_TTL
        return Admission(refused, window, counts.requests, counts.tokens, len(counts.in_flight))

    def release(self, told: End) -> None:
        counts = self._tenants.get(told.tenant)
        if counts is None or told.member is None:
            return
        counts.in_flight.pop(told.member, None)
        if told.tokens and counts.window == told.window:
            counts.tokens = max(0, counts.tokens + told.tokens)

    async def begin(self, ask: Begin) -> Began:
        admission = self.admit(ask) if ask.limits else None
        return Began(admission, [None] * len(ask.facts), [None] * len(ask.rests))

    async def end(self, told: End) -> None:
        self.release(told)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None
