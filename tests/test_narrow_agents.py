"""Tool narrowing on coding agents' turns: Claude Code 2.1.328's and Codex
CLI 0.169.0's tools as they send them (``tests/data/agent_tools_*.json``,
captured from the upstream side of ``tests/e2e/test_agents.py``'s runs:
the chat-completions ``tools`` the proxy's doors make of them, long
descriptions whole) and turns a user gives them, first turns and turns
after a tool's result (``tests/data/agent_turns.json``), each with the
tools a good agent calls for it.

A turn passes when narrowing declines (the model sees every tool) or
keeps one of those tools *on its score* (relative score above 0, not as
filler of the five kept). The failure is narrowing confidently to a set
without it, as the ranker did before the verbs' expansion and the name
field: Claude Code's "Create the file …" kept Bash, Edit, ScheduleWakeup
but Write only as filler; Codex's kept view_image and create_goal but
not exec_command. Deterministic: no I/O, no timing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamfix import narrow

DATA = Path(__file__).parent / "data"
TURNS = json.loads((DATA / "agent_turns.json").read_text())
TOOLS = {
    a: json.loads((DATA / f"agent_tools_{a}.json").read_text()) for a in ("claude_code", "codex")
}

#: What each agent wraps around the user's words (left out by ``turn_text``).
REMINDER = (
    "<system-reminder>\nAttribution for git commits and pull requests you create from here "
    "on: End git commit messages with Co-Authored-By\n</system-reminder>\n\n"
)
ENVIRONMENT = (
    "<environment_context>\n  <cwd>/tmp/w</cwd>\n  <shell>bash</shell>\n</environment_context>"
)


def messages(agent: str, case: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages the agent's request becomes, as the proxy sees them."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    if agent == "codex":
        out += [
            {"role": "user", "content": ENVIRONMENT},
            {"role": "user", "content": case["prompt"]},
        ]
    else:
        out.append({"role": "user", "content": REMINDER + case["prompt"]})
    if "result" in case:
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": case["called"], "arguments": "{}"},
        }
        out += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": case["result"]},
        ]
    return out


def decision(agent: str, case: dict[str, Any]) -> tuple[narrow.Decision, dict[str, float]]:
    """What the proxy's lexical path decides (``server/narrowing.decide``)."""
    msgs = messages(agent, case)
    tools = TOOLS[agent]
    names, scores = narrow.rank_lexical(
        tools, narrow.turn_text(msgs), None, narrow.asked_text(msgs)
    )
    d = narrow.decide(names, scores, narrow.called_before(msgs))
    return d, dict(zip(names, narrow.relative(scores), strict=True))


CASES = [(a, c) for a in ("claude_code", "codex") for c in TURNS[a]]


def test_the_data_is_what_the_agents_send() -> None:
    claude = narrow.tool_names(TOOLS["claude_code"])
    codex = narrow.tool_names(TOOLS["codex"])
    assert {"Bash", "Read", "Write", "Edit", "Agent"} <= set(claude) and len(
        claude
    ) > narrow.THRESHOLD
    assert {"exec_command", "write_stdin", "view_image"} <= set(codex) and len(
        codex
    ) > narrow.THRESHOLD
    # descriptions whole: the ranker reads the first MAX_DESCRIPTION_CHARS of each
    agent = next(t for t in TOOLS["claude_code"] if t["function"]["name"] == "Agent")
    assert len(agent["function"]["description"]) > 3000
    for agent_name, case in CASES:
        assert set(case["gold"]) <= set(narrow.tool_names(TOOLS[agent_name])), case


@pytest.mark.parametrize(
    ("agent", "case"), CASES, ids=[f"{a}:{c['prompt'][:40]}" for a, c in CASES]
)
def test_the_needed_tool_is_kept_or_nothing_is_narrowed(agent: str, case: dict[str, Any]) -> None:
    d, rel = decision(agent, case)
    if not d.narrowed:
        return
    assert d.kept is not None
    ranked = sorted(rel.items(), key=lambda kv: -kv[1])[:6]
    assert any(g in d.kept and rel[g] > 0 for g in case["gold"]), (d.kept, ranked)


def test_most_turns_are_narrowed() -> None:
    """Declining every turn would pass the test above: the agents' turns
    are narrowed, as they were before."""
    narrowed = sum(decision(a, c)[0].narrowed for a, c in CASES)
    assert narrowed >= len(CASES) - 3, narrowed


def test_the_first_turns_of_the_e2e_runs_rank_the_tool_the_agent_called() -> None:
    """The issue's two turns (with both captured runs' paths): Write for
    Claude Code, exec_command for Codex, kept on a score of at least a
    fifth of the best (before: 0.03 and 0.01 or 0, kept as filler or not
    at all)."""
    for path in ("/tmp/tmpqoj0_yt9/work/hello.txt", "/tmp/tmp1iita7_a/work/hello.txt"):
        prompt = f"Create the file {path} containing exactly: written by streamfix"
        for agent, tool in (("claude_code", "Write"), ("codex", "exec_command")):
            d, rel = decision(agent, {"prompt": prompt, "gold": [tool]})
            assert d.kept is not None and tool in d.kept and rel[tool] >= 0.2, (agent, d.kept, rel)


def test_query_terms() -> None:
    q = narrow.query_terms("Create the file /tmp/abc/work/hello.txt from https://x.org/a/b")
    # the path is a file and its last part; the URL a url; the verb adds words at half weight
    assert q["fil"] == 1.0 and q["hello"] == 1.0 and q["url"] == 1.0
    assert "tmp" not in q and "work" not in q and "org" not in q
    assert q["writ"] == narrow.EXPANSION_WEIGHT and q["shell"] == narrow.EXPANSION_WEIGHT
    # a tool's result: its words weigh less, its verbs add nothing, numbers are out
    q = narrow.query_terms("fix it\nrun 12 tests", asked="fix it")
    assert q["fix"] == 1.0 and q["edit"] == narrow.EXPANSION_WEIGHT
    assert q["run"] == narrow.RESULT_WEIGHT and "bash" not in q and "12" not in q
