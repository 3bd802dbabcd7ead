"""The code-line rule (issue 35): a call written as code (``NAME(...)``, no
wrapper token) is a call only when nothing but blanks or further calls
follows it to the end of the reply. Prose after it makes it an example: it
stays text, in place. A model explaining a tool is not calling it. Wrapped
calls are unaffected. In the chain, at every split, and through the proxy's
three doors (chat, Messages, Responses), streamed and not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .support.detectutil import check_split_invariant, run_pieces
from .support.streamutil import assemble, split_sizes, text_stream
from .support.upstream_fake import AppServer, FakeUpstream, Reply, completion, proxy_app


def _schema(*names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {n: {"type": "string"} for n in names},
        "required": list(names),
    }


BASH = {"name": "Bash", "description": "Run a command", "parameters": _schema("command")}
READ = {"name": "Read", "description": "Read a file", "parameters": _schema("file_path")}
REQUEST: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "clean up"}],
    "tools": [{"type": "function", "function": f} for f in (BASH, READ)],
}

EXAMPLE = (
    'To clean up you would run:\nBash(command="rm -rf build/")\n'
    "but I have not run it; tell me if you want me to."
)
USAGE = (
    'The Read tool takes a path:\n\n    Read(file_path="/etc/hosts")\n\n'
    "returns the file's lines, numbered."
)
ONLY = 'Bash(command="rm -rf build/")'
ENDS = 'Cleaning up now.\nBash(command="rm -rf build/")\n'
TWO = 'Bash(command="make clean")\nRead(file_path="build.log")\n'
WRAPPED_THEN_PROSE = (
    '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>\nRunning it now.'
)
RM = ("Bash", {"command": "rm -rf build/"})


def test_prose_after_a_code_line_makes_it_an_example() -> None:
    for text in (EXAMPLE, USAGE):
        assert check_split_invariant(text, REQUEST) == (text, "", [], "stop")
        _, report = run_pieces([text], REQUEST)
        assert report.counts["released.example_call"] == 1


def test_a_reply_that_is_the_line_or_ends_with_it_is_a_call() -> None:
    assert check_split_invariant(ONLY, REQUEST) == ("", "", [RM], "tool_calls")
    assert check_split_invariant(ENDS, REQUEST) == ("Cleaning up now.", "", [RM], "tool_calls")
    calls = [("Bash", {"command": "make clean"}), ("Read", {"file_path": "build.log"})]
    assert check_split_invariant(TWO, REQUEST) == ("", "", calls, "tool_calls")


def test_prose_after_further_calls_makes_them_all_examples() -> None:
    text = TWO + "Those two would do it."
    assert check_split_invariant(text, REQUEST) == (text, "", [], "stop")


def test_wrapped_calls_are_unaffected() -> None:
    got = check_split_invariant(WRAPPED_THEN_PROSE, REQUEST)
    assert got == ("Running it now.", "", [("Bash", {"command": "ls"})], "tool_calls")
    # a wrapped call after an example is still a call, the example stays text
    text = EXAMPLE + "\n" + WRAPPED_THEN_PROSE
    content, _, calls, _ = check_split_invariant(text, REQUEST)
    assert calls == [("Bash", {"command": "ls"})]
    assert content.startswith(EXAMPLE)


def test_the_hold_is_bounded() -> None:
    """Held text beyond ``max_call_chars`` goes out as text."""
    line = 'Bash(command="' + "x" * 60 + '")\n'
    a, report = run_pieces([line * 3], REQUEST, max_call_chars=100)
    assert a.content == line * 3 and a.calls() == []
    assert report.counts["released.example_call"] == 1


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([EXAMPLE, USAGE, ONLY, ENDS, TWO]),
    st.lists(st.integers(1, 9), min_size=1, max_size=40),
)
def test_split_invariance(text: str, sizes: list[int]) -> None:
    whole, _ = run_pieces([text], REQUEST)
    got, _ = run_pieces(split_sizes(text, sizes), REQUEST)
    assert (got.content, got.calls(), got.finish_reason) == (
        whole.content,
        whole.calls(),
        whole.finish_reason,
    )


# -- through the proxy's doors -------------------------------------------------


def _reply(text: str, stream: bool) -> Reply:
    if stream:
        return Reply.stream(text_stream([text[:17], text[17:40], text[40:]]))
    return Reply.json(completion(text))


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[FakeUpstream, AppServer]]:
    async with FakeUpstream() as up, AppServer(proxy_app(up.url)) as px:
        yield up, px


async def _chat(px: AppServer, stream: bool) -> tuple[str, list[Any]]:
    body = {**REQUEST, "stream": stream}
    async with (
        aiohttp.ClientSession() as s,
        s.post(px.url + "/chat/completions", json=body) as r,
    ):
        data = await r.read()
    if stream:
        a = assemble(data)
        return a.content, a.calls()
    msg = orjson.loads(data)["choices"][0]["message"]
    calls = [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in msg.get("tool_calls") or []
    ]
    return msg.get("content") or "", calls


async def _messages(px: AppServer, stream: bool) -> tuple[str, list[Any]]:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=px.root, max_retries=0)
    kw: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "clean up"}],
        "tools": [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in (BASH, READ)
        ],
    }
    try:
        if stream:
            async with client.messages.stream(**kw) as s:
                msg = await s.get_final_message()
        else:
            msg = await client.messages.create(**kw)
    finally:
        await client.close()
    text = "".join(b.text for b in msg.content if b.type == "text")
    return text, [(b.name, b.input) for b in msg.content if b.type == "tool_use"]


async def _responses(px: AppServer, stream: bool) -> tuple[str, list[Any]]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=px.url, max_retries=0)
    kw: dict[str, Any] = {
        "model": "m",
        "input": "clean up",
        "tools": [{"type": "function", "strict": False, **t} for t in (BASH, READ)],
    }
    try:
        if stream:
            async with client.responses.stream(**kw) as s:
                async for _ in s:
                    pass
                resp = await s.get_final_response()
        else:
            resp = await client.responses.create(**kw)
    finally:
        await client.close()
    calls = [(o.name, orjson.loads(o.arguments)) for o in resp.output if o.type == "function_call"]
    return resp.output_text, calls


DOORS = {"chat": _chat, "messages": _messages, "responses": _responses}


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("door", sorted(DOORS))
async def test_through_the_doors(
    proxy: tuple[FakeUpstream, AppServer], door: str, stream: bool
) -> None:
    up, px = proxy
    up.push(_reply(EXAMPLE, stream), _reply(ENDS, stream))
    text, calls = await DOORS[door](px, stream)
    assert (text, calls) == (EXAMPLE, [])  # an example: no tool_use, the line kept
    text, calls = await DOORS[door](px, stream)
    assert (text.strip(), calls) == ("Cleaning up now.", [RM])


def test_a_pythonic_list_after_text_ends_the_reply_or_is_an_example() -> None:
    """``[NAME(...)]`` after text on its line is a call when it ends the
    reply (SGLang reads Llama 4 so); with prose after it, it is text."""
    ends = "Let me check: [Read(file_path='a.txt')]"
    assert check_split_invariant(ends, REQUEST) == (
        "Let me check:",
        "",
        [("Read", {"file_path": "a.txt"})],
        "tool_calls",
    )
    for text in (
        "Let me check: [Read(file_path='a.txt')] and then report back.",
        "Write [Read(file_path='a.txt')]\nto read a file.",
    ):
        assert check_split_invariant(text, REQUEST) == (text, "", [], "stop")


def test_a_named_pythonic_list_off_the_schema_is_still_a_call() -> None:
    """``[NAME(...)]`` ending the reply is a call as a wrapper is: arguments
    that do not fit the schema are counted, not a reason to show code."""
    text = "[Read(file_path=['a.txt', 'b.txt'])]"
    got = check_split_invariant(text, REQUEST)
    assert got == ("", "", [("Read", {"file_path": ["a.txt", "b.txt"]})], "tool_calls")
    _, report = run_pieces([text], REQUEST)
    assert report.counts["invalid_arguments"] == 1
    # a line of code off the schema is still code
    line = "Read(file_path=['a.txt', 'b.txt'])"
    assert check_split_invariant(line, REQUEST) == (line, "", [], "stop")
