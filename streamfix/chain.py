"""The chain: per-choice transformer pipelines, and the chunks they emit.

``Chain`` is sans-I/O. It is fed decoded chunks (a ``ChunkView`` plus the
original, as bytes or a dict) and returns what to send on: ``PASS`` (send
the original unchanged — the fast path), new chunk dicts, or ``KEEPALIVE``
(text is being held; send an SSE comment so nobody times out). Each choice
index (``n > 1``) has its own pipeline:

    accumulate -> reasoning -> repetition -> detect -> residue -> json -> user steps

Only the repetition cutter runs when the request offered no tools: a reply
to such a request is never rewritten (docs/shapes.md, "Policies"), only cut if it
loops. A request that asks for JSON (``response_format``) also gets the
reasoning splitter and, last of the built-in steps, ``transforms/jsonout.py``.
User steps (``Options.transforms``, docs/extending.md) run last, on
every reply: they see lifted calls in ``Delta.calls`` and content with the
markup gone. A user step that raises ends its choice: the chain raises
``TransformError`` (``SSESession`` turns it into an error event); a
built-in step's exception is left as it is (a bug of ours).

*Chunks kept back whole.* In a reply whose JSON streams (``jsonout``'s
stream mode, or the lead before it), a chunk whose text the steps release
only in part (a comma, a key or a number at its end waits for the next
token) is not re-cut: the chain answers ``DEFER`` (keep this chunk's own
bytes back, send nothing) and watches what the steps release next. Each
kept chunk whose text has then come out exactly as it went in is sent as
it came (``RELEASE``: the oldest kept chunk's own bytes), in order, as
soon as it has. When the steps release anything else (a repair), or the
chunk carries anything else that changed, ``FORGET`` (drop the kept
chunks), then the chunks as they would have been sent without the keeping
(the same text and fields, so the client assembles the same reply at any
split). So a valid reply leaves as the upstream's own bytes, chunk by
chunk, with no more delay than the held tail had already. At most one
choice keeps chunks back at a time, at most ``MAX_KEPT_CHUNKS`` chunks or
``MAX_KEPT_CHARS`` characters of text (past that: ``FORGET``); a mount that
holds no bytes (``fix_chunks``) keeps the chunk objects instead. No
keep-alive is sent for a chunk kept back: the wait is a token or a few, and
the proxy keeps its client alive itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from . import jsoncodec
from .chunks import CONTENT, REASONING, ChoiceView, ChunkView, DeltaView, plain_text, view_of
from .context import Context
from .delta import Delta, ToolCall, Transform
from .delta import take_each as _take_each
from .errors import TransformError
from .transforms.accumulate import Accumulator
from .transforms.detect import ToolTagDetector
from .transforms.jsonout import JsonOutput
from .transforms.missed import MissedCalls
from .transforms.prompt_marker import PromptMarker
from .transforms.reasoning import ReasoningSplitter
from .transforms.repetition import UPSTREAM_CUT, RepetitionCutter, upstream_cut
from .transforms.residue import ResidueStripper
from .transforms.turn_end import TurnEnd


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


PASS: Final = _Marker("PASS")
KEEPALIVE: Final = _Marker("KEEPALIVE")
#: Keep this chunk's own bytes back; send nothing for it now.
DEFER: Final = _Marker("DEFER")
#: Send the oldest chunk kept back, as its own bytes.
RELEASE: Final = _Marker("RELEASE")
#: Drop the chunks kept back: what follows stands for them.
FORGET: Final = _Marker("FORGET")
Out = _Marker | dict[str, Any]
#: The answer for an unchanged chunk, shared (never mutated) to spare an
#: allocation per chunk.
PASS_ONLY: Final[list[Out]] = [PASS]
DEFER_ONLY: Final[list[Out]] = [DEFER]
#: Bounds on the chunks kept back (module doc).
MAX_KEPT_CHUNKS = 64
MAX_KEPT_CHARS = 4096

_OWNED_DELTA_KEYS = frozenset(
    {"content", "reasoning_content", "reasoning", "tool_calls", "function_call"}
)
_OWNED_CHOICE_KEYS = frozenset({"index", "delta", "message", "finish_reason", "streamfix"})


def build_pipeline(ctx: Context) -> list[Transform]:
    """The transformers of one choice, in order, as the context asks."""
    opts = ctx.options
    steps: list[Transform] = []
    if ctx.has_tools:
        steps.append(Accumulator(ctx))
    wants_json = ctx.json is not None
    splitter = (
        ReasoningSplitter(ctx) if (ctx.has_tools or wants_json) and opts.split_reasoning else None
    )
    if splitter is not None:
        steps.append(splitter)
    cutter = RepetitionCutter(ctx) if opts.repetition else None
    if cutter is not None:
        steps.append(cutter)
    if ctx.lifts:
        marker = PromptMarker.for_context(ctx)
        if marker is not None:
            steps.append(marker)
        detector = ToolTagDetector(ctx)
        steps.append(detector)
        if cutter is not None:
            # The cutter runs first; it asks the detector whether a counted
            # loop it finds in content is in a call held as text.
            cutter.watch_calls(detector.holds_call)
        if splitter is not None:
            # JSON in an answer channel of a family whose calls have their
            # own channel is the answer (``Reasoning.calls_apart``).
            detector.watch_answer(splitter.in_answer)
    if ctx.has_tools and opts.strip:
        # The turn's end first: what follows it is dropped, not stripped.
        steps.append(TurnEnd(ctx))
        steps.append(ResidueStripper(ctx))
    if ctx.lifts:
        steps.append(MissedCalls(ctx))
    if ctx.json is not None:
        json_step = JsonOutput(ctx, ctx.json)
        steps.append(json_step)
        if cutter is not None:
            # The JSON value asked for is data, as a call's arguments are.
            cutter.watch_calls(json_step.holds_value)
    for make in opts.transforms:
        steps.append(make(ctx))
    return steps


class _Lane:
    """A lane of one choice's steps (``delta.TextLane``): each step's method
    for one text, its index in the steps, and its method for a run."""

    __slots__ = ("accepts", "pos", "runs")

    def __init__(self) -> None:
        self.accepts: list[Callable[[str], bool]] = []
        self.pos: list[int] = []
        self.runs: list[Callable[[list[str], str], int]] = []


#: Each lane's step methods: one text, a run of texts, and the flag of a
#: step that the lane leaves out (calling it per chunk would only cost).
_LANE_METHODS = {
    "text": ("feed_text", "feed_texts", "ignores_content"),
    "reasoning": ("feed_reasoning", "feed_reasonings", "ignores_reasoning"),
}


def _lane_of(steps: list[Transform], kind: str) -> _Lane | None:
    """The ``kind`` lane of ``steps``, or None when a step has no method
    for it (then every such delta takes the full path)."""
    one, run, ignores = _LANE_METHODS[kind]
    lane = _Lane()
    for pos, step in enumerate(steps):
        if getattr(step, ignores, False):
            continue
        accepts = getattr(step, one, None)
        if accepts is None:
            return None
        lane.accepts.append(accepts)
        lane.pos.append(pos)
        runs = getattr(step, run, None)
        lane.runs.append(runs if runs is not None else partial(_take_each, accepts))
    return lane


class _Choice:
    """State of one choice index."""

    __slots__ = (
        "cut",
        "done",
        "index",
        "json",
        "n_calls",
        "reasoning_key",
        "reasoning_lane",
        "report",
        "room",
        "saw_output",
        "steps",
        "text_lane",
        "user_from",
    )

    def __init__(self, ctx: Context, index: int = 0) -> None:
        self.index = index
        self.steps = build_pipeline(ctx)
        #: The position of the first user step (``Options.transforms``).
        self.user_from = len(self.steps) - len(ctx.options.transforms)
        #: The JSON step, whose stream mode lets the chain keep chunks back.
        self.json = next((s for s in self.steps if isinstance(s, JsonOutput)), None)
        #: The plain-text and the reasoning lane (``delta.TextLane``).
        self.text_lane = _lane_of(self.steps, "text")
        self.reasoning_lane = _lane_of(self.steps, "reasoning")
        self.done = False
        self.cut = False
        self.n_calls = 0  # calls emitted so far: the next call's index
        self.reasoning_key = "reasoning_content"
        self.saw_output = False  # any text or call reached the client
        #: Calls this choice may still emit: one under
        #: ``parallel_tool_calls: false``, else any (-1).
        self.room = -1 if ctx.parallel_tool_calls else 1
        self.report = ctx.report

    def run(self, d: Delta, closing: bool, start: int = 0) -> None:
        if d.finish_reason == UPSTREAM_CUT:  # vLLM cut a loop: ended as ours are
            upstream_cut(d, self.report)
        try:
            for step in self.steps if not start else self.steps[start:]:
                if closing:
                    step.close(d)
                else:
                    step.feed(d)
                    if d.stop:
                        closing = True
        except Exception as exc:
            err = self.failed(self.steps.index(step), exc)
            if err is None:
                raise
            raise err from exc
        if d.calls and self.room >= 0:
            self._one_call(d)
        if closing:
            self.done = True
            self.cut = d.stop
            if d.finish_reason is not None:
                self.report.finish_reasons[self.index] = d.finish_reason

    def failed(self, pos: int, exc: Exception) -> TransformError | None:
        """Step ``pos`` raised ``exc``: a user step's ends the choice (no
        more output from it) and becomes a ``TransformError``; None for a
        built-in step's (raised as it is)."""
        if pos < self.user_from or isinstance(exc, TransformError):
            return None
        self.done = self.cut = True
        self.report.count("transform_error")
        step = self.steps[pos]
        cls = type(step)
        return TransformError(f"{cls.__module__}.{cls.__qualname__}", exc)

    def _one_call(self, d: Delta) -> None:
        """``parallel_tool_calls: false``: the first call emitted stays (from
        text or structured); the later ones are dropped and counted. Their
        markup was already taken out of the text by the detector."""
        calls = d.calls or []
        kept = calls[: self.room]
        if len(kept) < len(calls):
            self.report.count("dropped_call.parallel", len(calls) - len(kept))
        self.room -= len(kept)
        d.calls = kept or None


def delta_in(dv: DeltaView | None, finish_reason: str | None) -> Delta:
    """The Delta of a streamed ``delta`` or a whole ``message``."""
    if dv is None:
        return Delta(finish_reason=finish_reason)
    return Delta(
        content=dv.content,
        reasoning=dv.reasoning_content if dv.reasoning_content is not None else dv.reasoning,
        fragments=dv.tool_calls or None,
        finish_reason=finish_reason,
    )


def _delta_view(key: str, text: str) -> DeltaView:
    """The view of a delta whose only field is ``key``, holding ``text``."""
    if key == CONTENT:
        return DeltaView(content=text)
    if key == REASONING:
        return DeltaView(reasoning=text)
    return DeltaView(reasoning_content=text)


def _lane(st: _Choice, key: str) -> _Lane | None:
    """The lane of ``st`` that takes text of the field ``key``."""
    return st.text_lane if key == CONTENT else st.reasoning_lane


class _Kept:
    """Chunks of one choice kept back whole (module doc, ``Chain._one``),
    oldest first, with their texts joined and what the steps released of
    those texts (always a prefix of them)."""

    __slots__ = ("index", "items", "out", "text")

    def __init__(self, index: int) -> None:
        self.index = index
        self.items: deque[tuple[bytes | dict[str, Any], ChoiceView, Delta, int]] = deque()
        self.text = ""  # the kept chunks' content, joined
        self.out = ""  # what the steps released of it

    def add(self, original: bytes | dict[str, Any], ch: ChoiceView, d: Delta, text: str) -> None:
        self.items.append((original, ch, d, len(text)))
        self.text += text

    def release(self) -> int:
        """Drop the oldest chunks whose text was released whole (they go
        out as their own bytes); how many."""
        n = 0
        items = self.items
        while items and items[0][3] <= len(self.out):
            size = items.popleft()[3]
            if size:
                self.text = self.text[size:]
                self.out = self.out[size:]
            n += 1
        return n


class Chain:
    """Sans-I/O repair of one chat-completion stream (or one completion)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.report = ctx.report
        self._choices: dict[int, _Choice] = {}
        #: The last chunk seen, as a template for chunks we must create at
        #: end of stream (its id, model, created…).
        self._template: dict[str, Any] | None = None
        self._template_src: bytes | dict[str, Any] | None = None
        self._template_of: bytes | dict[str, Any] | None = None
        #: True once every choice ended by a cut: stop reading upstream.
        self.stopped = False
        #: Chunks kept back whole (module doc), or None.
        self._kept: _Kept | None = None

    @property
    def output_started(self) -> bool:
        """True once any text, reasoning or call has been emitted to the
        client (the role chunk and keep-alives do not count). Until then a
        proxy may still discard what it holds and ask the upstream again."""
        return any(st.saw_output for st in self._choices.values())

    @property
    def began(self) -> bool:
        """True once a chunk with a choice was read (not an error event,
        not a comment): the reply itself has begun."""
        return bool(self._choices)

    @property
    def holding_json(self) -> bool:
        """A choice's JSON is held until its end (``jsonout.JsonOutput``):
        a proxy keeps the reply back, so it can still ask again."""
        return any(
            st.json is not None and st.json.holding and not st.done for st in self._choices.values()
        )

    @property
    def calls_emitted(self) -> int:
        """How many complete tool calls have been emitted, all choices."""
        return sum(st.n_calls for st in self._choices.values())

    def _choice(self, index: int) -> _Choice:
        st = self._choices.get(index)
        if st is None:
            st = self._choices[index] = _Choice(self.ctx, index)
        return st

    # -- streaming ---------------------------------------------------------

    def feed(self, view: ChunkView, original: bytes | dict[str, Any]) -> list[Out]:
        """One chunk in; what to send on out (see module docstring)."""
        choices = view.choices
        if not choices or view.error is not None:
            return PASS_ONLY if self._kept is None else [*self._forget(), PASS]
        self._template_src = original
        if len(choices) == 1:
            # The common case, kept short: one choice, and most often
            # nothing to change.
            ch = choices[0]
            plain = plain_text(view)
            if plain is not None:
                index, text, key = plain
                out = (
                    self.feed_plain(index, text, original, ch)
                    if key == CONTENT
                    else self.feed_reasoning(index, text, key, original, ch)
                )
                if out is not None:
                    return out
            d, changed, alone = self._feed_choice(ch)
            if not changed and self._kept is None:
                return PASS_ONLY
            return self._one(ch, d, changed, alone, original)
        lead = self._forget() if self._kept is not None else []
        results: list[tuple[ChoiceView, Delta | None]] = []
        changed = False
        for ch in choices:
            d, ch_changed, _ = self._feed_choice(ch)
            changed = changed or ch_changed
            results.append((ch, d))
        if not changed:
            return [*lead, PASS] if lead else PASS_ONLY
        return [*lead, *self._changed(original, results)]

    def has_lane(self, index: int, key: str = CONTENT) -> bool:
        """Whether choice ``index`` takes plain text (or reasoning, for the
        key of a reasoning field) on its lane now (see ``feed_plain``)."""
        st = self._choices.get(index)
        return st is not None and not st.done and _lane(st, key) is not None

    def feed_plain(
        self,
        index: int,
        content: str,
        original: bytes | dict[str, Any],
        ch: ChoiceView | None = None,
    ) -> list[Out] | None:
        """A chunk whose only owned field is choice ``index``'s ``content``
        (no finish, no reasoning, no tool calls), on the plain-text lane.
        Returns what to send on, or None when this choice has no lane (the
        caller then feeds the chunk's view). ``ch``: the chunk's choice view,
        when the caller decoded one (else one is made if needed)."""
        st = self._choices.get(index)
        lane = st.text_lane if st is not None and not st.done else None
        if lane is None:
            return None
        assert st is not None
        self._template_src = original
        if self._kept is not None:
            return self._lane_from(st, 0, index, content, CONTENT, original, ch, True)
        try:
            for accepts in lane.accepts:  # (``_lane_from``, inlined: the hot path)
                if not accepts(content):
                    entry = lane.accepts.index(accepts)
                    return self._lane_from(st, entry, index, content, CONTENT, original, ch, True)
        except Exception as exc:
            err = st.failed(lane.pos[lane.accepts.index(accepts)], exc)
            if err is None:
                raise
            raise err from exc
        if not st.saw_output and content:
            st.saw_output = True
        return PASS_ONLY

    def feed_reasoning(
        self,
        index: int,
        text: str,
        key: str,
        original: bytes | dict[str, Any],
        ch: ChoiceView | None = None,
    ) -> list[Out] | None:
        """``feed_plain`` for a chunk whose only owned field is choice
        ``index``'s reasoning ``text``, in the field ``key``
        (``reasoning_content`` or ``reasoning``), on the reasoning lane."""
        st = self._choices.get(index)
        if st is None or st.done or st.reasoning_lane is None:
            return None
        self._template_src = original
        if key == REASONING:
            st.reasoning_key = key  # the server's own field name goes back out
        return self._lane_from(st, 0, index, text, key, original, ch)

    def _lane_from(
        self,
        st: _Choice,
        first: int,
        index: int,
        text: str,
        key: str,
        original: bytes | dict[str, Any],
        ch: ChoiceView | None = None,
        declined: bool = False,
    ) -> list[Out]:
        """``text`` (of the field ``key``) on its lane from entry ``first``
        on (the entries before it have taken it), then the full path from
        the entry that declines it, if one does. ``declined``: entry
        ``first`` has already seen and declined it, and is not asked again
        (a decline may keep its verdict for this very text: the repetition
        cutter's ``_lane_hit``): the full path from there at once."""
        lane = _lane(st, key)
        assert lane is not None
        entry = first
        if not declined and self._kept is None:
            try:
                for entry in range(first, len(lane.accepts)):
                    if not lane.accepts[entry](text):
                        break
                else:
                    if text:
                        self._saw(st, key)
                    return PASS_ONLY
            except Exception as exc:
                err = st.failed(lane.pos[entry], exc)
                if err is None:
                    raise
                raise err from exc
        if ch is None:
            ch = ChoiceView(index=index, delta=_delta_view(key, text))
        d, changed, alone = self._feed_choice(ch, start=lane.pos[entry])
        if not changed and self._kept is None:
            return PASS_ONLY
        return self._one(ch, d, changed, alone, original)

    def _saw(self, st: _Choice, key: str) -> None:
        """Text of the field ``key`` reached the client (``_note_output``)."""
        st.saw_output = True
        if key != CONTENT:
            self.report.reasoning = True

    def feed_plain_run(
        self,
        index: int,
        texts: list[str],
        joined: str,
        original: bytes | dict[str, Any],
        originals: list[bytes] | None = None,
        choices: list[ChoiceView] | None = None,
        key: str = CONTENT,
    ) -> tuple[int, list[tuple[int, list[Out]]]]:
        """``feed_plain`` (or ``feed_reasoning``, for the ``key`` of a
        reasoning field) for a run of such chunks of choice ``index`` read
        at once (``joined`` is ``"".join(texts)``), with each lane step
        looking at the run once (``TextLane.feed_texts``). Returns how many
        chunks were taken and, for those of them not sent unchanged, their
        position and what ``feed_plain`` would have returned. Fewer are
        taken when the choice's lane ends within the run (a cut, a
        finish): the caller feeds the rest one by one. ``original`` stands
        for every chunk of the run, unless ``originals`` (and ``choices``,
        their decoded choice views) give each its own."""
        st = self._choices.get(index)
        lane = None if st is None or st.done else _lane(st, key)
        if lane is None:
            return 0, []
        assert st is not None
        self._template_src = original
        if key == REASONING:
            st.reasoning_key = key
        n = len(texts)
        # taken[j]: how many texts lane entry j took (never more than the
        # entry before it passed on to it).
        taken: list[int] = []
        k = n
        if self._kept is not None:
            # chunks kept back: each text one at a time (``_lane_from``)
            taken = [0] * len(lane.runs)
            k = 0
        try:
            for feed_texts in lane.runs if k else ():
                if k == n:
                    k = feed_texts(texts, joined)
                elif k:
                    k = feed_texts(texts[:k], "".join(texts[:k]))
                taken.append(k)
        except Exception as exc:
            err = st.failed(lane.pos[len(taken)], exc)
            if err is None:
                raise
            raise err from exc
        if k and (joined if k == n else any(texts[:k])):
            self._saw(st, key)
        if originals is not None and k:
            self._template_src = originals[k - 1]  # the last chunk taken in
        changes: list[tuple[int, list[Out]]] = []
        # Text i >= k, one at a time, from the first entry that did not take
        # it (the first whose count is <= i): if that entry saw it and
        # declined it (its count is i), the full path from there; if it
        # never got it, the lane from there.
        for i in range(k, n):
            if st.done or self.stopped:
                return i, changes
            first = next(j for j, t in enumerate(taken) if t <= i)
            orig = original if originals is None else originals[i]
            ch = None if choices is None else choices[i]
            self._template_src = orig
            declined = taken[first] == i  # that entry saw it; else it never got it
            out = self._lane_from(st, first, index, texts[i], key, orig, ch, declined)
            if out is not PASS_ONLY:
                changes.append((i, out))
        return n, changes

    def _changed(
        self, original: bytes | dict[str, Any], results: list[tuple[ChoiceView, Delta | None]]
    ) -> list[Out]:
        out = self._rebuild(self._original_obj(original), results)
        if not out and self.ctx.options.keepalive:
            return [KEEPALIVE]
        return out

    def _one(
        self,
        ch: ChoiceView,
        d: Delta | None,
        changed: bool,
        alone: bool,
        original: bytes | dict[str, Any],
    ) -> list[Out]:
        """What to send for a chunk of one choice (``ch``), its delta
        through the pipeline being ``d``: the chunks kept back whole are
        released, kept on or forgotten, and this one sent, kept back or
        rebuilt (module doc). ``alone``: nothing but the content may have
        changed."""
        kept = self._kept
        lead: list[Out] = []
        if kept is not None and kept.index != ch.index:
            lead = self._forget()
            kept = None
        if alone and d is not None and d is not _NO_CHANGE:
            text = (ch.delta.content if ch.delta is not None else None) or ""
            out = d.content or ""
            if kept is None:
                json = self._choices[ch.index].json
                if (
                    changed
                    and json is not None
                    and json.streaming
                    and len(out) < len(text)
                    and text.startswith(out)
                ):
                    # part of the text held: keep the whole chunk back
                    self._kept = kept = _Kept(ch.index)
                    kept.add(original, ch, d, text)
                    kept.out = out
                    return [*lead, DEFER] if lead else DEFER_ONLY
            elif (kept.text + text).startswith(out, len(kept.out)):
                kept.add(original, ch, d, text)
                kept.out += out
                n = kept.release()
                if not kept.items:
                    self._kept = None  # nothing needed changing
                    return [DEFER, *[RELEASE] * n]
                outs: list[Out] = DEFER_ONLY if not n else [DEFER, *[RELEASE] * n]
                if len(kept.items) > MAX_KEPT_CHUNKS or len(kept.text) > MAX_KEPT_CHARS:
                    return [*outs, *self._forget()]
                return outs
        if kept is not None:
            lead = self._forget()
        if not changed:
            return [*lead, PASS]
        return [*lead, *self._changed(original, [(ch, d)])]

    def _forget(self) -> list[Out]:
        """The chunks kept back, dropped, and sent as they would have been
        without the keeping (``FORGET``, then their rebuilt chunks: what
        the steps released of their text on the first, the fields of
        each on its own)."""
        kept = self._kept
        assert kept is not None
        self._kept = None
        outs: list[Out] = [FORGET]
        unsent: str | None = kept.out
        for original, ch, d, _ in kept.items:
            d.content, unsent = unsent, None
            outs.extend(self._rebuild(self._original_obj(original), [(ch, d)]))
        return outs

    def _feed_choice(self, ch: ChoiceView, start: int = 0) -> tuple[Delta | None, bool, bool]:
        """Run one choice's delta through its pipeline (from step ``start``:
        the steps before it took the text on the plain-text lane). Returns
        the delta (``_NO_CHANGE`` to send the original, None to send
        nothing), whether anything changed, and whether nothing but the
        content may have."""
        st = self._choices.get(ch.index)
        if st is None:
            st = self._choice(ch.index)
        elif st.done:
            # After a cut the choice says no more; after a normal finish,
            # whatever else the upstream sends for it goes on untouched.
            return (None, True, False) if st.cut else (_NO_CHANGE, False, False)
        dv = ch.delta
        finish = ch.finish_reason
        d = delta_in(dv, finish)
        content0, reasoning0, fragments0 = d.content, d.reasoning, d.fragments
        if dv is not None and dv.reasoning_content is None and dv.reasoning is not None:
            st.reasoning_key = "reasoning"  # the server's own field name goes back out
        st.run(d, finish is not None, start)
        self._note_output(st, d)
        if st.done:
            if st.cut:
                self.stopped = all(c.cut for c in self._choices.values())
            self._check_empty()
        # Text compared by value: a step may hand back an equal string (text
        # held, then released as the next chunk's), and then the original
        # chunk goes out, whichever string objects the texts were read into.
        others = (
            d.reasoning != reasoning0
            or d.fragments is not fragments0
            or bool(d.calls)
            or d.finish_reason != finish
            or bool(d.ext)
        )
        return d, others or d.content != content0, not others

    def close(self) -> list[Out]:
        """End of stream (``[DONE]`` or the connection closed): resolve
        every choice that never got a finish chunk."""
        pending = [(i, st) for i, st in self._choices.items() if not st.done]
        kept = self._kept
        if not pending:
            return self._forget() if kept is not None else []
        template = self._template_obj()
        lead: list[Out] = []
        results: list[tuple[ChoiceView, Delta | None]] = []
        for index, st in pending:
            d = Delta()
            st.run(d, True)
            self._note_output(st, d)
            if kept is not None and index == kept.index:
                if kept.out + (d.content or "") == kept.text and not (
                    d.reasoning or d.calls or d.ext or d.finish_reason is not None
                ):
                    # the end released what was held as it came
                    self._kept = None
                    lead = [RELEASE] * len(kept.items)
                    continue
                lead = self._forget()
            results.append((ChoiceView(index=index), d))
        self._check_empty()
        return [*lead, *self._rebuild(template, results, synthetic=True)]

    def _note_output(self, st: _Choice, d: Delta) -> None:
        if d.content or d.calls or d.reasoning:
            st.saw_output = True
            if d.reasoning:
                self.report.reasoning = True

    def _check_empty(self) -> None:
        """Every choice ended with no call and no text but whitespace (as
        the residue stripper, when present, let it through): "empty after
        repair", so the proxy can ask again. A cut is not empty."""
        if not self.ctx.has_tools or not self._choices:
            return
        for st in self._choices.values():
            if not st.done or st.cut:
                return
            strippers = [s for s in st.steps if isinstance(s, ResidueStripper)]
            if strippers[0].saw_output if strippers else st.saw_output:
                return
        self.report.empty_after_repair = True

    # -- non-streaming -----------------------------------------------------

    def complete(self, completion: dict[str, Any]) -> dict[str, Any]:
        """Repair a whole ``chat.completion``: each message goes through the
        same pipeline as one delta that is also the last."""
        choices = completion.get("choices")
        if not isinstance(choices, list):
            return completion
        out = dict(completion)
        new_choices = []
        for pos, ch in enumerate(choices):
            if not isinstance(ch, dict) or not isinstance(ch.get("message"), dict):
                new_choices.append(ch)
                continue
            view = view_of({"choices": [ch]})
            cv = view.choices[0] if view.choices else ChoiceView(index=pos)
            st = self._choice(cv.index)
            d = delta_in(cv.message, cv.finish_reason)
            mv = cv.message
            if mv is not None and mv.tool_calls:
                # A message's calls are complete but have no index: number them.
                for i, tc in enumerate(mv.tool_calls):
                    if tc.index is None:
                        tc.index = i
            st.run(d, True)
            self._note_output(st, d)
            new_choices.append(self._message_choice(ch, d, st))
        out["choices"] = new_choices
        self._check_empty()
        return out

    def _message_choice(self, ch: dict[str, Any], d: Delta, st: _Choice) -> dict[str, Any]:
        msg_in: dict[str, Any] = ch["message"]
        msg = {k: v for k, v in msg_in.items() if k not in _OWNED_DELTA_KEYS}
        reasoning_key = (
            "reasoning"
            if "reasoning" in msg_in and "reasoning_content" not in msg_in
            else "reasoning_content"
        )
        calls = d.calls or []
        msg["content"] = d.content if (d.content or not calls) else None
        if msg["content"] is None and not calls and "content" not in msg_in:
            del msg["content"]
        if d.reasoning is not None:
            msg[reasoning_key] = d.reasoning
        if calls:
            msg["tool_calls"] = [_call_obj(c) for c in calls]
        elif "tool_calls" in msg_in and msg_in["tool_calls"] is not None:
            msg["tool_calls"] = []
        if "function_call" in msg_in and not calls:
            msg["function_call"] = msg_in["function_call"]
        out = {k: v for k, v in ch.items() if k != "message"}
        out["message"] = msg
        out["finish_reason"] = d.finish_reason
        if d.ext:
            out["streamfix"] = d.ext
        return out

    # -- building output chunks -------------------------------------------

    @staticmethod
    def _original_obj(original: bytes | dict[str, Any]) -> dict[str, Any]:
        if isinstance(original, dict):
            return original
        # Read as the client would (a ``-Infinity`` logprob, a lone
        # surrogate, a big integer kept exact), to be written back exactly.
        obj = jsoncodec.loads_lenient(original)
        assert isinstance(obj, dict)
        return obj

    def _template_obj(self) -> dict[str, Any]:
        """The last chunk seen, decoded (once), as the model for chunks we
        create at end of stream (its id, model, created…)."""
        src = self._template_src
        if src is None:
            return {"object": "chat.completion.chunk"}
        if self._template is None or self._template_of is not src:
            self._template = self._original_obj(src)
            self._template_of = src
        return self._template

    def _rebuild(
        self,
        obj: dict[str, Any],
        results: list[tuple[ChoiceView, Delta | None]],
        synthetic: bool = False,
    ) -> list[Out]:
        """The chunks to send for one input chunk whose choices changed.

        Per choice: a chunk with its text and every field we do not own,
        then one chunk per complete call, then the finish (merged into the
        first when there is no call). Top-level fields are copied to each;
        ``usage`` goes on the last only, so it is counted once.
        """
        top = {k: v for k, v in obj.items() if k not in ("choices", "usage")}
        orig_choices: dict[int, dict[str, Any]] = {}
        if not synthetic:
            for pos, c in enumerate(obj.get("choices") or []):
                if isinstance(c, dict):
                    idx = c.get("index", pos)
                    orig_choices[idx if isinstance(idx, int) else pos] = c
        pieces: list[dict[str, Any]] = []
        for cv, d in results:
            ch_obj = orig_choices.get(cv.index, {})
            if d is _NO_CHANGE:
                pieces.append(ch_obj)
                continue
            if d is None:
                continue
            st = self._choices[cv.index]
            pieces.extend(self._choice_pieces(cv.index, ch_obj, d, st))
        if not pieces:
            return []
        out: list[Out] = []
        for piece in pieces:
            chunk = dict(top)
            chunk["choices"] = [piece]
            out.append(chunk)
        if "usage" in obj:
            last = out[-1]
            assert isinstance(last, dict)
            last["usage"] = obj["usage"]
        return out

    def _choice_pieces(
        self, index: int, ch_obj: dict[str, Any], d: Delta, st: _Choice
    ) -> list[dict[str, Any]]:
        delta_obj = ch_obj.get("delta")
        new_delta: dict[str, Any] = {}
        keep = False
        if isinstance(delta_obj, dict):
            for k, v in delta_obj.items():
                if k not in _OWNED_DELTA_KEYS:
                    new_delta[k] = v
                    keep = keep or v is not None
        head: dict[str, Any] = {"index": index}
        for k, v in ch_obj.items():
            if k not in _OWNED_CHOICE_KEYS:
                head[k] = v
                keep = keep or v is not None
        if d.fragments is not None and isinstance(delta_obj, dict):
            # Nobody consumed the structured fragments (no accumulator in
            # this pipeline): they go on as they came.
            for k in ("tool_calls", "function_call"):
                if k in delta_obj:
                    new_delta[k] = delta_obj[k]
                    keep = True
        if d.content:
            new_delta["content"] = d.content
            keep = True
        if d.reasoning:
            new_delta[st.reasoning_key] = d.reasoning
            keep = True
        pieces: list[dict[str, Any]] = []
        head["delta"] = new_delta
        head["finish_reason"] = None
        if keep:
            pieces.append(head)
        for call in d.calls or ():
            pieces.append(
                {
                    "index": index,
                    "delta": {"tool_calls": [_call_obj(call, st.n_calls)]},
                    "finish_reason": None,
                }
            )
            st.n_calls += 1
            self.report.count(f"calls.{call.source}")
        if d.finish_reason is not None or d.ext:
            if pieces and not d.calls and pieces[-1] is head:
                fin = head
            else:
                fin = {"index": index, "delta": {}}
                pieces.append(fin)
            fin["finish_reason"] = d.finish_reason
            if d.ext:
                fin["streamfix"] = d.ext
        return pieces


_NO_CHANGE: Final = Delta()


def _call_obj(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    if index is not None:
        obj["index"] = index
    obj["id"] = call.id
    obj["type"] = "function"
    obj["function"] = {"name": call.name, "arguments": call.arguments}
    return obj
