"""The corpus of broken model replies from other projects' suites
(tests/data/json_repair_corpus.json), run through streamfix's public path
(the chain with a ``response_format`` request, whole and streamed) and
through ``json-repair``, and judged the same way for both.

A ``certain`` case is right when the value that comes out is ``expect`` and
nothing flagged it; a ``guess`` case is right when it is refused: for
streamfix the reply carries ``"streamfix": {"json": "invalid", ...}``
(``Report.json_invalid``; a reply cut by the token limit is flagged the
same way, as cut), for json-repair the call raises, returns nothing, or
returns what the request's schema (an object when there is none) rejects:
what a caller validating the result would see."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from streamfix.session import SSESession
from streamfix.spec import JsonSpec
from streamfix.transforms.jsonout import schema_error
from tests.support.streamutil import assemble, fixed_whole, text_stream

CORPUS_PATH = Path(__file__).resolve().parent.parent / "data" / "json_repair_corpus.json"
CASES: list[dict[str, Any]] = json.loads(CORPUS_PATH.read_text())["cases"]


class Outcome(NamedTuple):
    """What a client got: the text, its note, and whether it was refused."""

    content: str
    ext: dict[str, Any] | None
    refused: bool


def request(case: dict[str, Any]) -> dict[str, Any]:
    schema = case.get("schema")
    if schema is None:
        fmt: dict[str, Any] = {"type": "json_object"}
    else:
        fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    return {"model": "m", "messages": [], "response_format": fmt}


def whole(case: dict[str, Any]) -> Outcome:
    """The chain's non-streamed result."""
    choice, report = fixed_whole(case["text"], request(case), case["finish_reason"])
    ext = choice.get("streamfix")
    return Outcome(choice["message"]["content"] or "", ext, _refused(ext, report.json_invalid))


def streamed(case: dict[str, Any], pieces: Sequence[str]) -> Outcome:
    """The same reply streamed as ``pieces``, one content chunk each."""
    session = SSESession(request(case))
    out = session.feed(text_stream(list(pieces), case["finish_reason"])) + session.close()
    got = assemble(out)
    assert not got.errors and got.done, got.errors
    return Outcome(got.content, got.ext, _refused(got.ext, session.report.json_invalid))


def _refused(ext: dict[str, Any] | None, invalid: str | None) -> bool:
    flagged = bool(ext) and ext.get("json") == "invalid"  # type: ignore[union-attr]
    assert flagged == (invalid is not None), (ext, invalid)
    return flagged


def same(a: Any, b: Any) -> bool:
    """JSON equality: 1 and 1.0 are one number, True is not 1, keys as sets."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def failure(case: dict[str, Any], out: Outcome) -> str | None:
    """None when streamfix's outcome is right for the case; else how it is wrong:
    ``refused`` (a certain case flagged), ``wrong`` (a certain case sent as
    valid with another value), ``accepted`` (a guess sent as valid)."""
    if case["class"] == "guess":
        return None if out.refused else "accepted"
    if out.refused:
        return "refused"
    try:
        value = json.loads(out.content)
    except ValueError:
        return "wrong"
    return None if same(value, case["expect"]) else "wrong"


def schema_rejects(value: Any, schema: dict[str, Any] | None) -> bool:
    """What a caller validating the value would do (the same check
    streamfix makes: an object when there is no schema)."""
    spec = JsonSpec("json_object" if schema is None else "json_schema", schema, False)
    return schema_error(value, spec) is not None


def json_repair_failure(case: dict[str, Any]) -> str | None:
    """The same verdict for ``json_repair.loads`` (the PyPI library)."""
    import json_repair

    try:
        value = json_repair.loads(case["text"])
    except Exception:  # any error is a refusal
        refused = True
    else:
        refused = value == "" or schema_rejects(value, case.get("schema"))
    if case["class"] == "guess":
        return None if refused else "accepted"
    if refused:
        return "refused"
    return None if same(value, case["expect"]) else "wrong"
