"""``--record`` on every route that can need a repair (issue 25, item 9):
the front doors (``/v1/messages``, ``/v1/responses``), text completions,
and embeddings when they fail; and ``streamfix replay`` replays each
(a door's on its chat side, a text completion through
``CompletionSession``). Chat recordings are as they were."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from streamfix.server.record import RECORDER, redact_messages
from streamfix.server.replay import replay_document

from .support.streamutil import SHAPES_TOOLS, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app

TEXT_CALL = ["Let me check. ", "<tool_call>", '{"name": "lookup_order", ', '"arguments": ']
TEXT_CALL += ['{"order_id": "A1"}}', "</tool_call>"]
WHOLE_CALL = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "".join(TEXT_CALL)},
            "finish_reason": "stop",
        }
    ],
}
ORDER = SHAPES_TOOLS[0]["function"]
SAID = "Where is order A1? My card is 4111."


def door_body(path: str, stream: bool) -> dict[str, Any]:
    if path == "/v1/messages":
        return {
            "model": "m",
            "max_tokens": 200,
            "stream": stream,
            "messages": [{"role": "user", "content": SAID}],
            "tools": [
                {
                    "name": ORDER["name"],
                    "description": ORDER.get("description", ""),
                    "input_schema": ORDER["parameters"],
                }
            ],
        }
    return {
        "model": "m",
        "stream": stream,
        "input": SAID,
        "tools": [{"type": "function", "name": ORDER["name"], "parameters": ORDER["parameters"]}],
    }


async def post(root: str, path: str, payload: Any) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(root + path, data=orjson.dumps(payload)) as r:
        return r.status, await r.read()


async def recordings(px: AppServer, d: Path) -> list[dict[str, Any]]:
    assert await asyncio.to_thread(px.app[RECORDER].flush, 5.0)
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
async def test_a_door_is_recorded_and_replays(tmp_path: Path, path: str, stream: bool) -> None:
    """A call written as text, lifted through a door: recorded (before:
    nothing), with which door and the chat body it made; replay feeds the
    reads to today's chain and finds the chat side unchanged, and a change
    when lifting is switched off."""
    reply = Reply.events(text_stream(TEXT_CALL)) if stream else Reply.json(WHOLE_CALL)
    async with (
        FakeUpstream(reply) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        status, _ = await post(px.root, path, door_body(path, stream))
        [doc] = await recordings(px, tmp_path)
    assert status == 200
    assert doc["reasons"] == ["repair"]
    assert doc["request"]["path"] == path
    assert doc["request"]["body"] == door_body(path, stream)
    door = doc["door"]
    assert door["endpoint"] == path.rsplit("/", 1)[1]
    assert door["chat_body"]["messages"][-1]["content"] == SAID
    assert door["chat_body"]["tools"][0]["function"]["name"] == "lookup_order"
    assert doc["response"]["stream"] is stream
    then = replay_document(doc, tmp_path / "x.json")
    assert then.verdict == "same", then.notes
    assert then.now is not None and then.now.calls[0]["name"] == "lookup_order"
    assert replay_document(doc, tmp_path / "x.json", lift=False).verdict == "changed"


async def test_a_door_recording_is_redacted_too(tmp_path: Path) -> None:
    """``record_redact = "messages"``: neither the door's request nor its
    chat body keeps what was said; replay still finds the reply unchanged."""
    async with (
        FakeUpstream(Reply.events(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), record_redact="messages")) as px,
    ):
        for path in ("/v1/messages", "/v1/responses"):
            await post(px.root, path, door_body(path, True))
        docs = await recordings(px, tmp_path)
    assert len(docs) == 2
    for doc in docs:
        assert "4111" not in json.dumps(doc)
        assert replay_document(doc, tmp_path / "x.json").verdict == "same"


LOOP = ["Here:\n"] + ["the cat sat on the mat.\n"] * 60


def text_completion_stream(pieces: list[str]) -> bytes:
    chunks = [
        {"id": "t", "object": "text_completion", "choices": [{"index": 0, "text": p}]}
        for p in pieces
    ]
    chunks.append(
        {
            "id": "t",
            "object": "text_completion",
            "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
        }
    )
    return sse(chunks)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_a_text_completion_loop_is_recorded_and_replays(tmp_path: Path, stream: bool) -> None:
    """A looping text completion, cut: recorded (before: nothing) and
    replayed through ``CompletionSession``; without the cutter, a change."""
    if stream:
        reply = Reply.events(text_completion_stream(LOOP))
    else:
        choice = {"index": 0, "text": "".join(LOOP), "finish_reason": "length"}
        reply = Reply.json({"id": "t", "object": "text_completion", "choices": [choice]})
    body = {"model": "m", "prompt": "List:", "stream": stream}
    async with (
        FakeUpstream(reply) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        status, data = await post(px.root, "/v1/completions", body)
        [doc] = await recordings(px, tmp_path)
    assert status == 200 and b"the cat sat" in data
    assert doc["reasons"] == ["loop"]
    assert doc["request"]["path"] == "/v1/completions" and "door" not in doc
    out = replay_document(doc, tmp_path / "x.json")
    assert out.verdict == "same", out.notes
    assert out.now is not None and out.now.finish == "length" and out.now.ext is not None
    assert len(out.now.content) < len("".join(LOOP))
    assert replay_document(doc, tmp_path / "x.json", repetition=False).verdict == "changed"


async def test_a_failed_embedding_is_recorded(tmp_path: Path) -> None:
    """An embeddings request no upstream answered: recorded as an upstream
    error (before: nothing); replay has nothing to compare (skipped)."""
    async with (
        FakeUpstream(Reply.error(500, "overloaded")) as up,
        AppServer(proxy_app(f"{up.url}#kind=embedding", record=str(tmp_path), retries=0)) as px,
    ):
        status, _ = await post(px.root, "/v1/embeddings", {"model": "e", "input": "hello"})
        [doc] = await recordings(px, tmp_path)
    assert status >= 500
    assert doc["reasons"] == ["upstream_error"]
    assert doc["request"]["path"] == "/v1/embeddings"
    assert replay_document(doc, tmp_path / "x.json").verdict == "skipped"


async def test_redaction_covers_every_routes_text(tmp_path: Path) -> None:
    """Issue 37, item 7: ``record_redact = "messages"`` hides a text
    completion's ``prompt``, an embedding's ``input`` (string or list) and a
    chat history's ``reasoning_content``, as it hides chat content; a text
    completion still replays the same."""
    secret = "card 4111-SECRET"
    loop = Reply.events(text_completion_stream(LOOP))
    async with (
        FakeUpstream(loop) as up,
        FakeUpstream(Reply.error(500, "overloaded")) as emb,
        AppServer(
            proxy_app(
                up.url,
                f"{emb.url}#kind=embedding",
                record=str(tmp_path),
                record_redact="messages",
                retries=0,
            )
        ) as px,
    ):
        await post(px.root, "/v1/completions", {"model": "m", "prompt": secret, "stream": True})
        for given in (secret, [secret, "x"]):
            await post(px.root, "/v1/embeddings", {"model": "e", "input": given})
        docs = await recordings(px, tmp_path)
    assert len(docs) == 3
    for doc in docs:
        assert "4111" not in json.dumps(doc["request"])
    [completion] = [d for d in docs if d["request"]["path"] == "/v1/completions"]
    assert completion["request"]["body"]["prompt"] == "[redacted: 16 characters]"
    assert replay_document(completion, tmp_path / "x.json").verdict == "same"
    history = {
        "model": "m",
        "messages": [
            {"role": "assistant", "content": "ok", "reasoning_content": secret},
            {"role": "tool", "tool_call_id": "c1", "content": secret},
        ],
    }
    hidden = redact_messages(history)["messages"]
    assert hidden[0]["reasoning_content"] == "[redacted: 16 characters]"
    said = "[redacted: 16 characters]"
    assert hidden[1] == {"role": "tool", "tool_call_id": "c1", "content": said}


async def test_a_chat_recording_has_no_door(tmp_path: Path) -> None:
    """The chat route's recordings are as before: no ``door``, the client's
    own bytes as the response."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": SAID}]}
    body["tools"] = SHAPES_TOOLS
    async with (
        FakeUpstream(Reply.events(text_stream(TEXT_CALL))) as up,
        AppServer(proxy_app(up.url, record=str(tmp_path))) as px,
    ):
        _, data = await post(px.root, "/v1/chat/completions", body)
        [doc] = await recordings(px, tmp_path)
    assert "door" not in doc and doc["request"]["body"] == body
    assert doc["response"]["text"].encode() == data
    assert replay_document(doc, tmp_path / "x.json").verdict == "same"
