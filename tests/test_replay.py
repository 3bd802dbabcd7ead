"""``streamfix replay``: every recording in ``tests/recordings`` replays
unchanged through today's chain; ``--check`` fails when a repair is
switched off or a reply would come out differently; record then replay
round-trips."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from streamfix.server.record import RECORDER, decode_bytes, encode_bytes
from streamfix.server.replay import replay_document, replay_file
from streamfix.tools.cli import main

from .make_recordings import HERE, SCENARIOS
from .support.upstream_fake import AppServer, FakeUpstream, proxy_app
from .test_record import CASES, MESSAGES, files, post, tools_body

RECORDINGS = sorted(HERE.glob("*.json"))


def run_cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["replay", *argv])
    return status, capsys.readouterr().out


def test_the_recordings_cover_every_reason_and_the_real_model() -> None:
    reasons = {r for p in RECORDINGS for r in json.loads(p.read_text())["reasons"]}
    assert reasons == {"repair", "unrecognised", "missed", "loop", "empty", "upstream_error"}
    names = {p.stem for p in RECORDINGS}
    assert set(SCENARIOS) <= names
    assert {"smollm2-text-call", "smollm2-loop"} <= names


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_each_recording_replays_unchanged(path: Path) -> None:
    outcome = replay_file(path)
    assert outcome.verdict == "same", (outcome.notes, outcome.then, outcome.now)


def test_check_passes_on_the_recordings(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run_cli("--check", str(HERE), capsys=capsys)
    assert status == 0, out
    assert f"{len(RECORDINGS)} recording(s): {len(RECORDINGS)} same" in out


@pytest.mark.parametrize(
    ("repair", "changed"),
    [
        ("lift", "text-call-hermes-split-mid-tag"),
        ("repetition", "loop-cut"),
        ("strip", "empty-after-strip-asked-again"),
        ("split_reasoning", "think-in-content-then-call"),
    ],
)
def test_check_fails_when_a_repair_is_switched_off(
    repair: str, changed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = run_cli("--check", "--without", repair, str(HERE), capsys=capsys)
    assert status == 1
    line = next(li for li in out.splitlines() if f"{changed}.json" in li)
    assert line.startswith("CHANGED"), out
    assert "then" in out and "│ now" in out  # the two views side by side


def test_without_check_a_difference_is_shown_but_not_an_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out = run_cli("--without", "lift", str(HERE / "text-call-qwen-xml.json"), capsys=capsys)
    assert status == 0 and out.startswith("CHANGED")
    assert "! tool_calls[0]:" in out  # then: a call; now: text


def _doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((HERE / f"{name}.json").read_text())
    return doc


def test_a_different_client_view_is_a_change() -> None:
    doc = _doc("text-call-hermes-split-mid-tag")
    sent = decode_bytes(doc["response"]).replace(b'\\"A1\\"', b'\\"B2\\"')
    doc["response"].update(encode_bytes(sent))
    outcome = replay_document(doc, Path("tampered.json"))
    assert outcome.verdict == "changed" and outcome.failed


def test_a_discarded_attempt_that_would_now_be_kept_is_a_change() -> None:
    """The proxy asked again because the first reply came out empty; with
    the stripper off that reply is no longer empty, so the client would
    now get it: a difference even before the last attempt is compared."""
    doc = _doc("empty-after-strip-asked-again")
    outcome = replay_document(doc, Path("x.json"), strip=False)
    assert outcome.verdict == "changed"
    assert any("attempt 1 (asked again then)" in note for note in outcome.notes)


def test_unreadable_and_foreign_files_fail_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    status, out = run_cli("--check", str(tmp_path), capsys=capsys)
    assert status == 1
    assert out.count("UNREADABLE") == 2


def test_no_recordings_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run_cli(str(tmp_path), capsys=capsys)
    assert status == 2 and "no recordings" in out


def test_a_recording_cut_at_its_size_bound_is_not_compared() -> None:
    doc = _doc("loop-cut")
    doc["incomplete"] = True
    doc["attempts"][0]["reads"] = doc["attempts"][0]["reads"][:3]
    outcome = replay_document(doc, Path("x.json"))
    assert outcome.verdict == "incomplete" and not outcome.failed


def test_a_request_no_upstream_answered_is_skipped() -> None:
    doc = _doc("upstream-500-then-text-call")
    doc["attempts"] = []
    outcome = replay_document(doc, Path("x.json"))
    assert outcome.verdict == "skipped" and not outcome.failed


async def test_record_then_replay_round_trips(tmp_path: Path) -> None:
    """Whatever the proxy records today replays unchanged today: streamed
    and not, for each reason."""
    for reason, (reply, tools) in CASES.items():
        payload = tools_body() if tools else {"model": "m", "messages": MESSAGES, "stream": True}
        async with (
            FakeUpstream(reply) as up,
            AppServer(proxy_app(up.url, record=str(tmp_path / reason), retries=0)) as px,
        ):
            await post(px.url, payload)
            await post(px.url, {**payload, "stream": False})
            assert await asyncio.to_thread(px.app[RECORDER].flush, 5.0)
    paths = [p for reason in CASES for p in files(tmp_path / reason)]
    assert len(paths) == 2 * len(CASES)
    outcomes = [replay_file(p) for p in paths]
    verdicts = [o.verdict for o in outcomes]
    # the 500s reached no reply: nothing to replay; everything else the same
    assert verdicts.count("skipped") == 2
    assert verdicts.count("same") == len(verdicts) - 2


def test_replay_reads_as_the_reads_came() -> None:
    """The reads are fed one by one as recorded: the hermes recording's tag
    arrives split across reads."""
    reads = [
        decode_bytes(r) for r in _doc("text-call-hermes-split-mid-tag")["attempts"][0]["reads"]
    ]
    assert len(reads) > 5
    assert any(b'"content":"<"' in r for r in reads)
