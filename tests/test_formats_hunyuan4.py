"""Hunyuan 4 calls (issue 35): Hunyuan v3's tags without ``<tool_sep>``,
each structural token spelt with the checkpoint's suffix
(``<tool_calls:opensource>…<arg_key:opensource>…``; SGLang's
``test_hunyuan_detector.py`` and vLLM's ``hy_v4_tool_parser.py``), or bare
on an unsuffixed checkpoint. Prose that mentions such a tag is text, and is
released as it streams."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.formats import hunyuan
from streamfix.transforms.detect import ToolTagDetector

from .support.detectutil import check_byte_cuts, check_split_invariant
from .support.streamutil import tool

REQUEST: dict[str, Any] = {
    "model": "tencent/Hunyuan-4",
    "messages": [{"role": "user", "content": "x"}],
    "tools": [
        tool("get_current_date"),
        tool("get_weather", {"city": {"type": "string"}, "date": {"type": "string"}}, ["city"]),
        tool("search", {"query": {"type": "string"}, "count": {"type": "integer"}}, ["query"]),
    ],
}


def hy4(body: str, suffix: str = "opensource") -> str:
    """``body`` written with bare tags, in the suffixed spelling."""
    for t in ("tool_calls", "tool_call", "arg_key", "arg_value"):
        body = body.replace(f"<{t}>", f"<{t}:{suffix}>").replace(f"</{t}>", f"</{t}:{suffix}>")
    return body


ONE = (
    "<tool_calls><tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value>"
    "</tool_call></tool_calls>"
)
TWO = (
    "<tool_calls>\n<tool_call>search<arg_key>query</arg_key><arg_value>007</arg_value>"
    "<arg_key>count</arg_key><arg_value>5</arg_value></tool_call>\n"
    "<tool_call>get_current_date</tool_call>\n</tool_calls>"
)


def test_the_suffixed_tokens_without_a_separator() -> None:
    """SGLang's ``test_hy4_format_without_tool_separator``."""
    assert check_split_invariant(hy4(ONE), REQUEST) == (
        "",
        "",
        [("get_weather", {"city": "Beijing"})],
        "tool_calls",
    )


def test_any_suffix_and_the_bare_tokens() -> None:
    want = [("search", {"query": "007", "count": 5}), ("get_current_date", {})]
    for text in (hy4(TWO), hy4(TWO, "6124c78e"), TWO):
        content, _, calls, _ = check_split_invariant(text, REQUEST)
        assert (content, calls) == ("", want), text


def test_text_before_and_a_lone_suffixed_call() -> None:
    text = "Checking." + hy4("<tool_call>get_current_date</tool_call>")
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert (content, calls) == ("Checking.", [("get_current_date", {})])


def test_the_close_must_carry_the_same_suffix() -> None:
    """``</tool_calls:other>`` does not close ``<tool_calls:opensource>``:
    the region runs to its own close."""
    inner = hy4("<tool_call>get_weather<arg_key>city</arg_key><arg_value>a</arg_value></tool_call>")
    text = f"<tool_calls:opensource>{inner}</tool_calls:other></tool_calls:opensource>"
    assert hunyuan.Hunyuan().parse(text, {}) is None  # the stray close is not a call
    text = f"<tool_calls:opensource>{inner}</tool_calls:opensource>"
    assert hunyuan.unsuffixed(text) == (
        "<tool_calls><tool_call>get_weather<arg_key>city</arg_key><arg_value>a</arg_value>"
        "</tool_call></tool_calls>"
    )


def test_prose_that_mentions_the_tag_is_text() -> None:
    for text in (
        "The parser reads <tool_calls: a list> and stops.",
        "Write <tool_call:opensource> then the name, like this: <tool_call:opensource> done",
        "An empty suffix <tool_calls:> is nothing.",
    ):
        content, _, calls, _ = check_split_invariant(text, REQUEST)
        assert (content, calls) == (text, []), text


def test_prose_after_the_marker_is_released_as_it_streams() -> None:
    """The held text never runs past the first character a suffix lacks."""
    d = ToolTagDetector(Context.of(REQUEST, {}))
    released = ""
    for piece in ["See <tool_", "calls:", "open", " source> for more"]:
        dl = Delta(content=piece)
        d.feed(dl)
        released += dl.content or ""
    assert released == "See <tool_calls:open source> for more"
    assert not d.in_region


@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from([hy4(ONE), hy4(TWO, "6124c78e"), "Hi " + TWO + " bye"]),
    cuts=st.lists(st.integers(0, 2000), max_size=10),
)
def test_any_byte_split_gives_the_whole_result(text: str, cuts: list[int]) -> None:
    check_byte_cuts(text, cuts, REQUEST)
