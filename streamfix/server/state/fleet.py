"""What the request path asks of the store: ``Fleet.admit`` as a chat
request starts, ``Fleet.finish`` as it ends (``state/__init__``'s doc).

Without ``--state`` and without limits for the request's tenant,
``admit`` returns at once and nothing changes. With limits, the tenant's
counts are checked and counted (in process, or in the store); a refusal
is a 429 with ``Retry-After`` and OpenAI's ``x-ratelimit-*`` headers
(``refusal``), in the door's own error shape (``routes.doors``). With
``--state``, the rows' learned facts and rests not read in the last
``CACHE_SECONDS`` are read in the same round trip and applied to this
process's ``Upstream`` objects; what the request taught (a window from an
overflow, a rest after failures) is written as it ends, without the
request waiting on the store.

A refusal is cheap where it can be (``precheck``): a tenant whose
``max_concurrent`` slots this process alone already holds is refused
before its body is read, parsed or planned and without asking the store
(the fleet as a whole holds at least as many), so a tenant at its limit
costs the others little more than its 429s' bytes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..caller.replies import json_error
from ..config import ServerConfig, TenantConfig
from ..upstream.engines import MAX_WINDOW, MIN_WINDOW
from ..upstream.pool import Learned, Upstream
from .local import LocalStore
from .store import WINDOW, Admission, Begin, End, Limits, Store, StoreDown, fact_key, row_id

if TYPE_CHECKING:
    from ..metrics import Metrics
    from ..ui.activity import Activity

log = logging.getLogger("streamfix.state")

#: Seconds learned facts and rests read from the store are trusted locally.
CACHE_SECONDS = 2.0
#: Seconds the store is left alone after it failed.
RETRY_SECONDS = 1.0
#: Seconds between two warnings that the store is down.
WARN_EVERY = 60.0
#: Seconds between two checks of the store while the proxy runs.
PING_EVERY = 2.0
#: Most (row, model) read times kept.
MAX_FRESH = 4096

#: Learned's fields as the store keeps them.
_FIELDS = ("window", "token_scale", "reasoning", "prompt_opens", "json_schema_refused")


def facts_out(facts: Learned) -> dict[str, str]:
    return {
        "window": str(facts.window or ""),
        "token_scale": repr(facts.token_scale),
        "reasoning": "1" if facts.reasoning else "",
        "prompt_opens": "1" if facts.prompt_opens else "",
        "json_schema_refused": "1" if facts.json_schema_refused else "",
    }


def facts_in(up: Upstream, model: str, stored: dict[str, str]) -> None:
    """Facts another process learned, taken into ``up``'s for ``model``
    (a configured window still wins; a window out of bounds is ignored)."""
    facts = up.learn(model)
    try:
        window = int(stored.get("window") or 0)
        scale = float(stored.get("token_scale") or 1.0)
    except ValueError:
        return
    if up.cfg.window is None and MIN_WINDOW <= window <= MAX_WINDOW:
        facts.window = window
    if math.isfinite(scale) and 0.1 <= scale <= 10:
        facts.token_scale = scale
    facts.reasoning = facts.reasoning or bool(stored.get("reasoning"))
    facts.prompt_opens = facts.prompt_opens or bool(stored.get("prompt_opens"))
    facts.json_schema_refused = facts.json_schema_refused or bool(stored.get("json_schema_refused"))


def _snapshot(facts: Learned | None) -> tuple[Any, ...] | None:
    if facts is None:
        return None
    return (
        facts.window,
        facts.token_scale,
        facts.reasoning,
        facts.prompt_opens,
        facts.json_schema_refused,
    )


@dataclass(slots=True)
class Ticket:
    """One admitted request: what its end tells the store."""

    tenant: str
    member: str | None
    window: int
    #: Tokens counted at the start (the tpm limit), and the reply's usage.
    tokens: int
    used: int | None = None
    #: The last reads of a stream, where its usage is (tpm only).
    tail: deque[bytes] | None = None
    #: Whether it holds one of its tenant's ``max_concurrent`` slots here.
    held: bool = False
    #: (row, model, its facts as they were, resting until) at the start.
    rows: list[tuple[Upstream, str, tuple[Any, ...] | None, float]] = field(default_factory=list)
    local: bool = True

    def usage(self, usage: object) -> None:
        """The reply's ``usage`` object: its total corrects the tokens."""
        if not isinstance(usage, dict):
            return
        total = usage.get("total_tokens")
        if not isinstance(total, int):
            parts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
            if not all(isinstance(p, int) for p in parts):
                return
            total = sum(p for p in parts if isinstance(p, int))
        self.used = total


class Fleet:
    """The limits and the shared store of one proxy app."""

    def __init__(self, cfg: ServerConfig, metrics: Metrics, store: Store | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.local = LocalStore()
        if store is None and cfg.state:
            from .shared import RedisStore

            store = RedisStore(cfg.state, cfg.state_prefix)
        self.store = store
        self.fail_closed = cfg.state_failure == "closed"
        #: Why the store is down (None: up, or none configured).
        self.down: str | None = None
        self._retry_at = 0.0
        self._warned_at = -math.inf
        self._read: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: The page's last hour (``--ui``): refusals are counted there too.
        self.activity: Activity | None = None
        #: Slots each tenant holds in this process (its tickets not finished).
        self.held: dict[str, int] = {}

    # -- the request path ---------------------------------------------------

    def precheck(self, tenant: TenantConfig | None) -> web.Response | None:
        """The 429 of a tenant whose ``max_concurrent`` slots this process
        already holds (no body read, no plan, no store), else None."""
        limits = self.limits_of(tenant)
        if not limits.max_concurrent:
            return None
        name = tenant.name if tenant is not None else "-"
        held = self.held.get(name, 0)
        if held < limits.max_concurrent:
            return None
        self._limited(name, "concurrency")
        now = time.time()
        admission = Admission("concurrency", int(now // WINDOW), 0, 0, held)
        return refusal(limits, admission, now, counted=False)

    def limits_of(self, tenant: TenantConfig | None) -> Limits:
        if tenant is not None and tenant.limits is not None:
            return tenant.limits
        return self.cfg.limits

    async def admit(
        self, tenant: TenantConfig | None, rows: list[Upstream], model: object, tokens: int
    ) -> Ticket | web.Response | None:
        """A request may go on (its ticket, or None: nothing to tell at its
        end), or its 429 (or, failing closed, 503)."""
        limits = self.limits_of(tenant)
        store = self.store
        mono = time.monotonic()
        shared = store is not None and mono >= self._retry_at
        if not limits and not shared:
            return None
        name = tenant.name if tenant is not None else "-"
        now = time.time()
        ask = Begin(name, limits, tokens if limits.tpm else 0, os.urandom(8).hex(), now)
        pairs = [(up, up.served(model)) for up in rows]
        admission: Admission | None = None
        local = True
        if shared:
            assert store is not None
            stale = [(up, m) for up, m in pairs if self._read.get(self._key(up, m), 0) <= mono]
            ask.facts = [self._key(up, m) for up, m in stale]
            ask.rests = [row_id(*up.cfg.identity) for up, _ in stale]
            try:
                began = await store.begin(ask)
            except StoreDown as exc:
                self._failed(exc)
            else:
                self._up()
                admission, local = began.admission, False
                self._apply(stale, began.facts, began.rests, mono)
        if limits and local:
            if store is not None and self.fail_closed:
                self._limited(name, "state")
                return _error(
                    503,
                    "the shared state is unreachable and limits fail closed; retry later",
                    "server_error",
                    "state_unavailable",
                    {"Retry-After": "1"},
                )
            admission = self.local.admit(ask)
        if admission is not None and admission.refused is not None:
            self._limited(name, admission.refused)
            return refusal(limits, admission, now)
        ticket = Ticket(
            name,
            ask.member if admission is not None else None,
            admission.window if admission is not None else 0,
            ask.tokens,
            local=local,
        )
        if limits.tpm:
            ticket.tail = deque(maxlen=4)
        if limits.max_concurrent:
            ticket.held = True
            self.held[name] = self.held.get(name, 0) + 1
        if store is not None:
            ticket.rows = [
                (up, m, _snapshot(up.learned.get(m)), up.rested_until) for up, m in pairs
            ]
        return ticket

    def finish(self, ticket: Ticket | None) -> None:
        """The request ended: its slot and tokens back, what it taught to
        the store (in the background)."""
        if ticket is None:
            return
        if ticket.held:
            ticket.held = False
            left = self.held.get(ticket.tenant, 1) - 1
            if left > 0:
                self.held[ticket.tenant] = left
            else:
                self.held.pop(ticket.tenant, None)
        told = End(ticket.tenant, ticket.member, ticket.window)
        if ticket.tail is not None and ticket.used is None:
            ticket.usage(stream_usage(ticket.tail))
        if ticket.used is not None and ticket.tokens:
            told.tokens = ticket.used - ticket.tokens
        mono = time.monotonic()
        for up, model, before, resting in ticket.rows:
            facts = up.learned.get(model)
            if facts is not None and _snapshot(facts) != before:
                told.learned.append((self._key(up, model), facts_out(facts)))
            row = row_id(*up.cfg.identity)
            if up.rested_until > resting and up.rested_until > mono:
                told.rested.append((row, up.rested_until - mono))
            elif resting > mono and up.rested_until == 0.0:
                told.recovered.append(row)
        if ticket.local:
            self.local.release(told)
            told.member = None
        if told and self.store is not None and time.monotonic() >= self._retry_at:
            task = asyncio.get_running_loop().create_task(self._end(told))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _limited(self, tenant: str, limit: str) -> None:
        """A refusal counted: the metrics, and the page's last hour."""
        self.metrics.limited.labels(tenant, limit).inc()
        if self.activity is not None:
            self.activity.refused(tenant, limit)

    # -- the store ----------------------------------------------------------

    def _key(self, up: Upstream, model: str) -> str:
        return fact_key(row_id(*up.cfg.identity), model)

    def _apply(
        self,
        stale: list[tuple[Upstream, str]],
        facts: list[dict[str, str] | None],
        rests: list[float | None],
        mono: float,
    ) -> None:
        wall = time.time()
        if len(self._read) > MAX_FRESH:
            self._read.clear()
        for (up, model), stored, until in zip(stale, facts, rests, strict=True):
            self._read[self._key(up, model)] = mono + CACHE_SECONDS
            if stored:
                facts_in(up, model, stored)
            if until is not None and until > wall:
                up.rested_until = max(up.rested_until, mono + (until - wall))

    async def _end(self, told: End) -> None:
        assert self.store is not None
        try:
            await self.store.end(told)
        except StoreDown as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        mono = time.monotonic()
        self._retry_at = mono + RETRY_SECONDS
        self.metrics.state_errors.inc()
        if self.down is None or mono - self._warned_at >= WARN_EVERY:
            self._warned_at = mono
            log.warning(
                "shared state unreachable (%s): going on with this process's own facts and "
                "limits%s",
                exc,
                "; limited tenants are refused (state_failure = closed)"
                if self.fail_closed
                else "",
            )
        self.down = str(exc) or type(exc).__name__

    def _up(self) -> None:
        if self.down is not None:
            log.info("shared state reachable again")
            self.down = None

    async def lifecycle(self, app: web.Application) -> Any:
        """While the app runs: the store checked every ``PING_EVERY``
        seconds (``/readyz`` says ``degraded`` while it is down)."""
        task = None
        if self.store is not None:
            task = asyncio.get_running_loop().create_task(self._watch())
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            for t in list(self._tasks):
                with _suppress():
                    await asyncio.wait_for(t, 1.0)
            if self.store is not None:
                with _suppress():
                    await self.store.close()

    async def _watch(self) -> None:
        assert self.store is not None
        while True:
            try:
                await self.store.ping()
            except StoreDown as exc:
                self._failed(exc)
            else:
                self._up()
            await asyncio.sleep(PING_EVERY)


def _suppress() -> Any:
    import contextlib

    return contextlib.suppress(Exception, asyncio.CancelledError)


def stream_usage(reads: Iterable[bytes]) -> object:
    """The ``usage`` object in a stream's last reads, if one is there."""
    import orjson

    data = b"".join(reads)
    at = data.rfind(b'"usage"')
    if at < 0:
        return None
    start = data.rfind(b"data:", 0, at)
    end = data.find(b"\n", at)
    if start < 0:
        return None
    try:
        obj = orjson.loads(data[start + 5 : end if end >= 0 else None])
    except orjson.JSONDecodeError:
        return None
    return obj.get("usage") if isinstance(obj, dict) else None


def refusal(limits: Limits, admission: Admission, now: float, counted: bool = True) -> web.Response:
    """The 429 for a limit reached: OpenAI's shape (a door's path reshapes
    it), ``Retry-After`` and the ``x-ratelimit-*`` headers (the
    ``remaining`` ones only when the window's counts were read:
    ``counted``)."""
    reset = max(1, math.ceil(WINDOW - now % WINDOW))
    headers: dict[str, str] = {}
    if limits.rpm:
        headers["x-ratelimit-limit-requests"] = str(limits.rpm)
        if counted:
            left = max(0, limits.rpm - admission.requests)
            headers["x-ratelimit-remaining-requests"] = str(left)
        headers["x-ratelimit-reset-requests"] = f"{reset}s"
    if limits.tpm:
        headers["x-ratelimit-limit-tokens"] = str(limits.tpm)
        if counted:
            headers["x-ratelimit-remaining-tokens"] = str(max(0, limits.tpm - admission.tokens))
        headers["x-ratelimit-reset-tokens"] = f"{reset}s"
    what = {
        "requests": f"{limits.rpm} requests per minute",
        "tokens": f"{limits.tpm} tokens per minute",
        "concurrency": f"{limits.max_concurrent} requests at once",
    }[admission.refused or "requests"]
    headers["Retry-After"] = "1" if admission.refused == "concurrency" else str(reset)
    message = f"rate limit reached: this key may make {what}"
    return _error(429, message, "requests", "rate_limit_exceeded", headers)


def _error(
    status: int, message: str, type_: str, code: str, headers: dict[str, str]
) -> web.Response:
    resp = json_error(status, message, type_, code)
    resp.headers.update(headers)
    return resp
