"""Real clients through ``streamfix serve --narrow-tools auto``.

The OpenAI SDK (an agent loop with twenty tools), Claude Code and Codex
CLI, each against the scripted upstream of ``test_agents.py`` (the call
written as text until a tool result, then prose): with narrowing on, the
agent still runs its tool, the file is written and the prose printed. The
client always sees its own tools and ids; what the model was shown is
read from the upstream's side.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from streamfix import narrow
from tests.support.upstream_fake import (
    AppServer,
    FakeUpstream,
    Received,
    Reply,
    completion,
    proxy_app,
)
from tests.test_narrow import TOOLS

from .agents import agent_bin, run_claude, run_codex
from .test_agents import CONTENT, as_text, scripted

pytestmark = pytest.mark.e2e


def shown(rec: Received) -> list[str]:
    return narrow.tool_names(rec.body.get("tools") or [])


def offered_then_shown(up: FakeUpstream) -> list[tuple[int, list[str]]]:
    """Each chat request's tool count and the names sent (for messages)."""
    return [(len(shown(r)), shown(r)) for r in up.chat_requests]


async def narrowed_turns(px: AppServer) -> float:
    """How many replies the proxy counted as narrowed (only a request that
    offers more than ``narrow.THRESHOLD`` tools is)."""
    async with aiohttp.ClientSession() as s, s.get(px.root + "/metrics") as r:
        text = await r.text()
    narrowed = ("kept", "hidden", "no_call", "asked_again")
    return sum(
        float(row.split()[-1])
        for row in text.splitlines()
        if row.startswith("streamfix_narrowed_total{")
        and any(f'outcome="{o}"' in row for o in narrowed)
    )


async def test_openai_sdk_agent_loop_with_narrowing(tmp_path: Path) -> None:
    target = tmp_path / "hello.txt"
    script = scripted("hermes", "write_file", {"path": str(target), "content": CONTENT})

    def model(rec: Received) -> Reply:
        if rec.body.get("stream"):
            return script(rec)
        text = as_text("hermes", "write_file", {"path": str(target), "content": CONTENT})
        return Reply.json(completion(text))

    async with (
        FakeUpstream(handler=model) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        client = openai.AsyncOpenAI(api_key="sk-local", base_url=px.url, max_retries=0)
        messages: list[Any] = [
            {"role": "user", "content": f"Write the file {target} with the text {CONTENT}"}
        ]
        first = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        (call,) = first.choices[0].message.tool_calls or []
        assert call.type == "function" and call.function.name == "write_file"
        args = orjson.loads(call.function.arguments)
        Path(args["path"]).write_text(args["content"])  # the client runs its tool
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "written"},
        ]
        stream = await client.chat.completions.create(
            model="m", messages=messages, tools=TOOLS, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
    assert target.read_text() == CONTENT
    assert text == "I created the file."
    counts = offered_then_shown(up)
    assert counts[0][0] == narrow.KEEP and "write_file" in counts[0][1], counts
    # after the tool result: narrowed (write_file kept, it was called), and
    # the answer in prose is the reply (not asked again: the loop's end)
    assert [n for n, _ in counts[1:]] == [narrow.KEEP], counts
    assert "write_file" in counts[1][1]


async def test_claude_code_with_narrowing(tmp_path: Path) -> None:
    agent_bin("claude")
    target = tmp_path / "work" / "hello.txt"
    target.parent.mkdir()
    script = scripted("hermes", "Write", {"file_path": str(target), "content": CONTENT})
    async with (
        FakeUpstream(handler=script) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        run = await run_claude(
            px.root,
            f"Create the file {target} containing exactly: {CONTENT}",
            tmp_path,
            target.parent,
        )
        turns = await narrowed_turns(px)
    assert run.returncode == 0, run.stderr
    assert target.read_text() == CONTENT
    assert "I created the file." in run.stdout
    assert "tool_call" not in run.stdout
    counts = [n for n, _ in offered_then_shown(up)]
    # Claude Code offers enough tools to narrow, and every turn was narrowed
    assert max(counts) <= narrow.KEEP + 1 and turns == len(counts), (counts, turns)
    # "Create the file …" ranks Write first (the verbs' expansion and the
    # name field; before, Write came fourth on a sliver of a score)
    assert "Write" in offered_then_shown(up)[0][1], offered_then_shown(up)


async def test_codex_with_narrowing(tmp_path: Path) -> None:
    agent_bin("codex")
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    cmd = f"printf %s {shlex.quote(CONTENT)} > {shlex.quote(str(target))}"
    script = scripted("hermes", "exec_command", {"cmd": cmd})
    async with (
        FakeUpstream(handler=script) as up,
        AppServer(proxy_app(up.url, narrow_tools="auto")) as px,
    ):
        run = await run_codex(
            px.url, f"Create the file {target} containing exactly: {CONTENT}", tmp_path, work
        )
        turns = await narrowed_turns(px)
    assert run.returncode == 0, run.stderr
    assert target.read_text() == CONTENT
    assert (tmp_path / "last.txt").read_text().strip() == "I created the file."
    counts = [n for n, _ in offered_then_shown(up)]
    assert max(counts) <= narrow.KEEP + 1 and turns == len(counts), (counts, turns)
    # exec_command is shown (before: spawn_agent, create_goal… without it)
    assert "exec_command" in offered_then_shown(up)[0][1], offered_then_shown(up)
