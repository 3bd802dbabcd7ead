"""The operator page shows what it can of any recording (issue 37, defect
10): a recording of an odd reply the proxy relayed (a ``delta`` that is a
string, ``arguments`` that are a number, a ``message`` that is a string, a
``null`` choice) is a page with a note where a side cannot be assembled,
never a 500; ``streamfix replay`` reads the same files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from streamfix.seen import assemble, describe, seen_of_completion
from streamfix.server.replay import replay_document
from streamfix.server.ui import pages
from streamfix.server.ui.recordings import Index, sides

from .support.streamutil import chunk, sse

BASE = json.loads((Path(__file__).parent / "recordings" / "loop-cut.json").read_text())
NAME = "20260101T000000.000001Z-1-000001-repair.json"

STREAMED = {
    "a delta that is a string": [{"index": 0, "delta": "hello", "finish_reason": None}],
    "arguments that are a number": [
        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 5}}]}}
    ],
    "a null choice": [None],
    "choices that are a string": "nope",
}
WHOLE = {
    "a message that is a string": {"choices": [{"index": 0, "message": "hi"}]},
    "a null choice": {"choices": [None]},
    "arguments that are a number": {
        "choices": [{"message": {"tool_calls": [{"function": {"name": "f", "arguments": 5}}]}}]
    },
}


def streamed(choices: Any) -> bytes:
    odd = {**chunk("x"), "choices": choices}
    return sse([chunk(role="assistant"), odd, chunk("ok"), chunk(finish="stop")])


def recording(data: bytes, stream: bool) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    att = doc["attempts"][-1]
    att["reads"] = [{"t": 0.0, "text": data.decode()}]
    att["content_type"] = "text/event-stream" if stream else "application/json"
    doc["attempts"] = [att]
    doc["request"]["body"]["stream"] = stream
    doc["response"] = {"status": 200, "stream": stream, "text": data.decode()}
    return doc


CASES = [(k, streamed(v), True) for k, v in STREAMED.items()] + [
    (k, orjson.dumps(v), False) for k, v in WHOLE.items()
]


@pytest.mark.parametrize("what, data, stream", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_the_page_shows_an_odd_recording(
    tmp_path: Path, what: str, data: bytes, stream: bool
) -> None:
    (tmp_path / NAME).write_text(json.dumps(recording(data, stream)))
    got = sides(Index(tmp_path), NAME)
    assert got is not None
    html = pages.recording_view(got)
    assert "left out" in html  # the note where a side could not be read whole
    assert got.upstream is not None and got.then is not None
    if stream:
        assert got.upstream.content.endswith("ok")  # what could be assembled is shown
    # replay reads the same file
    assert replay_document(recording(data, stream), Path(NAME)).verdict != "unreadable"


def test_the_views_note_each_odd_part() -> None:
    seen = assemble(streamed(STREAMED["arguments that are a number"]))
    assert seen.calls == {0: {"name": "", "arguments": ""}}
    assert any("arguments is a int" in o for o in seen.odd)
    assert "odd: " in "\n".join(describe(seen))
    whole = seen_of_completion(WHOLE["a message that is a string"])
    assert whole.content == "" and any("a message is a str" in o for o in whole.odd)
