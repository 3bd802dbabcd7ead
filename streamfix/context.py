"""What one request tells the chain, and what the chain reports back.

``Context`` is built once per request from the client's body (its ``tools``,
``tool_choice`` and ``parallel_tool_calls``) and the caller's options. ``Report`` is the chain's
side channel to the I/O layer and the metrics: what was repaired, whether
the stream was cut (so the proxy closes the upstream at once), whether the
reply came out empty or with a cut-off call (so the proxy can ask again).
Both are plain data; nothing here does I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .formats.registry import load_entry_points, reasoning_models
from .spec import JsonSpec, ToolSpec, json_spec, tools_of

if TYPE_CHECKING:
    from .delta import Transform

#: What makes a user step for one choice of one request: called with the
#: request's ``Context`` (a ``Transform`` class is one).
TransformFactory = Callable[["Context"], "Transform"]

#: Characters of the start of a reply held while it may be an unopened
#: reasoning section (about 500 tokens); see ``transforms/reasoning.py``.
UNOPENED_HOLD = 2048

#: Unrecognised-markup samples kept per stream; each is at most
#: ``SAMPLE_CHARS`` long. Enough to show the next shape to a maintainer,
#: bounded so that a hostile stream cannot grow memory through them.
MAX_SAMPLES = 8
SAMPLE_CHARS = 200


@dataclass(slots=True)
class Options:
    """Keyword options of ``fix_sse`` / ``fix_chunks`` / ``fix_completion``.

    Each repair can be switched off alone; the defaults are what a user of
    the proxy gets.
    """

    lift: bool = True  # lift tool calls written as text (needs ``tools``)
    strip: bool = True  # strip residual call markup (needs ``tools``)
    split_reasoning: bool = True  # reasoning markup to reasoning_content (needs ``tools``)
    repetition: bool = True  # cut repetition loops
    keepalive: bool = True  # SSE comments while text is held
    max_event_bytes: int = 4 * 1024 * 1024  # see sse.MAX_EVENT_BYTES
    #: Longest call the detector holds (characters). A region that grows
    #: past it is not a call anyone can use: it is released/stripped as the
    #: detector documents, and counted.
    max_call_chars: int = 256 * 1024
    #: A call region the detector recognised but can read nothing in (a
    #: closed ``<tool_call>`` around broken JSON, a wrapper cut off with no
    #: ``length`` finish) is given back: it goes out as text, counted
    #: ``given_back.unreadable``, never as nothing. True holds it back
    #: instead (removed, counted ``stripped.unparsed_call``): for a caller
    #: that asks again when the reply comes out empty (the proxy does, on
    #: every attempt but its last), so that the model gets another try
    #: before the user sees raw call syntax.
    hold_unreadable: bool = False
    #: How much of the start of a reply the reasoning splitter holds while
    #: it may be a reasoning section the prompt opened (only its close
    #: arrives). Holding delays the first text of every
    #: reply, so ``None`` (auto) holds ``reasoning.UNOPENED_HOLD`` characters
    #: only for a request that looks like it goes to a reasoning model (see
    #: ``looks_like_reasoning``), else nothing; the proxy also holds for an
    #: upstream it has seen reasoning. An integer sets it (0: never).
    unopened_reasoning_hold: int | None = None
    #: The chat template is known to open the reasoning in the prompt (the
    #: proxy learns it per row and model from a close that had no open).
    #: Only then, or for a request that asks a reasoning model
    #: (``looks_like_reasoning``), is a reply cut by the token limit inside
    #: the hold, with no reasoning markup at all, taken for reasoning;
    #: otherwise it is the answer, cut (``transforms/reasoning.py``). Never
    #: when the request switches thinking off.
    prompt_opens_reasoning: bool = False
    #: User steps (``docs/extending.md``): factories called once per choice
    #: with the request's ``Context``, each returning a ``Transform``. They
    #: run after the built-in repairs, in this order, on every reply (tools
    #: offered or not).
    transforms: tuple[TransformFactory, ...] = ()

    @classmethod
    def of(cls, options: dict[str, Any]) -> Options:
        known = cls.__dataclass_fields__
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"unknown streamfix option(s): {', '.join(unknown)}")
        steps = options.get("transforms")
        if steps is not None and not isinstance(steps, tuple):
            if callable(steps):
                raise TypeError("transforms: a list of step factories, not one")
            options = {**options, "transforms": tuple(steps)}
        return cls(**options)


@dataclass(slots=True)
class Report:
    """What the chain did to one stream. Read by the proxy and metrics."""

    counts: Counter[str] = field(default_factory=Counter)
    #: Set when a transformer ended the turn early, e.g.
    #: ``{"cut": "repetition", "period": 12}``. The I/O layer must stop
    #: reading and close the upstream request.
    cut: dict[str, Any] | None = None
    #: A tool call was cut off by the output limit (no call was returned).
    truncated_call: bool = False
    #: The reply is empty after repair (no text, no call): ask again.
    empty_after_repair: bool = False
    unrecognised: list[str] = field(default_factory=list)
    #: Replies that may hold a call nothing lifted (``transforms/missed.py``).
    missed: list[str] = field(default_factory=list)
    #: The reply carried reasoning (upstream ``reasoning_content`` or a
    #: reasoning markup): the model reasons before answering, so the
    #: proxy gives it a larger output allowance next time.
    reasoning: bool = False
    #: The reasoning had no open: a close ended reasoning the chat
    #: template opened in the prompt.
    prompt_opened_reasoning: bool = False
    #: The request asked for JSON (``response_format``) and the reply is
    #: not what it asked for, even repaired: why, in a sentence (the proxy
    #: asks again with it when nothing was sent yet; ``transforms/jsonout.py``).
    json_invalid: str | None = None
    #: Each choice's finish reason as the chain sent it, after repair
    #: (``tool_calls`` for a lifted call, ``length`` for a cut loop), by
    #: choice index: what the client got (the traces' server span).
    finish_reasons: dict[int, str] = field(default_factory=dict)
    #: The tokens counted as unrecognised while a later step could still
    #: strip them (``sample_unrecognised(token=…)``), by text.
    watched: Counter[str] = field(default_factory=Counter)

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n

    def sample_unrecognised(self, text: str, token: str | None = None) -> None:
        """Count and sample markup nothing handled. ``token``: the whole
        token it starts with, when a later step may strip it (``handled``)."""
        self.counts["unrecognised_markup"] += 1
        if token is not None:
            self.watched[token] += 1
        if len(self.unrecognised) < MAX_SAMPLES:
            self.unrecognised.append(text[:SAMPLE_CHARS])

    def sample_missed(self, text: str) -> None:
        self.counts["possible_missed_call"] += 1
        if len(self.missed) < MAX_SAMPLES:
            self.missed.append(text[:SAMPLE_CHARS])

    def handled(self, token: str) -> None:
        """A step stripped ``token``: if it was counted as unrecognised, it
        no longer is (one reply, one account: stripped, not unrecognised)."""
        if not self.watched[token]:
            return
        self.watched[token] -= 1
        if not self.watched[token]:
            del self.watched[token]
        self.counts["unrecognised_markup"] -= 1
        if not self.counts["unrecognised_markup"]:
            del self.counts["unrecognised_markup"]
        at = next((i for i, s in enumerate(self.unrecognised) if s.startswith(token)), None)
        if at is not None:
            del self.unrecognised[at]


def thinking_switch(request: dict[str, Any]) -> bool | None:
    """What the request says of thinking: ``chat_template_kwargs``
    ``enable_thinking`` or ``thinking`` (the templates' spellings; MiniMax
    M3's ``thinking_mode``: ``"enabled"``/``"disabled"``);
    else False when the latest user or system message that writes the
    soft switch writes ``/no_think`` (after any ``/think``); None when it
    says nothing."""
    kwargs = request.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        for key in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(key), bool):
                return bool(kwargs[key])
        mode = kwargs.get("thinking_mode")  # MiniMax M3's template
        if mode in ("enabled", "disabled"):
            return bool(mode == "enabled")
    messages = request.get("messages")
    if not isinstance(messages, list):
        return None
    for msg in reversed(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "system"):
            continue
        content = msg.get("content")
        if isinstance(content, list):
            content = " ".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if not isinstance(content, str):
            continue
        off, on = content.rfind("/no_think"), content.rfind("/think")
        if off > on:
            return False
        if on >= 0:
            return None
    return None


#: ``looks_like_reasoning``'s ``switch`` when the caller has not read it.
_UNREAD: Any = object()


def looks_like_reasoning(request: dict[str, Any] | None, switch: Any = _UNREAD) -> bool:
    """The request asks a model that reasons before answering: a reasoning
    field (``reasoning_effort``, ``reasoning``, ``thinking``), thinking
    switched on in ``chat_template_kwargs``, or the name of a model that
    reasons by default (unless the request switched thinking off).
    ``switch``: ``thinking_switch(request)`` when the caller has it (it
    reads the messages)."""
    if not request:
        return False
    if switch is _UNREAD:
        switch = thinking_switch(request)
    if switch is not None:
        return bool(switch)
    if request.get("reasoning_effort") or request.get("reasoning") or request.get("thinking"):
        return True
    model = request.get("model")
    if not isinstance(model, str):
        return False
    # The families name their reasoning models (``REASONING_MODELS`` in
    # ``formats/``).
    return reasoning_models().search(model) is not None


#: Installed format plugins (the ``streamfix.formats`` entry points) are
#: loaded before the first request's context is made, not at import: a
#: plugin module may then import streamfix freely.
_plugins_pending = True


def _load_plugins() -> None:
    global _plugins_pending
    _plugins_pending = False
    load_entry_points(strict=False)


@dataclass(slots=True)
class Context:
    tools: dict[str, ToolSpec]
    tool_choice: Any
    options: Options
    report: Report
    #: Characters the reasoning splitter holds at the start of a reply
    #: (``Options.unopened_reasoning_hold`` resolved for this request).
    reasoning_hold: int = 0
    #: A reply cut inside the hold with no markup is reasoning: the
    #: template is known to open it in the prompt
    #: (``Options.prompt_opens_reasoning``), or the request asks a reasoning
    #: model (which also means it did not switch thinking off).
    prompt_opens_reasoning: bool = False
    #: What the request says of thinking (``thinking_switch``): off, a
    #: reasoning close in the reply is the answer's text, not markup.
    thinking: bool | None = None
    #: The request's model name ("" when none): some families' reasoning
    #: markup is prose in other models' replies (``Reasoning.models``).
    model: str = ""
    #: The request's ``parallel_tool_calls``: False allows one call per
    #: choice (the first emitted; the chain drops the rest, counted as
    #: ``dropped_call.parallel``).
    parallel_tool_calls: bool = True
    #: The JSON the request's ``response_format`` asks for
    #: (``spec.JsonSpec``); None: the reply is not JSON's business.
    json: JsonSpec | None = None

    @property
    def has_tools(self) -> bool:
        return bool(self.tools)

    @property
    def lifts(self) -> bool:
        """Calls written as text are lifted: tools offered, the option on,
        and ``tool_choice`` is not ``"none"`` (the client said no tool may
        run this turn: such text stays text; leftover markup is still
        stripped)."""
        return bool(self.tools) and self.options.lift and self.tool_choice != "none"

    @classmethod
    def of(cls, request: dict[str, Any] | None, options: dict[str, Any]) -> Context:
        if _plugins_pending:
            _load_plugins()
        opts = Options.of(options)
        switch = thinking_switch(request) if request else None
        named = looks_like_reasoning(request, switch)
        hold = opts.unopened_reasoning_hold
        if hold is None:
            hold = UNOPENED_HOLD if named else 0
        return cls(
            tools=tools_of(request),
            tool_choice=(request or {}).get("tool_choice"),
            options=opts,
            report=Report(),
            reasoning_hold=max(0, hold),
            prompt_opens_reasoning=(opts.prompt_opens_reasoning or named) and switch is not False,
            thinking=switch,
            model=model if isinstance(model := (request or {}).get("model"), str) else "",
            parallel_tool_calls=(request or {}).get("parallel_tool_calls") is not False,
            json=json_spec(request),
        )
