"""What a backend gets wrong, before agents meet it: ``streamfix probe`` and
the operator page's probe of a row.

A short scripted set of chat requests goes straight to the backend, each
streamed and not: a plain answer; tools offered and a call wanted; two
calls wanted; tools offered and no call wanted; a long answer; reasoning
asked for; ``max_tokens`` over the window. Each reply, as it came, is then
put through the chain (``SSESession`` / ``Chain.complete``) with its
request, and the chain's ``Report`` says what it found: calls written as
text and in which shape (the format registry's name, ``calls.<format>``),
markup stripped, markup no format recognised, a loop cut, ``<think>`` in
content. What no repair can see is read from the reply itself: structured
calls split into pieces or with their name repeated in every piece (which a
client's merge turns into ``get_weatherget_weather``), reasoning in its own
field. The window and the engine come from the proxy's own probe
(``upstream.engines.probe_upstream``).

Each request and mode is a ``Row``: what the backend did, and what a client
behind streamfix gets instead (``cells``). A request that got no usable
reply says why in one line (``upstream.diagnose``: connection refused, the
HTTP status with a short body, not OpenAI-shaped, ``/v1`` probably
missing); an HTML error page is reduced to its title. When the first
request gets no usable reply in either mode, the rest are not sent. The
summary (``verdict``) counts what answered.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
import orjson

from ..chain import Chain
from ..context import Context, Report
from ..errors import UpstreamProtocolError
from ..seen import TOOLS, Seen, assemble, seen_of_completion
from ..session import SSESession
from ..sse import DONE, SSEDecoder
from .plan import json_object_instead
from .upstream.budget import BudgetPolicy, clamp_request
from .upstream.diagnose import in_words, missing_v1, short_body, status_problem, v1_hint
from .upstream.engines import (
    asks_json_schema,
    probe_upstream,
    refuses_json_schema,
    window_from_error,
)

#: Seconds one request may take (a 135M model on two cores writes about a
#: hundred tokens a second; the longest request asks for 300).
REQUEST_TIMEOUT = 60.0

#: The tool offered (the demo's: one string parameter).
WEATHER = TOOLS[0]
_SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
#: The tools stated in the system prompt as Hermes-style chat templates do
#: (NousResearch Hermes 2 Pro's function-calling prompt): what the server's
#: template would have added for a model trained on that format, and what a
#: server whose template ignores ``tools`` (llama-cpp-python's generic
#: formats) leaves out. A server with native tool calling still sees
#: ``tools``.
_TOOLS_SYSTEM = {
    "role": "system",
    "content": (
        "You are a function calling AI model. You may call one or more functions to assist "
        "with the user query. Here are the available tools: <tools>"
        + orjson.dumps(WEATHER).decode()
        + "</tools> For each function call return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-dict>}\n</tool_call>'
    ),
}


#: One earlier turn in which the model called the tool, as agents' histories
#: have: with it even a 135M model writes calls in the prompt's format.
_EXAMPLE = [
    {"role": "user", "content": "What is the weather in Rome?"},
    {
        "role": "assistant",
        "content": (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        ),
    },
]


def _user(text: str, system: dict[str, str] = _SYSTEM) -> list[dict[str, Any]]:
    if system is _TOOLS_SYSTEM:
        return [system, *_EXAMPLE, {"role": "user", "content": text}]
    return [system, {"role": "user", "content": text}]


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    body: dict[str, Any]
    #: Calls a good reply holds: 0, 1, 2; None when either is fine.
    calls: int | None = 0


#: The scripted requests (``over_window`` gets its ``max_tokens`` from the
#: window found, see ``cases``).
CASES = (
    Case("plain", "plain answer", {"messages": _user("Name three colours."), "max_tokens": 48}),
    Case(
        "call",
        "tools, a call wanted",
        {
            "messages": _user("What is the weather in Paris?", _TOOLS_SYSTEM),
            "tools": [WEATHER],
            "max_tokens": 80,
        },
        calls=1,
    ),
    Case(
        "two_calls",
        "tools, two calls wanted",
        {
            "messages": _user(
                "What is the weather in Paris and in Tokyo? Call get_weather once for each city.",
                _TOOLS_SYSTEM,
            ),
            "tools": [WEATHER],
            "max_tokens": 120,
        },
        calls=2,
    ),
    Case(
        "no_call",
        "tools, no call wanted",
        {
            "messages": _user("Say hello in one short sentence.", _TOOLS_SYSTEM),
            "tools": [WEATHER],
            "max_tokens": 48,
        },
    ),
    Case(
        "long",
        "long answer",
        {"messages": _user("Write forty facts about the sea, one per line."), "max_tokens": 300},
        calls=None,
    ),
    Case(
        "reasoning",
        "reasoning asked for",
        {
            "messages": _user(
                "Think step by step inside <think></think>, then answer: what is 17 times 3?"
            ),
            "reasoning_effort": "low",
            # offered as agents do: streamfix moves <think> out of content
            # only where a call may follow (``Options.split_reasoning``)
            "tools": [WEATHER],
            "max_tokens": 160,
        },
        calls=None,
    ),
    Case(
        "json",
        "JSON asked for",
        {
            "messages": _user("Give the name and the age of Ada Lovelace when she died, as JSON."),
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "person",
                    "schema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                        "required": ["name", "age"],
                    },
                },
            },
            "max_tokens": 80,
        },
    ),
    Case(
        "over_window",
        "max_tokens over the window",
        {"messages": _user("Say OK."), "max_tokens": 0},
        calls=None,
    ),
)


@dataclass
class Row:
    """One request in one mode: what the backend did, what streamfix makes of it."""

    case: Case
    stream: bool
    status: int = 0
    seconds: float = 0.0
    did: list[str] = field(default_factory=list)  # what the backend did (its faults)
    fixed: list[str] = field(default_factory=list)  # what streamfix repaired
    left: list[str] = field(default_factory=list)  # what stays wrong behind streamfix
    error: str | None = None
    #: The backend answered as an OpenAI API does (a completion, a stream of
    #: chunks, or an error in OpenAI's shape).
    answered: bool = False

    @property
    def repaired(self) -> bool:
        return bool(self.fixed)


@dataclass
class Probe:
    url: str
    model: str | None
    engine: str | None
    window: int | None
    rows: list[Row]
    seconds: float

    @property
    def needs_streamfix(self) -> bool:
        return any(r.repaired for r in self.rows)

    @property
    def answered(self) -> int:
        return sum(r.answered for r in self.rows)

    def problem(self) -> str:
        """Why the first request without a usable reply got none."""
        for r in self.rows:
            if not r.answered:
                return r.error or "; ".join(r.did) or "no usable reply"
        return ""


def cases(window: int | None) -> list[Case]:
    """``CASES`` with the over-window request's ``max_tokens`` set: twice
    the window found, or a million tokens when none was."""
    out = []
    for c in CASES:
        if c.key == "over_window":
            over = 2 * window if window else 1_000_000
            c = Case(c.key, c.title, {**c.body, "max_tokens": over}, c.calls)
        out.append(c)
    return out


# -- reading what came back ------------------------------------------------------


def structured_calls(events: Sequence[dict[str, Any]]) -> tuple[int, bool, bool]:
    """Structured calls in a stream's chunks: how many, whether one's
    arguments came in several pieces, whether a name came more than once."""
    pieces: dict[int, int] = {}
    names: dict[int, int] = {}
    for obj in events:
        for ch in obj.get("choices") or ():
            for tc in (ch.get("delta") or {}).get("tool_calls") or ():
                i = tc.get("index", 0) if isinstance(tc.get("index"), int) else 0
                fn = tc.get("function") or {}
                if fn.get("arguments"):
                    pieces[i] = pieces.get(i, 0) + 1
                if fn.get("name"):
                    names[i] = names.get(i, 0) + 1
    calls = len(set(pieces) | set(names))
    return calls, any(n > 1 for n in pieces.values()), any(n > 1 for n in names.values())


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    dec = SSEDecoder()
    out = []
    for ev in dec.feed(raw) + dec.close():
        if ev.data is None or ev.data == DONE:
            continue
        try:
            obj = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def describe_report(report: Report) -> tuple[list[str], list[str]]:
    """What the chain's report says the backend did, and what it repaired."""
    did: list[str] = []
    fixed: list[str] = []
    counts = report.counts
    # ``lifted.<format>``: a call found in text, by the registry's name for
    # its shape (counted on both paths; ``calls.<format>`` only when streamed)
    text_shapes = sorted(k[7:] for k, n in counts.items() if k.startswith("lifted.") and n)
    if text_shapes:
        n = sum(counts[f"lifted.{s}"] for s in text_shapes)
        did.append(f"call as text ({', '.join(text_shapes)})")
        fixed.append(f"{n} call(s) lifted")
    stripped = sorted(k[9:] for k, n in counts.items() if k.startswith("stripped.") and n)
    if stripped:
        did.append(f"markup in content ({', '.join(stripped)})")
        fixed.append("markup stripped")
    if counts.get("unrecognised_markup"):
        sample = report.unrecognised[0][:40] if report.unrecognised else ""
        did.append(f"unrecognised markup {sample!r}")
    if counts.get("reasoning_split"):
        did.append("<think> in content")
        fixed.append("reasoning moved to reasoning_content")
    dropped = sorted(k[13:] for k, n in counts.items() if k.startswith("dropped_call.") and n)
    if dropped:
        did.append(f"unusable call ({', '.join(dropped)})")
        fixed.append("unusable call dropped")
    if counts.get("repaired_arguments"):
        did.append("arguments not valid JSON for the schema")
        fixed.append("arguments repaired")
    if report.cut is not None:
        did.append(f"loop (period {report.cut.get('period')})")
        fixed.append("loop cut")
    if report.truncated_call:
        did.append("call cut off by max_tokens")
        fixed.append("asked again with more room (proxy)")
    if report.empty_after_repair:
        fixed.append("empty after repair: asked again (proxy)")
    json_kinds = sorted(
        k[5:] for k, n in counts.items() if k.startswith("json_") and n and k != "json_invalid"
    )
    if json_kinds:
        did.append(f"JSON not as asked ({', '.join(json_kinds)})")
        fixed.append("JSON repaired")
    if report.json_invalid:
        did.append(f"JSON does not validate: {report.json_invalid[:60]}")
        fixed.append("asked again with the error when held (proxy)")
    return did, fixed


def _outcome(row: Row, seen: Seen, report: Report, raw_calls: int) -> None:
    """Fill ``row`` from the client's view behind streamfix and the report."""
    did, fixed = describe_report(report)
    row.did += did
    row.fixed += fixed
    calls = len(seen.calls)
    want = row.case.calls
    if report.reasoning and not report.counts.get("reasoning_split"):
        row.did.append("reasoning in its own field")
    elif row.case.key == "reasoning" and not report.reasoning:
        row.did.append("no reasoning")
    if want is not None and calls < want:
        row.left.append(f"{calls} call(s), {want} wanted")
    elif want == 0 and calls:
        row.left.append(f"{calls} unwanted call(s)")
    if raw_calls and not calls:
        row.left.append("structured call dropped")
    if not seen.content.strip() and not seen.calls and not seen.reasoning:
        row.left.append("empty reply")


async def _post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, list[bytes]]:
    """POST ``body``; the status and the reply's reads as they came."""
    reads: list[bytes] = []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with http.post(
        url + "/chat/completions", data=orjson.dumps(body), headers=headers, timeout=timeout
    ) as resp:
        async for data in resp.content.iter_any():
            reads.append(data)
        return resp.status, reads


async def run_case(
    http: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    case: Case,
    model: str | None,
    stream: bool,
    window: int | None,
    options: dict[str, Any] | None = None,
) -> Row:
    """One case against the backend; ``options`` go to the chain (user
    steps: ``--transform``)."""
    options = options or {}
    row = Row(case, stream)
    body = {**case.body, "temperature": 0, "stream": stream}
    if model:
        body["model"] = model
    began = time.perf_counter()
    try:
        row.status, reads = await _post(http, url, body, headers)
        refused = row.status != 200 and asks_json_schema(body)
        if refused and refuses_json_schema(row.status, b"".join(reads)):
            # what the proxy does (``AskAgain.format_refused``)
            row.did.append("refuses json_schema")
            row.fixed.append("sent as json_object")
            row.status, reads = await _post(http, url, json_object_instead(body), headers)
    except (TimeoutError, aiohttp.ClientError) as exc:
        row.error = in_words(exc)
        if isinstance(exc, TimeoutError):
            row.error = f"no reply in {REQUEST_TIMEOUT:.0f} s"
        row.did.append(f"no reply: {row.error}")
        return row
    finally:
        row.seconds = time.perf_counter() - began
    raw = b"".join(reads)
    if row.status != 200:
        _refused(row, raw, window, url)
        return row
    if case.key == "over_window":
        row.did.append("accepted it")
    if stream and not raw.lstrip().startswith(b"{"):
        events = sse_events(raw)
        if not events and not raw.lstrip().startswith(b"data:"):
            _not_openai(row, url, "not an event stream", raw)
            return row
        row.answered = True
        raw_calls, split, repeated = structured_calls(events)
        if raw_calls:
            row.did.append(f"{raw_calls} structured call(s)")
        if split:
            row.did.append("arguments split over deltas")
        if repeated:
            row.did.append("name repeated in every delta")
            row.fixed.append("deltas joined once")
        session = SSESession(body, **options)
        out = []
        try:
            for data in reads:
                out.append(session.feed(data))
                if session.finished:
                    break
            if not session.finished:
                if not session.saw_done:
                    row.did.append("no [DONE]")
                out.append(session.close())
        except UpstreamProtocolError as exc:
            row.did.append(f"broken stream ({exc})"[:80])
            out.append(session.fail(exc))
        _outcome(row, assemble(b"".join(out)), session.report, raw_calls)
        return row
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        _not_openai(row, url, "not JSON", raw)
        return row
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        _not_openai(row, url, "JSON that is not a completion", raw)
        return row
    row.answered = True
    if stream:
        row.did.append("answered JSON to a stream")
    raw_calls = sum(
        len((ch.get("message") or {}).get("tool_calls") or ())
        for ch in obj["choices"]
        if isinstance(ch, dict)
    )
    if raw_calls:
        row.did.append(f"{raw_calls} structured call(s)")
    ctx = Context.of(body, options)
    fixed = Chain(ctx).complete(obj)
    _outcome(row, seen_of_completion(fixed), ctx.report, raw_calls)
    return row


def _not_openai(row: Row, url: str, what: str, raw: bytes) -> None:
    """An HTTP 200 that is not what an OpenAI API answers."""
    line = f"HTTP 200 with {what}: {short_body(raw)}"
    if missing_v1(url):
        line += f" ({v1_hint(url)})"
    row.error = f"not OpenAI-shaped ({line})"
    row.did.append(row.error)


def _openai_error(raw: bytes) -> bool:
    """Whether an error body is an OpenAI-style API's: ``{"error": ...}``,
    or vLLM's older ``{"object": "error", "message": ...}``."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and (obj.get("error") is not None or obj.get("object") == "error")


def _refused(row: Row, raw: bytes, window: int | None, url: str) -> None:
    """A non-200 answer, in one line with its hint (``diagnose``); for the
    over-window request, whether streamfix's budget would have kept it
    from happening."""
    line = status_problem(url, row.status, raw, "/chat/completions")
    row.did.append(line)
    # a refusal of the over-window request is an answer; any other error
    # status means the request taught nothing about the backend
    row.answered = row.case.key == "over_window" and _openai_error(raw)
    if not row.answered:
        row.error = line
    if row.case.key != "over_window":
        row.left.append(f"HTTP {row.status}")
        return
    learned = window or window_from_error(raw)
    if learned is None:
        row.left.append("window unknown: not clamped")
        return
    body, info = clamp_request(
        {**row.case.body, "stream": row.stream}, learned, BudgetPolicy(), reasoning=False
    )
    if info is not None:
        how = "" if window else ", window learned from the error"
        row.fixed.append(f"max_tokens clamped to {body['max_tokens']}{how}")


async def probe(
    url: str,
    model: str | None = None,
    api_key: str | None = None,
    out: TextIO | None = None,
    options: dict[str, Any] | None = None,
) -> Probe:
    """Run every case against ``url`` (an OpenAI base ending in ``/v1``),
    one at a time (a small server serves one at a time); print each row
    to ``out`` as it is done. ``options``: the chain's (user steps)."""
    url = url.rstrip("/")
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    began = time.perf_counter()
    # A new connection per request: llama-cpp-python closes a kept-alive
    # one a moment after some replies, and the next request would fail.
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        info = await probe_upstream(http, url, headers, model)
        if model is None:
            model = await _first_model(http, url, headers)
        rows: list[Row] = []
        for case in cases(info.window):
            for stream in (True, False):
                row = await run_case(http, url, headers, case, model, stream, info.window, options)
                rows.append(row)
                if out is not None:
                    how = f"{row.seconds:.1f} s" if row.answered else (row.error or "no reply")
                    print(
                        f"  {case.title}, {'streamed' if stream else 'not streamed'}: {how}",
                        file=out,
                        flush=True,
                    )
            if len(rows) == 2 and not any(r.answered for r in rows):
                break  # the first request got no usable reply: the rest would not either
    return Probe(url, model, info.engine, info.window, rows, time.perf_counter() - began)


async def _first_model(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> str | None:
    try:
        async with http.get(url + "/models", headers=headers) as resp:
            data = await resp.json(content_type=None)
        return str(data["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
        return None


def mode_of(stream: bool) -> str:
    """A case's mode in plain words (each case is sent both ways)."""
    return "streamed" if stream else "not streamed"


def cells(result: Probe) -> list[tuple[str, str, str, str]]:
    """The table's rows as text: request, mode, what the backend did, what
    a client behind streamfix gets (the terminal table and the operator
    page's, ``server/ui``)."""
    out = []
    for r in result.rows:
        did = "; ".join(r.did) or "fine"
        if not r.answered:
            behind = "no usable reply"
        else:
            behind = "; ".join(r.fixed) if r.fixed else ("nothing to repair" if not r.left else "")
        if r.left and r.answered:
            behind = "; ".join(filter(None, [behind, "still: " + ", ".join(r.left)]))
        out.append((r.case.title, mode_of(r.stream), did, behind))
    return out


def verdict(result: Probe) -> str:
    """The summary line: what answered, and what that says."""
    total, answered = len(result.rows), result.answered
    n = sum(r.repaired for r in result.rows)
    if answered == 0:
        return (
            f"nothing answered ({result.problem()}): this backend could not be probed. "
            "The URL should be the server's OpenAI base, ending in /v1."
        )
    missing = total - answered
    tail = f" ({missing} of {total} requests got no usable reply)" if missing else ""
    if result.needs_streamfix:
        return f"streamfix repaired {n} of {answered} replies: this backend needs it.{tail}"
    if missing:
        return (
            f"no reply that came needed a repair, but {missing} of {total} requests got "
            "no usable reply: not enough to say whether this backend needs streamfix."
        )
    return (
        f"no reply needed a repair ({answered} of {total} answered): "
        "this backend does not need streamfix."
    )
