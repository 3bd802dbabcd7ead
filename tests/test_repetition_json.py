"""The repetition cutter and JSON data (streamfix/transforms/repetition.py,
"Counted loops" and "In arguments"): records with counting ids whose fields
differ are not loops, and the JSON value a ``response_format`` asked for is
data the way a call's arguments are; a true loop is still cut. Through the
whole chain (``SSESession``), at any chunking."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.transforms.repetition import (
    BOUND_CHARS,
    COUNTED_ARG_CHARS,
    COUNTED_BOUND_CHARS,
    COUNTED_BOUND_COPIES,
    LONG_AT,
)

from .support.detectutil import run_pieces
from .support.streamutil import Assembled, split_at, tool

PLAIN: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "users?"}]}
JSON_OBJECT: dict[str, Any] = {**PLAIN, "response_format": {"type": "json_object"}}
JSON_SCHEMA: dict[str, Any] = {
    **PLAIN,
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "users", "schema": {"type": "object"}},
    },
}
JSON_STRICT: dict[str, Any] = {
    **PLAIN,
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "users", "strict": True, "schema": {"type": "object"}},
    },
}
WITH_TOOLS: dict[str, Any] = {**JSON_OBJECT, "tools": [tool("get_weather")]}
REQUESTS = [PLAIN, JSON_OBJECT, JSON_SCHEMA]
REQUEST_IDS = ["plain", "json_object", "json_schema"]

FIRST = ["Alice", "Bob", "Carol", "David", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy"]
LAST = ["Smith", "Jones", "Brown", "Taylor", "Wilson", "Davies", "Evans", "Thomas", "Hall"]


def _person(i: int, cycle: int) -> tuple[str, str]:
    """Record ``i``'s name: from a short rotation (``cycle``) or all
    different (0)."""
    if cycle:
        return FIRST[i % cycle], LAST[i % cycle]
    return FIRST[(i * 7) % len(FIRST)], LAST[(i * 4) % len(LAST)]


def users(n: int, cycle: int = 0, indent: int | None = None) -> str:
    """``{"users": [...]}``: ``n`` records with counting ids, their names
    all different or rotating through ``cycle`` names (a record ~189
    characters, as in the report)."""
    recs = []
    for i in range(1, n + 1):
        f, last = _person(i, cycle)
        recs.append(
            {
                "id": i,
                "name": f"{f} {last}",
                "email": f"{f.lower()}.{last.lower()}@example.com",
                "active": True,
                "role": "member",
                "department": "Engineering",
                "country": "US",
                "created": "2024-01-15",
            }
        )
    return json.dumps({"users": recs}, indent=indent)


def degenerate(n: int, same_id: bool = False) -> str:
    """Records identical but for the counter (``User 7``, ``user7@``), or
    identical including the id: what a model that lost count writes."""
    recs = [
        {
            "id": 1 if same_id else i,
            "name": "User 1" if same_id else f"User {i}",
            "email": "user1@example.com" if same_id else f"user{i}@example.com",
            "active": True,
            "role": "member",
        }
        for i in range(1, n + 1)
    ]
    return json.dumps({"users": recs})


def csv_rows(n: int, cycle: int) -> str:
    out = "id,name,email,active,role\n"
    for i in range(1, n + 1):
        f, last = _person(i, cycle)
        out += f"{i},{f} {last},{f.lower()}@example.com,true,member\n"
    return out


def table_rows(n: int, cycle: int) -> str:
    out = "| id | name | email |\n|---|---|---|\n"
    for i in range(1, n + 1):
        f, last = _person(i, cycle)
        out += f"| {i} | {f} {last} | {f.lower()}@example.com |\n"
    return out


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _run(text: str, request: dict[str, Any], size: int = 7) -> Assembled:
    return run_pieces(_pieces(text, size), request)[0]


def _common(a: str, b: str) -> str:
    """The longest common prefix of two texts."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _passes(a: Assembled, text: str) -> None:
    assert a.content == text
    assert a.finish_reason == "stop"
    assert a.ext is None, a.ext


# -- (a) records whose fields differ are not loops -------------------------

RECORDS = [
    ("distinct names", users(40)),
    ("distinct names, indented", users(40, indent=2)),
    ("two names in turn", users(40, cycle=2)),
    ("three names in turn", users(40, cycle=3)),
    ("two names in turn, indented", users(40, cycle=2, indent=2)),
    ("five names in turn", users(60, cycle=5)),
]


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
@pytest.mark.parametrize(("name", "text"), RECORDS, ids=[x[0] for x in RECORDS])
def test_records_that_differ_are_not_loops(
    name: str, text: str, request_: dict[str, Any], size: int
) -> None:
    """The report's list (names that differ, counting ids, ~189 characters
    a record): with or without ``response_format``, whole. Names that come
    in turn made a copy of several records whose ids count: it was cut."""
    _passes(_run(text, request_, size), text)


ROWS = [
    ("csv, two names in turn", csv_rows(100, 2)),
    ("csv, three names in turn", csv_rows(100, 3)),
    ("table, two names in turn", table_rows(100, 2)),
    ("csv, names that differ", csv_rows(100, 0)),
]


@pytest.mark.parametrize(("name", "text"), ROWS, ids=[x[0] for x in ROWS])
def test_rows_that_differ_are_not_loops(name: str, text: str) -> None:
    _passes(_run(text, PLAIN), text)


# -- (b) the JSON value asked for is data until COUNTED_ARG_CHARS -----------


@pytest.mark.parametrize(
    "request_",
    [JSON_OBJECT, JSON_SCHEMA, JSON_STRICT, WITH_TOOLS],
    ids=["json_object", "json_schema", "strict (held)", "with tools"],
)
def test_counting_records_in_a_json_reply_are_data(request_: dict[str, Any]) -> None:
    """Records identical but for their counter, in the reply that asked
    for JSON: data, as in a call's arguments (it was cut ~1 KB in, with
    ``finish_reason: "length"`` and a "cut off inside the JSON" note)."""
    text = degenerate(40)
    for size in (1, 7, 64, len(text)):
        _passes(_run(text, request_, size), text)


def test_counting_records_in_a_json_reply_are_cut_past_the_argument_bound() -> None:
    """Past ``COUNTED_ARG_CHARS`` a counting value is a model that lost
    count: cut, as in arguments."""
    text = degenerate(600)
    assert len(text) > COUNTED_ARG_CHARS + 4096
    a = _run(text, JSON_OBJECT, 64)
    assert a.finish_reason == "length"
    assert a.ext is not None and a.ext["cut"] == "repetition" and a.ext["counted"] is True
    # what was sent, completed to valid syntax by the JSON step, with its note
    sent = _common(text, a.content)
    assert len(a.content) - len(sent) <= 4 and json.loads(a.content)
    assert a.ext["json"] == "invalid"
    start = len('{"users": [')
    assert len(sent) - start >= COUNTED_ARG_CHARS - 2 * LONG_AT
    assert len(sent) - start <= COUNTED_ARG_CHARS + 2 * COUNTED_BOUND_CHARS


def test_a_counting_loop_before_the_json_is_still_cut() -> None:
    """Prose before the value (no ``{`` yet) is not data: a counting loop
    there is cut within the prose bound."""
    lead = "Let me think about the users.\n"
    loop = "".join(f"Step {n}: Check the configuration file again.\n" for n in range(1, 200))
    text = lead + loop + '{"users": []}'
    for request_ in (PLAIN, JSON_OBJECT):
        a = _run(text, request_, 7)
        assert a.finish_reason == "length"
        assert a.ext is not None and a.ext["counted"] is True
        unit = len("Step 10: Check the configuration file again.\n")
        assert len(a.content) - len(lead) <= max(COUNTED_BOUND_COPIES * unit, COUNTED_BOUND_CHARS)


# -- (c) true loops are cut as before ---------------------------------------


@pytest.mark.parametrize("request_", REQUESTS, ids=REQUEST_IDS)
def test_the_same_record_over_and_over_is_cut(request_: dict[str, Any]) -> None:
    """Identical including the id: an exact loop, cut within 400
    characters also in the JSON asked for (as in arguments)."""
    text = degenerate(60, same_id=True)
    a = _run(text, request_, 7)
    assert a.finish_reason == "length"
    assert a.ext is not None and a.ext["cut"] == "repetition" and "counted" not in a.ext
    assert len(a.content) - len('{"users": [') <= BOUND_CHARS


def test_counting_records_without_response_format_are_still_cut() -> None:
    """Records identical but for the counter, with no JSON asked for: a
    counting loop, as today."""
    text = degenerate(60)
    a = _run(text, PLAIN, 7)
    assert a.finish_reason == "length"
    assert a.ext is not None and a.ext["counted"] is True
    unit = len(json.dumps({"id": 10, "name": "User 10", "email": "user10@example.com"})) + 40
    assert len(a.content) <= len('{"users": [') + max(COUNTED_BOUND_COPIES * unit, 1000)


def test_prose_that_rotates_is_still_a_loop() -> None:
    """The rotation rule is for records: prose that counts while it turns
    between two sentences is cut as before."""
    text = "Here is the plan.\n" + "".join(
        f"Step {n}: Open the configuration file again.\n"
        if n % 2
        else f"Step {n}: Save the configuration file again.\n"
        for n in range(1, 200)
    )
    a = _run(text, PLAIN, 7)
    assert a.finish_reason == "length"
    assert a.ext is not None and a.ext["counted"] is True


# -- split invariance -------------------------------------------------------

CASES = [
    (users(40, cycle=2), PLAIN),
    (users(40, cycle=3), JSON_OBJECT),
    (degenerate(40), JSON_OBJECT),
    (degenerate(60), PLAIN),
    (degenerate(60, same_id=True), JSON_OBJECT),
]


@settings(max_examples=25, deadline=None)
@given(
    case=st.sampled_from(range(len(CASES))),
    cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=40),
)
def test_the_verdict_does_not_depend_on_the_chunking(case: int, cuts: list[int]) -> None:
    text, request_ = CASES[case]
    whole = _run(text, request_, len(text))
    pieces = [p for p in split_at(text, [c % (len(text) + 1) for c in cuts]) if p]
    got = run_pieces(pieces, request_)[0]
    # the verdict is the same; a cut keeps what was already sent, so only
    # an uncut reply is the same text (the bound is checked above)
    assert (got.finish_reason, got.ext) == (whole.finish_reason, whole.ext)
    if whole.finish_reason == "stop":
        assert got.content == whole.content == text
    else:
        sent = _common(text, got.content)
        assert len(got.content) - len(sent) <= 4
