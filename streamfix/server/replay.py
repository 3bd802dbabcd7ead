"""Recorded replies through today's chain: what ``streamfix replay`` and the
operator page's recordings compare.

A recording (``streamfix serve --record DIR``, see ``record.py``) holds a
client's request, each upstream reply as the reads the proxy made, and the
bytes the client received. Replay feeds the same reads, with the request
they came with and the chain options the proxy used, to today's
``SSESession`` (or ``Chain.complete`` for a whole completion), ends the
stream as the proxy did, and compares what a client assembles from the
result with what it assembled then: content, reasoning, tool calls (name
and arguments; ids are random), finish reason, errors, ``[DONE]``.

An attempt the proxy discarded (it asked again) is replayed too: if today's
chain would not ask again (the reply is no longer empty, the call no longer
cut off), that is a difference.

An attempt sent with narrowed tools (``--narrow-tools``) is replayed with
the note it carried then, and a line says which tools were kept of how
many; the chain, then as now, knows every tool the client offered.

A front door's recording (``/v1/messages``, ``/v1/responses``) is
replayed on its chat side: the chat body the door made, the reads through
today's chain, compared with the chat chunks (or completion) the chain
produced then, before the door's encoder (``record.py``). A text
completion's (``/v1/completions``) goes through ``CompletionSession``, the
only repair it gets, and is compared by the text a client assembles. An
embeddings recording (an upstream failure) has nothing to replay.

Not compared (``incomplete``): a recording cut at its size bound, and a
reply the client left before its end (what the client got then depended
on when it left). A request no upstream answered has nothing to replay.

A step named in a recording's options (``module:factory``) is loaded by
name, and a format plugin named in its ``formats`` (``--format
module:NAME`` then) is registered again (``recorded_formats``); a
recording made through a plugin replays the same only with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..chain import Chain
from ..context import Context, Report
from ..errors import PluginError, TransformError, UpstreamProtocolError
from ..jsoncodec import loads_lenient
from ..narrow import NarrowNote
from ..plugins import factories, register_spec
from ..seen import (
    Seen,
    assemble,
    assemble_text,
    seen_of_completion,
    seen_of_text_completion,
)
from ..session import SSESession
from ..text_session import CompletionSession
from .record import FORMAT, decode_bytes, report_dict

#: What the proxy says when a stream ends without ``[DONE]`` and the
#: client's recorded bytes do not say it (``Exchange._stream_end``'s own words).
_NO_DONE = "upstream ended the stream before [DONE]"

#: The paths whose recordings are replayed otherwise than chat's.
COMPLETIONS = "/v1/completions"
EMBEDDINGS = "/v1/embeddings"


@dataclass
class Outcome:
    """One recording replayed."""

    path: Path
    verdict: str  # "same", "changed", "incomplete", "skipped", "unreadable"
    reasons: list[str] = field(default_factory=list)
    then: Seen | None = None
    now: Seen | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.verdict in ("changed", "unreadable")


def key(seen: Seen) -> tuple[Any, ...]:
    """What is compared of a client's view (not the chunk count)."""
    return (
        seen.content,
        seen.reasoning,
        sorted(seen.calls.items()),
        seen.finish,
        seen.errors,
        seen.done,
        seen.ext,
    )


def client_view(response: dict[str, Any], text: bool = False) -> Seen:
    """What the client assembled then, from the recorded bytes (``text``: a
    text completion's)."""
    data = decode_bytes(response)
    if response.get("stream") and response.get("status") == 200:
        return assemble_text(data) if text else assemble(data)
    try:
        obj = loads_lenient(data)
        return seen_of_text_completion(obj) if text else seen_of_completion(obj)
    except orjson.JSONDecodeError:
        seen = Seen()
        seen.errors.append(data[:200].decode("utf-8", "replace"))
        return seen


def _last_error(then: Seen) -> str:
    return then.errors[-1] if then.errors else _NO_DONE


def replay_stream(
    body: dict[str, Any],
    options: dict[str, Any],
    reads: Iterable[bytes],
    error: str,
    ended: bool,
    text: bool = False,
) -> tuple[bytes, SSESession | CompletionSession]:
    """The bytes a client gets today for these reads, ended as the proxy
    ends a stream (``server/exchange.py``'s ``pump``): ``[DONE]`` passed on; without one,
    an error event with ``error``; ``ended`` False (the client left): no end.
    ``text``: a text completion's stream (``CompletionSession``)."""
    session: SSESession | CompletionSession
    session = CompletionSession(body, **options) if text else SSESession(body, **options)
    out: list[bytes] = []
    try:
        for data in reads:
            out.append(session.feed(data))
            if session.finished:
                break
        if session.finished or not ended:
            pass
        elif session.saw_done:
            out.append(session.close())
        else:
            out.append(session.fail(UpstreamProtocolError(error)))
    except UpstreamProtocolError as exc:
        out.append(session.fail(exc))
    return b"".join(out), session


def replay_completion(
    body: dict[str, Any], options: dict[str, Any], raw: bytes, error: str
) -> tuple[dict[str, Any], Context]:
    """A whole upstream completion through today's chain: the repaired
    object, or ``{"error": …}`` with ``error`` (the proxy's words then) when
    it is no completion, and its context."""
    ctx = Context.of(body, options)
    try:
        obj = loads_lenient(raw)  # as the proxy reads it
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or "error" in obj or not isinstance(obj.get("choices"), list):
        return {"error": {"message": error}}, ctx
    try:
        return Chain(ctx).complete(obj), ctx
    except TransformError as exc:  # the proxy answers a 500 with this message
        return {"error": {"message": str(exc)}}, ctx


def replay_text_completion(
    body: dict[str, Any], options: dict[str, Any], raw: bytes, error: str
) -> tuple[dict[str, Any], Report]:
    """A whole text completion through today's loop cutter
    (``CompletionSession.complete``), or ``{"error": …}`` as the proxy
    answered a reply that is no completion; and the report."""
    session = CompletionSession(body, **options)
    try:
        obj = loads_lenient(raw)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or "error" in obj or not isinstance(obj.get("choices"), list):
        return {"error": {"message": error}}, session.report
    return session.complete(obj), session.report


def _asks_again(report: dict[str, Any] | None) -> tuple[bool, bool, bool]:
    """What decides whether the proxy asks again: the reply is empty, a call
    was cut off, a call was emitted (``tool_choice: "required"``)."""
    report = report or {}
    counts = report.get("counts") or {}
    return (
        bool(report.get("empty_after_repair")),
        bool(report.get("truncated_call")),
        any(k.startswith(("calls.", "lifted.")) and n for k, n in counts.items()),
    )


def recorded_formats(doc: dict[str, Any]) -> list[str]:
    """Register the format plugins a recording was made with (``--format``
    then, its ``formats``), as its steps are loaded by name; their specs.
    A spec that does not load raises ``PluginError``."""
    specs = doc.get("formats")
    if not isinstance(specs, list):
        return []
    names = [s for s in specs if isinstance(s, str)]
    for spec in names:
        register_spec(spec)
    return names


def replay_document(
    doc: dict[str, Any], path: Path, extra_steps: tuple[str, ...] = (), **switches: bool
) -> Outcome:
    """Replay one recording; ``switches`` (``lift=False``…) override the
    chain options it was recorded with; ``extra_steps`` (``module:factory``)
    run after the steps it was recorded with."""
    if doc.get("format") != FORMAT:
        return Outcome(path, "unreadable", notes=[f"not a {FORMAT} file"])
    recorded_formats(doc)
    reasons = list(doc.get("reasons") or ())
    request = doc["request"]
    body = request["body"] if isinstance(request.get("body"), dict) else {}
    door = doc.get("door")
    if isinstance(door, dict):  # a front door's: its chat side (``server/record.py``)
        body = door["chat_body"] if isinstance(door.get("chat_body"), dict) else {}
    text = request.get("path") == COMPLETIONS
    response = doc["response"]
    then = client_view(response, text)
    attempts = doc.get("attempts") or []
    result = Outcome(path, "same", reasons, then)
    if request.get("path") == EMBEDDINGS:
        result.verdict = "skipped"
        result.notes.append("an embeddings request: relayed, nothing to repair")
        result.now = then
        return result
    if not attempts or attempts[-1].get("status") != 200:
        status = attempts[-1].get("status") if attempts else None
        errors = ", ".join(kind for _, kind in doc.get("upstream_errors") or ())
        result.verdict = "skipped"
        result.notes.append(
            f"the upstream answered HTTP {status}"
            if status
            else f"no upstream reply ({errors or 'none'})"
        )
        result.now = then
        return result
    for i, att in enumerate(attempts):
        options = {**att.get("options", {}), **switches}
        steps = (*options.get("transforms", ()), *extra_steps)
        if steps:
            options["transforms"] = factories(tuple(steps))
        kept = att.get("narrowed")
        if isinstance(kept, dict):  # sent with only these tools (--narrow-tools)
            note = NarrowNote.factory(kept, set())
            options["transforms"] = (*options.get("transforms", ()), note)
            result.notes.append(
                f"attempt {i + 1} narrowed to {len(kept.get('kept') or ())} of "
                f"{kept.get('of')} tools: {', '.join(map(str, kept.get('kept') or ()))}"
            )
        reads = [decode_bytes(r) for r in att.get("reads") or ()]
        last = i == len(attempts) - 1
        # The proxy's paths: a stream; a whole completion for a stream (sent on
        # as one); a whole completion asked for (its body parsed, whatever
        # its content type).
        stream = body.get("stream") is True
        if stream and att.get("content_type") != "application/json":
            ended = not last or response.get("status") != 499
            data, session = replay_stream(body, options, reads, _last_error(then), ended, text)
            now, report = (assemble_text(data) if text else assemble(data)), session.report
        elif text:
            fixed, report = replay_text_completion(
                body, options, b"".join(reads), _last_error(then)
            )
            now = seen_of_text_completion(fixed)
            if stream and "error" not in fixed:
                now.done = True  # sent on as one event and [DONE]
        else:
            fixed, ctx = replay_completion(body, options, b"".join(reads), _last_error(then))
            report = ctx.report
            if stream and "error" not in fixed:
                from .caller.replies import completion_to_sse

                now = assemble(completion_to_sse(fixed))
            else:
                now = seen_of_completion(fixed)
        if not last:
            then_flags = _asks_again(att.get("report"))
            now_flags = _asks_again(report_dict(report))
            if then_flags != now_flags:
                result.verdict = "changed"
                result.notes.append(
                    f"attempt {i + 1} (asked again then): empty, cut-off call, calls "
                    f"{then_flags} then, {now_flags} now"
                )
            continue
        result.now = now
        if doc.get("incomplete") or response.get("status") == 499:
            result.verdict = "incomplete"
            result.notes.append(
                "the recording reached its size bound"
                if doc.get("incomplete")
                else "the client left before the end"
            )
        elif key(now) != key(then):
            result.verdict = "changed"
    return result


def replay_file(path: Path, extra_steps: tuple[str, ...] = (), **switches: bool) -> Outcome:
    try:
        doc = orjson.loads(path.read_bytes())
        return replay_document(doc, path, extra_steps, **switches)
    except (
        OSError,
        orjson.JSONDecodeError,
        KeyError,
        TypeError,
        AttributeError,
        PluginError,
    ) as exc:
        return Outcome(path, "unreadable", notes=[f"{type(exc).__name__}: {exc}"])
