"""Structured output recorded and replayed (issue #30): a ``response_format``
reply the proxy repaired is recorded by ``streamfix serve --record`` with
its ``json_*`` repairs (and ``json_invalid`` when it did not validate), and
``streamfix replay`` of that recording gives today's chain's repaired JSON,
streamed and not, including an attempt the proxy asked again for."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamfix.server.record import RECORDER
from streamfix.server.replay import replay_file
from streamfix.tools.cli import main

from .support.streamutil import chunk, sse, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app
from .test_record import files, load, post

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
ADA = {"name": "Ada", "age": 36}
BROKEN = ["```json\n", "{'name': 'Ada', ", "'age': 36,", "}\n", "```"]


def body(stream: bool, strict: bool = False) -> dict[str, Any]:
    js: dict[str, Any] = {"name": "person", "schema": PERSON}
    if strict:
        js["strict"] = True
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "Ada, 36, as JSON"}],
        "response_format": {"type": "json_schema", "json_schema": js},
        "stream": stream,
    }


async def record(tmp_path: Path, replies: list[Reply], payload: dict[str, Any]) -> Path:
    """``payload`` through a recording proxy whose upstream answers
    ``replies`` in turn; the one recording it wrote."""
    async with (
        FakeUpstream() as up,
        AppServer(proxy_app(up.url, record=str(tmp_path), retries=0)) as px,
    ):
        for r in replies:
            up.push(r)
        status, _ = await post(px.url, payload)
        assert status == 200
        assert await asyncio.to_thread(px.app[RECORDER].flush, 5.0)
    (path,) = files(tmp_path)
    return path


def _report(path: Path, attempt: int = -1) -> dict[str, Any]:
    doc = load(path)
    rep: dict[str, Any] = doc["attempts"][attempt]["report"]
    return rep


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_repaired_json_reply_is_recorded_and_replays_to_the_same_json(
    tmp_path: Path, stream: bool
) -> None:
    reply = Reply.stream(text_stream(BROKEN)) if stream else Reply.json(completion("".join(BROKEN)))
    path = await record(tmp_path, [reply], body(stream))
    assert "repair" in load(path)["reasons"]
    rep = _report(path)
    for kind in ("json_fence", "json_quote", "json_comma"):
        assert rep["counts"].get(kind), (kind, rep["counts"])
    assert rep["json_invalid"] is None
    outcome = replay_file(path)
    assert outcome.verdict == "same", outcome.notes
    assert outcome.now is not None and orjson.loads(outcome.now.content) == ADA
    assert outcome.now.ext is None


async def test_a_streamed_value_that_does_not_validate_is_recorded_with_the_note(
    tmp_path: Path,
) -> None:
    """Nothing sent yet when the reply ended (one read): asked again once
    (reason ``json``); the second reply fails too and goes out with the
    note. Both attempts recorded with ``json_invalid``."""
    bad = text_stream(["```json\n", '{"name": "Ada"}', "\n```"])
    path = await record(tmp_path, [Reply.stream(bad), Reply.stream(bad)], body(True))
    assert len(load(path)["attempts"]) == 2
    for attempt in (0, 1):
        rep = _report(path, attempt)
        assert rep["counts"].get("json_invalid") == 1 and rep["counts"].get("json_fence")
        assert "age" in rep["json_invalid"]
    outcome = replay_file(path)
    assert outcome.verdict == "same", outcome.notes
    assert outcome.now is not None and outcome.now.ext is not None
    assert outcome.now.ext["json"] == "invalid" and "age" in outcome.now.ext["error"]
    assert orjson.loads(outcome.now.content) == {"name": "Ada"}


async def test_an_attempt_asked_again_for_its_json_replays_the_same(tmp_path: Path) -> None:
    """``strict: true`` holds the reply: one that does not validate is
    asked again (reason ``json``); both attempts are recorded and replay
    gives the same: the first would still be asked again, the second is
    the repaired JSON the client got."""
    first = Reply.stream(sse([chunk('{"name": "Ada"}'), chunk(finish="stop")]))
    second = Reply.stream(text_stream(BROKEN))
    path = await record(tmp_path, [first, second], body(True, strict=True))
    doc = load(path)
    assert len(doc["attempts"]) == 2
    assert "age" in _report(path, 0)["json_invalid"]
    assert _report(path, 1)["json_invalid"] is None
    outcome = replay_file(path)
    assert outcome.verdict == "same", outcome.notes
    assert outcome.now is not None and orjson.loads(outcome.now.content) == ADA


async def test_replay_check_passes_on_json_recordings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await record(tmp_path / "a", [Reply.stream(text_stream(BROKEN))], body(True))
    await record(tmp_path / "b", [Reply.json(completion("".join(BROKEN)))], body(False))
    status = main(["replay", "--check", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "2 recording(s): 2 same" in out
    # the recorded request kept what it asked for
    doc = json.loads(files(tmp_path / "a")[0].read_text())
    assert doc["request"]["body"]["response_format"]["type"] == "json_schema"
