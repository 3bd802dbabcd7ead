"""OpenTelemetry traces of the proxy's requests (the optional ``otel`` extra).

All of the proxy's OpenTelemetry code is here and in ``otel_metrics.py``
(the GenAI metrics, recorded at each request's end); the layers it observes call
a few hooks, each a no-op (one ``None`` check) when traces are off.
``pip install 'streamfix[otel]'`` brings the API, the SDK and the
OTLP/HTTP exporter; without them nothing changes: ``available()`` (the one
guarded import) is False, ``tracer_for`` returns None and no hook does
anything. They are imported only when traces are wanted, so that an
installed extra costs the processes that do not trace no start-up time
(the SDK takes about 0.1 s to import); the methods that run only with a
tracer import the names they use from the modules already loaded.

*When traces are on.* ``streamfix serve --traces`` (``STREAMFIX_TRACES``,
``traces = true``), or when the standard variables ask for an exporter:
``OTEL_TRACES_EXPORTER`` set to anything but ``none``, or
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
set. ``OTEL_SDK_DISABLED=true`` turns them off whatever else says.
``--traces`` without the extra is a start-up error (``problem``); the
variables alone without it are ignored (one warning).

*Where spans go.* A tracer provider someone else set up globally (the
``opentelemetry-instrument`` launcher) is used as it is; otherwise the
proxy builds its own from the standard variables: ``OTEL_SERVICE_NAME``
(default ``streamfix``) and ``OTEL_RESOURCE_ATTRIBUTES``; exporters from
``OTEL_TRACES_EXPORTER`` (``otlp``, the default: OTLP over HTTP/protobuf
to ``OTEL_EXPORTER_OTLP_ENDPOINT``, default ``http://localhost:4318``, with
its ``_HEADERS``, ``_TIMEOUT``, ``_COMPRESSION``; ``console``; ``none``),
batched off the event loop (``OTEL_BSP_*``), sampled by
``OTEL_TRACES_SAMPLER``. Only OTLP over HTTP is shipped: a ``grpc``
protocol is warned about and HTTP used. The provider is flushed and shut
down with the app.

*The spans.* One per request to a GenAI endpoint (chat, the Messages and
Responses doors, text completions, embeddings; ``/v1/models`` and the
status routes have none) that reaches ``Scope.answer`` (a request refused
before, for its body, its key or an unknown model, has none: the
counters and the log have it), kind SERVER, named
``{operation} {model}``, from the request's arrival (its body's reading
included) to the end of its reply, for a stream the last byte written or
the client gone. It
continues the client's W3C ``traceparent``/``tracestate`` (the propagators
of ``OTEL_PROPAGATORS``, default W3C trace context and baggage). A child
span (kind CLIENT) per upstream HTTP request: every row tried by failover
and retries, every re-ask, the one-token check of an empty stream
(``streamfix.probe``); the upstream request carries a ``traceparent``
whose parent is that attempt span (a client's own ``traceparent`` is
replaced, never forwarded beside it).

Attributes, GenAI semantic conventions: ``gen_ai.operation.name``
(``chat``, ``text_completion``, ``embeddings``), ``gen_ai.provider.name``
and the older ``gen_ai.system`` (``openai``: the API the upstreams
speak), ``gen_ai.request.model`` (as the client named it),
``gen_ai.response.model`` (as the upstream's row serves it),
``gen_ai.request.max_tokens``, ``gen_ai.response.finish_reasons``,
``gen_ai.response.id`` and ``gen_ai.usage.input_tokens`` /
``output_tokens`` (read from the reply's own fields, from the last reads
of a stream; absent when it sent none), and on the attempt spans
``server.address`` / ``server.port`` of the upstream,
``http.response.status_code`` and ``error.type`` (an attempt's
``gen_ai.request.model`` is the served name). Whether the request was
streamed: ``streamfix.stream``. Each span says what its side saw: the
request span what the client got (the finish reasons after repair, as
the chain sent them, ``Report.finish_reasons``: ``tool_calls`` for a
call lifted from text, ``length`` for a cut loop; in chat terms, which
the doors map to theirs), an attempt span what its upstream sent (its
own finish reasons: ``stop``, vLLM's ``repetition``). Usage is the
upstream's on both (streamfix passes it on). What streamfix changed is
in its own attributes,
``streamfix.repairs.<kind>`` (the chain's counts, summed over the
attempts; the kinds of the ``streamfix_repairs_total`` metric),
``streamfix.loop_cut``, ``streamfix.reasks`` (and the discarded
attempt's ``streamfix.reask_reason``), ``streamfix.tenant``,
``streamfix.door`` (``chat``, ``messages``, ``responses``) and
``streamfix.upstream`` (the row's name). A span's status is ERROR when
the request failed (a 5xx answered, or an error event ended the stream)
or the attempt did (a connection error, a timeout, an HTTP error, a
stream that died or broke the protocol). A client that went away is no
error: ``streamfix.client_gone``.

*More attributes from the request's own code*: ``Scope.annotate({...})``
sets them on the request span, before or after it started
(``RequestTrace.note``); nothing when traces are off. Tool narrowing
(``server/narrowing.py``) notes ``streamfix.narrowing`` (``narrowed``,
``few_tools``, ``not_confident``), ``streamfix.narrowing_of`` (tools
offered) and ``streamfix.narrowing_kept`` (tools shown).

*Cost.* Off: a ``None`` check per request at each hook and one per
upstream read. On, per chunk: a reference to each of the last
``TAIL_READS`` reads of a stream kept, and at its end a decode of the few
events that carry the finish reasons and usage (``_stream_facts``). Per
request the SDK's own work dominates: two spans started, their
attributes checked, and, on the batch processor's thread (which holds the
GIL while it works), encoded to protobuf, about 0.5 ms of CPU per request
in all on a loaded two-core machine (``bench/proxy.py --traces``: no
change in the latency per chunk; 400-chunk streams at 32 at once lost
about a tenth of their throughput). ``OTEL_TRACES_SAMPLER`` (say
``parentbased_traceidratio`` with ``OTEL_TRACES_SAMPLER_ARG=0.1``) makes
the unsampled requests' spans non-recording: no attribute work, no export.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from .. import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span

    from ..context import Report
    from .config import ServerConfig
    from .otel_metrics import GenAIMeters
    from .upstream.pool import Upstream, UpstreamFailure

log = logging.getLogger("streamfix.server")

#: Endpoint (``Scope.endpoint``) -> ``gen_ai.operation.name``; endpoints
#: not here get no span.
OPERATIONS = {
    "chat": "chat",
    "messages": "chat",
    "responses": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
}

#: The API every upstream speaks: the GenAI conventions' provider value.
PROVIDER = "openai"

#: The last reads of a stream kept (by reference) to find the finish
#: reasons and usage in at its end, and the most bytes of them read.
TAIL_READS = 4
TAIL_BYTES = 16 * 1024
#: Most ``data:`` events decoded from that tail.
TAIL_EVENTS = 32
#: A whole reply up to this size is decoded for its facts; a larger one
#: (an embedding batch) is searched near its end for ``usage`` only.
WHOLE_DECODE_BYTES = 256 * 1024

#: HTTP headers of W3C trace context: a client's are replaced upstream.
TRACE_HEADERS = ("traceparent", "tracestate")

_CURRENT: ContextVar[RequestTrace | None] = ContextVar("streamfix_trace", default=None)
_USAGE = re.compile(rb'"usage"\s*:\s*(\{[^{}]*\})')


def wanted(cfg: ServerConfig, environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces are on (the module doc, *When traces are on*)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if cfg.traces:
        return True
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def problem(cfg: ServerConfig) -> str | None:
    """A start-up problem: ``--traces`` asked for without the extra."""
    if cfg.traces and not available():
        return "--traces needs the otel extra: pip install 'streamfix[otel]'"
    return None


def tracer_for(cfg: ServerConfig, environ: Mapping[str, str] | None = None) -> Tracer | None:
    """The proxy's tracer when traces are on (None: off, or the extra is
    not installed)."""
    if not wanted(cfg, environ):
        return None
    if not available():
        log.warning("OTEL_* variables ask for traces, but the otel extra is not installed")
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    env = os.environ if environ is None else environ
    meters = _meters(env)
    given = trace.get_tracer_provider()
    if isinstance(given, TracerProvider):  # set up by someone else: theirs
        return Tracer(given, own=False, meters=meters)
    return Tracer(_provider(env), own=True, meters=meters)


def _meters(env: Mapping[str, str]) -> GenAIMeters | None:
    """The GenAI metrics beside the traces (``otel_metrics.py``)."""
    from .otel_metrics import meters_for

    try:
        return meters_for(env, _resource(env))
    except ImportError as exc:  # an extra without the metrics SDK
        log.warning("OpenTelemetry metrics not available: %s", exc)
        return None


def _resource(env: Mapping[str, str]) -> Any:
    """The resource of our own providers: ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES``, ``service.name`` ``streamfix`` by default."""
    from opentelemetry.sdk.resources import Resource

    attrs: dict[str, str] = {}
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attrs["service.name"] = "streamfix"
    return Resource.create(attrs)


def available() -> bool:
    """Whether the ``otel`` extra is installed: its modules imported (the
    one guarded import; called at start-up only, when traces are wanted)."""
    try:
        import opentelemetry.propagate
        import opentelemetry.sdk.resources
        import opentelemetry.sdk.trace
        import opentelemetry.sdk.trace.export
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _provider(env: Mapping[str, str]) -> TracerProvider:
    """A provider configured by the standard variables (module doc)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    provider = TracerProvider(resource=_resource(env))
    names = env.get("OTEL_TRACES_EXPORTER", "otlp") or "otlp"
    for name in (n.strip().lower() for n in names.split(",")):
        exporter: SpanExporter | None = None
        if name == "otlp":
            protocol = env.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
            )
            if protocol and protocol != "http/protobuf":
                log.warning("OTLP %r is not shipped: exporting over http/protobuf", protocol)
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        elif name == "console":
            exporter = ConsoleSpanExporter()
        elif name and name != "none":
            log.warning("OTEL_TRACES_EXPORTER %r is not known here: ignored", name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def current() -> RequestTrace | None:
    """The trace of the request this task serves, if any."""
    return _CURRENT.get()


def report(rep: Report) -> None:
    """What the chain reported for the current attempt (``Proxy.count_report``)."""
    tr = _CURRENT.get()
    if tr is not None:
        tr.report(rep)


def reasked(reason: str) -> None:
    """The current attempt is discarded and the request asked again (``reask.py``)."""
    tr = _CURRENT.get()
    if tr is not None:
        tr.reasked(reason)


def upstream_error(kind: str) -> None:
    """The current attempt failed (``Proxy.upstream_error``)."""
    tr = _CURRENT.get()
    if tr is not None:
        tr.attempt_error(kind)


class Tracer:
    """The proxy's tracer (``Proxy.tracer``; None there when traces are off)."""

    def __init__(self, provider: Any, own: bool = False, meters: GenAIMeters | None = None) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("streamfix", __version__)
        #: The provider is ours to flush and shut down with the app.
        self.own = own
        #: The GenAI metrics (``otel_metrics.py``); None: off.
        self.meters = meters

    def request(self, endpoint: str) -> RequestTrace | None:
        """A trace for a request to ``endpoint`` (None: no span for it)."""
        op = OPERATIONS.get(endpoint)
        return None if op is None else RequestTrace(self.tracer, op, endpoint, self.meters)

    def shutdown(self) -> None:
        """Flush and stop the exporters (blocking: run it off the loop)."""
        if self.own:
            self.provider.shutdown()
        if self.meters is not None:
            self.meters.shutdown()


@lru_cache(maxsize=256)
def _server(url: str) -> tuple[str, int]:
    """An upstream URL's host and port (never its credentials)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", port


def _max_tokens(body: Mapping[str, Any] | None) -> int | None:
    if not body:
        return None
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class _Facts:
    """What a reply said of itself: finish reasons, usage, id."""

    __slots__ = ("finish", "id", "usage")

    def __init__(self) -> None:
        self.finish: dict[int, str] = {}
        self.usage: dict[str, Any] | None = None
        self.id: str | None = None

    def take(self, obj: Any) -> None:
        """Fields of one completion or chunk not yet known (later ones first)."""
        if not isinstance(obj, dict):
            return
        usage = obj.get("usage")
        if self.usage is None and isinstance(usage, dict):
            self.usage = usage
        if self.id is None and isinstance(obj.get("id"), str):
            self.id = obj["id"]
        choices = obj.get("choices")
        if isinstance(choices, list):
            for i, ch in enumerate(choices):
                if not isinstance(ch, dict):
                    continue
                reason = ch.get("finish_reason")
                index = ch.get("index", i)
                if isinstance(reason, str) and isinstance(index, int):
                    self.finish.setdefault(index, reason)

    def attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.finish:
            out["gen_ai.response.finish_reasons"] = [self.finish[i] for i in sorted(self.finish)]
        if self.id is not None:
            out["gen_ai.response.id"] = self.id
        usage = self.usage or {}
        for key, name in (
            ("prompt_tokens", "gen_ai.usage.input_tokens"),
            ("completion_tokens", "gen_ai.usage.output_tokens"),
        ):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                out[name] = value
        return out


def _stream_facts(reads: Iterable[bytes]) -> _Facts:
    """The finish reasons, usage and id in a stream's last reads: its
    ``data:`` events read from the end (at most ``TAIL_EVENTS``)."""
    facts = _Facts()
    data = b"".join(reads)[-TAIL_BYTES:]
    seen = 0
    for line in reversed(data.split(b"\n")):
        line = line.strip()
        if not line.startswith(b"data:") or b"{" not in line:
            continue
        seen += 1
        if seen > TAIL_EVENTS:
            break
        if b"finish_reason" in line or b'"usage"' in line or facts.id is None:
            try:
                facts.take(orjson.loads(line[5:]))
            except orjson.JSONDecodeError:  # the first line may be cut
                continue
    return facts


def _whole_facts(raw: bytes) -> _Facts:
    facts = _Facts()
    if len(raw) <= WHOLE_DECODE_BYTES:
        with contextlib.suppress(orjson.JSONDecodeError):
            facts.take(orjson.loads(raw))
        return facts
    m = _USAGE.search(raw, max(0, len(raw) - 4096))
    if m is not None:
        with contextlib.suppress(orjson.JSONDecodeError):
            facts.take({"usage": orjson.loads(m.group(1))})
    return facts


class _Attempt:
    """One upstream HTTP request's span and what is known of it."""

    __slots__ = ("closed_at", "error", "reads", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.reads: deque[bytes] | None = None
        self.closed_at: int | None = None
        self.error: str | None = None

    def fail(self, kind: str, message: str | None = None) -> None:
        if self.error is None:
            from opentelemetry.trace import Status, StatusCode

            self.error = kind
            self.span.set_attribute("error.type", kind)
            self.span.set_status(Status(StatusCode.ERROR, message or kind))


class RequestTrace:
    """One request's span and its attempts' (``Scope.trace``)."""

    __slots__ = (
        "attempt",
        "attempts",
        "endpoint",
        "facts",
        "first",
        "loop_cut",
        "meters",
        "model",
        "notes",
        "op",
        "reasks",
        "repairs",
        "sent",
        "served",
        "span",
        "t0",
        "token",
        "tracer",
    )

    def __init__(
        self, tracer: Any, op: str, endpoint: str, meters: GenAIMeters | None = None
    ) -> None:
        self.tracer = tracer
        self.meters = meters
        #: When the request arrived, and the reply's stream first read
        #: (``time.perf_counter``; the GenAI metrics').
        self.t0 = time.perf_counter()
        self.first: float | None = None
        #: The model as the client named it (``start``).
        self.model: str | None = None
        self.op = op
        self.endpoint = endpoint
        self.span: Span | None = None
        self.token: Token[RequestTrace | None] | None = None
        #: Attributes given before the span started (``note``).
        self.notes: dict[str, Any] = {}
        self.attempt: _Attempt | None = None
        self.attempts = 0
        self.reasks = 0
        self.repairs: Counter[str] = Counter()
        self.loop_cut = False
        #: The last attempt's facts and served model: the reply's.
        self.facts: _Facts | None = None
        self.served: str | None = None
        #: The chain's finish reasons for the reply (``Report.finish_reasons``).
        self.sent: dict[int, str] = {}

    # -- the request ---------------------------------------------------------

    def start(
        self,
        model: str | None,
        tenant: str,
        stream: bool,
        headers: Mapping[str, str],
        arrived: float | None = None,
    ) -> None:
        """The request span begins (``Scope.answer``: the model asked, the
        tenant's label, streamed or not, the caller's headers, when it
        arrived on the loop's clock), continuing the client's trace
        context; the request's hooks find it from here on."""
        self.model = model
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": self.op,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.system": PROVIDER,
            "gen_ai.request.model": model,
            "streamfix.tenant": tenant,
            "streamfix.stream": stream,
        }
        if self.op == "chat":
            attrs["streamfix.door"] = self.endpoint
        attrs.update(self.notes)
        start = None
        if arrived is not None:  # the loop's clock: the body's reading counts
            ago = max(0.0, asyncio.get_running_loop().time() - arrived)
            start = time.time_ns() - int(ago * 1e9)
            self.t0 = time.perf_counter() - ago
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind

        self.span = self.tracer.start_span(
            f"{self.op} {model}",
            context=propagate.extract(headers),
            kind=SpanKind.SERVER,
            attributes=attrs,
            start_time=start,
        )
        self.token = _CURRENT.set(self)

    def note(self, attributes: Mapping[str, Any]) -> None:
        """Attributes for the request span (``Scope.annotate``): set now,
        or when it starts."""
        if self.span is None:
            self.notes.update(attributes)
        elif self.span.is_recording():
            self.span.set_attributes(dict(attributes))

    def end(self, status: int | None, error: str | None = None) -> None:
        """The request is answered (``Scope.answer``'s end, in its
        ``finally``): its attempt and its span end. 499, or ``status`` None
        with the task cancelled: the client went away; None with another
        exception on its way out: an error of ours; ``error``: what ended
        the request badly."""
        raised = sys.exc_info()[1] if status is None else None
        gone = status == 499 or isinstance(raised, asyncio.CancelledError)
        if raised is not None and not gone:
            error = error or type(raised).__name__
        if self.token is not None:
            _CURRENT.reset(self.token)
            self.token = None
        att = self._end_attempt()
        span = self.span
        if span is None:
            return
        if self.meters is not None:
            self._measure(status, error, gone, att)
        if span.is_recording():
            attrs: dict[str, Any] = {
                "streamfix.reasks": self.reasks,
                "streamfix.loop_cut": self.loop_cut,
            }
            attrs.update({f"streamfix.repairs.{k}": n for k, n in self.repairs.items() if n})
            if self.served is not None:
                attrs["gen_ai.response.model"] = self.served
            if self.facts is not None:
                attrs.update(self.facts.attributes())
            if self.sent:  # what the client got, after repair
                finish = {**(self.facts.finish if self.facts else {}), **self.sent}
                attrs["gen_ai.response.finish_reasons"] = [finish[i] for i in sorted(finish)]
            if status is not None:
                attrs["http.response.status_code"] = status
            if gone:
                attrs["streamfix.client_gone"] = True
            span.set_attributes(attrs)
            if error is None and att is not None and att.error is not None and status == 200:
                error = att.error  # the stream began, then its upstream failed
            if error is not None or (status is not None and status >= 500):
                from opentelemetry.trace import Status, StatusCode

                kind = error or str(status)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, kind))
        span.end()

    def _measure(
        self, status: int | None, error: str | None, gone: bool, att: _Attempt | None
    ) -> None:
        """The GenAI metrics of the request (``otel_metrics.py``)."""
        assert self.meters is not None
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": self.op,
            "gen_ai.provider.name": PROVIDER,
        }
        if self.model is not None:
            attrs["gen_ai.request.model"] = self.model
        if self.served is not None:
            attrs["gen_ai.response.model"] = self.served
        if error is None and att is not None and att.error is not None and status == 200:
            error = att.error
        if error is None and status is not None and status >= 400:
            error = str(status)
        if gone:
            error = "client_gone"
        first = None if self.first is None else self.first - self.t0
        usage = self.facts.usage if self.facts is not None else None
        self.meters.record(attrs, time.perf_counter() - self.t0, error, usage, first)

    # -- its attempts ----------------------------------------------------------

    def attempt_start(
        self,
        up: Upstream,
        body: Mapping[str, Any] | None,
        headers: Any,
        probe: bool = False,
    ) -> None:
        """An upstream request is about to go (``Exchange.open``, per row
        tried): the previous attempt ends, a child span starts, and
        ``headers`` carry its trace context instead of the client's."""
        self._end_attempt()
        span = self.span
        if span is None:
            return
        self.attempts += 1
        served = up.served((body or {}).get("model"))
        if self.attempts == 1 and span.is_recording():
            asked = _max_tokens(body)
            if asked is not None:
                span.set_attribute("gen_ai.request.max_tokens", asked)
        host, port = _server(up.cfg.url)
        # Each attribute costs (the SDK checks it, the exporter encodes it):
        # the request span's are not repeated here.
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": self.op,
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": served,
            "server.address": host,
            "server.port": port,
            "streamfix.upstream": up.name,
            "streamfix.attempt": self.attempts,
        }
        sent = _max_tokens(body)
        if sent is not None:
            attrs["gen_ai.request.max_tokens"] = sent
        if probe:
            attrs["streamfix.probe"] = True
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind

        child = self.tracer.start_span(
            f"{self.op} {served}",
            context=trace.set_span_in_context(span),
            kind=SpanKind.CLIENT,
            attributes=attrs,
        )
        self.attempt = _Attempt(child)
        if not probe:
            self.served = served
            self.facts = None
            self.sent = {}
            self.first = None
        for name in TRACE_HEADERS:
            headers.popall(name, None)
        propagate.inject(headers, context=trace.set_span_in_context(child))

    def answered(self, status: int, stream: bool) -> None:
        """The attempt's upstream answered ``status`` (its headers)."""
        att = self.attempt
        if att is None:
            return
        att.span.set_attribute("http.response.status_code", status)
        if status >= 400:
            att.fail(str(status), f"HTTP {status}")
        elif stream:
            att.reads = deque(maxlen=TAIL_READS)

    def failed(self, failure: UpstreamFailure) -> None:
        """The attempt's row failed and the next is tried (``pool.send``)."""
        att = self.attempt
        if att is None:
            return
        if failure.status and failure.kind.startswith("status"):
            att.span.set_attribute("http.response.status_code", failure.status)
        att.fail(failure.kind, failure.detail or failure.kind)

    def attempt_error(self, kind: str) -> None:
        if self.attempt is not None:
            self.attempt.fail(kind)

    def read(self, data: bytes) -> None:
        """One read of the attempt's stream (the last few are kept)."""
        att = self.attempt
        if att is not None and att.reads is not None:
            att.reads.append(data)
            if self.first is None:
                self.first = time.perf_counter()

    def whole(self, raw: bytes) -> None:
        """The attempt's whole reply (200): its facts."""
        att = self.attempt
        if att is not None and (att.span.is_recording() or self.meters is not None):
            facts = _whole_facts(raw)
            if att.span.is_recording():
                att.span.set_attributes(facts.attributes())
            self.facts = facts

    def closed(self) -> None:
        """The attempt's upstream response is closed: its span's end time
        (it ends when the next attempt or the request does, so that what
        the chain reported of it is on it)."""
        if self.attempt is not None:
            self._close(self.attempt)

    def _close(self, att: _Attempt) -> None:
        if att.closed_at is not None:
            return
        att.closed_at = time.time_ns()
        if att.reads is not None:
            if att.span.is_recording() or self.meters is not None:
                facts = _stream_facts(att.reads)
                if att.span.is_recording():
                    att.span.set_attributes(facts.attributes())
                self.facts = facts
            att.reads = None

    def report(self, rep: Report) -> None:
        """The chain's report of the current attempt (the last one's finish
        reasons are the reply's, as the client got them)."""
        self.repairs.update(rep.counts)
        self.sent = dict(rep.finish_reasons)
        cut = rep.cut is not None
        self.loop_cut = self.loop_cut or cut
        att = self.attempt
        if att is not None and att.span.is_recording():
            attrs: dict[str, Any] = {
                f"streamfix.repairs.{k}": n for k, n in rep.counts.items() if n
            }
            attrs["streamfix.loop_cut"] = cut
            att.span.set_attributes(attrs)

    def reasked(self, reason: str) -> None:
        self.reasks += 1
        if self.attempt is not None:
            self.attempt.span.set_attribute("streamfix.reask_reason", reason)

    def _end_attempt(self) -> _Attempt | None:
        att = self.attempt
        if att is None:
            return None
        self.attempt = None
        self._close(att)  # a stream the exchange did not close: its facts
        att.span.end(end_time=att.closed_at)
        return att
