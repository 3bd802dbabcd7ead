"""One exchange with an upstream: the body it is sent (a chat request's
plan through the row's steps, ``plan.for_row``), sending it
(``upstream.pool.send``: weighted choice, failover, retries), the attempt
recorded, the reply read whole or pumped through a
stream session to the caller, and how it ended.

Every endpoint that reaches an upstream goes through here, in one order::

    Exchange.open(scope, path, body) ─► the row chosen, its response
      ─► whole(): the reply read (bounded), or Answered(a 502/504)
      ─► relayed(raw): an upstream's error for the caller
      ─► pump(session, client, ready): each read through the session to
         the caller (held until ``ready``), and how the stream ended

A chat request's row steps read the row's and the model's asked there
(``row_of``: ``Upstream.window_for`` and the rest of what that model
taught, ``upstream/pool.Learned``), as values; where
the estimate says the prompt must be trimmed and the row's server can
count tokens (vLLM, llama.cpp), its count decides (``server_counts``).

With traces on (``tracing.py``), each row tried is an attempt span whose
trace context the upstream request carries (``headers_for``); the
attempt's status, its last reads (finish reasons, usage) and its end
(``close``) are told to ``Scope.trace``.

A failure the caller must hear of is raised (``UpstreamFailure``: no row
answered; ``scope.Answered``: a reply that could not be read) and answered
in one place, ``Scope.answer``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from .. import jsoncodec
from ..bodyreads import BodyReads
from ..context import UNOPENED_HOLD, looks_like_reasoning, thinking_switch
from ..errors import UpstreamProtocolError
from ..plugins import factories
from ..session import error_event
from . import record
from .caller.replies import is_error_object, json_error, read_reply, relay_error
from .caller.stream import MAX_HELD_BYTES, ClientGone, ClientStream
from .plan import Plan, Row, for_row, noted, served_model_step
from .proxy import Proxy
from .scope import Answered, Scope
from .upstream.budget import may_not_fit
from .upstream.diagnose import in_words, missing_v1, short_body
from .upstream.pool import (
    ERROR_BODY_BYTES,
    ReadWatch,
    Upstream,
    UpstreamFailure,
    forward_headers,
    response_headers,
    send,
)
from .upstream.tokens import COUNTING, count_prompt

log = logging.getLogger("streamfix.server")

#: A read before the commit larger than this (a whole short reply in one
#: read, as a fast upstream sends it) is fed event by event for its first
#: ``LEAD_EVENTS`` events: the role chunk and the first text go out (once
#: ``ready``) before the rest of the read is repaired. The session's output
#: does not depend on how the reads are split.
LEAD_SPLIT_BYTES = 1024
LEAD_EVENTS = 4


class StreamSession(Protocol):
    """What an exchange needs of a sans-I/O stream session (``SSESession``,
    ``text_session.CompletionSession``)."""

    @property
    def finished(self) -> bool: ...
    @property
    def saw_done(self) -> bool: ...
    def feed(self, data: bytes) -> bytes: ...
    def close(self) -> bytes: ...
    def fail(self, exc: Exception) -> bytes: ...
    def finish(self) -> None: ...


def chain_options(up: Upstream, body: dict[str, Any] | None) -> dict[str, Any]:
    """The chain's options for ``up``'s reply to ``body`` (as sent: named
    as the row's server knows the model). What the request says comes
    first: thinking switched off (``chat_template_kwargs``) means no hold
    and no split of an unmarked reply. Otherwise the start of the reply is
    held for a reasoning section the prompt opened when this model on this
    row is known to reason (configured, probed, or seen reasoning) or its
    name is a reasoning model's; an unmarked reply cut by the token limit
    is reasoning only for such a name or a model seen closing reasoning its
    prompt opened (not for one merely seen reasoning in its own markup).
    With nothing known, the client's request decides
    (``Options.unopened_reasoning_hold``). The row's user steps
    (``--transform``, loaded once: ``plugins.factories``) run after the
    built-in repairs. Keep-alives are the proxy's, at most one per
    interval (``caller.stream.KEEPALIVE_INTERVAL``), not the chain's
    comment per held chunk."""
    body = body or {}
    opts: dict[str, Any] = {"keepalive": False}
    if up.cfg.transforms:
        opts["transforms"] = factories(up.cfg.transforms)
    switch = thinking_switch(body)
    if switch is False:
        opts["unopened_reasoning_hold"] = 0
        return opts
    model = up.served(body.get("model"))
    named = looks_like_reasoning(body, switch)  # as the row's server names the model
    if up.reasons(model) or named:
        opts["unopened_reasoning_hold"] = UNOPENED_HOLD
    if up.prompt_opens(model) or named:
        opts["prompt_opens_reasoning"] = True
    return opts


def recorded_options(up: Upstream, options: dict[str, Any]) -> dict[str, Any]:
    """``chain_options`` as a recording keeps them: steps by their names
    (``module:factory``), which ``streamfix replay`` loads again."""
    if "transforms" not in options:
        return options
    return {**options, "transforms": list(up.cfg.transforms)}


def with_model(body: dict[str, Any], up: Upstream) -> dict[str, Any]:
    """``body`` naming the model as ``up``'s server knows it (a catch-all
    row sends the client's name on: ``plan.served_model_step``)."""
    return served_model_step(body, up.cfg.model)[0]


def row_of(up: Upstream, body: dict[str, Any]) -> Row:
    """What ``plan.for_row`` reads of ``up`` for ``body``, as values: the
    model as the row names it, its window and token scale there, whether
    it reasons there, the engine, a refused ``json_schema``."""
    model = up.served(up.cfg.model if up.cfg.model is not None else body.get("model"))
    return Row(
        up.cfg.model,
        up.window_for(model),
        up.token_scale(model),
        up.reasons(model),
        up.info,
        up.refuses_json_schema(model),
    )


def budgeted(
    proxy: Proxy,
    plan: Plan,
    up: Upstream,
    sent: dict[str, Any],
    counted: dict[Upstream, int] | None = None,
) -> bytes:
    """The plan's body for ``up`` (``plan.for_row``: the model named as
    the row names it, the prompt fitted to the window of the model asked
    there, max_tokens clamped, engine fields, ``json_object`` for a row
    that refused ``json_schema``). ``counted``: prompts the server itself
    counted (``upstream/tokens.py``), which decide a trim instead of the
    estimate. ``sent`` receives the final body and what was clamped; the
    plan, the row's notes."""
    count = counted.get(up) if counted else None
    body, notes = for_row(plan.body, row_of(up, plan.body), proxy.policy, count)
    plan.row_notes = notes
    fitted = noted(notes, "budget") or {}
    if "trim" in fitted:
        proxy.metrics.count_trim(up.name, fitted["trim"])
    sent["body"] = body
    sent["clamp"] = fitted.get("clamp")
    return orjson.dumps(body)


async def server_counts(
    proxy: Proxy, body: dict[str, Any], rows: list[Upstream]
) -> dict[Upstream, int]:
    """The prompt's tokens as counted by each of ``rows`` whose server can
    count (``upstream/tokens.py``) and for which the estimate says a trim
    is due; the others are left to the estimate. Asked at once, each
    bounded by ``tokens.COUNT_TIMEOUT``."""
    asks = {}
    for up in rows:
        if up.info.engine not in COUNTING:
            continue
        base = with_model(body, up)
        model = up.served(base.get("model"))
        if may_not_fit(base, up.window_for(model), proxy.policy, up.token_scale(model)):
            headers = {"Authorization": f"Bearer {up.cfg.api_key}"} if up.cfg.api_key else {}
            asks[up] = count_prompt(proxy.client, up.info.engine, up.cfg.url, base, headers)
    if not asks:
        return {}
    counts = await asyncio.gather(*asks.values())
    return {up: n for up, n in zip(asks, counts, strict=True) if n is not None}


def reply_failed(scope: Scope, up: Upstream, exc: Exception) -> web.Response:
    """A whole reply that could not be read (the connection died or went
    silent): counted, and the 502 (504 for a timeout) to answer."""
    kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "died_midstream"
    scope.proxy.upstream_error(up, kind)
    return json_error(
        504 if kind == "timeout" else 502,
        f"upstream {scope.shown(up)} failed mid-reply: {in_words(exc, False)}",
        "upstream_error",
        kind,
    )


@dataclass(slots=True)
class Ended:
    """How a pumped stream ended: ``error`` (None: it ended well), the
    bytes that end it for the caller (``tail``, not yet written), and
    whether the upstream sent anything at all."""

    error: str | None
    tail: bytes
    got_data: bool


@dataclass(slots=True)
class Exchange:
    """One upstream's answer to one attempt of a request."""

    scope: Scope
    up: Upstream
    resp: aiohttp.ClientResponse
    #: What was sent: ``body`` (and ``clamp`` when budgeted).
    sent: dict[str, Any] = field(default_factory=dict)
    #: ``options``, once read.
    read_options: dict[str, Any] | None = None
    #: The path asked for (``/chat/completions``).
    path: str = ""

    @classmethod
    async def open(
        cls,
        scope: Scope,
        path: str,
        body: dict[str, Any] | Plan | None,
        *,
        method: str = "POST",
        rows: list[Upstream] | None = None,
        order: list[Upstream] | None = None,
        retries: int | None = None,
        recorded: bool = True,
    ) -> Exchange:
        """Send ``body`` (for each row tried: named as the row's model; a
        chat request's ``Plan`` through its row steps, ``plan.for_row``) to
        one of ``rows`` (default: the scope's rows; ``order`` to try exactly
        these). Raises
        ``UpstreamFailure`` when none answered usably."""
        proxy = scope.proxy
        sent: dict[str, Any] = {}
        forward_auth = not scope.table.keys
        eligible = rows if rows is not None or order is not None else scope.rows or None
        counted: dict[Upstream, int] = {}
        plan = body if isinstance(body, Plan) else None
        if plan is not None:  # the servers' own counts, awaited before the row steps
            candidates = order or eligible or scope.table.upstreams
            counted = await server_counts(proxy, plan.body, candidates)

        def body_for(up: Upstream) -> bytes | None:
            if plan is not None:
                return budgeted(proxy, plan, up, sent, counted)
            if body is None:
                return None
            assert not isinstance(body, Plan)
            out = sent["body"] = with_model(body, up)
            return orjson.dumps(out)

        trace = scope.trace

        def headers_for(up: Upstream) -> CIMultiDict[str]:
            h = forward_headers(scope.headers, up, forward_auth=forward_auth)
            if method == "POST":
                h["Content-Type"] = "application/json"
            if trace is not None:  # a span per row tried; its traceparent goes up
                trace.attempt_start(up, sent.get("body"), h, probe=not recorded)
            return h

        up, resp = await send(
            scope.table.pool,
            proxy.client,
            method,
            path,
            body_for=body_for,
            headers_for=headers_for,
            retries=proxy.cfg.retries if retries is None else retries,
            backoff=proxy.cfg.backoff,
            timeout=proxy.timeout,
            on_error=proxy.upstream_error,
            order=order,
            rows=eligible,
            on_failure=trace.failed if trace is not None else None,
        )
        if trace is not None:
            trace.answered(resp.status, resp.content_type == "text/event-stream")
        ex = cls(scope, up, resp, sent, path=path)
        if resp.status == 200:
            proxy.answered(up)
        if recorded:
            record.attempt(
                up.name,
                sent.get("body"),
                resp.status,
                resp.content_type,
                recorded_options(up, ex.options),
            )
        if sent.get("clamp"):
            proxy.metrics.clamps.inc()
            log.info("clamped for %s: %s", up.name, sent["clamp"])
        return ex

    @property
    def options(self) -> dict[str, Any]:
        """The chain's options for this upstream's reply (read once: they
        read the request's messages)."""
        if self.read_options is None:
            self.read_options = chain_options(self.up, self.sent.get("body"))
        return self.read_options

    @property
    def model(self) -> str:
        """The model asked, as its row's server knows it: the key of what
        is learned from this reply."""
        return self.up.served((self.sent.get("body") or {}).get("model"))

    @property
    def ok(self) -> bool:
        return self.resp.status == 200

    @property
    def headers(self) -> CIMultiDict[str]:
        """The reply's headers that are passed on to the caller."""
        return response_headers(self.resp.headers)

    def close(self) -> None:
        self.resp.close()
        if self.scope.trace is not None:
            self.scope.trace.closed()

    async def whole(self) -> bytes:
        """The whole reply (bounded); one that cannot be read raises
        ``Answered`` with its 502/504. The response is closed."""
        try:
            raw = await read_reply(self.resp)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Answered(reply_failed(self.scope, self.up, exc)) from None
        finally:
            self.close()
        if self.ok and self.scope.trace is not None:
            self.scope.trace.whole(raw)
        return raw

    async def window_probe(self, body: dict[str, Any]) -> bytes | None:
        """For an HTTP 200 stream with an empty body (llama.cpp's answer
        when the prompt does not fit its window: no error, nothing to learn
        from): ``body`` asked of the same upstream, not streamed and for one
        token. Its 400 error body (a ``context_length_exceeded`` there
        states the window and the prompt's size), or None."""
        probe = {k: v for k, v in body.items() if k not in ("stream_options",)}
        probe.update(stream=False, max_tokens=1)
        probe.pop("max_completion_tokens", None)
        try:
            check = await Exchange.open(
                self.scope, self.path, probe, order=[self.up], retries=0, recorded=False
            )
        except UpstreamFailure:
            return None
        try:
            if check.resp.status != 400:
                return None
            return await check.error_body()
        except (TimeoutError, aiohttp.ClientError):
            return None
        finally:
            check.close()

    async def error_body(self) -> bytes:
        """The start of an error reply's body (``ERROR_BODY_BYTES``)."""
        return await self.resp.content.read(ERROR_BODY_BYTES)

    @property
    def shown(self) -> str:
        """What errors call this upstream for the caller (``Scope.shown``)."""
        return self.scope.shown(self.up)

    def relayed(self, raw: bytes, status: int | None = None) -> web.Response:
        """This reply's error for the caller (``replies.relay_error``), as
        ``status`` (default: the reply's own). A 404 from a row whose URL
        lacks ``/v1`` says so: the start-up check's hint, where the client
        sees it."""
        resp = self.resp
        url = self.up.cfg.url
        if status is None and resp.status == 404 and missing_v1(url):
            line = (
                f"upstream {self.shown} answered HTTP 404 on {self.path}: {short_body(raw)} "
                "(no /v1? its URL probably lacks /v1: give --upstream …/v1)"
            )
            redact = self.scope.redact
            if redact is not None:
                line = redact(line.encode()).decode("utf-8", "replace")
            return json_error(404, line, "upstream_error")
        return relay_error(
            status or resp.status,
            raw,
            self.headers,
            resp.content_type,
            self.shown,
            self.scope.redact,
        )

    def error_reply(self, obj: object, raw: bytes) -> web.Response | None:
        """A 200 whose JSON body is an error object (some servers answer
        so): counted, and relayed as a 502 with the upstream's own
        message; None when ``obj`` is no error (``replies.is_error_object``)."""
        if not is_error_object(obj):
            return None
        self.scope.proxy.upstream_error(self.up, "protocol")
        return self.relayed(raw, 502)

    def completion(
        self,
        raw: bytes,
        what: str = "JSON that is not a completion",
        type_: str = "upstream_protocol_error",
        choices: bool = True,
    ) -> dict[str, Any]:
        """The whole reply ``raw`` as a completion, read as the SDKs read it.
        An error object in an HTTP 200, or JSON that is not ``what`` it
        should be (an object, with ``choices`` when ``choices``), raises
        ``Answered`` with the 502 to answer."""
        try:
            obj = jsoncodec.loads_lenient(raw)
        except orjson.JSONDecodeError:
            obj = None
        error = self.error_reply(obj, raw)
        if error is not None:  # an HTTP 200 that is an error: never an empty reply
            raise Answered(error)
        if not isinstance(obj, dict) or (choices and not isinstance(obj.get("choices"), list)):
            raise Answered(self.not_json(what, type_))
        return obj

    def not_json(self, what: str, type_: str = "upstream_protocol_error") -> web.Response:
        """A reply that is not the JSON ``what`` it should be: counted, 502."""
        self.scope.proxy.upstream_error(self.up, "protocol")
        return json_error(502, f"upstream {self.shown} sent {what}", type_)

    async def pump(
        self, session: StreamSession, client: ClientStream, ready: Callable[[], bool]
    ) -> Ended:
        """Each read of the reply through ``session`` to ``client``: written
        once the client stream is committed, held before that until
        ``ready()`` (or ``MAX_HELD_BYTES``), with keep-alives meanwhile.
        Stops at the session's end (a cut) and when the client has gone
        (``ClientGone``). The bytes that end the stream are returned, not
        written: the caller may still discard the attempt."""
        proxy = self.scope.proxy
        up = self.up
        observe = proxy.metrics.chunk_seconds.of(self.scope.model).observe
        perf = time.perf_counter
        got_data = False
        trace = self.scope.trace
        watch = ReadWatch(self.resp, proxy.cfg.read_timeout)
        ticket = self.scope.ticket
        usage_reads = ticket.tail if ticket is not None else None  # a tokens limit
        leads = LEAD_EVENTS
        try:
            async for data in record.reads(BodyReads(self.resp.content)):
                got_data = True
                if trace is not None:  # the last reads: the reply's finish and usage
                    trace.read(data)
                if usage_reads is not None:
                    usage_reads.append(data)
                watch.last = perf()
                spent = 0.0
                while data:
                    piece = data
                    if leads and not client.committed and len(data) > LEAD_SPLIT_BYTES:
                        # a large read before the commit: its first events
                        # alone, so the reply's start goes out before the rest
                        # is repaired (the output does not depend on the split)
                        leads -= 1
                        cut = data.find(b"\n\n") + 2
                        if 2 <= cut < len(data):
                            piece = data[:cut]
                    data = data[len(piece) :]
                    t0 = perf()
                    out = session.feed(piece)
                    spent += perf() - t0
                    watch.busy = True  # writing to the client: not the upstream's silence
                    if out:
                        if client.committed:
                            await client.write(out)
                        else:
                            client.hold(out)
                            if ready() or client.held_bytes > MAX_HELD_BYTES:
                                await client.commit()
                            else:
                                await client.keepalive_if_due()
                    else:  # the chain holds this read (before or after the commit)
                        await client.keepalive_if_due()
                    watch.busy = False
                    if session.finished:
                        break
                observe(spent)
                if session.finished:
                    break
                if client.gone():
                    raise ClientGone
            error, tail = self._stream_end(session, got_data)
        except (UpstreamProtocolError, TimeoutError, aiohttp.ClientError) as exc:
            error, tail = self._stream_broke(session, exc)
        except (ClientGone, asyncio.CancelledError):
            raise
        except Exception:  # a bug of ours: end the stream cleanly, loudly in the log
            log.exception("internal error while repairing a stream from %s", up.name)
            error = "internal error"
            session.finish()
            tail = error_event("streamfix internal error", "internal_error")
        finally:
            watch.cancel()
        return Ended(error, tail, got_data)

    def _stream_end(self, session: StreamSession, got_data: bool) -> tuple[str | None, bytes]:
        """A stream whose reads ran out: (the error, or None; the bytes that
        end it). Without ``[DONE]`` it died (or was empty: some servers'
        answer to a prompt over their window), and an error event ends it."""
        if session.finished:
            return None, b""
        if session.saw_done:
            return None, session.close()
        up = self.up
        kind = "died_midstream" if got_data else "empty_stream"
        self.scope.proxy.upstream_error(up, kind)
        error = (
            f"upstream {self.shown} ended the stream before [DONE]"
            if got_data
            else f"upstream {self.shown} sent an empty stream"
            " (llama.cpp does so when the prompt exceeds its context window)"
        )
        if got_data:
            self._log_death(error)
        return error, session.fail(UpstreamProtocolError(error))

    def _stream_broke(self, session: StreamSession, exc: Exception) -> tuple[str, bytes]:
        """A stream that broke the protocol, timed out or lost its
        connection: (the error, the bytes that end it)."""
        proxy, up = self.scope.proxy, self.up
        if isinstance(exc, UpstreamProtocolError):
            proxy.upstream_error(up, "protocol")
            return str(exc), session.fail(exc)
        kind = "timeout" if isinstance(exc, asyncio.TimeoutError) else "died_midstream"
        proxy.upstream_error(up, kind)
        error = f"upstream {self.shown} failed mid-stream: {in_words(exc, False)}"
        self._log_death(error)
        return error, session.fail(UpstreamProtocolError(error))

    def _log_death(self, error: str) -> None:
        """A stream that died after it began: one warning naming the
        request (endpoint, model, what was sent) and the upstream, since the
        client only sees an error event."""
        scope = self.scope
        body = self.sent.get("body")
        model = body.get("model") if isinstance(body, dict) else None
        log.warning(
            "%s (request: %s %s, model %s, upstream %s)",
            error,
            scope.endpoint,
            self.path,
            model if model is not None else scope.model,
            self.up.name,
        )
