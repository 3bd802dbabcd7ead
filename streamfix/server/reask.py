"""Asking again: what one request's successive upstream attempts share, and
the policy that decides whether a repaired reply is discarded and the
request sent once more (at most ``max_reasks`` times, each reason once).

The reasons: the repaired reply is empty; a tool call was cut off by the
output limit (asked with twice the allowance, clamped to the window);
``--required soft`` with ``tool_choice: "required"`` or a named tool and
no call (asked with an instruction naming the tools); the upstream said
``context_length_exceeded`` (the window is learned from the message, the
prompt fitted); a reply to a ``response_format`` request that is not the
JSON asked for even repaired, or was cut off inside it
(``Report.json_invalid``: asked with that error in an instruction, and,
when cut, twice the allowance). Only the upstream teaches a window: its HTTP error, or an
error event in its stream (``stream_error``), never what a model wrote,
and the window learned is the asked model's on that row alone.

*A named tool* (``tool_choice: {"type": "function", "function": {"name":
X}}``) under ``--required soft`` gives the model less to decide: only X is
sent, with ``tool_choice: "auto"`` and a short instruction made from X's
own description (``narrow_to_tool``); a reply without a call is asked
once more. A decoding constraint that forces the call makes small models
loop, as ``required`` does; a gateway in front of self-hosted models
reported this narrowing raising the turns that call the tool from 16% to
70%. ``bench/named_tool.py`` measures it on a scripted model.

*Narrowed tools* (``--narrow-tools auto``; ``server/narrowing.py`` decides,
``streamfix/narrow.py`` ranks): the model is shown the few tools the turn
needs, with an instruction made from their descriptions
(``narrow_to_tools``), and the reply is held until a call. The chain still
knows every tool the client offered, so a call to one not shown is
accepted. A reply without a call is asked once more with every tool
(reason ``narrowed``): never worse than not narrowing, at the cost of a
second request. Not after a tool's result (``Decision.after_result``),
unless ``required``: there an answer in prose is how an agent's loop
ends, and asking again would double the cost of every final answer.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ..context import Report
from ..errors import UpstreamProtocolError
from ..narrow import Decision, NarrowNote
from ..spec import tools_of
from ..sse import SSEDecoder
from ..wire import Door
from . import tracing
from .metrics import Metrics
from .upstream.budget import BudgetPolicy, estimate_prompt_tokens, fit_prompt
from .upstream.engines import (
    asks_json_schema,
    prompt_tokens_from_error,
    refuses_json_schema,
    window_from_error,
)
from .upstream.pool import Upstream

log = logging.getLogger("streamfix.server")

#: The instruction added when ``tool_choice: "required"`` got prose back.
REQUIRED_INSTRUCTION = (
    "You must answer this turn by calling one of these tools: {names}. "
    "Reply with a tool call only, not with text."
)

#: The instruction sent with a named tool, narrowed to that tool alone.
NAMED_INSTRUCTION = (
    "Answer this turn by calling the tool {name}{purpose}. Reply with the call only."
)

#: The instruction added when a reply was not the JSON ``response_format``
#: asked for (``transforms/jsonout.py``), with the reason.
JSON_INSTRUCTION = (
    "Your previous reply was not valid for the requested JSON format: {error}. "
    "Reply with only the JSON value, no code fence and no text around it."
)
#: The instruction sent with the tools a turn was narrowed to: ``{tools}``
#: is ``name (purpose)`` for each.
NARROWED_INSTRUCTION = "For this turn, call the tool that fits among: {tools}."
#: ... and when ``tool_choice`` was ``"required"``.
NARROWED_REQUIRED = (
    "Answer this turn by calling one of these tools: {tools}. Reply with the call only."
)

#: Most characters of a tool's description quoted in that instruction.
MAX_PURPOSE_CHARS = 200
#: ... for each of the narrowed tools (the instruction stays one line).
MAX_NARROWED_PURPOSE = 80


class Attempt:
    """What one request's successive upstream attempts share: the body
    asked with (before each row's budget), and the reasons already used."""

    __slots__ = (
        "body",
        "called",
        "done",
        "door",
        "full",
        "json_error",
        "named",
        "narrowed",
        "reasks",
        "soft",
    )

    def __init__(
        self,
        body: dict[str, Any],
        soft: bool,
        door: Door | None = None,
        named: bool = False,
        narrowed: Decision | None = None,
        full: dict[str, Any] | None = None,
    ) -> None:
        self.body = body  # sent upstream (before the per-upstream budget)
        self.soft = soft  # held until a call; asked again without one
        self.named = named  # narrowed to the one tool tool_choice named
        self.door = door  # the front door the request came in by, if not chat
        #: The tools were narrowed (``narrow.Decision``); ``full``: the body
        #: with every tool, asked with when the narrowed reply has no call.
        self.narrowed = narrowed if narrowed is not None and narrowed.narrowed else None
        self.full = full
        #: The names the narrowed replies called (``narrow.NarrowNote``).
        self.called: set[str] = set()
        self.reasks = 0
        self.done: set[str] = set()  # re-ask reasons used
        self.json_error: str | None = None  # why the JSON asked for was not it

    @property
    def narrowing(self) -> bool:
        """This attempt is sent with the narrowed tools."""
        return self.narrowed is not None and "narrowed" not in self.done

    @property
    def wants_call(self) -> bool:
        """The reply is held until a call (``required`` under ``--required
        soft``, a named tool, or narrowed tools on a turn that does not
        follow a tool's result)."""
        return self.soft or self.narrowing_wants_call

    @property
    def narrowing_wants_call(self) -> bool:
        """Narrowed, and a reply without a call is asked again with every
        tool: not after a tool's result, where an answer in prose ends the
        agent's loop (asking again would double the cost of every final
        answer), unless ``required``."""
        if not self.narrowing:
            return False
        assert self.narrowed is not None
        return self.soft or not self.narrowed.after_result

    def options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The chain's ``options`` for this attempt: a narrowed one notes
        what was kept on the reply and which tools it called."""
        if not self.narrowing:
            return options
        assert self.narrowed is not None
        step = NarrowNote.factory(self.narrowed.note(), self.called)
        return {**options, "transforms": (*options.get("transforms", ()), step)}


def with_required_instruction(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with an instruction naming the offered tools."""
    return with_instruction(body, REQUIRED_INSTRUCTION.format(names=", ".join(tools_of(body))))


def named_tool(body: dict[str, Any]) -> str | None:
    """The offered function tool that ``tool_choice`` names, if any."""
    choice = body.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") != "function":
        return None
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) and name in tools_of(body) else None


def purpose_of(tool: dict[str, Any], limit: int = MAX_PURPOSE_CHARS) -> str:
    """A tool's purpose in its own wording: the first sentence of its
    description, at most ``limit`` characters ("" without one)."""
    fn = tool.get("function")
    desc = fn.get("description") if isinstance(fn, dict) else None
    if not isinstance(desc, str) or not desc.strip():
        return ""
    first = desc.strip().split("\n", 1)[0].split(". ", 1)[0].rstrip(". ")
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0] + "…"
    return first


def _only(body: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """The function tools of ``body`` named in ``names``, in that order."""
    by_name: dict[str, dict[str, Any]] = {}
    for t in body["tools"]:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            by_name.setdefault(fn["name"], t)
    return [by_name[n] for n in names if n in by_name]


def narrow_to_tool(body: dict[str, Any], name: str) -> dict[str, Any]:
    """``body`` offering only the function tool ``name``, with
    ``tool_choice: "auto"`` and an instruction to call it, in the tool's
    own wording: the first sentence of its description."""
    tools = _only(body, [name])
    first = purpose_of(tools[0]) if tools else ""
    purpose = f" ({first})" if first else ""
    out = {**body, "tools": tools, "tool_choice": "auto"}
    return with_instruction(out, NAMED_INSTRUCTION.format(name=name, purpose=purpose))


def narrow_to_tools(
    body: dict[str, Any], names: list[str], required: bool | None = None
) -> dict[str, Any]:
    """``body`` offering only the function tools ``names`` (the ranking's
    choice), with ``tool_choice: "auto"`` and a one-line instruction naming
    them with their purposes (``purpose_of``). ``required`` (default: the
    body's ``tool_choice``; the client's, when ``--required soft`` already
    sent ``auto``) keeps its force in the instruction's words, not as a
    decoding constraint."""
    tools = _only(body, names)
    listed = []
    for t in tools:
        first = purpose_of(t, MAX_NARROWED_PURPOSE)
        name = t["function"]["name"]
        listed.append(f"{name} ({first})" if first else name)
    if required is None:
        required = body.get("tool_choice") == "required"
    template = NARROWED_REQUIRED if required else NARROWED_INSTRUCTION
    out = {**body, "tools": tools, "tool_choice": "auto"}
    return with_instruction(out, template.format(tools="; ".join(listed)))


def with_instruction(body: dict[str, Any], text: str) -> dict[str, Any]:
    """``body`` with ``text`` merged into the first system message
    (several chat templates reject a system message anywhere but first)
    or added as one."""
    messages = [dict(m) for m in body["messages"]]
    first = messages[0]
    if first.get("role") in ("system", "developer") and isinstance(first.get("content"), str):
        first["content"] = f"{first['content']}\n\n{text}"
    else:
        messages.insert(0, {"role": "system", "content": text})
    out = dict(body)
    out["messages"] = messages
    return out


#: The schema stated to a model whose server refused ``json_schema``.
SCHEMA_INSTRUCTION = "Reply with one JSON value that matches this JSON Schema: {schema}"
#: Longest schema quoted to the model when ``json_schema`` goes as
#: ``json_object`` (a longer one is left out of the instruction).
MAX_SCHEMA_QUOTED = 4000


def json_object_instead(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its ``json_schema`` format sent as ``json_object`` (the
    JSON mode nearly every server has), the schema stated to the model in
    the system message instead, for an upstream that refused the format
    (``Learned.json_schema_refused``). The reply is still held to the
    schema by the chain (``transforms/jsonout.py``): it reads the client's
    request, not this body."""
    fmt = body["response_format"]
    spec = fmt.get("json_schema")
    schema = orjson.dumps(spec.get("schema", {}) if isinstance(spec, dict) else {}).decode()
    out = {**body, "response_format": {"type": "json_object"}}
    if len(schema) > MAX_SCHEMA_QUOTED or not out.get("messages"):
        return out
    return with_instruction(out, SCHEMA_INSTRUCTION.format(schema=schema))


def raise_allowance(
    body: dict[str, Any], sent: dict[str, Any] | None, reservation: int
) -> dict[str, Any]:
    """``body`` asking for twice the output tokens last sent (the budget
    clamps the result to the window). A request that set no limit is left
    as is: the engine already allowed what fits."""
    out = dict(body)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int):
            cur = (sent or body).get(key) or body[key] or reservation
            out[key] = max(int(cur) * 2, body[key])
    return out


def count_trim(metrics: Metrics, up: Upstream, info: dict[str, Any]) -> None:
    """A prompt was trimmed to fit ``up``'s window: counted and logged."""
    metrics.prompt_trims.inc()
    log.info("prompt trimmed for %s: %s", up.name, info)


class AskAgain:
    """The policy: whether to ask again, and the body to ask with."""

    __slots__ = ("max_reasks", "metrics", "policy")

    def __init__(self, max_reasks: int, policy: BudgetPolicy, metrics: Metrics) -> None:
        self.max_reasks = max_reasks
        self.policy = policy
        self.metrics = metrics

    def reason(self, att: Attempt, report: Report, calls: int) -> str | None:
        """Why the repaired reply is to be asked again, or None."""
        if att.reasks >= self.max_reasks:
            return None
        # a cut-off call also leaves the reply empty: the specific reason first
        if report.truncated_call and "truncated_call" not in att.done:
            return "truncated_call"
        if report.empty_after_repair and "empty" not in att.done:
            return "empty"
        if att.narrowing_wants_call and calls == 0:
            return "narrowed"
        if att.soft and calls == 0 and "required" not in att.done:
            return "required"
        if report.json_invalid and "json" not in att.done:
            att.json_error = report.json_invalid
            return "json"
        return None

    def settle(self, att: Attempt, calls: int) -> None:
        """The reply the client gets is final: a named tool's outcome, and
        a narrowed request's, is counted."""
        if att.named:
            outcome = "no_call" if not calls else "called"
            if calls and "required" in att.done:
                outcome = "called_after_reask"
            self.metrics.named_tool.labels(outcome).inc()
        if att.narrowed is not None:
            kept = set(att.narrowed.kept or ())
            if "narrowed" in att.done:
                outcome = "asked_again"
            elif att.called & kept:
                outcome = "kept"
            elif att.called:
                outcome = "hidden"
            else:
                outcome = "no_call"
            self.metrics.narrowed.labels(outcome).inc()

    def next_body(self, att: Attempt, reason: str, sent: dict[str, Any]) -> None:
        """``att.body`` for asking again for ``reason`` (counted)."""
        att.reasks += 1
        att.done.add(reason)
        self.metrics.reasks.labels(reason).inc()
        tracing.reasked(reason)
        if reason == "truncated_call":
            att.body = raise_allowance(att.body, sent.get("body"), self.policy.output_reservation)
        elif reason == "narrowed":
            assert att.full is not None
            att.body = att.full
        elif reason == "required":
            att.body = with_required_instruction(att.body)
        elif reason == "json":
            error = att.json_error or "not JSON"
            if error.startswith("cut off"):
                att.body = raise_allowance(
                    att.body, sent.get("body"), self.policy.output_reservation
                )
            att.body = with_instruction(att.body, JSON_INSTRUCTION.format(error=error))

    def format_refused(self, up: Upstream, att: Attempt, status: int, error: bytes) -> bool:
        """An upstream's refusal of ``response_format: json_schema``
        (``engines.refuses_json_schema``): learned for the model on that
        row, so this and later requests go as ``json_object``
        (``exchange.budgeted``), and asked again once. The model never ran,
        so it is no re-ask of the model: ``max_reasks`` is not spent."""
        if "format" in att.done or not asks_json_schema(att.body):
            return False
        if not refuses_json_schema(status, error):
            return False
        up.learn(up.served(att.body.get("model"))).json_schema_refused = True
        att.done.add("format")
        self.metrics.reasks.labels("format").inc()
        tracing.reasked("format")
        return True

    def context_exceeded(self, up: Upstream, att: Attempt, error: bytes) -> bool:
        """An upstream's ``context_length_exceeded`` error (``error``: the
        body of its HTTP 400, or an error event of its stream, never a
        reply's text: ``stream_error``): learn the window for the model
        asked (``Upstream.learn_window``) and say whether to ask again
        (once)."""
        if b"context_length_exceeded" not in error or "context" in att.done:
            return False
        window = window_from_error(error)
        if window is None or att.reasks >= self.max_reasks:
            return False
        model = up.served(att.body.get("model"))
        up.learn_window(model, window)
        prompt = prompt_tokens_from_error(error)
        estimate = estimate_prompt_tokens(att.body)
        if prompt and estimate:
            up.learn(model).token_scale = prompt / estimate
        # The prompt itself may be what does not fit: clamping the reply
        # alone cannot help then (llama.cpp lowers max_tokens by itself).
        scale = up.token_scale(model)
        att.body, trim = fit_prompt(att.body, window, self.policy, scale=scale)
        if trim is not None:
            count_trim(self.metrics, up, trim)
        att.reasks += 1
        att.done.add("context")
        self.metrics.reasks.labels("context").inc()
        tracing.reasked("context")
        return True


def stream_error(held: bytes) -> bytes | None:
    """The first error event in a stream's held bytes (an SSE event whose
    data is a JSON object with ``error`` and no ``choices``: what
    llama.cpp sends on an overflow in a 200 stream), or None. The text a
    model wrote is in ``choices`` and is never read as an error: what a
    model says must not set anyone's budget."""
    decoder = SSEDecoder()
    try:
        events = [*decoder.feed(held), *decoder.close()]
    except UpstreamProtocolError:
        return None
    for event in events:
        data = event.data
        if not data or not data.lstrip().startswith(b"{") or b'"error"' not in data:
            continue
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "error" in obj and "choices" not in obj:
            return data
    return None
