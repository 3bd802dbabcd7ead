"""Recordings made without a proxy, for ``streamfix learn``'s tests: a
reply's text streamed through today's chain as the proxy would, written in
the recording format with the reasons the recorder would give it
(``server/record.py``), and invented call shapes (markup no family uses)
with replies to learn from and held-out replies to lift."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson

from streamfix.passthrough import sse_stream
from streamfix.server.record import _NOT_REPAIRS, FORMAT
from streamfix.session import SSESession

from .streamutil import SHAPES_TOOLS

_seq = itertools.count()

REQUEST: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "help"}],
    "tools": SHAPES_TOOLS,
    "stream": True,
}


def reasons_of(counts: dict[str, int]) -> list[str]:
    found = []
    if any(n and k not in _NOT_REPAIRS for k, n in counts.items()):
        found.append("repair")
    if counts.get("unrecognised_markup"):
        found.append("unrecognised")
    if counts.get("possible_missed_call"):
        found.append("missed")
    return found


def record(
    directory: Path, text: str, request: dict[str, Any] | None = None, pieces: int = 7
) -> Path | None:
    """Write the recording of ``text`` as the reply (streamed in pieces of
    ``pieces`` characters); None when the recorder would not keep it."""
    body = request or REQUEST
    data = sse_stream([text[i : i + pieces] for i in range(0, len(text), pieces)] or [""])
    session = SSESession(body)
    out = session.feed(data) + session.close()
    counts = dict(session.report.counts)
    reasons = reasons_of(counts)
    if not reasons:
        return None
    doc = {
        "format": FORMAT,
        "reasons": reasons,
        "tenant": "-",
        "request": {"method": "POST", "path": "/v1/chat/completions", "headers": {}, "body": body},
        "attempts": [
            {
                "upstream": "http://127.0.0.1:1/v1",
                "status": 200,
                "content_type": "text/event-stream",
                "options": {},
                "sent": {},
                "reads": [{"t": 0.0, "text": data.decode()}],
                "report": {"counts": counts},
            }
        ],
        "upstream_errors": [],
        "response": {"status": 200, "stream": True, "text": out.decode()},
        "incomplete": False,
    }
    n = next(_seq)
    path = directory / f"20260101T000000.{n:06d}Z-1-{n:06d}-{'+'.join(reasons)}.json"
    path.write_bytes(orjson.dumps(doc))
    return path


#: Invented call shapes: each a template of one call (``{name}``,
#: ``{args}``), three replies to learn from and two held out, each a
#: (text before, tool, arguments, text after).
Call = tuple[str, str, dict[str, Any], str]

LEARN: list[Call] = [
    ("Let me look that up. ", "lookup_order", {"order_id": "A1"}, ""),
    ("", "create_ticket", {"title": "Printer on fire", "priority": 1}, "\nDone."),
    ("Sure!\n\n", "lookup_order", {"order_id": "Z-99"}, " I will report back."),
]
HELD_OUT: list[Call] = [
    ("Checking now: ", "create_ticket", {"title": "VPN down"}, ""),
    ("", "lookup_order", {"order_id": "Q7"}, "\n\nOne moment."),
]

SHAPES: dict[str, str] = {
    "at-call": "@@call {name} {args} @@end",
    "white-brackets": "⟦tool⟧ {name} → {args} ⟦/tool⟧",
    "percent-invoke": "%%invoke({name}) {args}",
    "tilde-block": "~~~tool {name}\n{args}\n~~~",
    "hash-object": '#CALL# {{"name": "{name}", "arguments": {args}}} #END#',
    "angle-fn": "<<fn:{name}>>{args}<</fn>>",
    "bang-args": "!!use_tool {name} args={args}!!",
    "double-bracket": "[[call: {name} | {args}]]",
    "dollar": "$$fn={name};{args};$$",
    "caret-pipe": "^^|{name}|^^ {args} ^^|end|^^",
    "attr-call": '<call name="{name}">{args}</call>',
    "special-tokens": "<|call_start|>{name}<|args|>{args}<|call_end|>",
    "word-between": "&tool {name} with {args} &done",
    "args-first": '<<<{{"arguments": {args}, "name": "{name}"}}>>>',
    "xml-ish": "<tool>{name}</tool><args>{args}</args>",
    "colons": "TOOL::{name}::{args}::END",
    "paren": "{{{{call}}}} {name}({args})",
    "namespaced": "<|fn|>functions.{name}{args}<|/fn|>",
    "newline-sep": "=== call {name}\n{args}\n===",
}


def render(template: str, call: Call) -> str:
    before, name, args, after = call
    body = template.format(name=name, args=orjson.dumps(args).decode().replace(",", ", "))
    return before + body + after
