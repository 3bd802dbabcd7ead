"""streamfix serve in front of a real llama.cpp server (SmolLM2-135M).

Every comparison is between what the client got through streamfix and what
the server sent for *that same request*, recorded by the relay: this
server's output varies between requests even at temperature 0.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest

from streamfix.tools.local import AppThread, LocalServer
from tests.e2e.common import (
    GET_WEATHER,
    LOOP_REQUEST,
    TOOL_AS_TEXT_MESSAGES,
    deltas,
    post_json,
    post_stream,
    stream_assembled,
    valid_calls_in,
)
from tests.e2e.conftest import PING_INTERVAL, ProxyFactory
from tests.e2e.relay import RecordingRelay
from tests.support.streamutil import assemble

pytestmark = pytest.mark.e2e

PLAIN = {
    "model": "smollm2",
    "messages": [{"role": "user", "content": "Name three colours and say one thing about each."}],
    "max_tokens": 48,
    "temperature": 0,
}
NAMED_CHOICE = {
    "model": "smollm2",
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [GET_WEATHER],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "max_tokens": 40,
    "temperature": 0,
}
#: Far more than the 2048-token window: ~10 tokens per sentence.
LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 260
#: A conversation whose first turn alone is longer than the window.
OVERFLOW = {
    "model": "smollm2",
    "messages": [
        {"role": "user", "content": LONG_TEXT},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Say hello."},
    ],
    "max_tokens": 16,
    "temperature": 0,
}


# -- transparency ------------------------------------------------------------


def test_transparency_streamed(http: httpx.Client, proxy: AppThread, relay: RecordingRelay) -> None:
    mark = relay.mark()
    got = stream_assembled(http, proxy.base_url, PLAIN)
    sent = relay.only_chat_since(mark).assembled()
    assert sent.content  # the model said something
    assert got.content == sent.content
    assert got.finish_reason == sent.finish_reason
    assert got.done and not got.errors


def test_transparency_not_streamed(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay
) -> None:
    mark = relay.mark()
    status, got = post_json(http, proxy.base_url, PLAIN)
    ex = relay.only_chat_since(mark)
    assert status == 200
    sent = ex.json()
    assert sent["choices"][0]["message"]["content"]
    assert got["choices"][0]["message"]["content"] == sent["choices"][0]["message"]["content"]
    assert got["choices"][0]["finish_reason"] == sent["choices"][0]["finish_reason"]
    assert got["usage"] == sent["usage"]


def test_ping_comments_pass_and_do_not_disturb(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay
) -> None:
    """The server sends ``: ping - <time>`` comments (sse-starlette; every
    PING_INTERVAL s here, 15 s by default) in the middle of the stream."""
    mark = relay.mark()
    status, data = post_stream(http, proxy.base_url, {**PLAIN, "max_tokens": 80})
    ex = relay.only_chat_since(mark)
    assert status == 200
    duration = (ex.ended or 0) - ex.started
    if duration < 2 * PING_INTERVAL:  # pragma: no cover - a very fast machine
        pytest.skip(f"the reply took {duration:.2f} s: too short for a ping")
    assert b": ping - " in ex.response
    got, sent = assemble(data), ex.assembled()
    assert got.content == sent.content and got.done and not got.errors
    assert got.comments >= 1  # comments are passed on (or sent as keep-alives)


# -- a real loop -------------------------------------------------------------


def test_real_loop_is_cut_and_server_stops(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay, llama: LocalServer
) -> None:
    mark = relay.mark()
    got = stream_assembled(http, proxy.base_url, LOOP_REQUEST)
    ex = relay.only_chat_since(mark)
    sent = ex.assembled()
    # the client got a clean end of the turn, sooner than the server would have
    assert got.done and not got.errors
    assert got.finish_reason is not None
    assert got.content and sent.content.startswith(got.content)
    tokens = sent.chunks - 2  # role chunk and finish chunk aside: one token per chunk
    assert tokens < LOOP_REQUEST["max_tokens"] - 20, f"not cut: the server sent {tokens} tokens"
    # streamfix closed its upstream request: the relay saw it go and hung up too
    assert ex.downstream_gone and not ex.complete
    assert sent.finish_reason is None and not sent.done
    # ...and the server stopped generating: it serves the next request at
    # once, instead of finishing the remaining tokens first (with
    # --interrupt_requests false it runs one request at a time).
    seconds = (ex.ended or 0) - ex.started
    rate = max(tokens, 1) / max(seconds, 1e-3)
    remaining = (LOOP_REQUEST["max_tokens"] - tokens) / rate
    t0 = time.monotonic()
    r = http.post(
        f"{llama.base_url}/chat/completions",
        json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
    )
    waited = time.monotonic() - t0
    assert r.status_code == 200
    assert waited < max(1.5, remaining / 2), (
        f"the next request waited {waited:.1f} s; the loop had ~{remaining:.1f} s left"
    )


def test_real_loop_not_streamed_is_cut(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay
) -> None:
    """Not streamed, the server has generated everything already; the
    client still gets the reply cut after a few repetitions."""
    mark = relay.mark()
    status, got = post_json(http, proxy.base_url, {**LOOP_REQUEST, "max_tokens": 200})
    sent = relay.only_chat_since(mark).json()
    assert status == 200
    text = got["choices"][0]["message"]["content"]
    full = sent["choices"][0]["message"]["content"]
    if sent["usage"]["completion_tokens"] < 150:  # pragma: no cover - no loop this time
        pytest.skip(f"the model did not loop: {full!r}")
    assert text and full.startswith(text) and len(text) < len(full)


# -- a tool call written as text -----------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
def test_text_tool_call_comes_out_structured(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay, stream: bool
) -> None:
    body = {
        "model": "smollm2",
        "messages": TOOL_AS_TEXT_MESSAGES,
        "tools": [GET_WEATHER],
        "max_tokens": 60,
        "temperature": 0,
    }
    mark = relay.mark()
    if stream:
        got = stream_assembled(http, proxy.base_url, body)
        content, calls, finish = got.content, got.calls(), got.finish_reason
        assert got.done and not got.errors
    else:
        status, obj = post_json(http, proxy.base_url, body)
        assert status == 200, obj
        msg = obj["choices"][0]["message"]
        content = msg.get("content") or ""
        calls = [
            (c["function"]["name"], orjson.loads(c["function"]["arguments"]))
            for c in msg.get("tool_calls") or []
        ]
        finish = obj["choices"][0]["finish_reason"]
    direct = relay.only_chat_since(mark).content()
    expected = valid_calls_in(direct)
    assert "<tool_call>" not in content
    if expected:
        assert calls == expected, f"server wrote {direct!r}"
        assert finish == "tool_calls"
    # else: the model wrote no valid call this time; streamfix may still
    # repair a broken one, but must not leak markup (checked above)


# -- the server's own quirks ---------------------------------------------------


@pytest.fixture(scope="module")
def forcing_proxy(make_proxy: ProxyFactory) -> AppThread:
    """A proxy that forwards ``tool_choice`` as the client sent it
    (``--required off``): llama.cpp then forces the named call with a
    grammar, in its own streamed shape."""
    return make_proxy(required="off")


def test_named_tool_choice_streamed_gives_one_clean_call(
    http: httpx.Client, forcing_proxy: AppThread, relay: RecordingRelay
) -> None:
    """Every delta repeats the id and the name, and a legacy
    ``function_call`` rides along (capture b2): a client must still see
    one call with its name once."""
    proxy = forcing_proxy
    mark = relay.mark()
    status, data = post_stream(http, proxy.base_url, NAMED_CHOICE)
    ex = relay.only_chat_since(mark)
    assert status == 200
    server = [d for d in deltas(bytes(ex.response)) if d.get("tool_calls")]
    assert len(server) > 1
    assert all(d["tool_calls"][0]["function"]["name"] == "get_weather" for d in server)
    sent_args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in server)

    got = assemble(data)
    assert got.done and not got.errors
    assert len(got.tool_calls) == 1
    call = got.tool_calls[0]
    assert call["function"]["name"] == "get_weather"
    assert call["id"] and call["type"] == "function"
    assert orjson.loads(call["function"]["arguments"]) == orjson.loads(sent_args)
    assert got.finish_reason == "tool_calls"
    legacy = "".join((d.get("function_call") or {}).get("name") or "" for d in deltas(data))
    assert legacy in ("", "get_weather")  # never the name once per delta


def test_named_tool_choice_not_streamed(
    http: httpx.Client, forcing_proxy: AppThread, relay: RecordingRelay
) -> None:
    proxy = forcing_proxy
    mark = relay.mark()
    status, got = post_json(http, proxy.base_url, NAMED_CHOICE)
    sent = relay.only_chat_since(mark).json()
    assert status == 200
    sent_msg, msg = sent["choices"][0]["message"], got["choices"][0]["message"]
    assert sent_msg.get("function_call")  # the quirk is there
    assert len(msg["tool_calls"]) == 1
    fn = msg["tool_calls"][0]["function"]
    assert fn["name"] == "get_weather"
    assert orjson.loads(fn["arguments"]) == orjson.loads(
        sent_msg["tool_calls"][0]["function"]["arguments"]
    )
    assert got["choices"][0]["finish_reason"] == "tool_calls"
    legacy = msg.get("function_call")
    assert legacy is None or legacy["name"] == "get_weather"


def test_named_tool_choice_is_narrowed_for_the_real_model(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay
) -> None:
    """``--required soft`` (the default): the named tool alone, with
    ``tool_choice: "auto"`` and an instruction in the tool's own words; a
    reply without a call is asked once more, and the client gets one
    clean turn either way."""
    other = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    body = {**NAMED_CHOICE, "tools": [other, GET_WEATHER]}
    mark = relay.mark()
    status, data = post_stream(http, proxy.base_url, body)
    sent = relay.chats_since(mark)
    assert status == 200 and 1 <= len(sent) <= 2
    first = sent[0].body
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert first["tool_choice"] == "auto"
    assert "calling the tool get_weather" in first["messages"][0]["content"]
    got = assemble(data)
    assert got.done and not got.errors
    assert all(c["function"]["name"] == "get_weather" for c in got.tool_calls)
    if len(sent) == 2:  # the first reply had no call: asked once more
        assert not sent[0].assembled().tool_calls


def test_empty_200_stream_reaches_the_client_as_an_error(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay
) -> None:
    """A failure inside llama-cpp-python's stream (here: ``tool_choice``
    names a tool that is not offered) is answered HTTP 200 with an empty
    body: the client must get an error, not a blank turn."""
    body = {
        **NAMED_CHOICE,
        "tool_choice": {"type": "function", "function": {"name": "not_offered"}},
    }
    mark = relay.mark()
    status, data = post_stream(http, proxy.base_url, body)
    sent = relay.chats_since(mark)
    assert sent and sent[0].status == 200 and sent[0].response == b""
    # streamfix looks into an empty stream once: the same request, not
    # streamed, for one token (an overflow would answer 400 with the window)
    assert all(e.body["stream"] is False and e.body["max_tokens"] == 1 for e in sent[1:])
    assert len(sent) <= 2
    if status == 200:
        got = assemble(data)
        assert got.errors, f"a blank turn: {data!r}"
        assert not got.content and not got.tool_calls
    else:
        assert status >= 400


def test_streamed_overflow_is_an_error_not_a_blank_turn(
    http: httpx.Client, make_proxy: ProxyFactory, relay: RecordingRelay
) -> None:
    """A streamed prompt longer than the window: HTTP 200, empty body."""
    proxy = make_proxy()
    body = {"model": "smollm2", "messages": [{"role": "user", "content": LONG_TEXT}],
            "max_tokens": 16}  # fmt: skip
    mark = relay.mark()
    status, data = post_stream(http, proxy.base_url, body)
    sent = relay.chats_since(mark)
    assert sent and sent[0].status == 200 and sent[0].response == b""
    if status == 200:
        got = assemble(data)
        assert got.errors or got.content, f"a blank turn: {data!r}"
    else:
        assert status >= 400


def _row(http: httpx.Client, proxy: AppThread) -> dict[str, Any]:
    row: dict[str, Any] = http.get(f"{proxy.root_url}/healthz").json()["upstreams"][0]
    return row


@pytest.mark.parametrize("stream", [False, True], ids=["not-streamed", "streamed"])
def test_window_learned_from_the_overflow_error_then_clamped(
    http: httpx.Client, make_proxy: ProxyFactory, relay: RecordingRelay, stream: bool
) -> None:
    """``/v1/models`` reports no window; 2048 appears only in the 400
    ``context_length_exceeded`` message. streamfix learns it there, for
    this model on this row (a catch-all row: ``/healthz`` counts the
    models it learned of, not their windows), and clamps later requests
    for the model to it."""
    proxy = make_proxy()
    row = _row(http, proxy)
    assert row["window"] is None and row["learned_models"] == 0  # the probe found nothing
    overflow = {"model": "smollm2", "messages": [{"role": "user", "content": LONG_TEXT}],
                "max_tokens": 16}  # fmt: skip
    mark = relay.mark()
    status, _ = post_json(http, proxy.base_url, overflow)
    first = relay.chats_since(mark)[0]
    assert first.status == 400 and b"context_length_exceeded" in first.response
    assert _row(http, proxy)["learned_models"] == 1
    # a short prompt asking for far more than the window: clamped, answered
    # (``stop`` keeps the reply short whatever the clamp allows)
    ask = {**PLAIN, "max_tokens": 65536, "stop": ["."]}
    mark = relay.mark()
    if stream:
        got = stream_assembled(http, proxy.base_url, ask)
        assert got.done and not got.errors and got.content
    else:
        status, obj = post_json(http, proxy.base_url, ask)
        assert status == 200 and obj["choices"][0]["message"]["content"]
    ex = relay.only_chat_since(mark)
    assert ex.status == 200
    assert ex.body["max_tokens"] < 2048


@pytest.mark.parametrize("stream", [False, True], ids=["not-streamed", "streamed"])
def test_overflow_is_never_seen_by_the_client(
    http: httpx.Client, make_proxy: ProxyFactory, relay: RecordingRelay, stream: bool
) -> None:
    """A prompt longer than the whole window: this server refuses it (HTTP
    400 when not streamed, an empty HTTP 200 when streamed), states its
    window and the prompt's size only in the 400's message; streamfix learns
    both, drops the oldest turn, and asks again. The client sees a reply."""
    proxy = make_proxy()
    if stream:
        got = stream_assembled(http, proxy.base_url, OVERFLOW)
        assert not got.errors and got.content
    else:
        status, obj = post_json(http, proxy.base_url, OVERFLOW)
        assert status == 200, obj


def test_overflow_straight_to_the_server(http: httpx.Client, llama: LocalServer) -> None:
    """The same overflow, streamed, with nothing between streamfix and the
    server. After its empty stream, llama-cpp-python closes that connection
    a moment later: the probe that follows at once may meet it closed in
    streamfix's pool. streamfix then sends it again on a new connection, and
    the client still sees a reply."""
    from streamfix.server import ServerConfig, create_app
    from streamfix.server.config import parse_upstream

    config = ServerConfig(upstreams=[parse_upstream(llama.base_url)])
    with AppThread(create_app(config), handler_cancellation=True) as proxy:
        for _ in range(3):
            got = stream_assembled(http, proxy.base_url, OVERFLOW)
            assert not got.errors and got.content


# -- text completions ----------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_text_completions_pass_through_the_real_server(
    http: httpx.Client, proxy: AppThread, relay: RecordingRelay, stream: bool
) -> None:
    """``POST /v1/completions`` reaches llama.cpp's server and its reply
    comes back as the server sent it (no loop in it: nothing to cut)."""
    body = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 16,
            "temperature": 0, "stream": stream}  # fmt: skip
    mark = relay.mark()
    resp = http.post(f"{proxy.base_url}/completions", json=body)
    (ex,) = relay.since(mark, "/v1/completions")
    assert resp.status_code == 200 and ex.status == 200
    assert resp.content == bytes(ex.response)
    if stream:
        assert resp.content.endswith(b"data: [DONE]\n\n")
    else:
        assert resp.json()["choices"][0]["text"]
