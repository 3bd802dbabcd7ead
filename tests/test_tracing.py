"""OpenTelemetry traces (``streamfix/server/tracing.py``): a span per
request with the GenAI conventions' attributes and streamfix's own, a
child per upstream attempt, the client's ``traceparent`` continued and
the attempt's passed to the upstream; spans exported over OTLP/HTTP to a
real receiver on loopback; and the proxy unchanged without the extra.

The proxy and the upstreams are real aiohttp servers on loopback; the
spans are the SDK's, kept by its in-memory exporter.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

pytest.importorskip("opentelemetry.sdk")  # the otel extra: .ci/run installs it

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from streamfix.server import tracing
from streamfix.server.config import ServerConfig
from streamfix.server.proxy import PROXY
from streamfix.server.tracing import Tracer

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream, with_usage
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app

MESSAGES = [{"role": "user", "content": "hi"}]
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


def traced_app(exporter: InMemorySpanExporter, *upstreams: str, **settings: Any) -> Any:
    """The proxy with traces on, its spans kept by ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = proxy_app(*upstreams, **settings)
    app[PROXY].tracer = Tracer(provider)
    return app


async def post(
    px: AppServer, path: str, payload: Any, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.root + path, json=payload, headers=headers or {}) as r,
    ):
        return r.status, await r.read()


def by_kind(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The request span and its attempt spans, in order."""
    done = exporter.get_finished_spans()
    server = [s for s in done if s.kind == SpanKind.SERVER]
    assert len(server) == 1, [s.name for s in done]
    attempts = [s for s in done if s.kind == SpanKind.CLIENT]
    attempts.sort(key=lambda s: s.attributes["streamfix.attempt"])  # type: ignore[index]
    return server[0], attempts


def parent_of(traceparent: str) -> tuple[str, str]:
    """(trace id, parent span id) of a W3C ``traceparent``."""
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


# -- one request, streamed and whole ------------------------------------------------------------


async def test_a_streamed_chat_is_one_span_continuing_the_client_trace(
    spans: InMemorySpanExporter,
) -> None:
    stream = with_usage(text_stream(["Hel", "lo"]), USAGE)
    async with (
        FakeUpstream(Reply.stream(stream)) as up,
        AppServer(traced_app(spans, f"{up.url}#model=served-8b,name=fast")) as px,
    ):
        payload = {"model": "fast", "messages": MESSAGES, "stream": True, "max_tokens": 99}
        headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
        status, data = await post(px, "/v1/chat/completions", payload, headers)
    assert status == 200 and assemble(data).content == "Hello"
    req, (att,) = by_kind(spans)
    # the client's trace continued: the request span is its child
    assert hexid(req.context.trace_id, 32) == TRACE_ID
    assert req.parent is not None and hexid(req.parent.span_id, 16) == CLIENT_SPAN
    assert req.parent.is_remote
    assert req.name == "chat fast"
    a = req.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.system"] == "openai"
    assert a["gen_ai.request.model"] == "fast"
    assert a["gen_ai.response.model"] == "served-8b"
    assert a["gen_ai.request.max_tokens"] == 99
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert a["gen_ai.usage.input_tokens"] == 11 and a["gen_ai.usage.output_tokens"] == 7
    assert a["gen_ai.response.id"] == "chatcmpl-test"
    assert a["streamfix.door"] == "chat" and a["streamfix.tenant"] == "-"
    assert a["streamfix.reasks"] == 0 and a["streamfix.loop_cut"] is False
    assert a["http.response.status_code"] == 200
    assert req.status.status_code == StatusCode.UNSET
    # the attempt: a child of the request span, naming the upstream
    assert att.parent is not None and att.parent.span_id == req.context.span_id
    assert att.context.trace_id == req.context.trace_id
    b = att.attributes
    assert b["gen_ai.operation.name"] == "chat" and b["gen_ai.provider.name"] == "openai"
    assert b["server.address"] == "127.0.0.1" and b["server.port"] == up.port
    assert b["gen_ai.request.model"] == "served-8b"
    assert b["http.response.status_code"] == 200
    assert b["gen_ai.response.finish_reasons"] == ("stop",)
    # the upstream got the attempt span's trace context, the client's state with it
    sent = up.chat_requests[0].headers
    assert parent_of(sent["traceparent"]) == (TRACE_ID, hexid(att.context.span_id, 16))
    assert sent["tracestate"] == "vendor=abc"
    # the spans end in order: the attempt within the request
    assert req.end_time is not None and att.end_time is not None
    assert req.start_time is not None and att.start_time is not None
    assert req.start_time <= att.start_time <= att.end_time <= req.end_time


async def test_a_whole_chat_reply_gives_its_finish_reasons_and_usage(
    spans: InMemorySpanExporter,
) -> None:
    reply = completion("hi", finish="length", usage=USAGE)
    async with FakeUpstream(Reply.json(reply)) as up, AppServer(traced_app(spans, up.url)) as px:
        status, _ = await post(
            px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "max_tokens": 5}
        )
    assert status == 200
    req, (att,) = by_kind(spans)
    for span in (req, att):
        assert span.attributes["gen_ai.response.finish_reasons"] == ("length",)
        assert span.attributes["gen_ai.usage.input_tokens"] == 11
        assert span.attributes["gen_ai.usage.output_tokens"] == 7
        assert span.attributes["gen_ai.response.id"] == "chatcmpl-fake"
    assert req.attributes["gen_ai.request.max_tokens"] == 5
    assert req.attributes["streamfix.stream"] is False
    # no client trace: a new one, and the upstream is its child's child
    assert req.parent is None
    sent = up.chat_requests[0].headers["traceparent"]
    assert parent_of(sent) == (hexid(req.context.trace_id, 32), hexid(att.context.span_id, 16))


async def test_no_usage_sent_means_no_usage_attribute(spans: InMemorySpanExporter) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(["x"]))) as up,
        AppServer(traced_app(spans, up.url)) as px,
    ):
        await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
    req, _ = by_kind(spans)
    assert "gen_ai.usage.input_tokens" not in req.attributes
    assert req.attributes["gen_ai.response.finish_reasons"] == ("stop",)


async def test_a_client_trace_not_sampled_exports_nothing_and_still_goes_up(
    spans: InMemorySpanExporter,
) -> None:
    """The SDK's default sampler follows the client's flag: its spans are
    non-recording (no attribute work, nothing exported), and the upstream
    still gets the trace, unsampled."""
    reply = with_usage(text_stream(["x"]), USAGE)
    async with (
        FakeUpstream(Reply.stream(reply)) as up,
        AppServer(traced_app(spans, up.url)) as px,
    ):
        status, data = await post(
            px,
            "/v1/chat/completions",
            {"model": "m", "messages": MESSAGES, "stream": True},
            {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-00"},
        )
    assert status == 200 and assemble(data).content == "x"
    assert spans.get_finished_spans() == ()
    sent = up.chat_requests[0].headers["traceparent"]
    assert sent.startswith(f"00-{TRACE_ID}-") and sent.endswith("-00")
    assert parent_of(sent)[1] != CLIENT_SPAN  # a span of ours, if not recorded


# -- attempts: re-asks and failover ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_a_reask_is_a_second_attempt_child(spans: InMemorySpanExporter, stream: bool) -> None:
    async with FakeUpstream() as up:
        if stream:
            empty = sse([chunk(role="assistant"), chunk(""), chunk(finish="stop")])
            up.push(Reply.stream(empty), Reply.stream(text_stream(["second"])))
        else:
            up.push(Reply.json(completion("")), Reply.json(completion("second")))
        async with AppServer(traced_app(spans, up.url)) as px:
            payload = {"model": "m", "messages": MESSAGES, "tools": SHAPES_TOOLS, "stream": stream}
            status, _ = await post(px, "/v1/chat/completions", payload)
    assert status == 200
    req, attempts = by_kind(spans)
    assert len(attempts) == 2
    assert all(a.parent is not None and a.parent.span_id == req.context.span_id for a in attempts)
    assert attempts[0].attributes["streamfix.reask_reason"] == "empty"
    assert "streamfix.reask_reason" not in attempts[1].attributes
    assert req.attributes["streamfix.reasks"] == 1
    # each upstream request carried its own attempt's context
    sent = [parent_of(r.headers["traceparent"])[1] for r in up.chat_requests]
    assert sent == [hexid(a.context.span_id, 16) for a in attempts]


async def test_a_failed_row_is_an_attempt_with_its_status(spans: InMemorySpanExporter) -> None:
    """A 503, then the retry round's 200: two attempts, the first an error."""
    async with FakeUpstream() as up:
        up.push(Reply.error(503, "busy"), Reply.json(completion("ok")))
        async with AppServer(traced_app(spans, up.url)) as px:
            status, _ = await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    assert status == 200
    req, attempts = by_kind(spans)
    assert len(attempts) == 2 == len(up.chat_requests)
    first, second = attempts
    assert first.attributes["http.response.status_code"] == 503
    assert first.status.status_code == StatusCode.ERROR
    assert first.attributes["error.type"] == "status_5xx"
    assert second.attributes["http.response.status_code"] == 200
    assert second.status.status_code == StatusCode.UNSET
    assert req.status.status_code == StatusCode.UNSET
    sent = [parent_of(r.headers["traceparent"])[1] for r in up.chat_requests]
    assert sent == [hexid(a.context.span_id, 16) for a in attempts]


async def test_no_upstream_answering_is_an_error_span(spans: InMemorySpanExporter) -> None:
    async with (
        FakeUpstream(Reply.error(503, "busy")) as bad,
        AppServer(traced_app(spans, bad.url, retries=0)) as px,
    ):
        status, _ = await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    assert status == 503
    req, (att,) = by_kind(spans)
    assert req.status.status_code == StatusCode.ERROR
    assert req.attributes["error.type"] == "status_5xx"
    assert req.attributes["http.response.status_code"] == 503
    assert att.status.status_code == StatusCode.ERROR


# -- streams that end badly ---------------------------------------------------------------------


async def test_an_upstream_dying_mid_stream_ends_both_spans_as_errors(
    spans: InMemorySpanExporter,
) -> None:
    dying = Reply.stream(sse([chunk(role="assistant"), chunk("part")], done=False), end="abort")
    async with FakeUpstream(dying) as up, AppServer(traced_app(spans, up.url)) as px:
        status, data = await post(
            px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}
        )
    assert status == 200 and assemble(data).errors
    req, (att,) = by_kind(spans)
    assert att.status.status_code == StatusCode.ERROR
    assert att.attributes["error.type"] == "died_midstream"
    assert req.status.status_code == StatusCode.ERROR
    assert req.attributes["error.type"] == "died_midstream"


async def test_a_client_gone_mid_stream_ends_the_spans(spans: InMemorySpanExporter) -> None:
    head = sse([chunk(role="assistant"), chunk("a")], done=False)
    forever = Reply.stream(head, delay=0.005, repeat=sse([chunk(" b")], done=False))
    async with FakeUpstream(forever) as up, AppServer(traced_app(spans, up.url)) as px:
        async with aiohttp.ClientSession() as s:
            r = await s.post(
                px.root + "/v1/chat/completions",
                json={"model": "m", "messages": MESSAGES, "stream": True},
            )
            await r.content.readany()
            r.close()
        await asyncio.wait_for(up.chat_requests[0].ended.wait(), 5)
        for _ in range(200):  # the handler's cancellation runs its finally
            if len(spans.get_finished_spans()) == 2:
                break
            await asyncio.sleep(0.01)
    req, (att,) = by_kind(spans)
    assert req.attributes["streamfix.client_gone"] is True
    assert req.status.status_code == StatusCode.UNSET  # the client's doing, not an error
    assert att.end_time is not None


async def test_a_client_gone_before_a_whole_reply_ends_the_spans(
    spans: InMemorySpanExporter,
) -> None:
    hang = Reply.stream(sse([chunk(role="assistant")], done=False), end="hang")
    async with FakeUpstream(hang) as up, AppServer(traced_app(spans, up.url)) as px:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES}), 0.5
            )
        for _ in range(200):
            if len(spans.get_finished_spans()) == 2:
                break
            await asyncio.sleep(0.01)
    req, _ = by_kind(spans)
    assert req.attributes["streamfix.client_gone"] is True
    assert req.status.status_code == StatusCode.UNSET


async def test_an_error_of_ours_is_an_error_span(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamfix.server import reply as reply_mod

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(reply_mod, "_repaired", broken)
    async with (
        FakeUpstream(Reply.json(completion("x"))) as up,
        AppServer(traced_app(spans, up.url)) as px,
    ):
        status, _ = await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    assert status == 500
    req, _ = by_kind(spans)
    assert req.status.status_code == StatusCode.ERROR
    assert req.attributes["error.type"] == "RuntimeError"
    assert "streamfix.client_gone" not in req.attributes


async def test_a_cut_loop_and_repairs_are_on_the_spans(spans: InMemorySpanExporter) -> None:
    head = sse([chunk(role="assistant")], done=False)
    loop = Reply.stream(
        head, delay=0.002, repeat=sse([chunk("the cat sat on the mat. ")], done=False)
    )
    async with FakeUpstream(loop) as up, AppServer(traced_app(spans, up.url)) as px:
        status, data = await post(
            px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}
        )
    assert status == 200 and assemble(data).finish_reason == "length"
    req, (att,) = by_kind(spans)
    assert req.attributes["streamfix.loop_cut"] is True
    assert att.attributes["streamfix.loop_cut"] is True
    repairs = {k: v for k, v in req.attributes.items() if k.startswith("streamfix.repairs.")}
    assert repairs and all(isinstance(v, int) and v > 0 for v in repairs.values())


async def test_a_call_written_as_text_counts_its_repair(spans: InMemorySpanExporter) -> None:
    text = '<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call>'
    async with (
        FakeUpstream(Reply.stream(text_stream([text]))) as up,
        AppServer(traced_app(spans, up.url)) as px,
    ):
        payload = {"model": "m", "messages": MESSAGES, "tools": SHAPES_TOOLS, "stream": True}
        status, data = await post(px, "/v1/chat/completions", payload)
    assert status == 200 and assemble(data).tool_calls
    req, (att,) = by_kind(spans)
    lifted = {k: v for k, v in req.attributes.items() if k.startswith("streamfix.repairs.")}
    assert lifted and lifted == {
        k: v for k, v in att.attributes.items() if k.startswith("streamfix.repairs.")
    }


@pytest.mark.parametrize("stream", [True, False])
async def test_the_server_span_says_what_the_client_got(
    spans: InMemorySpanExporter, stream: bool
) -> None:
    """A call lifted from text: the client got ``tool_calls``, and so says
    the request span; the attempt span keeps the upstream's ``stop``.
    Usage and repairs are on the request span too."""
    text = '<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call><|im_end|>'
    if stream:
        reply = Reply.stream(with_usage(text_stream([text]), USAGE))
    else:
        reply = Reply.json(completion(text, usage=USAGE))
    async with FakeUpstream(reply) as up, AppServer(traced_app(spans, up.url)) as px:
        payload = {"model": "m", "messages": MESSAGES, "tools": SHAPES_TOOLS, "stream": stream}
        status, _ = await post(px, "/v1/chat/completions", payload)
    assert status == 200
    req, (att,) = by_kind(spans)
    assert req.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert att.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert req.attributes["gen_ai.usage.input_tokens"] == 11
    assert req.attributes["gen_ai.usage.output_tokens"] == 7
    assert req.attributes["streamfix.repairs.lifted.hermes"] == 1
    assert req.attributes["streamfix.repairs.stripped.special_token"] == 1
    assert "streamfix.repairs.unrecognised_markup" not in req.attributes


async def test_an_upstream_loop_cut_is_length_to_the_client(spans: InMemorySpanExporter) -> None:
    """vLLM's ``repetition``: the attempt span says it; the client got
    ``length`` (a loop cut), and so says the request span."""
    reply = Reply.stream(text_stream(["ok ok ok"], finish="repetition"))
    async with FakeUpstream(reply) as up, AppServer(traced_app(spans, up.url)) as px:
        payload = {"model": "m", "messages": MESSAGES, "stream": True}
        status, _ = await post(px, "/v1/chat/completions", payload)
    assert status == 200
    req, (att,) = by_kind(spans)
    assert req.attributes["gen_ai.response.finish_reasons"] == ("length",)
    assert att.attributes["gen_ai.response.finish_reasons"] == ("repetition",)
    assert req.attributes["streamfix.loop_cut"] is True


# -- the doors and the other operations -----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "payload", "door"),
    [
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 64, "messages": MESSAGES, "stream": True},
            "messages",
        ),
        ("/v1/responses", {"model": "m", "input": "hi", "stream": True}, "responses"),
        ("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, "chat"),
    ],
)
async def test_each_door_is_a_chat_span_naming_its_door(
    spans: InMemorySpanExporter, path: str, payload: dict[str, Any], door: str
) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(["hi"]))) as up,
        AppServer(traced_app(spans, up.url)) as px,
    ):
        status, _ = await post(px, path, payload, {"traceparent": TRACEPARENT})
    assert status == 200
    req, (att,) = by_kind(spans)
    assert req.attributes["gen_ai.operation.name"] == "chat"
    assert req.attributes["streamfix.door"] == door
    assert req.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert hexid(req.context.trace_id, 32) == TRACE_ID
    assert parent_of(up.chat_requests[0].headers["traceparent"])[1] == hexid(
        att.context.span_id, 16
    )


async def test_text_completions_and_embeddings_name_their_operation(
    spans: InMemorySpanExporter,
) -> None:
    text = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "m",
        "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
        "usage": USAGE,
    }
    vectors = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5] * 8}],
        "model": "e",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    async with (
        FakeUpstream(Reply.json(text)) as chat_up,
        FakeUpstream(Reply.json(vectors)) as embed_up,
        AppServer(traced_app(spans, chat_up.url, f"{embed_up.url}#kind=embedding,model=e")) as px,
    ):
        s1, _ = await post(px, "/v1/completions", {"model": "m", "prompt": "hi"})
        req, _ = by_kind(spans)
        spans.clear()
        s2, _ = await post(px, "/v1/embeddings", {"model": "e", "input": "hi"})
        emb, _ = by_kind(spans)
    assert s1 == s2 == 200
    assert req.attributes["gen_ai.operation.name"] == "text_completion"
    assert req.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert req.attributes["gen_ai.usage.output_tokens"] == 7
    assert "streamfix.door" not in req.attributes
    assert emb.attributes["gen_ai.operation.name"] == "embeddings"
    assert emb.attributes["gen_ai.usage.input_tokens"] == 3


async def test_models_and_status_routes_have_no_span(spans: InMemorySpanExporter) -> None:
    models = {"object": "list", "data": [{"id": "m", "object": "model"}]}
    async with (
        FakeUpstream(routes={"/v1/models": models}) as up,
        AppServer(traced_app(spans, up.url)) as px,
        aiohttp.ClientSession() as s,
    ):
        for path in ("/v1/models", "/healthz"):
            async with s.get(px.root + path) as r:
                assert r.status == 200
    assert spans.get_finished_spans() == ()


async def test_the_scope_can_add_attributes_before_and_after_the_span_starts(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook for another part of the request (tool narrowing): a
    ``Scope.annotate`` before ``Scope.answer`` and one during it."""
    from streamfix.server import reply as reply_mod
    from streamfix.server import scope as scope_mod

    real_route = scope_mod.Scope.route
    real_open = reply_mod.Exchange.open

    def route(self: Any, kind: str, model: Any, stream: bool = False) -> Any:
        rows = real_route(self, kind, model, stream)
        self.annotate({"streamfix.narrowing.offered": 12})
        return rows

    async def open_(scope: Any, *a: Any, **kw: Any) -> Any:
        scope.annotate({"streamfix.narrowing.kept": 3})
        return await real_open(scope, *a, **kw)

    monkeypatch.setattr(scope_mod.Scope, "route", route)
    monkeypatch.setattr(reply_mod.Exchange, "open", open_)
    async with (
        FakeUpstream(Reply.stream(text_stream(["x"]))) as up,
        AppServer(traced_app(spans, up.url)) as px,
    ):
        await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
    req, _ = by_kind(spans)
    assert req.attributes["streamfix.narrowing.offered"] == 12
    assert req.attributes["streamfix.narrowing.kept"] == 3


# -- switching traces on --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("traces", "env", "on"),
    [
        (False, {}, False),
        (True, {}, True),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        (False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"}, True),
        (False, {"OTEL_TRACES_EXPORTER": "console"}, True),
        (False, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        (True, {"OTEL_SDK_DISABLED": "true"}, False),
        (False, {"OTEL_SERVICE_NAME": "svc"}, False),
    ],
)
def test_when_traces_are_on(traces: bool, env: dict[str, str], on: bool) -> None:
    cfg = ServerConfig(traces=traces)
    assert tracing.wanted(cfg, env) is on
    tracer = tracing.tracer_for(cfg, env)
    assert (tracer is not None) is on
    if tracer is not None:
        tracer.shutdown()


def test_traces_off_leave_the_proxy_without_a_tracer() -> None:
    app = proxy_app("http://127.0.0.1:9/v1")
    assert app[PROXY].tracer is None


async def test_without_traces_the_client_traceparent_goes_up_as_before() -> None:
    """Traces off: nothing is injected; the client's header is forwarded
    as any end-to-end header is."""
    async with (
        FakeUpstream(Reply.stream(text_stream(["x"]))) as up,
        AppServer(proxy_app(up.url)) as px,
    ):
        await post(
            px,
            "/v1/chat/completions",
            {"model": "m", "messages": MESSAGES, "stream": True},
            {"traceparent": TRACEPARENT},
        )
    assert up.chat_requests[0].headers["traceparent"] == TRACEPARENT


# -- a real OTLP/HTTP receiver ------------------------------------------------------------------


async def test_spans_reach_an_otlp_http_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--traces`` with the standard variables: the proxy's own provider
    exports over OTLP/HTTP (protobuf) to a receiver on loopback, flushed
    when the app stops."""
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    got: list[ExportTraceServiceRequest] = []

    async def receive(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(await request.read())
        got.append(msg)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    receiver_app = web.Application()
    receiver_app.router.add_post("/v1/traces", receive)
    async with AppServer(receiver_app) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.root)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "streamfix-test")
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        async with FakeUpstream(Reply.stream(text_stream(["hi"]))) as up:
            app = proxy_app(up.url, traces=True)
            assert app[PROXY].tracer is not None and app[PROXY].tracer.own
            async with AppServer(app) as px:
                status, _ = await post(
                    px,
                    "/v1/chat/completions",
                    {"model": "m", "messages": MESSAGES, "stream": True},
                    {"traceparent": TRACEPARENT},
                )
            assert status == 200  # the app stopped: its provider flushed
    spans_got = [
        (rs, span)
        for msg in got
        for rs in msg.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    names = sorted(span.name for _, span in spans_got)
    assert names == ["chat m", "chat m"]
    rs, server = next((rs, s) for rs, s in spans_got if s.kind == s.SPAN_KIND_SERVER)
    assert server.trace_id.hex() == TRACE_ID and server.parent_span_id.hex() == CLIENT_SPAN
    attrs = {kv.key: kv.value for kv in server.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "chat"
    reasons = [v.string_value for v in attrs["gen_ai.response.finish_reasons"].array_value.values]
    assert reasons == ["stop"]
    service = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
    assert service["service.name"] == "streamfix-test"


# -- the extra absent -----------------------------------------------------------------------------


@pytest.fixture
def without_otel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """As if the extra were not installed: every ``opentelemetry`` module
    blocked (an import of one raises ImportError), restored afterwards;
    ``tracing`` itself imported anew under the block."""
    for name in list(sys.modules):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    for name in ("opentelemetry", "opentelemetry.sdk", "opentelemetry.trace"):
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    module = importlib.reload(tracing)
    try:
        yield module
    finally:
        monkeypatch.undo()
        importlib.reload(tracing)


async def test_without_the_extra_the_proxy_runs_unchanged(
    without_otel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert without_otel.available() is False
    assert without_otel.problem(ServerConfig(traces=True)) is not None
    assert without_otel.problem(ServerConfig()) is None
    # the variables alone: ignored, the proxy serves as before
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    reply = with_usage(text_stream(["Hel", "lo"]), USAGE)
    async with FakeUpstream() as up:
        up.push(Reply.stream(reply), Reply.json(completion("hi")))
        app = proxy_app(up.url)
        assert app[PROXY].tracer is None
        async with AppServer(app) as px:
            status, data = await post(
                px,
                "/v1/chat/completions",
                {"model": "m", "messages": MESSAGES, "stream": True},
                {"traceparent": TRACEPARENT},
            )
            status2, data2 = await post(
                px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES}
            )
    assert status == 200 and assemble(data).content == "Hello"
    assert status2 == 200 and orjson.loads(data2)["choices"][0]["message"]["content"] == "hi"
    assert up.chat_requests[0].headers["traceparent"] == TRACEPARENT


def test_traces_asked_without_the_extra_is_a_start_up_problem(without_otel: Any) -> None:
    from streamfix.tools.cli import start_problems

    problems = start_problems(ServerConfig(traces=True, port=0))
    assert any("otel extra" in p for p in problems)


def test_traces_off_import_nothing_of_the_extra() -> None:
    """With the extra installed but traces off, a proxy process never
    imports the SDK (about 0.1 s of start-up)."""
    import os
    import subprocess

    code = (
        "import sys\n"
        "from streamfix.server.app import create_app\n"
        "from streamfix.server.config import ServerConfig, parse_upstream\n"
        "create_app(ServerConfig(upstreams=[parse_upstream('http://127.0.0.1:9/v1')]))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_narrowing_is_noted_on_the_request_span(spans: InMemorySpanExporter) -> None:
    """``--narrow-tools auto``: the request span says what narrowing did
    (the outcome, the tools shown of those offered)."""
    from .test_narrow_proxy import model_calling, turn

    async with (
        FakeUpstream(handler=model_calling("get_weather")) as up,
        AppServer(traced_app(spans, up.url, narrow_tools="auto")) as px,
    ):
        status, _ = await post(px, "/v1/chat/completions", turn())
        assert status == 200
        req, _ = by_kind(spans)
        spans.clear()
        status, _ = await post(px, "/v1/chat/completions", {**turn(), "tools": turn()["tools"][:3]})
        assert status == 200
        few, _ = by_kind(spans)
    a = req.attributes
    assert a["streamfix.narrowing"] == "narrowed"
    assert a["streamfix.narrowing_kept"] == 5 and a["streamfix.narrowing_of"] > 5
    assert few.attributes["streamfix.narrowing"] == "few_tools"
    assert "streamfix.narrowing_kept" not in few.attributes


# -- the GenAI metrics ----------------------------------------------------------------------------


def metered_app(
    exporter: InMemorySpanExporter, *upstreams: str, **settings: Any
) -> tuple[Any, Any]:
    """``traced_app`` with the GenAI metrics, and the in-memory reader of them."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from streamfix.server.otel_metrics import GenAIMeters

    app = traced_app(exporter, *upstreams, **settings)
    reader = InMemoryMetricReader()
    app[PROXY].tracer.meters = GenAIMeters(MeterProvider(metric_readers=[reader]))
    return app, reader


def points(reader: Any) -> dict[str, list[Any]]:
    """Histogram data points by metric name."""
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(m.data.data_points)
    return out


GENAI = (
    "gen_ai.client.token.usage",
    "gen_ai.server.request.duration",
    "gen_ai.server.time_to_first_token",
    "gen_ai.server.time_per_output_token",
)


async def test_a_streamed_reply_records_the_four_genai_histograms(
    spans: InMemorySpanExporter,
) -> None:
    reply = Reply.stream(with_usage(text_stream(["Hel", "lo"]), USAGE), delay=0.01)
    async with FakeUpstream(reply) as up:
        app, reader = metered_app(spans, f"{up.url}#model=served-8b,name=fast")
        async with AppServer(app) as px:
            payload = {"model": "fast", "messages": MESSAGES, "stream": True}
            status, _ = await post(px, "/v1/chat/completions", payload)
    assert status == 200
    got = points(reader)
    assert sorted(got) == sorted(GENAI)
    tokens = {p.attributes["gen_ai.token.type"]: p for p in got["gen_ai.client.token.usage"]}
    assert set(tokens) == {"input", "output"}
    assert tokens["input"].sum == 11 and tokens["output"].sum == 7
    for name in GENAI:
        for p in got[name]:
            assert p.attributes["gen_ai.operation.name"] == "chat"
            assert p.attributes["gen_ai.provider.name"] == "openai"
            assert p.attributes["gen_ai.request.model"] == "fast"
            assert p.attributes["gen_ai.response.model"] == "served-8b"
            assert "error.type" not in p.attributes
    [duration] = got["gen_ai.server.request.duration"]
    [first] = got["gen_ai.server.time_to_first_token"]
    [per] = got["gen_ai.server.time_per_output_token"]
    assert duration.count == first.count == per.count == 1
    assert 0 < first.sum <= duration.sum
    assert per.sum == pytest.approx((duration.sum - first.sum) / 6, rel=0.2)


async def test_a_whole_reply_and_a_failure_record_what_they_have(
    spans: InMemorySpanExporter,
) -> None:
    async with FakeUpstream() as up:
        up.push(Reply.json(completion("hi", usage=USAGE)), Reply.error(400, "bad"))
        app, reader = metered_app(spans, up.url)
        async with AppServer(app) as px:
            ok, _ = await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
            bad, _ = await post(px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})
    assert (ok, bad) == (200, 400)
    got = points(reader)
    # not streamed: no first token; the failure only as a duration with its error
    assert sorted(got) == ["gen_ai.client.token.usage", "gen_ai.server.request.duration"]
    assert sorted(p.sum for p in got["gen_ai.client.token.usage"]) == [7, 11]
    durations = got["gen_ai.server.request.duration"]
    errors = sorted(p.attributes.get("error.type", "") for p in durations)
    assert errors == ["", "400"]


async def test_genai_metrics_reach_an_otlp_http_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--traces``: the metrics go to the same OTLP/HTTP receiver as the
    spans (``/v1/metrics``), flushed when the app stops."""
    from aiohttp import web
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    )

    got: list[ExportMetricsServiceRequest] = []

    async def metrics_in(request: web.Request) -> web.Response:
        msg = ExportMetricsServiceRequest()
        msg.ParseFromString(await request.read())
        got.append(msg)
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    async def traces_in(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(content_type="application/x-protobuf")

    receiver_app = web.Application()
    receiver_app.router.add_post("/v1/metrics", metrics_in)
    receiver_app.router.add_post("/v1/traces", traces_in)
    async with AppServer(receiver_app) as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.root)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "streamfix-test")
        monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
        reply = Reply.stream(with_usage(text_stream(["hi", " there"]), USAGE))
        async with FakeUpstream(reply) as up:
            app = proxy_app(up.url, traces=True)
            assert app[PROXY].tracer.meters is not None and app[PROXY].tracer.meters.own
            async with AppServer(app) as px:
                status, _ = await post(
                    px, "/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}
                )
            assert status == 200  # the app stopped: its meter provider flushed
    metrics = {
        m.name: m
        for msg in got
        for rm in msg.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert set(GENAI) <= set(metrics)
    usage = metrics["gen_ai.client.token.usage"].histogram.data_points
    kinds = {
        next(kv.value.string_value for kv in p.attributes if kv.key == "gen_ai.token.type"): p.sum
        for p in usage
    }
    assert kinds == {"input": 11, "output": 7}
    assert metrics["gen_ai.server.request.duration"].unit == "s"
    service = {
        kv.key: kv.value.string_value for kv in got[0].resource_metrics[0].resource.attributes
    }
    assert service["service.name"] == "streamfix-test"


def test_metrics_exporter_none_leaves_the_traces_alone() -> None:
    tracer = tracing.tracer_for(
        ServerConfig(traces=True), {"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert tracer is not None and tracer.meters is None
