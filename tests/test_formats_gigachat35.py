"""GigaChat 3.5 calls (issue 35): ``<｜GCML｜tool_calls>`` around
``<｜GCML｜invoke name=…>`` elements whose ``<｜GCML｜parameter>`` values are
text unless ``string="false"`` (vLLM's ``gigachat35_tool_parser.py`` and
its reasoning test). Prose that mentions the wrapper is text."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from .support.detectutil import check_byte_cuts, check_split_invariant
from .support.streamutil import tool

REQUEST: dict[str, Any] = {
    "model": "ai-sage/GigaChat3.5-432B-A28B",
    "messages": [{"role": "user", "content": "x"}],
    "tools": [
        tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}, ["city"]),
        tool("set_flags", {"flags": {"type": "object"}, "note": {"type": "string"}}),
    ],
}


def gcml(*invokes: str) -> str:
    return "<｜GCML｜tool_calls>\n" + "\n".join(invokes) + "\n</｜GCML｜tool_calls>"


def invoke(name: str, **params: tuple[str, str]) -> str:
    inner = "".join(
        f'<｜GCML｜parameter name="{k}" string="{s}">{v}</｜GCML｜parameter>\n'
        for k, (v, s) in params.items()
    )
    return f'<｜GCML｜invoke name="{name}">\n{inner}</｜GCML｜invoke>'


WEATHER = gcml(invoke("get_weather", city=("Москва", "true")))
TWO = gcml(
    invoke("get_weather", city=("007", "true"), days=("3", "false")),
    invoke("set_flags", flags=('{"a": [1, 2]}', "false"), note=("{not json}", "true")),
)


def test_the_reasoning_test_call_after_the_prompt_opened_reasoning() -> None:
    text = "Need the weather tool.</think>\n\n" + WEATHER
    request = {**REQUEST, "chat_template_kwargs": {"enable_thinking": True}}
    assert check_split_invariant(text, request) == (
        "",
        "Need the weather tool.",
        [("get_weather", {"city": "Москва"})],
        "tool_calls",
    )


def test_values_are_text_unless_string_false() -> None:
    content, _, calls, _ = check_split_invariant("Checking." + TWO, REQUEST)
    assert content == "Checking."
    assert calls == [
        ("get_weather", {"city": "007", "days": 3}),
        ("set_flags", {"flags": {"a": [1, 2]}, "note": "{not json}"}),
    ]


def test_a_mention_of_the_wrapper_in_prose_is_text() -> None:
    text = "GigaChat wraps calls in <｜GCML｜tool_calls> tags, then invokes."
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert (content, calls) == (text, [])


@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from([WEATHER, "Hi." + TWO, TWO + " bye"]),
    cuts=st.lists(st.integers(0, 3000), max_size=10),
)
def test_any_byte_split_gives_the_whole_result(text: str, cuts: list[int]) -> None:
    check_byte_cuts(text, cuts, REQUEST)
