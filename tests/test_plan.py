"""The request side's steps (``streamfix/server/plan.py``) as plain calls:
each takes a body (and plain facts) and returns the body to send and a
note of what it did; a step that changes nothing returns its argument
itself and no note, and no step modifies its argument."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from streamfix.narrow import Decision
from streamfix.server.plan import (
    JSON_INSTRUCTION,
    NAMED_INSTRUCTION,
    NARROWED_INSTRUCTION,
    NARROWED_REQUIRED,
    REQUIRED_INSTRUCTION,
    SCHEMA_INSTRUCTION,
    Note,
    Plan,
    Row,
    ask_again_step,
    budget_step,
    engine_step,
    for_row,
    json_fallback_step,
    named_step,
    narrowed_step,
    noted,
    refit_step,
    served_model_step,
    soft_required_step,
)
from streamfix.server.upstream.budget import BudgetPolicy
from streamfix.server.upstream.engines import UpstreamInfo

POLICY = BudgetPolicy()
USER = {"role": "user", "content": "Open a ticket: the printer is on fire."}


def fn(name: str, description: str = "") -> dict[str, Any]:
    f: dict[str, Any] = {"name": name, "parameters": {"type": "object"}}
    if description:
        f["description"] = description
    return {"type": "function", "function": f}


TICKET = fn("create_ticket", "Open a ticket for facilities. Use for broken things.")
SEARCH = fn("search", "Search the web")
WEATHER = fn("weather")


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], **kw}


def unchanged(step: Any, body: dict[str, Any], *args: Any) -> None:
    """``step`` leaves ``body`` as it is: the same object, no note."""
    before = copy.deepcopy(body)
    out, note = step(body, *args)
    assert out is body
    assert note is None
    assert body == before


# -- the request's steps --------------------------------------------------


def test_named_step_sends_the_one_tool_with_auto_and_its_purpose() -> None:
    choice = {"type": "function", "function": {"name": "create_ticket"}}
    body = chat(tools=[SEARCH, TICKET], tool_choice=choice)
    before = copy.deepcopy(body)
    out, note = named_step(body, True)
    assert note == Note("named_tool", "create_ticket")
    assert out["tools"] == [TICKET]
    assert out["tool_choice"] == "auto"
    assert out["messages"] == [
        {
            "role": "system",
            "content": NAMED_INSTRUCTION.format(
                name="create_ticket", purpose=" (Open a ticket for facilities)"
            ),
        },
        USER,
    ]
    assert body == before


def test_named_step_needs_soft_and_an_offered_name() -> None:
    choice = {"type": "function", "function": {"name": "create_ticket"}}
    unchanged(named_step, chat(tools=[SEARCH, TICKET], tool_choice=choice), False)
    other = {"type": "function", "function": {"name": "nowhere"}}
    unchanged(named_step, chat(tools=[SEARCH, TICKET], tool_choice=other), True)
    unchanged(named_step, chat(tools=[SEARCH], tool_choice="required"), True)


def test_soft_required_step_sends_auto() -> None:
    body = chat(tools=[SEARCH], tool_choice="required")
    out, note = soft_required_step(body, True)
    assert out == {**body, "tool_choice": "auto"}
    assert note == Note("soft_required")
    assert body["tool_choice"] == "required"
    unchanged(soft_required_step, body, False)
    unchanged(soft_required_step, chat(tools=[SEARCH], tool_choice="auto"), True)
    unchanged(soft_required_step, chat(tool_choice="required"), True)


def test_narrowed_step_shows_the_kept_tools_with_an_instruction() -> None:
    body = chat(tools=[SEARCH, TICKET, WEATHER])
    decision = Decision(3, ["weather", "search"])
    out, note = narrowed_step(body, decision, False)
    assert note == Note("narrowed", {"kept": ["weather", "search"], "of": 3})
    assert out["tools"] == [WEATHER, SEARCH]
    assert out["tool_choice"] == "auto"
    line = NARROWED_INSTRUCTION.format(tools="weather; search (Search the web)")
    assert out["messages"] == [{"role": "system", "content": line}, USER]
    forced, _ = narrowed_step(body, decision, True)
    line = NARROWED_REQUIRED.format(tools="weather; search (Search the web)")
    assert forced["messages"][0] == {"role": "system", "content": line}
    unchanged(narrowed_step, body, None, False)
    unchanged(narrowed_step, body, Decision(3, outcome="not_confident"), False)


def test_ask_again_step_for_each_reason() -> None:
    body = chat(tools=[SEARCH], max_tokens=100)
    sent = {**body, "max_tokens": 300}
    out, note = ask_again_step(body, "truncated_call", sent=sent, reservation=1024)
    assert out == {**body, "max_tokens": 600}
    assert note == Note("ask_again", "truncated_call")

    out, note = ask_again_step(body, "required")
    line = REQUIRED_INSTRUCTION.format(names="search")
    assert out["messages"] == [{"role": "system", "content": line}, USER]
    assert note == Note("ask_again", "required")

    full = chat(tools=[SEARCH, TICKET])
    out, note = ask_again_step(body, "narrowed", full=full)
    assert out is full
    assert note == Note("ask_again", "narrowed")

    out, _ = ask_again_step(body, "json", json_error="not JSON: Expecting value")
    line = JSON_INSTRUCTION.format(error="not JSON: Expecting value")
    assert out["messages"] == [{"role": "system", "content": line}, USER]
    assert out["max_tokens"] == 100
    cut, _ = ask_again_step(body, "json", sent=None, reservation=1024, json_error="cut off")
    assert cut["max_tokens"] == 200

    same, note = ask_again_step(body, "empty")
    assert same is body
    assert note == Note("ask_again", "empty")


def test_refit_step_drops_the_oldest_turns() -> None:
    old = [{"role": "user", "content": "x " * 4000}, {"role": "assistant", "content": "ok"}]
    body = chat(messages=[*old, USER])
    out, note = refit_step(body, 2000, POLICY)
    assert out["messages"] == [USER]
    assert note is not None and note.step == "trim"
    assert note.detail["dropped_messages"] == 2
    assert note.detail["window"] == 2000
    assert len(body["messages"]) == 3
    unchanged(refit_step, chat(), 2000, POLICY)


# -- each row's steps -----------------------------------------------------


def test_served_model_step_names_the_rows_model() -> None:
    body = chat()
    out, note = served_model_step(body, "qwen3:8b")
    assert out == {**body, "model": "qwen3:8b"}
    assert note == Note("served_model", "qwen3:8b")
    assert body["model"] == "m"
    unchanged(served_model_step, body, None)
    unchanged(served_model_step, body, "m")


def test_budget_step_trims_only_when_even_the_smallest_reply_cannot_fit() -> None:
    old = [{"role": "user", "content": "x " * 4000}, {"role": "assistant", "content": "ok"}]
    body = chat(messages=[*old, USER])
    out, note = budget_step(body, 2000, POLICY, 1.0)
    assert out["messages"] == [USER]
    assert note is not None and note.step == "budget"
    assert list(note.detail) == ["trim"]
    assert note.detail["trim"]["action"] == "trimmed"
    assert note.detail["trim"]["dropped_messages"] == 2
    assert len(body["messages"]) == 3
    # the server counted a prompt that fits: its count decides, no trim
    unchanged(budget_step, body, 2000, POLICY, 1.0, False, 100)
    unchanged(budget_step, body, None, POLICY, 1.0)


def test_budget_step_clamps_with_the_reasoning_allowance() -> None:
    body = chat(max_tokens=65536)
    out, note = budget_step(body, 8192, POLICY)
    assert note is not None and list(note.detail) == ["clamp"]
    clamp = note.detail["clamp"]
    assert out["max_tokens"] == clamp["clamped"] == 8192 - clamp["prompt_estimate"] - 64
    assert body["max_tokens"] == 65536
    raised, note = budget_step(chat(max_tokens=100), 32768, POLICY, reasons=True)
    assert raised["max_tokens"] == 100 + POLICY.reasoning_reserve
    assert note is not None and note.detail["clamp"]["action"] == "raised"
    off = chat(max_tokens=100, chat_template_kwargs={"enable_thinking": False})
    unchanged(budget_step, off, 32768, POLICY, 1.0, True)
    unchanged(budget_step, chat(max_tokens=100), None, POLICY)


def test_engine_step_adds_vllms_field() -> None:
    body = chat(tools=[SEARCH])
    out, note = engine_step(body, UpstreamInfo(window=None, engine="vllm"))
    assert out == {**body, "skip_special_tokens": False}
    assert note == Note("engine", {"skip_special_tokens": False})
    unchanged(engine_step, body, UpstreamInfo(window=None, engine="llamacpp"))
    unchanged(engine_step, chat(), UpstreamInfo(window=None, engine="vllm"))


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def test_json_fallback_step_sends_json_object_and_states_the_schema() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    body = chat(response_format=fmt)
    out, note = json_fallback_step(body, True)
    assert note == Note("json_fallback")
    assert out["response_format"] == {"type": "json_object"}
    line = SCHEMA_INSTRUCTION.format(schema=orjson.dumps(SCHEMA).decode())
    assert out["messages"] == [{"role": "system", "content": line}, USER]
    assert body["response_format"] is fmt
    unchanged(json_fallback_step, body, False)
    unchanged(json_fallback_step, chat(response_format={"type": "json_object"}), True)


def test_for_row_runs_the_row_steps_in_order_with_their_notes() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    body = chat(tools=[SEARCH], max_tokens=65536, response_format=fmt)
    row = Row("served", 8192, 1.0, False, UpstreamInfo(window=8192, engine="vllm"), True)
    out, notes = for_row(body, row, POLICY)
    assert [n.step for n in notes] == ["served_model", "budget", "json_fallback", "engine"]
    assert out["model"] == "served"
    assert out["max_tokens"] == noted(notes, "budget")["clamp"]["clamped"]
    assert out["skip_special_tokens"] is False
    assert out["response_format"] == {"type": "json_object"}
    assert "trim" not in noted(notes, "budget")
    same, none = for_row(chat(), Row(None), POLICY)
    assert none == []
    assert same == chat()


# -- the plan -------------------------------------------------------------


def test_plan_of_a_named_tool_shows_the_chain_the_one_tool() -> None:
    choice = {"type": "function", "function": {"name": "create_ticket"}}
    body = chat(tools=[SEARCH, TICKET], tool_choice=choice)
    plan = Plan.of(body, soft=True)
    assert plan.named and plan.soft and plan.wants_call
    assert plan.client == {**body, "tools": [TICKET]}
    assert list(plan.tools) == ["create_ticket"]
    assert plan.body["tools"] == [TICKET]
    assert plan.notes == [Note("named_tool", "create_ticket")]


def test_plan_of_soft_required_then_narrowed_then_asked_again() -> None:
    body = chat(tools=[SEARCH, TICKET, WEATHER], tool_choice="required")
    plan = Plan.of(body, soft=True, narrowed=Decision(3, ["search"]))
    assert plan.soft and not plan.named
    assert plan.client is body
    assert plan.narrowing
    assert plan.body["tools"] == [SEARCH]
    line = NARROWED_REQUIRED.format(tools="search (Search the web)")
    assert plan.body["messages"][0] == {"role": "system", "content": line}
    assert plan.full == {**body, "tool_choice": "auto"}
    plan.done.add("narrowed")
    plan.again("narrowed", None, 1024)
    assert plan.body is plan.full
    assert [n.step for n in plan.notes] == ["soft_required", "narrowed", "ask_again"]
    assert noted(plan.notes, "narrowed") == {"kept": ["search"], "of": 3}
    assert plan.shown == {"kept": ["search"], "of": 3}


def test_plan_of_a_plain_request_is_one_shallow_copy() -> None:
    body = chat(tools=[SEARCH])
    plan = Plan.of(body, soft=False)
    assert plan.body == body
    assert plan.body is not body
    assert plan.client is body
    assert not plan.soft and plan.notes == []
    assert list(plan.tools) == ["search"]
    plan.narrow(None)
    assert plan.narrowed is None and plan.notes == []


def test_plan_refit_notes_the_trim() -> None:
    old = [{"role": "user", "content": "x " * 4000}, {"role": "assistant", "content": "ok"}]
    plan = Plan.of(chat(messages=[*old, USER]), soft=False)
    trim = plan.refit(2000, POLICY, 1.0)
    assert trim is not None and trim["dropped_messages"] == 2
    assert plan.body["messages"] == [USER]
    assert [n.step for n in plan.notes] == ["ask_again", "trim"]
    assert plan.refit(2000, POLICY, 1.0) is None
