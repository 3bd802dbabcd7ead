"""Delta accumulator: structured tool-call fragments in, whole calls out.

Servers split a streamed call differently: id and name in the first piece
only (OpenAI, vLLM), or repeated in every piece (llama-cpp-python); calls
interleaved by ``index``; parallel calls that all say ``"index": 0`` and
differ only by id (so a new id starts a new call, whatever the index
says; the same id repeated is the same call); no ``index`` at all (one
call at a time); entries that never get a name; arguments that end up not
quite JSON. Clients merge
pieces by index and append every string they see, so a repeated name
arrives doubled (``get_weatherget_weather``). The accumulator holds the
pieces by index and, when the choice ends, emits each call once, whole and
valid: one delta per call with index, id, type, name and arguments.
"""

from __future__ import annotations

from ..chunks import ToolCallDelta
from ..context import Context
from ..delta import Delta, ToolCall, new_call_id
from ..formats.base import resolve_name
from ..toolargs import coerce, dumps, looks_truncated, parse_object, too_deep


class _Pending:
    __slots__ = ("args", "dropped", "id", "name", "size")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.args: list[str] = []
        self.size = 0
        self.dropped = False


class Accumulator:
    """Joins structured tool-call fragments by index (see module doc)."""

    __slots__ = ("_at", "_calls", "_last", "_next", "ctx")

    #: Content or reasoning alone never concerns the accumulator: the
    #: chain leaves it out of both lanes (``delta.TextLane``).
    ignores_content = True
    ignores_reasoning = True

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        #: Calls by our own key, in order of first appearance (the order
        #: they are emitted and numbered in).
        self._calls: dict[int, _Pending] = {}
        #: The key of the call an upstream ``index`` stands for now: the
        #: last one started at that index.
        self._at: dict[int, int] = {}
        self._last: tuple[int, _Pending] | None = None
        self._next = 0  # the next call's key

    def feed(self, d: Delta) -> None:
        frags = d.fragments
        if frags is None:
            return
        d.fragments = None
        arg_text: list[tuple[int, str]] = []
        limit = self.ctx.options.max_call_chars
        for f in frags:
            key, call = self._last = self._route(f)
            if f.id and call.id is None:
                call.id = f.id
            fn = f.function
            if fn is None:
                continue
            if fn.name:
                if call.name is None:
                    call.name = fn.name
                elif fn.name != call.name:
                    # Some servers stream the name in pieces too.
                    call.name += fn.name
            if fn.arguments and not call.dropped:
                call.size += len(fn.arguments)
                if call.size > limit:
                    call.dropped = True
                    call.args = []
                    self.ctx.report.count("dropped_call.too_large")
                    continue
                call.args.append(fn.arguments)
                arg_text.append((key, fn.arguments))
        if arg_text:
            d.arg_text = arg_text

    def _route(self, f: ToolCallDelta) -> tuple[int, _Pending]:
        """The call ``f`` belongs to (its key, the call): the call at its
        index, unless ``f`` names another id (a new call); with no index,
        the last call, unless ``f`` names another id or, once that call has
        arguments, another function."""
        fid = f.id
        if f.index is not None:
            key = self._at.get(f.index)
            if key is not None:
                call = self._calls[key]
                if not (fid and call.id is not None and fid != call.id):
                    return key, call
            key, call = self._new()
            self._at[f.index] = key
            return key, call
        last = self._last
        if last is None:
            return self._new()
        fn_name = f.function.name if f.function else None
        call = last[1]
        if (fid and call.id is not None and fid != call.id) or (
            fn_name is not None
            and call.name is not None
            and fn_name != call.name
            and bool(call.args)
        ):
            return self._new()
        return last

    def _new(self) -> tuple[int, _Pending]:
        key = self._next
        self._next += 1
        call = self._calls[key] = _Pending()
        return key, call

    def close(self, d: Delta) -> None:
        self.feed(d)
        if not self._calls:
            return
        report = self.ctx.report
        tools = self.ctx.tools
        emitted = 0
        truncated = False
        for call in self._calls.values():
            if call.dropped:
                continue
            if not call.name:
                report.count("dropped_call.no_name")
                continue
            text = "".join(call.args)
            args, repaired = parse_object(text)
            # Nested deeper than the chain reads (``jsoncodec.MAX_DEPTH``): the
            # upstream's own arguments, passed on as it sent them.
            deep = args is None and too_deep(text)
            if args is None and not deep:
                if looks_truncated(text) or d.finish_reason == "length":
                    truncated = True
                    report.count("dropped_call.truncated")
                else:
                    report.count("dropped_call.bad_arguments")
                continue
            if tools and call.name not in tools:
                # Only offered tools are called: an engine's parser turns
                # whatever name the model wrote (prompt injection included)
                # into a structured call. ``functions.x`` still names ``x``.
                resolved = resolve_name(call.name, tools)
                if resolved is None:
                    report.count("dropped_call.unoffered")
                    continue
                call.name = resolved
            if deep:
                report.count("deep_arguments")
                d.add_call(ToolCall(call.name, text, call.id or new_call_id()))
                emitted += 1
                continue
            assert args is not None
            spec = tools.get(call.name)
            if spec is not None:
                args, converted = coerce(args, spec.parameters)
                repaired = repaired or converted
            if repaired:
                report.count("repaired_arguments")
                text = dumps(args)
            d.add_call(ToolCall(call.name, text, call.id or new_call_id()))
            emitted += 1
        self._calls.clear()
        self._at.clear()
        self._last = None
        if emitted:
            if d.finish_reason is not None:
                d.finish_reason = "tool_calls"
        elif truncated:
            report.truncated_call = True
            d.finish_reason = "length"
        elif d.finish_reason == "tool_calls":
            d.finish_reason = "stop"
