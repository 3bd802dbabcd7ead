"""The upstreams: choice by weight, failover, retries, rest, headers.

A request goes to one upstream chosen at random by weight among those not
resting. Before the first byte of the reply reached the client, a
connection error, a timeout, a 5xx or a 429 moves on to the next upstream
in that order; after a whole round fails, the round is tried again after an
exponential backoff, ``retries`` times. An upstream that failed is rested
(skipped while others are available) for ``rest`` seconds. A request that
meets a kept-alive connection the upstream has just closed is sent again at
once on a new one, and is no failure (``_request``).

Headers: the client's end-to-end headers are forwarded, hop-by-hop ones
(RFC 9110 §7.6.1) are not. ``Authorization``: an upstream's configured key
wins; otherwise the client's header is forwarded, unless the proxy checks
inbound keys (then the client's header holds *our* key, which must not
leak upstream). An Anthropic client's ``x-api-key`` is never forwarded as
such; where ``Authorization`` would be forwarded, it is sent as one.
Keys are never logged: only ``UpstreamConfig.name`` is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict

from ..config import UpstreamConfig
from .diagnose import in_words
from .engines import UpstreamInfo

log = logging.getLogger("streamfix.upstreams")

#: RFC 9110 §7.6.1 hop-by-hop fields, plus those aiohttp sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "content-encoding",
    }
)

#: Upstream statuses worth another upstream or a retry.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

#: Longest backoff between two retry rounds (seconds).
MAX_BACKOFF = 5.0

#: Bytes of an upstream error body kept for the client's error message.
ERROR_BODY_BYTES = 64 * 1024


class Upstream:
    """One configured upstream and what is known about it."""

    __slots__ = ("cfg", "dimensions", "failures", "info", "rested_until", "token_scale")

    def __init__(self, cfg: UpstreamConfig, previous: Upstream | None = None) -> None:
        """``previous``: the same backend in the table this one replaces (a
        reload): what was probed and learned of it carries over."""
        self.cfg = cfg
        self.info = UpstreamInfo(window=cfg.window, engine=None, reasoning=cfg.reasoning)
        self.rested_until = 0.0
        self.failures = 0
        #: The upstream's own prompt token count over our estimate, learned
        #: from an overflow error that states it (1.0 until then).
        self.token_scale = 1.0
        #: An embedding row's vector size, probed.
        self.dimensions: int | None = None
        if previous is not None:
            self.set_info(dataclasses.replace(previous.info))
            self.token_scale = previous.token_scale
            self.dimensions = previous.dimensions
            self.rested_until = previous.rested_until
            self.failures = previous.failures

    @property
    def probed(self) -> bool:
        """Whether a probe (or a reply) taught anything about the backend."""
        return self.info.engine is not None or self.info.window is not None

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def window(self) -> int | None:
        return self.cfg.window if self.cfg.window is not None else self.info.window

    def set_info(self, info: UpstreamInfo) -> None:
        """A probe result; configured values override probed ones."""
        if self.cfg.window is not None:
            info.window = self.cfg.window
        elif info.window is None:
            info.window = self.info.window  # keep a window learned from an error
        info.reasoning = info.reasoning or self.info.reasoning or self.cfg.reasoning
        self.info = info

    def learn_window(self, window: int) -> None:
        if self.cfg.window is None:
            self.info.window = window

    def mark_reasoning(self) -> None:
        self.info.reasoning = True

    def resting(self, now: float) -> bool:
        return now < self.rested_until


class UpstreamPool:
    def __init__(self, upstreams: list[Upstream], rest: float = 30.0) -> None:
        self.upstreams = upstreams
        self.rest = rest
        self._random = random.Random()

    def order(self, rows: list[Upstream] | None = None) -> list[Upstream]:
        """``rows`` (default: all upstreams), in the order to try them:
        those not resting first, shuffled by weight (Efraimidis–Spirakis
        keys), then resting ones."""
        now = time.monotonic()
        rnd = self._random.random

        def key(u: Upstream) -> tuple[bool, float]:
            return (u.resting(now), -(rnd() ** (1.0 / u.cfg.weight)))

        return sorted(self.upstreams if rows is None else rows, key=key)

    def failed(self, up: Upstream) -> None:
        up.failures += 1
        up.rested_until = time.monotonic() + self.rest

    def succeeded(self, up: Upstream) -> None:
        up.failures = 0
        up.rested_until = 0.0


def forward_headers(
    client: Mapping[str, str], up: Upstream, *, forward_auth: bool
) -> CIMultiDict[str]:
    """The headers to send upstream (see module docstring)."""
    drop = set(HOP_BY_HOP)
    conn = client.get("Connection")
    if conn:
        drop.update(t.strip().lower() for t in conn.split(","))
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in client.items():
        lk = k.lower()
        if lk in drop or lk in ("authorization", "x-api-key"):
            continue
        out.add(k, v)
    if up.cfg.has_credentials:
        pass  # user:password in the URL: aiohttp sends it as Basic auth
    elif up.cfg.api_key:
        out["Authorization"] = f"Bearer {up.cfg.api_key}"
    elif forward_auth and client.get("Authorization"):
        out["Authorization"] = client["Authorization"]
    elif forward_auth and client.get("x-api-key"):
        out["Authorization"] = f"Bearer {client['x-api-key']}"
    return out


def response_headers(upstream: Mapping[str, str]) -> CIMultiDict[str]:
    """Upstream response headers worth relaying (not hop-by-hop, not the
    framing ones that the proxy sets itself)."""
    out: CIMultiDict[str] = CIMultiDict()
    skip = HOP_BY_HOP | {"content-type", "date", "server"}
    conn = upstream.get("Connection")
    if conn:  # fields the upstream named hop-by-hop (RFC 9110 §7.6.1)
        skip = skip | {t.strip().lower() for t in conn.split(",")}
    for k, v in upstream.items():
        if k.lower() not in skip:
            out.add(k, v)
    return out


@dataclass(slots=True)
class UpstreamFailure(Exception):
    """No upstream answered usably. ``status`` is the HTTP status to give
    the client: the last upstream's own 5xx/429 (with ``body``), 502 when
    none could be reached, 504 on a timeout."""

    status: int
    message: str
    kind: str
    body: bytes | None = None
    headers: Mapping[str, str] | None = None

    def __str__(self) -> str:
        return self.message


ErrorHook = Callable[[Upstream, str], None]


async def _request(
    session: aiohttp.ClientSession, up: Upstream, method: str, url: str, **kw: Any
) -> aiohttp.ClientResponse:
    """``session.request``, sent once more on a new connection when the
    connection it went out on turns out closed before any reply.

    That is a kept-alive connection the server closed as it was reused
    (llama-cpp-python closes one after an empty stream, a moment later):
    aiohttp sends such a request again by itself only for idempotent
    methods, and a chat completion is a POST. Asking twice costs at most
    one more generation; the error is not the upstream's, so it is neither
    counted nor rested. A connection that could not be opened at all
    (``ClientConnectorError``) is a real failure and is not retried here.
    """
    try:
        return await session.request(method, url, **kw)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise
        log.info("%s closed a connection before replying (%s); sending again", up.name, exc)
        return await session.request(method, url, **kw)


async def send(
    pool: UpstreamPool,
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    *,
    body_for: Callable[[Upstream], bytes | None],
    headers_for: Callable[[Upstream], CIMultiDict[str]],
    retries: int,
    backoff: float,
    timeout: aiohttp.ClientTimeout,
    on_error: ErrorHook | None = None,
    order: list[Upstream] | None = None,
    rows: list[Upstream] | None = None,
) -> tuple[Upstream, aiohttp.ClientResponse]:
    """Open ``method path`` on the first upstream that answers with
    something other than a connection error, a timeout, a 5xx or a 429.
    ``rows`` are the upstreams eligible (a model's rows; default all), in
    a new weighted order each round; ``order`` a fixed order instead.

    Returns the upstream and its open response (the caller closes it).
    Raises ``UpstreamFailure`` when every round failed.
    """
    last: UpstreamFailure | None = None
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(min(MAX_BACKOFF, backoff * 2 ** (attempt - 1)))
        for up in order if order is not None else pool.order(rows):
            url = up.cfg.url + path
            try:
                resp = await _request(
                    session,
                    up,
                    method,
                    url,
                    data=body_for(up),
                    headers=headers_for(up),
                    timeout=timeout,
                    allow_redirects=False,
                )
            except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
                last = UpstreamFailure(504, f"upstream {up.name} timed out: {exc}", "timeout")
            except aiohttp.ClientError as exc:
                last = UpstreamFailure(
                    502, f"upstream {up.name} unreachable: {in_words(exc)}", "connect"
                )
            else:
                if resp.status not in RETRYABLE_STATUS:
                    pool.succeeded(up)
                    return up, resp
                try:
                    body = await resp.content.read(ERROR_BODY_BYTES)
                except (TimeoutError, aiohttp.ClientError):
                    body = b""
                finally:
                    resp.close()
                kind = "status_429" if resp.status == 429 else "status_5xx"
                last = UpstreamFailure(
                    resp.status,
                    f"upstream {up.name} answered HTTP {resp.status}",
                    kind,
                    body,
                    response_headers(resp.headers),
                )
            log.warning("%s", last.message)
            pool.failed(up)
            if on_error is not None:
                on_error(up, last.kind)
    assert last is not None  # the pool is never empty
    raise last


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """An OpenAI-shaped error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class ReadWatch:
    """The read timeout of a streamed reply's body, as one timer per stream.

    aiohttp's ``sock_read`` re-arms a timer on every network read (a cancel,
    a new handle, a heap push): measurable latency on every chunk of a
    stream. Once the reply's headers are in, this takes over: the stream's
    loop notes each read in ``last`` and sets ``busy`` while it writes to
    the client (a slow client is not a silent upstream), and one timer
    checks, re-armed for the time left only when it fires. After
    ``timeout`` seconds without a read, the body's reader raises
    ``ServerTimeoutError``, as with ``sock_read``. Where the connection's
    protocol does not let its own timeout be switched off, it stays in
    charge and this does nothing.
    """

    __slots__ = ("busy", "content", "handle", "last", "loop", "timeout")

    def __init__(self, resp: aiohttp.ClientResponse, timeout: float | None) -> None:
        self.busy = False
        self.last = time.perf_counter()
        self.timeout = timeout
        self.content = resp.content
        self.handle: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_running_loop()
        conn = resp.connection
        proto = conn.protocol if conn is not None else None
        switch = getattr(type(proto), "read_timeout", None)
        if not timeout or not isinstance(switch, property) or switch.fset is None:
            return
        # aiohttp's timer, armed at the headers, is dropped at the next read.
        proto.read_timeout = None  # type: ignore[union-attr]
        self.handle = self.loop.call_later(timeout, self._check)

    def _check(self) -> None:
        assert self.timeout is not None
        idle = time.perf_counter() - self.last
        if self.busy or idle < self.timeout:
            self.handle = self.loop.call_later(
                self.timeout if self.busy else self.timeout - idle, self._check
            )
            return
        self.handle = None
        self.content.set_exception(
            aiohttp.ServerTimeoutError("Timeout on reading data from socket")
        )

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
