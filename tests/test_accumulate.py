"""The delta accumulator: structured tool-call fragments joined by index
and emitted whole (streamfix/transforms/accumulate.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamfix

from .support.streamutil import (
    CAPTURES,
    assemble,
    run_sse,
    split_at,
    stream_of,
    tc,
    tool,
)

WEATHER = {"tools": [tool("get_weather", {"city": {"type": "string"}})]}
TWO = {
    "tools": [
        tool("get_weather", {"city": {"type": "string"}}),
        tool("get_time", {"tz": {"type": "string"}, "days": {"type": "integer"}}),
    ]
}


def test_id_and_name_only_in_the_first_piece() -> None:
    a = assemble(
        run_sse(
            stream_of(
                [tc(0, "call_1", "get_weather", "")],
                [tc(0, args='{"city":')],
                [tc(0, args=' "Paris"}')],
            ),
            WEATHER,
        )
    )
    assert a.calls() == [("get_weather", {"city": "Paris"})]
    assert a.tool_calls[0]["id"] == "call_1"
    assert a.finish_reason == "tool_calls"


def test_name_and_id_repeated_in_every_piece_are_joined_once() -> None:
    """llama-cpp-python repeats id and name in every delta; a client that
    appends strings would otherwise read ``get_weatherget_weather…``."""
    data = (CAPTURES / "b2_tools_named_choice_stream_default_format.sse").read_bytes()
    a = assemble(run_sse(data, WEATHER))
    assert a.calls() == [("get_weather", {"city": "Paris"})]
    assert a.tool_calls[0]["id"] == "call__0_get_weather_cmpl-878eb92a-1e1e-46e1-b44d-a1acd1ea385d"
    # The legacy function_call twin is not passed on beside the calls.
    assert (
        b"function_call"
        not in run_sse(data, WEATHER).split(b"[DONE]")[0].split(b'"tool_calls":[')[-1]
    )


def test_one_delta_per_call_with_everything_in_it() -> None:
    out = run_sse(stream_of([tc(0, "c1", "get_weather", '{"city": "Oslo"}')]), WEATHER)
    deltas = [
        c["choices"][0]["delta"]
        for c in (orjson.loads(b[6:]) for b in out.split(b"\n\n") if b.startswith(b"data: {"))
        if c["choices"][0]["delta"].get("tool_calls")
    ]
    assert deltas == [
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ]
        }
    ]


def test_interleaved_calls_by_index() -> None:
    a = assemble(
        run_sse(
            stream_of(
                [tc(0, "a", "get_weather", '{"ci')],
                [tc(1, "b", "get_time", '{"tz": "UTC"')],
                [tc(0, args='ty": "Rome"}')],
                [tc(1, args=', "days": 2}')],
            ),
            TWO,
        )
    )
    assert a.calls() == [("get_weather", {"city": "Rome"}), ("get_time", {"tz": "UTC", "days": 2})]
    assert [c["id"] for c in a.tool_calls] == ["a", "b"]


def test_indexes_follow_first_appearance() -> None:
    """A server that numbers its calls 3 and 7 still gives the client 0, 1."""
    out = run_sse(stream_of([tc(3, "x", "get_weather", "{}")], [tc(7, "y", "get_time", "{}")]), TWO)
    indexes = [
        c["choices"][0]["delta"]["tool_calls"][0]["index"]
        for c in (orjson.loads(b[6:]) for b in out.split(b"\n\n") if b.startswith(b"data: {"))
        if c["choices"][0]["delta"].get("tool_calls")
    ]
    assert indexes == [0, 1]


def test_missing_index_means_one_call_at_a_time() -> None:
    a = assemble(
        run_sse(
            stream_of(
                [tc(None, "a", "get_weather", '{"city": ')],
                [tc(None, args='"Lima"}')],
                [tc(None, "b", "get_time", '{"tz": "UTC"}')],
            ),
            TWO,
        )
    )
    assert a.calls() == [("get_weather", {"city": "Lima"}), ("get_time", {"tz": "UTC"})]


def test_entry_without_a_function_name_is_dropped() -> None:
    session = streamfix.SSESession(TWO)
    out = session.feed(stream_of([tc(0, "a", None, '{"x": 1}')], [tc(1, "b", "get_time", "{}")]))
    a = assemble(out + session.close())
    assert a.calls() == [("get_time", {})]
    assert session.report.counts["dropped_call.no_name"] == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('{"city": "Rome",}', {"city": "Rome"}),  # trailing comma
        ("{'city': 'Rome'}", {"city": "Rome"}),  # Python dict
        ('"{\\"city\\": \\"Rome\\"}"', {"city": "Rome"}),  # the object as a JSON string
        ("", {}),  # nothing, for a call with no arguments
    ],
)
def test_arguments_repaired_when_unambiguous(args: str, expected: dict[str, Any]) -> None:
    a = assemble(run_sse(stream_of([tc(0, "a", "get_weather", args)]), WEATHER))
    assert a.calls() == [("get_weather", expected)]


def test_arguments_that_cannot_be_read_drop_the_call() -> None:
    session = streamfix.SSESession(WEATHER)
    a = assemble(
        session.feed(stream_of([tc(0, "a", "get_weather", "{city: Rome) ]")])) + session.close()
    )
    assert a.tool_calls == []
    assert a.finish_reason == "stop"
    assert session.report.counts["dropped_call.bad_arguments"] == 1


def test_truncated_arguments_are_a_cut_off_call() -> None:
    """llama-cpp-python says ``tool_calls`` even when max_tokens cut the
    arguments at ``{ "city":``: no call, and finish_reason ``length``."""
    data = (CAPTURES / "b3_tools_named_choice_stream_truncated.sse").read_bytes()
    session = streamfix.SSESession(WEATHER)
    a = assemble(session.feed(data) + session.close())
    assert a.tool_calls == []
    assert a.finish_reason == "length"
    assert session.report.truncated_call


def test_missing_id_is_generated() -> None:
    a = assemble(run_sse(stream_of([tc(0, None, "get_weather", "{}")]), WEATHER))
    assert a.tool_calls[0]["id"].startswith("call_") and len(a.tool_calls[0]["id"]) == 29


def test_integer_argument_converted_by_schema() -> None:
    a = assemble(run_sse(stream_of([tc(0, "a", "get_time", '{"tz": "UTC", "days": "5"}')]), TWO))
    assert a.calls() == [("get_time", {"tz": "UTC", "days": 5})]


def test_keepalive_comments_while_a_call_is_held() -> None:
    a = assemble(
        run_sse(
            stream_of(
                *[
                    [tc(0, "a" if i == 0 else None, "get_weather" if i == 0 else None, p)]
                    for i, p in enumerate(['{"ci', 'ty":', ' "X"', "}"])
                ]
            ),
            WEATHER,
        )
    )
    assert a.comments == 4
    assert a.calls() == [("get_weather", {"city": "X"})]


def test_keepalive_can_be_switched_off() -> None:
    a = assemble(
        run_sse(
            stream_of([tc(0, "a", "get_weather", "{")], [tc(0, args="}")]), WEATHER, keepalive=False
        )
    )
    assert a.comments == 0


def test_non_streaming_completion_with_calls() -> None:
    completion = orjson.loads(
        (CAPTURES / "c2_tools_named_choice_nostream_default_format.json").read_bytes()
    )
    out = streamfix.fix_completion(completion, WEATHER)
    msg = out["choices"][0]["message"]
    assert [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in msg["tool_calls"]
    ] == [("get_weather", {"city": "Paris"})]
    assert "index" not in msg["tool_calls"][0]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"] == completion["usage"]
    assert completion["choices"][0]["message"]["function_call"]  # input not modified


def test_streaming_and_non_streaming_agree() -> None:
    pieces = [[tc(0, "a", "get_weather", '{"city": ')], [tc(0, args="'Rome'}")]]
    streamed = assemble(run_sse(stream_of(*pieces), WEATHER))
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\": 'Rome'}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    msg = streamfix.fix_completion(completion, WEATHER)["choices"][0]["message"]
    assert [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in msg["tool_calls"]
    ] == streamed.calls()


_piece = st.tuples(st.integers(0, 2), st.text(alphabet='{}":, abc019', max_size=6))


@given(st.lists(_piece, min_size=1, max_size=12), st.lists(st.integers(0, 5000), max_size=25))
def test_split_invariance(pieces: list[tuple[int, str]], cuts: list[int]) -> None:
    """Whatever the fragments hold, any byte-level split of the stream gives
    the same calls (ids, names, arguments) and finish reason."""
    seen: set[int] = set()
    frags = []
    for idx, args in pieces:
        first = idx not in seen
        seen.add(idx)
        frags.append(
            [tc(idx, f"id{idx}" if first else None, "get_weather" if first else None, args)]
        )
    data = stream_of(*frags)
    whole = assemble(run_sse(data, WEATHER))
    split = assemble(run_sse(split_at(data, cuts), WEATHER))
    assert (split.tool_calls, split.finish_reason) == (whole.tool_calls, whole.finish_reason)
