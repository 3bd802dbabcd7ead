"""The upstreams: choice by weight, failover, retries, rest, headers.

A request goes to one upstream chosen at random by weight among those not
resting. Before the first byte of the reply reached the client, a failure
moves on to the next upstream in that order; after a whole round fails,
the round is tried again after an exponential backoff, ``retries`` times.
A request that meets a kept-alive connection the upstream has just closed
is sent again at once on a new one, and is no failure (``_request``).

*Whose fault.* An answer says either "the upstream is unwell" or "this
request is bad", and only the first may cost other clients anything:

- A connection error, a timeout, a 502, 503 or 504, a 429: the upstream
  (or what stands in front of it) cannot serve now. It is rested (skipped
  while others are available) for ``rest`` seconds, and the request moves
  on to the next row and to the next round.
- A 500: an engine's answer to an exception, which is as often the
  request's (llama-cpp-python answers a ``tool`` message without
  ``tool_call_id`` with one) as the server's. The request moves on to the
  model's other rows, but a row that answered it 500 is never asked it
  again (no retry round, no second try): the same body would get the same
  answer, and the SDK in front retries it anyway, so asking again only
  multiplies the load one bad request makes. One request's 500 never rests
  a row. A row is rested when ``REST_AFTER_500S`` *different* requests (by
  body) got a 500 from it with no success in between: an upstream that
  fails whatever it is asked is unwell. The same body sent again (an SDK's
  retry) counts once.
- Any other 4xx: the request's own problem, relayed at once.

Headers: the client's end-to-end headers are forwarded, hop-by-hop ones
(RFC 9110 §7.6.1) are not. ``Authorization``: an upstream's configured key
wins; otherwise the client's header is forwarded, unless the proxy checks
inbound keys (then the client's header holds *our* key, which must not
leak upstream). An Anthropic client's ``x-api-key`` is never forwarded as
such; where ``Authorization`` would be forwarded, it is sent as one.
Keys are never logged: only ``UpstreamConfig.name`` is.

*Cookies* never cross the proxy (``COOKIES``): a client's ``Cookie`` is
for the proxy's own origin (another app's session on the same host, say),
not for the upstream; an upstream's ``Set-Cookie`` is state of the proxy's
own connection to it, shared by every client, so relaying it would hand
one client's session to the next. The HTTP client keeps no cookie jar
(``proxy.Proxy.lifecycle``) for the same reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict

from ..config import UpstreamConfig
from .diagnose import in_words
from .engines import MAX_WINDOW, MIN_WINDOW, UpstreamInfo

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

#: Cookie fields: never forwarded, never relayed (module doc).
COOKIES = frozenset({"cookie", "cookie2", "set-cookie", "set-cookie2"})

#: A client's fields never sent upstream as they are: the hop-by-hop ones,
#: cookies, and its credentials (``forward_headers`` sets the row's key or
#: forwards the client's as ``Authorization``). Built once: the set is
#: asked of every field of every request.
_NOT_FORWARDED = HOP_BY_HOP | COOKIES | {"authorization", "x-api-key"}
#: An upstream's fields never relayed: those and the framing ones the
#: proxy sets itself.
_NOT_RELAYED = HOP_BY_HOP | COOKIES | {"content-type", "date", "server"}

#: Upstream statuses worth another upstream or a retry.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
#: Sent with a failure streamfix already retried (failover, retry rounds):
#: the OpenAI and Anthropic SDKs honour it and do not multiply the rounds
#: (each of their retries would be ``retries + 1`` rounds again).
NO_RETRY = {"x-should-retry": "false"}

#: Different requests answered 500 by one row, with no success between,
#: that make it rested (module doc: *Whose fault*).
REST_AFTER_500S = 3

#: Longest backoff between two retry rounds (seconds).
MAX_BACKOFF = 5.0

#: Bytes of an upstream error body kept for the client's error message.
ERROR_BODY_BYTES = 64 * 1024


#: Served model names whose learned facts one catch-all row keeps (least
#: recently used first out): a catch-all row serves any name a client
#: sends, so what it learns per name must be bounded.
MAX_LEARNED_MODELS = 64


@dataclass(slots=True)
class Learned:
    """What the replies of one served model on one row taught the proxy.

    Only the upstream teaches ``window`` and ``token_scale``: its error
    status or an error event in its stream (``reask.AskAgain.context_exceeded``),
    never a reply's text. ``reasoning`` and ``prompt_opens`` come from the
    chain's report on this model's own replies.
    """

    #: The context window an overflow error stated.
    window: int | None = None
    #: The upstream's own prompt token count over our estimate, from an
    #: overflow error that states it (1.0 until then).
    token_scale: float = 1.0
    #: Its replies carried reasoning (a larger output allowance, and the
    #: start of its replies held for an unopened reasoning section).
    reasoning: bool = False
    #: It closed reasoning it never opened: its chat template opens the
    #: reasoning in the prompt (a reply cut before any close is reasoning).
    prompt_opens: bool = False
    #: Its server refused ``response_format: json_schema`` (an error status
    #: naming the field: llama-cpp-python's server takes only ``text`` and
    #: ``json_object``): such requests go as ``json_object``
    #: (``plan.json_object_instead``).
    json_schema_refused: bool = False


class Upstream:
    """One configured upstream: what was configured and probed of it (per
    row: one server is one engine), and what was learned per served model
    (``Learned``, keyed by the model name sent upstream: the row's
    ``model``, or on a catch-all row the client's name, at most
    ``MAX_LEARNED_MODELS`` of them). One URL commonly serves many models
    (Ollama, LM Studio, vLLM, another gateway): one model's window,
    reasoning or token counts say nothing of another's."""

    __slots__ = (
        "cfg",
        "dimensions",
        "failures",
        "info",
        "label",
        "learned",
        "name",
        "rested_until",
        "went_500",
    )

    def __init__(self, cfg: UpstreamConfig, previous: Upstream | None = None) -> None:
        """``previous``: the same backend in the table this one replaces (a
        reload): what was probed and learned of it carries over, except
        learned windows where the new configuration sets one (it wins)."""
        self.cfg = cfg
        #: ``cfg.name``, kept: it is read for every request (metrics, logs),
        #: and each reading parses the URL.
        self.name = cfg.name
        self.info = UpstreamInfo(window=cfg.window, engine=None, reasoning=cfg.reasoning)
        self.rested_until = 0.0
        self.failures = 0
        #: What a tenant is told this row is called: its public name, or its
        #: place in the table (``Table`` numbers catch-all rows); never its URL.
        self.label = cfg.served or "?"
        #: The requests (their bodies' hashes) answered 500 since the last
        #: success, at most ``REST_AFTER_500S``.
        self.went_500: set[int] = set()
        self.learned: OrderedDict[str, Learned] = OrderedDict()
        #: An embedding row's vector size, probed.
        self.dimensions: int | None = None
        if previous is not None:
            self.set_info(dataclasses.replace(previous.info))
            for model, facts in previous.learned.items():
                facts = dataclasses.replace(facts)
                # a window configured now wins; a learned one is re-checked
                if cfg.window is not None or not MIN_WINDOW <= (facts.window or 0) <= MAX_WINDOW:
                    facts.window = None
                self.learned[model] = facts
            self.dimensions = previous.dimensions
            self.rested_until = previous.rested_until
            self.failures = previous.failures
            self.went_500 = set(previous.went_500)

    @property
    def probed(self) -> bool:
        """Whether a probe taught anything about the backend."""
        return self.info.engine is not None or self.info.window is not None

    @property
    def window(self) -> int | None:
        """The row's window as configured or probed (``window_for`` adds
        what a model's errors taught)."""
        return self.cfg.window if self.cfg.window is not None else self.info.window

    def served(self, model: object) -> str:
        """The model name sent upstream for a request naming ``model``:
        the row's own, or on a catch-all row the client's (the key of what
        is learned)."""
        if self.cfg.model is not None:
            return self.cfg.model
        return model if isinstance(model, str) else ""

    def facts(self, model: str) -> Learned | None:
        """What ``model``'s replies on this row taught, if anything."""
        facts = self.learned.get(model)
        if facts is not None:
            self.learned.move_to_end(model)
        return facts

    def learn(self, model: str) -> Learned:
        """``model``'s learned facts, to be updated (made if new; the least
        recently used model's are dropped past ``MAX_LEARNED_MODELS``)."""
        facts = self.facts(model)
        if facts is None:
            facts = self.learned[model] = Learned()
            while len(self.learned) > MAX_LEARNED_MODELS:
                self.learned.popitem(last=False)
        return facts

    def refuses_json_schema(self, model: str) -> bool:
        """``model``'s server on this row refused a ``json_schema`` format."""
        facts = self.facts(model)
        return facts is not None and facts.json_schema_refused

    def window_for(self, model: str) -> int | None:
        """The window a request for ``model`` is budgeted with: configured,
        else learned from this model's own overflow error, else probed."""
        if self.cfg.window is not None:
            return self.cfg.window
        facts = self.facts(model)
        if facts is not None and facts.window is not None:
            return facts.window
        return self.info.window

    def token_scale(self, model: str) -> float:
        facts = self.facts(model)
        return facts.token_scale if facts is not None else 1.0

    def reasons(self, model: str) -> bool:
        """Whether ``model`` on this row is known to reason: configured for
        the row, probed for that model (a catch-all row's probe describes
        one listed model only), or seen in its own replies."""
        if self.cfg.reasoning:
            return True
        if self.info.reasoning and (self.cfg.model is not None or self.info.model == model):
            return True
        facts = self.facts(model)
        return facts is not None and facts.reasoning

    def takes_images(self, model: str) -> bool:
        """Whether ``model`` on this row takes images: configured
        (``vision``) or probed for that model (as ``reasons``)."""
        if self.cfg.vision:
            return True
        return self.info.vision and (self.cfg.model is not None or self.info.model == model)

    def prompt_opens(self, model: str) -> bool:
        """Whether ``model``'s template is known to open the reasoning in
        the prompt (seen closing reasoning it never opened)."""
        facts = self.facts(model)
        return facts is not None and facts.prompt_opens

    def set_info(self, info: UpstreamInfo) -> None:
        """A probe result; configured values override probed ones. A probe
        that states the window of a named row's own model replaces a window
        learned for it (the fresher fact); a catch-all row's probe speaks
        for no particular client name, so learned windows stay."""
        if self.cfg.window is not None:
            info.window = self.cfg.window
        elif info.window is not None and self.cfg.model is not None:
            facts = self.learned.get(self.cfg.model)
            if facts is not None:
                facts.window = None
        info.reasoning = info.reasoning or self.cfg.reasoning
        self.info = info

    def learn_window(self, model: str, window: int) -> None:
        """An overflow error from ``model`` stated the window."""
        if self.cfg.window is None:
            self.learn(model).window = window

    def mark_reasoning(self, model: str, prompt_opens: bool = False) -> None:
        """``model``'s reply carried reasoning (``prompt_opens``: reasoning
        its prompt opened)."""
        facts = self.learn(model)
        facts.reasoning = True
        facts.prompt_opens = facts.prompt_opens or prompt_opens

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
        up.went_500.clear()

    def answered_500(self, up: Upstream, request: int) -> bool:
        """``up`` answered request ``request`` (its body's hash) with a 500:
        rested, and True, once ``REST_AFTER_500S`` different requests had
        one from it since its last success (module doc)."""
        up.went_500.add(request)
        if len(up.went_500) < REST_AFTER_500S:
            return False
        up.went_500.clear()
        self.failed(up)
        return True


def forward_headers(
    client: Mapping[str, str], up: Upstream, *, forward_auth: bool
) -> CIMultiDict[str]:
    """The headers to send upstream (see module docstring)."""
    skip = _NOT_FORWARDED
    conn = client.get("Connection")
    if conn:  # fields the client named hop-by-hop
        skip = skip | {t.strip().lower() for t in conn.split(",")}
    out: CIMultiDict[str] = CIMultiDict()
    for k, v in client.items():
        if k.lower() not in skip:
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
    framing ones that the proxy sets itself, no cookie)."""
    out: CIMultiDict[str] = CIMultiDict()
    skip = _NOT_RELAYED
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
    none could be reached, 504 on a timeout. ``message`` names the
    upstream by its URL (for the log); ``told`` words it for a caller."""

    status: int
    message: str
    kind: str
    body: bytes | None = None
    headers: Mapping[str, str] | None = None
    #: The upstream that failed last, and what happened, without its name.
    upstream: Upstream | None = None
    detail: str = ""
    #: Upstream requests made for it (failover and retry rounds): more
    #: than one, and the client is told not to retry (``NO_RETRY``).
    attempts: int = 1

    def __str__(self) -> str:
        return self.message

    def told(self, name: Callable[[Upstream], str]) -> str:
        """The message with the upstream called ``name(upstream)``."""
        if self.upstream is None:
            return self.message
        return f"upstream {name(self.upstream)} {self.detail}"


def _failure(
    up: Upstream,
    status: int,
    detail: str,
    kind: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> UpstreamFailure:
    return UpstreamFailure(status, f"upstream {up.name} {detail}", kind, body, headers, up, detail)


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
    on_failure: Callable[[UpstreamFailure], None] | None = None,
) -> tuple[Upstream, aiohttp.ClientResponse]:
    """Open ``method path`` on the first upstream that answers with
    something other than a connection error, a timeout, a 5xx or a 429.
    ``rows`` are the upstreams eligible (a model's rows; default all), in
    a new weighted order each round; ``order`` a fixed order instead.

    Returns the upstream and its open response (the caller closes it).
    Raises ``UpstreamFailure`` when every round failed. ``on_failure`` is
    told of each row's failure as it happens (``tracing.py``'s attempt spans).
    """
    last: UpstreamFailure | None = None
    #: Rows that answered this request 500: not asked it again (module doc).
    went_500: set[Upstream] = set()
    request = 0
    tried = 0
    for attempt in range(retries + 1):
        rows_now = order if order is not None else pool.order(rows)
        if went_500:
            rows_now = [u for u in rows_now if u not in went_500]
            if not rows_now:
                break
        if attempt:
            await asyncio.sleep(min(MAX_BACKOFF, backoff * 2 ** (attempt - 1)))
        for up in rows_now:
            url = up.cfg.url + path
            body = body_for(up)
            tried += 1
            try:
                resp = await _request(
                    session,
                    up,
                    method,
                    url,
                    data=body,
                    headers=headers_for(up),
                    timeout=timeout,
                    allow_redirects=False,
                )
            except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
                last = _failure(up, 504, f"timed out: {exc}", "timeout")
            except aiohttp.ClientError as exc:
                last = _failure(up, 502, f"unreachable: {in_words(exc, False)}", "connect")
            else:
                if resp.status not in RETRYABLE_STATUS:
                    pool.succeeded(up)
                    return up, resp
                try:
                    error = await resp.content.read(ERROR_BODY_BYTES)
                except (TimeoutError, aiohttp.ClientError):
                    error = b""
                finally:
                    resp.close()
                kind = "status_429" if resp.status == 429 else "status_5xx"
                last = _failure(
                    up,
                    resp.status,
                    f"answered HTTP {resp.status}",
                    kind,
                    error,
                    response_headers(resp.headers),
                )
            log.warning("%s", last.message)
            if last.status == 500:
                went_500.add(up)
                request = request or hash((method, path, body))
                pool.answered_500(up, request)
            else:
                pool.failed(up)
            if on_failure is not None:
                on_failure(last)
            if on_error is not None:
                on_error(up, last.kind)
    assert last is not None  # the pool is never empty
    last.attempts = tried
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
