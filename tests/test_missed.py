"""A missed call is a signal (``transforms/missed.py``): a reply with tools
offered that names one and follows it with its arguments, while nothing was
lifted, is counted, sampled, measured and recorded as ``missed``; prose that
names a tool, arguments that do not fit, and replies that lifted a call are
not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamfix.context import Report
from streamfix.passthrough import CHECK_REQUEST, PROSE, sse_stream
from streamfix.session import SSESession
from streamfix.spec import tools_of
from streamfix.testing import check_passthrough
from streamfix.transforms.missed import MAX_NAMES, MAX_SCAN, NEAR, find_missed

from .support.streamutil import text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, proxy_app
from .test_record import files, flushed, load, metrics_text, post, tools_body

AT = 'Let me check. @@call get_weather {"city": "Paris"} @@end'


def report_of(text: str | list[str], request: dict[str, Any] | None = CHECK_REQUEST) -> Report:
    pieces = [text] if isinstance(text, str) else text
    s = SSESession(request)
    s.feed(sse_stream(pieces))
    s.close()
    return s.report


def test_an_unknown_shape_naming_a_tool_with_its_arguments_is_counted_and_sampled() -> None:
    rep = report_of(list(AT))  # one character per chunk: the text lane keeps it all
    assert rep.counts["possible_missed_call"] == 1
    assert rep.missed == [AT]


def test_the_whole_reply_path_counts_it_too() -> None:
    from streamfix.chain import Chain
    from streamfix.context import Context

    completion = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": AT}, "finish_reason": "stop"}
        ],
    }
    ctx = Context.of(CHECK_REQUEST, {})
    out = Chain(ctx).complete(completion)
    assert out["choices"][0]["message"]["content"] == AT  # a signal, not a repair
    assert ctx.report.counts["possible_missed_call"] == 1


def test_nothing_when_a_call_was_lifted_or_no_tools_were_offered() -> None:
    lifted = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert not report_of(lifted + " " + AT).counts["possible_missed_call"]
    assert not report_of(AT, {"model": "m", "messages": []}).counts["possible_missed_call"]


def test_prose_and_arguments_that_do_not_fit_are_not_a_missed_call() -> None:
    tools = tools_of(CHECK_REQUEST)
    for text in (
        *PROSE,
        "get_weather is the tool I would use; it takes a city.",
        'get_weather {"town": "Paris"}',  # not a parameter
        'get_weather {"unit": "c", "city": "Paris", "x": 1}',  # an extra key
        'get_weather {"query": "Paris"}',  # search's key, not get_weather's
        'search {"query": "x"}'.replace("search", "research"),  # a longer word
        "get_weather {}",  # nothing: not arguments
        "get_weather" + " " * (NEAR + 1) + '{"city": "Paris"}',  # too far
    ):
        assert find_missed(text, tools) is None, text
    assert find_missed('search -> {"query": "x"}', tools) is not None  # no required keys
    # required keys: get_weather requires city
    assert find_missed('get_weather {"city": "Paris"}', tools) is not None


def test_the_search_is_bounded() -> None:
    tools = tools_of(CHECK_REQUEST)
    far = "x" * MAX_SCAN + AT
    assert find_missed(far, tools) is None
    many = {
        **{f"t{i}": tools["search"]._replace(name=f"t{i}") for i in range(MAX_NAMES)},
        **tools,
    }
    assert find_missed(AT, many) is None  # get_weather is past the first MAX_NAMES


def test_plain_prose_still_passes_unchanged_and_uncounted() -> None:
    check_passthrough(request=CHECK_REQUEST)
    for text in PROSE:
        assert not report_of(text).counts["possible_missed_call"]


async def test_the_proxy_counts_it_and_records_it_as_missed(tmp_path: Path) -> None:
    call = '@@call lookup_order {"order_id": "A1"} @@end'
    upstream = FakeUpstream(Reply.stream(text_stream(["Looking. ", call])))
    async with upstream as up, AppServer(proxy_app(up.url, record=str(tmp_path), retries=0)) as px:
        status, _ = await post(px.url, tools_body())
        assert status == 200
        await flushed(px)
        metrics = await metrics_text(px)
    assert "streamfix_possible_missed_calls_total 1.0" in metrics
    (path,) = files(tmp_path)
    doc = load(path)
    assert doc["reasons"] == ["missed"]
    assert doc["attempts"][0]["report"]["missed"] == ["Looking. " + call]


def test_a_call_written_as_a_json_object_in_any_key_order_counts() -> None:
    tools = tools_of(CHECK_REQUEST)
    text = 'x <<<{"arguments": {"city": "Oslo"}, "name": "get_weather"}>>>'
    hit = find_missed(text, tools)
    assert hit is not None and text[hit[2] : hit[3]].startswith('{"arguments"')
    assert find_missed('{"name": "get_weather", "arguments": {"town": "Oslo"}}', tools) is None
