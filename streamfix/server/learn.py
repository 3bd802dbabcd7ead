"""The next shape, learned from the replies that went out badly
(``streamfix learn DIR``, and the operator page's "learned shapes").

*Samples.* A recording made as ``missed`` or ``unrecognised``
(``record.py``) holds the tools that were offered and the upstream's own
text. Where that text names an offered tool and follows it, within a short
distance, by a JSON object that fits the tool's parameters
(``transforms/missed.py``'s ``hits``), the markup around them is a sample:
the text before the name, between the name and the arguments, and after
them; or, when the name is a field of a JSON object that holds the
arguments, the text before and after that object.

*A shape.* Samples that agree (the same way of naming, the same text
between name and arguments) from at least ``min_replies`` replies (never
one) give a declared shape (``formats/declared.py``): its start marker is
the constant text before the name (the longest common suffix, to the last
blank), its separator the text between, its end marker the constant text
after the arguments (the longest common prefix, to the first blank; none
when nothing constant follows: the call ends where its JSON closes). A
marker of letters, digits and blanks only is refused (prose is made of
them); a start marker under 3 characters counts only at the start of a
reply, and only if every sample has it there.

*Proof, before it is offered.* The shape is registered as any plugin (the
static rules, plain prose through the chain), then: the property kit
(``streamfix.testing``: each sample's reply the same however it is cut,
prose unchanged cut anywhere); every genuine answer of ``genuine.py``
unchanged with each sample's tools offered; every recording of the
directory replayed (``replay.py``) without and with the shape. The
replies it was learned from must now lift their calls; any other reply
that changes is listed; a change to a reply recorded for another reason
(a repair, a loop, …) or to a genuine answer rejects the shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import PluginError
from ..formats import registry
from ..formats.declared import Declared, Shape, shape_toml
from ..formats.rules import MIN_MARKER
from ..genuine import GENUINE
from ..jsoncodec import loads_lenient
from ..passthrough import CHECK_REQUEST, reply, run, sse_stream
from ..seen import assemble, seen_of_completion
from ..spec import ToolSpec, tools_of
from ..testing import check_passthrough, check_split_invariant
from ..transforms.missed import hits
from .record import FORMAT, decode_bytes
from .replay import key, replay_file

#: The reasons of the recordings learned from.
LEARN_FROM = ("missed", "unrecognised")
#: Fewest agreeing replies a shape is learned from (``--min-replies``).
MIN_REPLIES = 2
#: Longest marker inferred.
MAX_MARKER = 48
#: Replies' cuts tried by the split check of a learned shape.
SPLIT_CUTS = 120

_PUNCT = ".,;:!?"


@dataclass(frozen=True)
class Reply:
    """One recording's upstream text and what it was offered."""

    path: Path
    reasons: tuple[str, ...]
    body: dict[str, Any]
    text: str

    @property
    def tools(self) -> dict[str, ToolSpec]:
        return tools_of(self.body)


@dataclass(frozen=True)
class Sample:
    """The markup around one call in a reply (see the module docstring)."""

    reply: Reply
    tool: str
    mode: str  # "after_marker" or "json_field"
    before: str
    between: str
    after: str


@dataclass
class Learned:
    """A shape inferred, and what proving it showed."""

    shape: Shape
    samples: list[Sample]
    #: The recordings it was learned from, with the calls they lift now.
    lifted: dict[Path, list[str]] = field(default_factory=dict)
    #: Other recordings whose replies change with it, with their reasons.
    changed: dict[Path, list[str]] = field(default_factory=dict)
    #: Why it is not offered (None: offered).
    rejected: str | None = None

    @property
    def sources(self) -> list[Path]:
        return sorted({s.reply.path for s in self.samples})

    @property
    def toml(self) -> str:
        return shape_toml(self.shape)


# -- reading recordings ------------------------------------------------------


def read_replies(directory: Path) -> list[Reply]:
    """Every readable chat recording in ``directory`` whose last attempt
    got a reply, with its upstream text (oldest first)."""
    out = []
    for path in sorted(directory.glob("*.json")):
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        r = reply_of(doc, path)
        if r is not None:
            out.append(r)
    return out


def reply_of(doc: Any, path: Path) -> Reply | None:
    """A recording's upstream text (the last attempt's), or None."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    request = doc.get("request") or {}
    body: dict[str, Any] = request["body"] if isinstance(request.get("body"), dict) else {}
    door = doc.get("door")
    if isinstance(door, dict) and isinstance(door.get("chat_body"), dict):
        body = door["chat_body"]
    attempts = doc.get("attempts") or []
    if not attempts or attempts[-1].get("status") != 200:
        return None
    raw = b"".join(decode_bytes(r) for r in attempts[-1].get("reads") or ())
    if attempts[-1].get("content_type") == "application/json" or not body.get("stream"):
        try:
            text = seen_of_completion(loads_lenient(raw)).content
        except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
            return None
    else:
        text = assemble(raw).content
    reasons = tuple(r for r in doc.get("reasons") or () if isinstance(r, str))
    return Reply(path, reasons, body, text)


# -- samples and shapes ------------------------------------------------------


def samples_of(r: Reply) -> list[Sample]:
    """The samples in one reply (see the module docstring)."""
    out: list[Sample] = []
    tools = r.tools
    text = r.text
    for name, at, args_at, args_end in hits(text, tools):
        if args_at < at:  # a JSON object holding the name and the arguments
            out.append(Sample(r, name, "json_field", text[:args_at], "", text[args_end:]))
        else:
            out.append(
                Sample(
                    r,
                    name,
                    "after_marker",
                    text[:at],
                    text[at + len(name) : args_at],
                    text[args_end:],
                )
            )
    return out


def _common_suffix(items: Sequence[str]) -> str:
    first = items[0]
    n = 0
    while n < len(first) and all(len(s) > n and s[-1 - n] == first[-1 - n] for s in items):
        n += 1
    return first[len(first) - n :] if n else ""


def _common_prefix(items: Sequence[str]) -> str:
    first = items[0]
    n = 0
    while n < len(first) and all(len(s) > n and s[n] == first[n] for s in items):
        n += 1
    return first[:n]


def _prose_only(marker: str) -> bool:
    """Letters, digits and blanks only: prose would match it."""
    return all(c.isalnum() or c.isspace() for c in marker)


def _trim(marker: str, lead: bool) -> str:
    """A marker without the sentence punctuation the text around it lent
    it (``". @@call"``: the period ends the sentence before it)."""
    if len(marker) < 2:
        return marker
    edge, next_ = (marker[0], marker[1]) if lead else (marker[-1], marker[-2])
    if edge not in _PUNCT or next_ == edge:
        return marker  # a run (``!!``, ``::``) is the marker's own
    rest = marker[1:] if lead else marker[:-1]
    return marker if len(rest) < MIN_MARKER or _prose_only(rest) else rest


def _markup(token: str) -> bool:
    """A token with a character prose rarely has (``<``, ``@``, ``=``…)."""
    return any(not (c.isalnum() or c in _PUNCT) for c in token)


def _tokens(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


def marker_text(befores: Sequence[str]) -> str:
    """The start marker's text (not yet judged): the last blank-separated
    token of what the texts before the name share, with the markup
    tokens before it."""
    common = _common_suffix(befores).rstrip()
    if not common:
        return ""
    spans = _tokens(common)
    first = len(spans) - 1
    while first > 0 and _markup(common[slice(*spans[first - 1])]):
        first -= 1
    return _trim(common[spans[first][0] :], lead=True)[-MAX_MARKER:]


def start_marker(befores: Sequence[str]) -> tuple[str, bool] | str:
    """The start marker the texts before the name share, and whether it
    counts only at the reply's start; or why there is none. It is the last
    blank-separated token of the common text, and the markup tokens before
    it (``<call name="``), not the prose that happens to be shared."""
    marker = marker_text(befores)
    if not marker:
        return "the samples share no text before the tool's name"
    if _prose_only(marker):
        return f"the start marker {marker!r} is made of letters and digits only (prose matches it)"
    if len(marker) >= MIN_MARKER:
        return marker, False
    if all(b.strip() == marker for b in befores):
        return marker, True
    return f"the start marker {marker!r} is shorter than {MIN_MARKER} characters"


def end_marker(afters: Sequence[str]) -> str:
    """The end marker the texts after the arguments share ("" for none)."""
    common = _common_prefix([a.lstrip() for a in afters])
    if not common or common[0].isspace():
        return ""
    spans = _tokens(common)
    last = 0
    while last + 1 < len(spans) and _markup(common[slice(*spans[last])]):
        if not _markup(common[slice(*spans[last + 1])]):
            break
        last += 1
    marker = _trim(common[: spans[last][1]], lead=False)[:MAX_MARKER]
    return "" if _prose_only(marker) else marker


def _shape_id(marker: str, taken: set[str]) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", marker.lower()).strip("_") or "shape"
    base = f"learned_{slug}"
    sid, n = base, 2
    while sid in taken:
        sid, n = f"{base}_{n}", n + 1
    return sid


def infer(
    replies: Iterable[Reply], min_replies: int = MIN_REPLIES
) -> list[tuple[Shape | None, list[Sample], str | None]]:
    """The shapes the samples of ``replies`` agree on, each with its
    samples, or None and why not (too few replies, no marker)."""
    if min_replies < 2:
        raise ValueError("a shape is never learned from one reply: min_replies must be >= 2")
    by_way: dict[tuple[str, str], list[Sample]] = {}
    for r in replies:
        for s in samples_of(r):
            by_way.setdefault((s.mode, s.between.strip()), []).append(s)
    # Shapes told apart by how they name, what stands between name and
    # arguments, and a start marker their texts before the name share: a
    # sample joins the first cluster it still shares a marker with.
    groups: list[tuple[str, str, list[Sample]]] = []
    for (mode, sep), samples in by_way.items():
        clusters: list[list[Sample]] = []
        for s in samples:
            for c in clusters:
                had = marker_text([x.before for x in c])
                joined = [*(x.before for x in c), s.before]
                if marker_text(joined) == had or not isinstance(start_marker(joined), str):
                    c.append(s)
                    break
            else:
                clusters.append([s])
        groups.extend((mode, sep, c) for c in clusters)
    taken = {f.name for f in registry.all_formats()}
    out: list[tuple[Shape | None, list[Sample], str | None]] = []
    for mode, sep, samples in groups:
        n = len({s.reply.path for s in samples})
        if n < min_replies:
            out.append((None, samples, f"{n} reply, {min_replies} needed"))
            continue
        start = start_marker([s.before for s in samples])
        if isinstance(start, str):
            out.append((None, samples, start))
            continue
        marker, at_start = start
        end = end_marker([s.after for s in samples])
        sid = _shape_id(marker, taken)
        taken.add(sid)
        shape = Shape(
            sid,
            (marker,),
            name=mode,
            body="object" if mode == "json_field" else "json",
            end=(end,) if end else (),
            separator=(sep,) if sep else (),
            at_start_only=at_start,
        )
        out.append((shape, samples, None))
    return out


# -- proof -------------------------------------------------------------------


def _views(paths: Sequence[Path]) -> dict[Path, tuple[Any, ...] | None]:
    out: dict[Path, tuple[Any, ...] | None] = {}
    for p in paths:
        o = replay_file(p)
        out[p] = key(o.now) if o.now is not None and o.verdict != "unreadable" else None
    return out


def _lifts(view: tuple[Any, ...] | None) -> bool:
    return view is not None and bool(view[2])  # ``key``'s calls


def prove(learned: Learned, directory: Path, baseline: Mapping[Path, Any] | None = None) -> None:
    """Register the shape for the time of the checks (module docstring);
    sets ``learned.rejected``, ``lifted`` and ``changed``."""
    paths = sorted(directory.glob("*.json"))
    before = dict(baseline) if baseline is not None else _views(paths)
    requests = list({id(s.reply.body): s.reply.body for s in learned.samples}.values())[:3]
    genuine_before = {
        (i, t): reply(run(sse_stream([t]), req)) for i, req in enumerate(requests) for t in GENUINE
    }
    try:
        plugin = registry.register(Declared(learned.shape), name=f"learned:{learned.shape.id}")
    except PluginError as exc:
        learned.rejected = str(exc)
        return
    try:
        learned.rejected = _checks(learned, paths, before, requests, genuine_before)
    finally:
        registry.unregister(plugin)


def _checks(
    learned: Learned,
    paths: Sequence[Path],
    before: Mapping[Path, Any],
    requests: Sequence[dict[str, Any]],
    genuine_before: Mapping[tuple[int, str], Any],
) -> str | None:
    for s in learned.samples:
        try:
            check_split_invariant(s.reply.text, s.reply.body, max_cuts=SPLIT_CUTS)
        except AssertionError as exc:
            return f"not split invariant on {s.reply.path.name}: {str(exc).splitlines()[0]}"
    try:
        check_passthrough(request=CHECK_REQUEST)
    except AssertionError as exc:
        return f"plain prose changes: {str(exc).splitlines()[1].strip()}"
    for (i, text), was in genuine_before.items():
        if reply(run(sse_stream([text]), requests[i])) != was:
            return f"a genuine answer changes: {text[:60]!r}"
    sources = {s.reply.path for s in learned.samples}
    for p in paths:
        o = replay_file(p)
        now = key(o.now) if o.now is not None and o.verdict != "unreadable" else None
        if p in sources:
            calls = sorted(c["name"] for c in (o.now.calls.values() if o.now else ()))
            learned.lifted[p] = calls
            if not calls:
                return f"{p.name}, learned from, lifts no call with it"
        elif now != before.get(p):
            learned.changed[p] = list(o.reasons)
            other = [r for r in o.reasons if r not in LEARN_FROM]
            if other:
                return f"it changes {p.name}, recorded for {', '.join(other)}"
    return None


def learn(directory: Path, min_replies: int = MIN_REPLIES) -> list[Learned]:
    """The shapes the recordings in ``directory`` teach, each proved (see
    the module docstring); rejected ones say why."""
    baseline = _views(sorted(directory.glob("*.json")))
    # A reply today's chain lifts calls from (a shape added since) teaches nothing new.
    replies = [
        r
        for r in read_replies(directory)
        if set(r.reasons) & set(LEARN_FROM) and not _lifts(baseline.get(r.path))
    ]
    out: list[Learned] = []
    for shape, samples, _why in infer(replies, min_replies):
        if shape is None:
            continue
        learned = Learned(shape, samples)
        prove(learned, directory, baseline)
        out.append(learned)
    return out


def report_lines(learned: Learned) -> list[str]:
    """What proving ``learned`` showed, as TOML comment lines."""
    lines = [f"# learned from {len(learned.sources)} replies:"]
    for p in learned.sources:
        lines.append(f"#   {p.name}: lifts {', '.join(learned.lifted.get(p, [])) or '-'}")
    for p, reasons in sorted(learned.changed.items()):
        lines.append(f"#   also changes {p.name} ({', '.join(reasons) or 'no reason'})")
    if learned.rejected:
        lines.append(f"# REJECTED: {learned.rejected}")
    return lines
