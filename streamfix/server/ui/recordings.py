"""The ``--record`` directory as the operator page reads it.

*Listing.* The directory is scanned (names only, ``os.scandir``); each
recording is read once for its summary (time, model, tenant, reasons,
status) and the summary kept by file name: a recording is never changed
after it is renamed into place (``record.Recorder._write_file``), and
the cache forgets names that left the directory. Newest first (the names
begin with the UTC time), filtered by model, tenant and reason, at most
``MAX_LISTED`` shown. Files over ``MAX_FILE_BYTES`` are listed by name
only. All of it runs in a thread (``asyncio.to_thread``), off the loop.

*One recording* (``Sides``): what the upstream sent (the last attempt's
reads as a client would assemble them: markup as it came, shown as
text), what the client got then, and what today's chain makes of the
same reads (``replay.replay_document``), field by field, with the
fields that differ marked. The name asked for must be a recording's name
in the directory (``NAME``): no path reaches anywhere else.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ...errors import PluginError
from ...jsoncodec import loads_lenient
from ...seen import Seen, assemble, assemble_text, seen_of_completion
from ..record import FORMAT, decode_bytes
from ..replay import Outcome, client_view, replay_document

#: Recordings listed on one page.
MAX_LISTED = 200
#: Largest recording the page reads (the recorder's own bound on one
#: request's reads is 8 MiB; base64 and JSON add to it).
MAX_FILE_BYTES = 32 * 1024 * 1024
#: Raw upstream bytes shown on a recording's page.
MAX_RAW_CHARS = 64 * 1024

#: What a recording's file name looks like (``record.Recorder._write``).
NAME = re.compile(r"^[0-9]{8}T[0-9]{6}\.[0-9]+Z-[0-9]+-[0-9]+-[a-z_+]+\.json$")


@dataclass(frozen=True, slots=True)
class Summary:
    name: str
    at: str
    model: str
    tenant: str
    reasons: tuple[str, ...]
    path: str
    status: int | None
    readable: bool = True
    #: Which repairs the reason ``repair`` stands for: the report's kinds
    #: over every attempt (``repairs_of``).
    repairs: tuple[str, ...] = ()

    def reasons_words(self) -> str:
        """The reasons, ``repair`` followed by which: ``repair (lifted.hermes)``."""
        return ", ".join(
            f"{r} ({', '.join(self.repairs)})" if r == "repair" and self.repairs else r
            for r in self.reasons
        )


#: Report counts that are not a repair of their own: calls by shape
#: (``calls.<format>``, a lifted one is also ``lifted.<format>``), and the
#: counts that have a reason of their own (``unrecognised``, ``loop``).
_OWN_REASON = frozenset({"unrecognised_markup", "loop_cut"})


def repairs_of(doc: dict[str, Any]) -> tuple[str, ...]:
    """The repair kinds a recording's attempts counted, most first, and
    "asked again" when there was more than one attempt."""
    totals: dict[str, int] = {}
    attempts = doc.get("attempts")
    for att in attempts if isinstance(attempts, list) else ():
        report = _dict(_dict(att).get("report"))
        for kind, n in _dict(report.get("counts")).items():
            ours = not kind.startswith("calls.") and kind not in _OWN_REASON
            if ours and isinstance(n, int) and n:
                totals[kind] = totals.get(kind, 0) + n
    kinds = sorted(totals, key=lambda k: (-totals[k], k))
    if isinstance(attempts, list) and len(attempts) > 1:
        kinds.append("asked again")
    return tuple(kinds)


def summary_of(name: str, doc: Any) -> Summary:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return Summary(name, "", "?", "?", (), "?", None, readable=False)
    request = _dict(doc.get("request"))
    body = _dict(request.get("body"))
    response = _dict(doc.get("response"))
    status = response.get("status")
    return Summary(
        name,
        str(doc.get("recorded_at") or ""),
        str(body.get("model") or "-"),
        str(doc.get("tenant") or "-"),
        tuple(str(r) for r in doc.get("reasons") or ()),
        str(request.get("path") or "?"),
        status if isinstance(status, int) else None,
        repairs=repairs_of(doc),
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class Index:
    """The summaries of one directory's recordings (see the module doc)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, Summary] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        try:
            found = [e.name for e in os.scandir(self.directory) if NAME.match(e.name)]
        except OSError:
            return []
        return sorted(found, reverse=True)

    def summaries(self) -> list[Summary]:
        """Every recording, newest first (blocking: call from a thread)."""
        names = self.names()
        with self._lock:
            cache = self._cache
            out = []
            for name in names:
                s = cache.get(name)
                if s is None:
                    s = cache[name] = self._read_summary(name)
                out.append(s)
            for gone in set(cache) - set(names):
                del cache[gone]
        return out

    def _read_summary(self, name: str) -> Summary:
        doc = self.load(name)
        if doc is None:
            return Summary(name, "", "?", "?", tuple(_reasons_of(name)), "?", None, False)
        return summary_of(name, doc)

    def load(self, name: str) -> Any:
        """A recording's document, or None (not one, too large, unreadable)."""
        if not NAME.match(name):
            return None
        path = self.directory / name
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                return None
            return orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None

    def listed(
        self, model: str | None = None, tenant: str | None = None, reason: str | None = None
    ) -> tuple[list[Summary], list[Summary]]:
        """(the newest ``MAX_LISTED`` matching, all of them unfiltered)."""
        every = self.summaries()
        hits = [
            s
            for s in every
            if (not model or s.model == model)
            and (not tenant or s.tenant == tenant)
            and (not reason or reason in s.reasons)
        ]
        return hits[:MAX_LISTED], every


def _reasons_of(name: str) -> list[str]:
    return name.rsplit("-", 1)[-1].removesuffix(".json").split("+")


@dataclass
class Sides:
    """One recording's three views, and what differs between them."""

    name: str
    summary: Summary
    upstream: Seen | None
    then: Seen | None
    now: Seen | None
    outcome: Outcome
    raw: str
    request: str
    attempts: int
    notes: list[str] = field(default_factory=list)


def upstream_view(doc: dict[str, Any]) -> tuple[Seen | None, str]:
    """What the last upstream reply said, as a client would assemble it
    with no repair (markup as it came), and its raw text (bounded)."""
    attempts = doc.get("attempts") or []
    if not isinstance(attempts, list) or not attempts or not isinstance(attempts[-1], dict):
        return None, ""
    att = attempts[-1]
    data = b"".join(decode_bytes(r) for r in att.get("reads") or ())
    text = data[:MAX_RAW_CHARS].decode("utf-8", "replace")
    if len(data) > MAX_RAW_CHARS:
        text += f"\n… ({len(data)} bytes in all)"
    if att.get("status") != 200:
        return None, text
    if att.get("content_type") == "application/json" or data.lstrip().startswith(b"{"):
        try:
            return seen_of_completion(loads_lenient(data)), text
        except orjson.JSONDecodeError:
            return None, text
    if _dict(doc.get("request")).get("path") == "/v1/completions":
        return assemble_text(data), text
    return assemble(data), text


#: What a view that cannot be read raises (a recording of an odd reply).
_UNREADABLE = (KeyError, TypeError, AttributeError, ValueError, PluginError)


def sides(index: Index, name: str) -> Sides | None:
    """The three views of recording ``name`` (blocking: call from a thread).
    A side that cannot be assembled is None with a note saying why; odd
    parts of a side (``Seen.odd``) are noted too: the page shows what it
    can of any recording."""
    doc = index.load(name)
    if not isinstance(doc, dict):
        return None
    summary = summary_of(name, doc)
    notes: list[str] = []
    try:
        outcome = replay_document(doc, Path(name))
    except _UNREADABLE as exc:
        outcome = Outcome(Path(name), "unreadable", notes=[f"{type(exc).__name__}: {exc}"])
    try:
        upstream, text = upstream_view(doc)
    except _UNREADABLE as exc:
        upstream, text = None, ""
        notes.append(f"what the upstream sent cannot be assembled: {type(exc).__name__}: {exc}")
    then = outcome.then
    response, request = doc.get("response"), _dict(doc.get("request"))
    if then is None and isinstance(response, dict):
        try:
            then = client_view(response, request.get("path") == "/v1/completions")
        except _UNREADABLE as exc:
            notes.append(f"what the client got cannot be assembled: {type(exc).__name__}: {exc}")
    for side, seen in (("upstream", upstream), ("then", then), ("today", outcome.now)):
        notes += [f"{side}: {odd}" for odd in (seen.odd if seen is not None else ())]
    try:
        shown = orjson.dumps(request.get("body"), option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        shown = repr(request.get("body"))
    return Sides(
        name,
        summary,
        upstream,
        then,
        outcome.now,
        outcome,
        text,
        shown[:MAX_RAW_CHARS],
        len(doc.get("attempts") or ()),
        list(outcome.notes) + notes,
    )


def fields_of(seen: Seen | None) -> dict[str, str]:
    """A view's fields, as the page compares and shows them."""
    if seen is None:
        return {}
    calls = "\n".join(f"{c['name']}({c['arguments']})" for _, c in sorted(seen.calls.items()))
    return {
        "content": seen.content,
        "reasoning": seen.reasoning,
        "tool calls": calls,
        "finish reason": seen.finish or "",
        "errors": "\n".join(seen.errors),
    }
