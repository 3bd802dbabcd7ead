"""The request side of a chat request: what goes upstream, and why, as one
ordered list of steps (the response side's counterpart, ``chain.py``).

Each step is a small pure function ``(body, facts) -> (body, note)``: the
body it returns is the argument itself when the step changes nothing and a
new dict otherwise (the argument is never modified, so a body is copied
only where something changes); the note (``Note``, or None) says what the
step did. The steps, in the order they run::

    the client's body
      ─► named_tool     ``--required soft``, ``tool_choice`` names X: only X
                        is sent, with ``"auto"`` and an instruction from X's
                        description (``reask.py``: why)
      ─► soft_required  ``--required soft``, ``"required"``: sent as ``"auto"``,
                        the reply held until a call
      ─► narrowed       ``--narrow-tools``: the few tools the turn needs
                        (``narrowing.decide``, awaited before: its
                        ``Decision`` is passed in)
      ─► ask_again      a reason to ask again (``reask.AskAgain``): twice the
                        allowance, an instruction, every tool again, the
                        prompt fitted to a learned window
    for each row tried (``Exchange.open``):
      ─► served_model   the model named as the row's server knows it
      ─► budget         the oldest turns dropped when the prompt cannot fit
                        (the server's own count, ``upstream/tokens.py``,
                        awaited before and passed in), ``max_tokens`` within
                        the window
      ─► json_fallback  ``json_object`` instead of a ``json_schema`` the row's
                        server refused
      ─► engine         engine fields (``engines.engine_fields``)

``Plan`` holds what one request's attempts share and the notes of what
was sent and why: the narrowing goes into the recording
(``record.narrowed``), the budget's trim and clamp into the metrics and
the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from ..narrow import Decision, NarrowNote
from ..spec import ToolSpec, tools_of
from ..wire import Door
from .upstream.budget import BudgetPolicy, estimate_prompt_tokens, fit_prompt, fit_request
from .upstream.engines import UpstreamInfo, asks_json_schema, engine_fields

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

#: The schema stated to a model whose server refused ``json_schema``.
SCHEMA_INSTRUCTION = "Reply with one JSON value that matches this JSON Schema: {schema}"
#: Longest schema quoted to the model when ``json_schema`` goes as
#: ``json_object`` (a longer one is left out of the instruction).
MAX_SCHEMA_QUOTED = 4000


class Note(NamedTuple):
    """What one step did: its name and what it changed (``detail``)."""

    step: str
    detail: Any = None


Step = tuple[dict[str, Any], Note | None]


# --------------------------------------------------------------------------
# The body's rewrites


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


def with_required_instruction(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with an instruction naming the offered tools."""
    return with_instruction(body, REQUIRED_INSTRUCTION.format(names=", ".join(tools_of(body))))


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


# --------------------------------------------------------------------------
# The request's steps


def named_step(body: dict[str, Any], soft: bool) -> Step:
    """Under ``--required soft``, a ``tool_choice`` naming an offered tool:
    that tool alone, asked for in words (``narrow_to_tool``)."""
    name = named_tool(body) if soft and body.get("tools") else None
    if name is None:
        return body, None
    return narrow_to_tool(body, name), Note("named_tool", name)


def soft_required_step(
    body: dict[str, Any], soft: bool, tools: Mapping[str, Any] | None = None
) -> Step:
    """Under ``--required soft``, ``tool_choice: "required"`` with tools
    offered (``tools``: ``context.tools_of(body)``, when already read) goes
    as ``"auto"``: the reply is held until a call and asked again without
    one, instead of a decoding constraint that makes small models loop."""
    if not (soft and body.get("tool_choice") == "required"):
        return body, None
    if not (tools_of(body) if tools is None else tools):
        return body, None
    return {**body, "tool_choice": "auto"}, Note("soft_required")


def narrowed_step(body: dict[str, Any], decision: Decision | None, required: bool) -> Step:
    """``--narrow-tools``: the tools ``decision`` kept, with an instruction
    naming them (``required``: the client's ``tool_choice`` was)."""
    if decision is None or decision.kept is None:
        return body, None
    return narrow_to_tools(body, decision.kept, required=required), Note(
        "narrowed", decision.note()
    )


def ask_again_step(
    body: dict[str, Any],
    reason: str,
    *,
    sent: dict[str, Any] | None = None,
    reservation: int = 0,
    full: dict[str, Any] | None = None,
    json_error: str | None = None,
) -> Step:
    """The body for asking again for ``reason``: twice the allowance last
    ``sent`` (``truncated_call``), every tool (``narrowed``: ``full``), an
    instruction naming the tools (``required``), the JSON error in an
    instruction and, when the reply was cut inside it, twice the allowance
    (``json``). Another reason asks with the same body."""
    if reason == "truncated_call":
        body = raise_allowance(body, sent, reservation)
    elif reason == "narrowed":
        assert full is not None
        body = full
    elif reason == "required":
        body = with_required_instruction(body)
    elif reason == "json":
        error = json_error or "not JSON"
        if error.startswith("cut off"):
            body = raise_allowance(body, sent, reservation)
        body = with_instruction(body, JSON_INSTRUCTION.format(error=error))
    return body, Note("ask_again", reason)


def refit_step(body: dict[str, Any], window: int, policy: BudgetPolicy, scale: float = 1.0) -> Step:
    """The prompt fitted to a window an upstream's refusal taught
    (``context_length_exceeded``: known not to fit)."""
    out, trim = fit_prompt(body, window, policy, scale=scale)
    return out, Note("trim", trim) if trim is not None else None


# --------------------------------------------------------------------------
# Each row's steps


def served_model_step(body: dict[str, Any], model: str | None) -> Step:
    """``body`` naming the model as the row's server knows it (``model``:
    the row's; None, a catch-all row, sends the client's name on)."""
    if model is None or body.get("model") == model:
        return body, None
    return {**body, "model": model}, Note("served_model", model)


def budget_step(
    body: dict[str, Any],
    window: int | None,
    policy: BudgetPolicy,
    scale: float = 1.0,
    reasons: bool = False,
    counted: int | None = None,
) -> Step:
    """The request fitted to the row's ``window`` (``budget.fit_request``):
    the oldest turns dropped when not even the smallest reply would fit
    (``counted``: the server's own count of the prompt, which decides
    instead of the estimate times ``scale``), then ``max_tokens``
    (``max_completion_tokens``) clamped, with the reasoning allowance for
    a model that ``reasons`` on the row unless the request switched
    thinking off. The note: ``{"trim": …, "clamp": …}``, what each did."""
    out, trim, clamp = fit_request(
        body, window, policy, scale=scale, counted=counted, reasons=reasons
    )
    if trim is None and clamp is None:
        return body, None
    detail = {k: v for k, v in (("trim", trim), ("clamp", clamp)) if v is not None}
    return out, Note("budget", detail)


def engine_step(body: dict[str, Any], info: UpstreamInfo) -> Step:
    """The row's engine fields (``engines.engine_fields``)."""
    extra = engine_fields(body, info)
    if not extra:
        return body, None
    return {**body, **extra}, Note("engine", extra)


def json_fallback_step(body: dict[str, Any], refused: bool) -> Step:
    """``json_object`` instead of ``json_schema`` for a row whose server
    refused that format (``refused``, learned), the schema in words."""
    if not refused or not asks_json_schema(body):
        return body, None
    return json_object_instead(body), Note("json_fallback")


class Row(NamedTuple):
    """What a row's steps read of the row, as plain values: its name for
    the model, that model's window and token scale there, whether it
    reasons there, the engine, and whether its server refused
    ``json_schema``."""

    model: str | None
    window: int | None = None
    scale: float = 1.0
    reasons: bool = False
    info: UpstreamInfo | None = None
    refuses_json_schema: bool = False


def for_row(
    body: dict[str, Any], row: Row, policy: BudgetPolicy, counted: int | None = None
) -> tuple[dict[str, Any], list[Note]]:
    """The row's steps in order: (the body sent, their notes)."""
    notes: list[Note] = []
    body, note = served_model_step(body, row.model)
    if note is not None:
        notes.append(note)
    body, note = budget_step(body, row.window, policy, row.scale, row.reasons, counted)
    if note is not None:
        notes.append(note)
    # the JSON fallback and the engine fields touch different fields: in
    # either order the same body
    body, note = json_fallback_step(body, row.refuses_json_schema)
    if note is not None:
        notes.append(note)
    if row.info is not None:
        body, note = engine_step(body, row.info)
        if note is not None:
            notes.append(note)
    return body, notes


def noted(notes: list[Note], step: str) -> Any:
    """The detail of the note of ``step`` among ``notes`` (None without one)."""
    for n in notes:
        if n.step == step:
            return n.detail
    return None


# --------------------------------------------------------------------------
# The plan


class Plan:
    """A chat request's plan: the body the chain reads (``client``), the
    body asked with (``body``, before each row's steps), the notes of what
    the steps did, and what the request's successive attempts share (the
    reasons already used, for ``reask.AskAgain``)."""

    __slots__ = (
        "body",
        "called",
        "client",
        "done",
        "door",
        "full",
        "json_error",
        "named",
        "narrowed",
        "notes",
        "prompt_tokens",
        "reasks",
        "row_notes",
        "shown",
        "soft",
        "tools",
    )

    def __init__(
        self,
        body: dict[str, Any],
        soft: bool,
        door: Door | None = None,
        named: bool = False,
        narrowed: Decision | None = None,
        full: dict[str, Any] | None = None,
        client: dict[str, Any] | None = None,
        tools: dict[str, ToolSpec] | None = None,
    ) -> None:
        self.body = body  # sent upstream (before the per-row steps)
        self.client = body if client is None else client  # what the chain reads
        #: The function tools the chain knows (``context.tools_of``): the
        #: client's, or the one a named tool narrowed to.
        self.tools = tools_of(self.client) if tools is None else tools
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
        #: What the request's steps did, in order; ``row_notes``: the last
        #: row's (``for_row``).
        self.notes: list[Note] = []
        self.row_notes: list[Note] = []
        #: What narrowing showed the model (``narrow.Decision.note``: the
        #: tools kept, of how many), for the recording; None: not narrowed.
        self.shown: dict[str, Any] | None = None
        #: The estimate of the client's prompt (``budget.estimate_prompt_tokens``):
        #: the usage a front door reports when the upstream sends none, and
        #: what a tokens-per-minute limit counts as the request starts.
        self.prompt_tokens = estimate_prompt_tokens(self.client)

    @property
    def admitted_tokens(self) -> int:
        """What a request counts against a tokens-per-minute limit as it
        starts: its prompt's estimate and its ``max_tokens`` (corrected by
        the reply's usage as it ends)."""
        out = self.client.get("max_tokens") or self.client.get("max_completion_tokens")
        return self.prompt_tokens + (out if isinstance(out, int) else 0)

    @classmethod
    def of(
        cls,
        body: dict[str, Any],
        *,
        soft: bool,
        narrowed: Decision | None = None,
        door: Door | None = None,
    ) -> Plan:
        """The request's steps on the client's ``body`` (``soft``:
        ``--required soft``; ``narrowed``: ``narrowing.decide``'s answer,
        awaited before, which never narrows a named tool)."""
        up, note = named_step(body, soft)
        if note is not None:
            # The chain lifts only what the model was shown: the one tool.
            plan = cls(up, True, door, True, full=up, client={**body, "tools": up["tools"]})
            plan.notes.append(note)
            return plan
        tools = tools_of(body)
        up, note = soft_required_step(body, soft, tools)
        held = note is not None
        plan = cls(up if held else dict(body), held, door, client=body, tools=tools)
        if note is not None:
            plan.notes.append(note)
        plan.full = plan.body
        if narrowed is not None:
            plan.narrow(narrowed)
        return plan

    def narrow(self, decision: Decision | None) -> None:
        """``narrowing.decide``'s answer applied (``narrowed_step``)."""
        self.narrowed = decision if decision is not None and decision.narrowed else None
        required = self.client.get("tool_choice") == "required"
        self.body, note = narrowed_step(self.body, decision, required)
        if note is not None:
            self.notes.append(note)
            self.shown = note.detail

    def again(self, reason: str, sent: dict[str, Any] | None, reservation: int) -> None:
        """Replanned for asking again for ``reason`` (``ask_again_step``)."""
        self.body, note = ask_again_step(
            self.body,
            reason,
            sent=sent,
            reservation=reservation,
            full=self.full,
            json_error=self.json_error,
        )
        self.notes.append(note or Note("ask_again", reason))

    def refit(self, window: int, policy: BudgetPolicy, scale: float) -> dict[str, Any] | None:
        """Replanned to fit ``window`` (``refit_step``); the trim, if any."""
        self.body, note = refit_step(self.body, window, policy, scale)
        self.notes.append(Note("ask_again", "context"))
        if note is None:
            return None
        self.notes.append(note)
        trim: dict[str, Any] = note.detail
        return trim

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

    def options(self, options: dict[str, Any], max_reasks: int) -> dict[str, Any]:
        """The chain's ``options`` (the row's, ``exchange.chain_options``)
        for this attempt. A narrowed one notes what was kept on the reply
        and which tools it called. While the reply may still be asked
        again for coming out empty (``max_reasks`` not spent), a call
        region the model wrote but that reads as nothing is held back
        (``Options.hold_unreadable``): the reply is then empty, and the
        model gets another try; on the last attempt it is given back as
        text."""
        if "empty" not in self.done and self.reasks < max_reasks:
            options = {**options, "hold_unreadable": True}
        if not self.narrowing:
            return options
        assert self.narrowed is not None
        step = NarrowNote.factory(self.narrowed.note(), self.called)
        return {**options, "transforms": (*options.get("transforms", ()), step)}
