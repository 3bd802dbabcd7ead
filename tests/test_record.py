"""``streamfix serve --record DIR`` against real loopback upstreams: what is
recorded and why, the bounds, sampling, credentials never written, and a
slow or failing disk that never delays a stream."""

from __future__ import annotations

import asyncio
import errno
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from streamfix.server.metrics import Metrics
from streamfix.server.record import (
    RECORDER,
    Recorder,
    Take,
    decode_bytes,
    redact_messages,
)

from .support.streamutil import SHAPES_TOOLS, assemble, chunk, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app

MESSAGES = [{"role": "user", "content": "Where is order A1? My card is 4111."}]
TEXT_CALL = ["Let me check. ", "<tool_call>", '{"name": "lookup_order", ', '"arguments": ']
TEXT_CALL += ['{"order_id": "A1"}}', "</tool_call>"]


def tools_body(stream: bool = True, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": MESSAGES, "tools": SHAPES_TOOLS, "stream": stream, **kw}


async def post(url: str, payload: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/chat/completions", data=orjson.dumps(payload), headers=headers) as r,
    ):
        return r.status, await r.read()


def recorder_of(px: AppServer) -> Recorder:
    return px.app[RECORDER]


async def flushed(px: AppServer) -> Recorder:
    rec = recorder_of(px)
    assert await asyncio.to_thread(rec.flush, 5.0)
    return rec


def files(d: Path) -> list[Path]:
    return sorted(d.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


async def metrics_text(px: AppServer) -> str:
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        return await r.text()


# -- what is recorded ------------------------------------------------------------


async def test_a_text_call_is_recorded_with_its_reads_and_what_the_client_got(
    tmp_path: Path,
) -> None:
    raw = text_stream(TEXT_CALL)
    async with (
        FakeUpstream(Reply.events(raw, delay=0.01)) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        status, data = await post(px.url, tools_body())
        await flushed(px)
        metrics = await metrics_text(px)
    assert status == 200
    [path] = files(tmp_path)
    assert path.name.endswith("-repair.json")
    doc = load(path)
    assert doc["format"] == "streamfix-recording/1"
    assert doc["reasons"] == ["repair"]
    assert doc["request"]["body"] == tools_body()
    assert doc["request"]["path"] == "/v1/chat/completions"
    [att] = doc["attempts"]
    assert att["upstream"] == up.url and att["status"] == 200
    assert att["content_type"] == "text/event-stream"
    reads = att["reads"]
    assert len(reads) > 3  # one per event, as they came
    assert b"".join(decode_bytes(r) for r in reads) == raw
    times = [r["t"] for r in reads]
    assert times == sorted(times) and times[-1] >= 0.05  # ten 10 ms gaps at least
    assert att["report"]["counts"]["calls.hermes"] == 1
    assert decode_bytes(doc["response"]) == data
    assert doc["response"]["status"] == 200 and doc["response"]["stream"] is True
    assert 'streamfix_recordings_total{reason="repair"} 1.0' in metrics


async def test_a_reply_that_needed_nothing_is_not_recorded(tmp_path: Path) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(["Hello", " there"]))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        await post(px.url, tools_body())
        await post(px.url, {"model": "m", "messages": MESSAGES, "stream": True})
        await flushed(px)
    assert files(tmp_path) == []


LOOP = text_stream(["Here:\n"] + ["the cat sat on the mat.\n"] * 60, "length")
CASES = {
    "repair": (Reply.stream(text_stream(TEXT_CALL)), True),
    "loop": (Reply.stream(LOOP), False),
    "unrecognised": (Reply.stream(text_stream(["<tool_call>not a call at all</tool_call>"])), True),
    "missed": (Reply.stream(text_stream(['@@call lookup_order {"order_id": "A1"} @@end'])), True),
    "empty": (Reply.stream(text_stream(["<|im_end|>"])), True),
    "upstream_error": (Reply.error(500, "overloaded"), True),
}


@pytest.mark.parametrize("reason", list(CASES))
async def test_each_reason_is_recorded_and_can_be_left_out(tmp_path: Path, reason: str) -> None:
    reply, tools = CASES[reason]
    payload = tools_body() if tools else {"model": "m", "messages": MESSAGES, "stream": True}
    others = ",".join(r for r in CASES if r != reason)
    async with FakeUpstream(reply) as up:
        async with AppServer(proxy_app(up.url, record=str(tmp_path / "on"), retries=0)) as px:
            await post(px.url, payload)
            await flushed(px)
        only_others = proxy_app(up.url, record=str(tmp_path / "off"), record_on=others, retries=0)
        async with AppServer(only_others) as px:
            await post(px.url, payload)
            await flushed(px)
    recorded = [load(p)["reasons"] for p in files(tmp_path / "on")]
    assert len(recorded) == 1 and reason in recorded[0], recorded
    left = [load(p)["reasons"] for p in files(tmp_path / "off")]
    assert all(reason not in r for r in left)


async def test_a_reply_asked_again_keeps_both_attempts(tmp_path: Path) -> None:
    """An empty reply is asked again: the discarded attempt is in the file."""
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        up.push(Reply.stream(text_stream(["<|im_end|>"])), Reply.stream(text_stream(["Fine."])))
        _, data = await post(px.url, tools_body())
        await flushed(px)
    assert assemble(data).content == "Fine."
    [path] = files(tmp_path)
    doc = load(path)
    assert {"repair", "empty"} <= set(doc["reasons"])
    first, second = doc["attempts"]
    assert first["report"]["empty_after_repair"] is True
    assert second["report"]["empty_after_repair"] is False
    assert decode_bytes(doc["response"]) == data


async def test_a_non_streamed_reply_is_recorded_whole(tmp_path: Path) -> None:
    content = "".join(TEXT_CALL)
    obj = {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    }
    async with (
        FakeUpstream(Reply.json(obj)) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        _, data = await post(px.url, tools_body(stream=False))
        await flushed(px)
    doc = load(files(tmp_path)[0])
    [att] = doc["attempts"]
    assert orjson.loads(b"".join(decode_bytes(r) for r in att["reads"])) == obj
    assert decode_bytes(doc["response"]) == data
    assert doc["response"]["stream"] is False


# -- bounds and sampling -----------------------------------------------------------


async def test_count_bound_removes_the_oldest_first(tmp_path: Path) -> None:
    old = tmp_path / "00000000T000000.000000Z-1-000001-repair.json"
    old.write_text("{}")  # a recording from an earlier run: the oldest
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_max_files=3)) as px,
    ):
        for i in range(5):
            await post(px.url, tools_body(user=f"u{i}"))
        await flushed(px)
    kept = files(tmp_path)
    assert len(kept) == 3 and old not in kept
    assert [load(p)["request"]["body"]["user"] for p in kept] == ["u2", "u3", "u4"]


async def test_the_bounds_touch_only_the_recorders_own_files(tmp_path: Path) -> None:
    """Issue 37, item 6: the operator's own ``*.json`` in the directory
    (sorting before the recordings, a file named like a recording but for
    its shape) are neither counted nor removed."""
    theirs = [tmp_path / n for n in ("a.json", "0-config.json", "19700101-notes.json")]
    for p in theirs:
        p.write_text('{"mine": true}')
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_max_files=2)) as px,
    ):
        for i in range(3):
            await post(px.url, tools_body(user=f"u{i}"))
        await flushed(px)
    assert all(p.read_text() == '{"mine": true}' for p in theirs)
    kept = [p for p in files(tmp_path) if p not in theirs]
    assert [load(p)["request"]["body"]["user"] for p in kept] == ["u1", "u2"]


async def test_size_bound_removes_the_oldest_first(tmp_path: Path) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path / "probe"))) as px,
    ):
        await post(px.url, tools_body(user="u0"))
        await flushed(px)
        size = files(tmp_path / "probe")[0].stat().st_size
        limit = int(size * 2.5)  # room for two
        async with AppServer(
            proxy_app(up.url, record=str(tmp_path / "d"), record_max_bytes=limit)
        ) as px2:
            for i in range(4):
                await post(px2.url, tools_body(user=f"u{i}"))
            await flushed(px2)
    kept = files(tmp_path / "d")
    assert sum(p.stat().st_size for p in kept) <= limit
    assert [load(p)["request"]["body"]["user"] for p in kept] == ["u2", "u3"]


async def test_a_recording_larger_than_the_size_bound_is_dropped_and_counted(
    tmp_path: Path,
) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_max_bytes=100)) as px,
    ):
        status, _ = await post(px.url, tools_body())
        await flushed(px)
        metrics = await metrics_text(px)
    assert status == 200 and files(tmp_path) == []
    assert 'streamfix_recordings_dropped_total{why="too_large"} 1.0' in metrics


async def test_sampling_keeps_the_share_drawn(tmp_path: Path) -> None:
    n = 40
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_sample=0.25)) as px,
    ):
        recorder_of(px).rng = random.Random(7)
        for i in range(n):
            await post(px.url, tools_body(user=f"u{i}"))
        await flushed(px)
    draws = random.Random(7)
    expected = [f"u{i}" for i in range(n) if draws.random() < 0.25]
    got = sorted((load(p)["request"]["body"]["user"] for p in files(tmp_path)), key=expected.index)
    assert got == expected and 0 < len(expected) < n


async def test_sample_zero_records_nothing(tmp_path: Path) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_sample=0.0)) as px,
    ):
        await post(px.url, tools_body())
        await flushed(px)
    assert files(tmp_path) == []


# -- credentials ---------------------------------------------------------------------

INBOUND_KEY = "sfx-inbound-4fd2a9c1e07b"
UPSTREAM_KEY = "up-key-91b3c7d2e6f0a8"
URL_PASSWORD = "pw-5e1c0b9a7d33"
CLIENT_SECRET_HEADER = "tok-c4a1e9f7b2d6"
BODY_KEY = "sk-live-0123456789abcdef"
SECRETS = (INBOUND_KEY, UPSTREAM_KEY, URL_PASSWORD, CLIENT_SECRET_HEADER, BODY_KEY)


@pytest.mark.parametrize("failing", [False, True], ids=["stream", "error_body"])
async def test_credentials_are_never_written(tmp_path: Path, failing: bool) -> None:
    """Keys in headers (inbound, upstream, a custom header), in the upstream
    URL (a password), in the request body, and echoed back by the upstream
    in its error body or its stream: none reaches the file."""
    echo = f"Incorrect API key provided: {UPSTREAM_KEY} ({INBOUND_KEY}, {CLIENT_SECRET_HEADER})"

    def reply(rec: Any) -> Reply:
        # the upstream echoes the Authorization it got (Basic, from the URL)
        echoed = f"{echo} {rec.headers.get('Authorization')}"
        if failing:
            return Reply.error(500, echoed)
        # the model repeats what it saw: the keys stream back as text
        return Reply.stream(text_stream([f"{echoed} ", *TEXT_CALL]))

    async with FakeUpstream(handler=reply) as up:
        host = up.url.split("//", 1)[1]
        url = f"http://user:{URL_PASSWORD}@{host}#api_key={UPSTREAM_KEY}"
        app = proxy_app(url, record=str(tmp_path), api_keys=[INBOUND_KEY], retries=0)
        async with AppServer(app) as px:
            headers = {
                "Authorization": f"Bearer {INBOUND_KEY}",
                "X-Api-Key": INBOUND_KEY,
                "X-Custom-Token": CLIENT_SECRET_HEADER,
                "Cookie": f"session={CLIENT_SECRET_HEADER}",
                "User-Agent": "test-agent/1",
            }
            status, _ = await post(px.url, tools_body(metadata={"key": BODY_KEY}), headers)
            await flushed(px)
        sent_upstream = up.chat_requests[0].headers
    assert status == (500 if failing else 200)
    basic = sent_upstream["Authorization"]  # the URL's user and password, as aiohttp sends them
    assert basic.startswith("Basic ")
    [path] = files(tmp_path)
    text = path.read_text()
    for secret in (*SECRETS, basic[6:]):
        assert secret not in text
    doc = load(path)
    assert doc["request"]["headers"] == {
        "user-agent": "test-agent/1",
        "accept": "*/*",
        "content-type": "application/octet-stream",
    }
    assert doc["attempts"] == [] if failing else doc["attempts"][0]["upstream"] == up.url
    assert doc["upstream_errors"] == ([[up.url, "status_5xx"]] if failing else [])
    assert "[redacted]" in text


def test_key_shapes_are_scrubbed_whatever_the_config_knows() -> None:
    rec = Recorder("unused", Metrics())
    take = Take.__new__(Take)
    for name, value in (("method", "POST"), ("path", "/v1/chat/completions"), ("headers", {})):
        setattr(take, name, value)
    take.secrets, take.wall, take.attempts, take.errors = [], 0.0, [], []
    take.incomplete, take.status, take.tenant = False, 500, "-"
    take.door = take.chat_body = take.chat_reply = None  # the chat route
    take.body = b'{"messages": []}'
    take.client = [
        b'{"error": "bad key sk-proj-AbC123xyz789QQQ, Authorization: Bearer eyJhbGciOi.x.y,'
        b' see https://h/v1?api_key=12345&x=1", "note": "a basic understanding of risk-aware'
        b' task-management"}'
    ]
    text = rec.encode(take, ["upstream_error"]).decode()
    for leaked in ("AbC123xyz789QQQ", "eyJhbGciOi.x.y", "12345"):
        assert leaked not in text
    assert "sk-[redacted]" in text and "Bearer [redacted]" in text
    # prose is left alone
    assert "a basic understanding of risk-aware task-management" in text


async def test_message_text_can_be_redacted(tmp_path: Path) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_redact="messages")) as px,
    ):
        await post(px.url, tools_body())
        await flushed(px)
    text = files(tmp_path)[0].read_text()
    assert "4111" not in text and "Where is order" not in text
    body = load(files(tmp_path)[0])["request"]["body"]
    assert body["messages"] == [{"role": "user", "content": "[redacted: 35 characters]"}]
    assert body["tools"] == SHAPES_TOOLS  # what the chain reads is kept


def test_redact_messages_covers_parts_and_call_arguments() -> None:
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "secret"}, {"type": "image"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 1}'}}],
            },
        ]
    }
    assert redact_messages(body)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[redacted: 6 characters]"},
                {"type": "image"},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "function": {"name": "f", "arguments": "[redacted: 8 characters]"}}
            ],
        },
    ]


# -- the disk never slows a stream -------------------------------------------------


async def test_a_stalled_disk_never_delays_a_stream(tmp_path: Path) -> None:
    """The writer thread is stuck in its first write (a disk that does not
    answer): streams go on at full speed, recordings past the queue are
    dropped and counted, and once the disk answers the queued ones land."""
    gate = threading.Event()
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        rec = recorder_of(px)
        real_write = rec._write_file

        def stalled_write(path: Path, data: bytes) -> None:
            gate.wait(30)  # the simulated disk; everything else is real
            real_write(path, data)

        rec._write_file = stalled_write  # type: ignore[method-assign]
        # a small queue, so that a few requests fill it
        rec._queue.maxsize = 2
        durations = []
        for _ in range(6):
            began = time.perf_counter()
            status, data = await post(px.url, tools_body())
            durations.append(time.perf_counter() - began)
            assert status == 200 and assemble(data).tool_calls
        assert max(durations) < 0.5, durations
        assert files(tmp_path) == []
        gate.set()
        await flushed(px)
        metrics = await metrics_text(px)
    # one in the writer's hands, two queued, three dropped
    assert len(files(tmp_path)) == 3
    assert 'streamfix_recordings_dropped_total{why="queue_full"} 3.0' in metrics


async def test_a_full_disk_is_counted_and_logged_never_an_error_for_the_client(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        rec = recorder_of(px)

        def full_disk(path: Path, data: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        rec._write_file = full_disk  # type: ignore[method-assign]
        outcomes = [await post(px.url, tools_body()) for _ in range(3)]
        await flushed(px)
        metrics = await metrics_text(px)
    assert all(s == 200 and assemble(d).tool_calls for s, d in outcomes)
    assert 'streamfix_recordings_dropped_total{why="write_error"} 3.0' in metrics
    warnings = [r for r in caplog.records if r.name == "streamfix.record"]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()


async def test_a_record_path_that_is_not_a_directory_fails_softly(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    async with (
        FakeUpstream(Reply.stream(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(not_a_dir))) as px,
    ):
        status, data = await post(px.url, tools_body())
        await flushed(px)
        metrics = await metrics_text(px)
    assert status == 200 and assemble(data).tool_calls
    assert 'streamfix_recordings_dropped_total{why="write_error"} 1.0' in metrics


async def test_a_client_that_leaves_mid_stream_is_still_recorded(tmp_path: Path) -> None:
    """A call was lifted, then the upstream stalls and the client leaves:
    the recording is written with what was read until then (status 499)."""
    parts = [chunk(role="assistant", content="")] + [chunk(p) for p in TEXT_CALL]
    async with (
        FakeUpstream(Reply.stream(sse(parts, done=False), end="hang")) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(post(px.url, tools_body()), 0.5)
        await up.chat_requests[0].ended.wait()
        for _ in range(100):  # the handler's cancellation reaches the recorder
            if recorder_of(px)._queue.unfinished_tasks or files(tmp_path):
                break
            await asyncio.sleep(0.01)
        await flushed(px)
    [path] = files(tmp_path)
    doc = load(path)
    assert doc["reasons"] == ["repair"] and doc["response"]["status"] == 499
    assert b"".join(decode_bytes(r) for r in doc["attempts"][0]["reads"]) == sse(parts, False)


def test_an_unknown_reason_is_a_config_error() -> None:
    from streamfix.server.config import ConfigError, ServerConfig, validate

    with pytest.raises(ConfigError, match="bogus"):
        validate(ServerConfig(record="d", record_on="repair,bogus"))
    with pytest.raises(ConfigError):
        validate(ServerConfig(record="d", record_sample=1.5))


async def test_without_record_nothing_is_installed() -> None:
    app = proxy_app("http://127.0.0.1:9/v1")
    assert RECORDER not in app
    assert isinstance(app, web.Application)


async def test_an_empty_stream_is_recorded_as_empty_and_an_upstream_error(tmp_path: Path) -> None:
    """HTTP 200 and no body (llama.cpp on an overflow): the proxy looks into
    it and gives up; the recording says why."""
    async with (
        FakeUpstream(Reply.empty()) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), max_reasks=0)) as px,
    ):
        status, data = await post(px.url, tools_body())
        await flushed(px)
    assert status == 200 and assemble(data).errors
    doc = load(files(tmp_path)[0])
    assert doc["reasons"] == ["empty", "upstream_error"]
    assert doc["upstream_errors"] == [[up.url, "empty_stream"]]
    assert doc["attempts"][0]["reads"] == []
