"""Tool narrowing: which of the offered tools a turn needs (sans-I/O).

A small model shown fifty tools picks badly or answers in prose; shown the
few that fit the turn, it calls one. This module ranks a request's offered
tools against its turn and decides whether the ranking is sure enough to
show the model only the top few. It does no I/O: the proxy's adapter
(``server/narrowing.py``) gives it the request body and, when an embedding
row is configured, the vectors it fetched; the body sent upstream is made
by ``server/plan.narrow_to_tools``.

- **The turn** (``turn_text``): the last user message, and the last tool
  result when the turn follows one (the model decides what to call next
  from it), without the blocks agents add for the model's sake
  (``<system-reminder>``, ``<environment_context>``).
- **The tools' text** (``tool_text``): the name split into words (snake,
  camel, kebab, dotted), the description, each parameter's name (split)
  and description, nested ones too, bounded.
- **The query** (``query_terms``): the turn's words, with a URL read as
  ``url`` and a path as ``file`` and its last part (``tmp``, ``work``,
  ``src`` say nothing of the tool); the user's verbs add, at half weight,
  the words coding agents' tools are named by (``EXPANSIONS``: create →
  write, file, shell; fix → edit, patch; run, test, install → bash,
  shell, command; …; verbs common in other APIs, find, show, look, are
  left out: they cost BFCL recall); the words only a tool's result says
  weigh half and are not expanded.
- **Lexical ranking** (``Bm25``): Okapi BM25 over those texts (k1 1.2,
  b 0.75, the usual values), words lower-cased and cut to a crude stem,
  plus the name as a field of its own (``NAME_WEIGHT``: a query word in
  the name adds its idf once more).
  Written here, about fifty lines: the libraries that fit (``rank-bm25``,
  ``bm25s``) bring numpy or scipy into the core for sums over a few
  hundred short documents per request, and ``rank-bm25`` has had no
  release since 2022. **Vectors** (``cosine``): with the gateway's own
  embedding row, the cosine of each tool's vector with the turn's.
- **The decision** (``decide``): scores are taken relative to the best
  one, above the median (``relative``). The ranking is confident when at
  most ``keep`` tools come within ``ratio`` of the best: then the top
  ``keep`` are shown, and every tool left out scores below ``ratio`` of
  the best (the margin). When more are that close the ranking cannot
  tell, and nothing is narrowed (``not_confident``), as when nothing
  matched at all. A request with ``threshold`` tools or fewer
  is left as it is (``few_tools``). Tools the conversation already called
  stay offered on top, so the history the template renders stays valid.

The defaults were chosen on BFCL's ``live_multiple`` questions pooled with
distractors (``bench/narrow.py``: recall of the needed tool among those
kept, and how often narrowing declines, at 20, 50 and 100 tools), and on
Claude Code's and Codex CLI's own tools with a coding agent's turns
(``tests/test_narrow_agents.py``): BFCL alone ranked "Create the file …"
to Bash and ScheduleWakeup over Write, and to view_image and create_goal
without exec_command.

``NarrowNote`` is a chain step (``docs/extending.md``) the proxy adds to a
narrowed attempt: it puts ``{"narrowed": {"kept": [...], "of": N}}`` in
the ``streamfix`` field of each choice's finish and notes the names the
reply called (for ``streamfix_narrowed_total``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .context import Context
from .delta import Delta

#: Narrow only a request offering more tools than this. Below it the
#: prompt is short and the model's choice rarely wrong; BFCL recall at 20
#: tools is already near 1 with six kept (``bench/narrow.py``).
THRESHOLD = 8
#: Most tools shown to the model (earlier-called tools come on top).
KEEP = 5
#: A tool is as good as the best when its relative score reaches this.
RATIO = 0.6

#: A query word in a tool's name adds this times its idf (the name as a
#: field of its own, BM25F-like, on top of its two copies in the text):
#: an agent's ``Edit``, ``Write`` or ``exec_command`` says in one word
#: what its long description buries among many.
NAME_WEIGHT = 1.0

#: BM25's usual constants.
K1 = 1.2
B = 0.75

#: Most characters of a tool's description that are read: the opening
#: says what the tool is for; the rest of a long one (coding agents'
#: run to pages of usage notes) names every other thing in passing.
MAX_DESCRIPTION_CHARS = 300
#: Most characters of one tool's text, and of the turn's, that are read.
MAX_TOOL_CHARS = 4000
MAX_TURN_CHARS = 4000

_WORD = re.compile(r"[A-Za-z]+|[0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
#: Words that say nothing about which tool is meant.
STOPWORDS = (
    "a an and are as at be by can do for from get has have how i in is it its me my of "
    "on or please that the this to was what when where which with you your will would "
    "should could into use used using if any all not no"
)
_STOP = frozenset(STOPWORDS.split())


def words(text: str) -> list[str]:
    """``text`` as index terms: camel case split, lower case, stop words
    out, a crude stem (``orders`` and ``ordered`` meet ``order``)."""
    out = []
    for w in _WORD.findall(_CAMEL.sub(" ", text)):
        w = w.lower()
        if w in _STOP:
            continue
        out.append(_stem(w))
    return out


def _stem(w: str) -> str:
    """A crude stem: one inflection off, then a final ``e`` (``create``,
    ``creates`` and ``created`` all become ``creat``)."""
    if len(w) <= 3:
        return w
    for suffix in ("ing", "ies", "ed", "es", "s"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return w[:-1] if w.endswith("e") and len(w) > 3 else w


def _function(tool: Any) -> dict[str, Any] | None:
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn if isinstance(fn, dict) and isinstance(fn.get("name"), str) else None


def tool_names(tools: Sequence[Any]) -> list[str]:
    """The function tools' names, in order (malformed entries skipped)."""
    return [fn["name"] for fn in map(_function, tools) if fn is not None]


def tool_text(fn: Mapping[str, Any]) -> str:
    """What a function tool is ranked by: its name (twice: names are the
    most telling words), description, parameter names and descriptions."""
    name = str(fn.get("name") or "")
    parts = [name, name, str(fn.get("description") or "")[:MAX_DESCRIPTION_CHARS]]
    _params(fn.get("parameters"), parts, 0)
    return " ".join(parts)[:MAX_TOOL_CHARS]


def _params(schema: Any, parts: list[str], depth: int) -> None:
    if not isinstance(schema, dict) or depth > 3:
        return
    props = schema.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            parts.append(str(key))
            if isinstance(sub, dict):
                if isinstance(sub.get("description"), str):
                    parts.append(sub["description"])
                _params(sub, parts, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        _params(items, parts, depth + 1)


#: What agents add to the user's message for the model's sake, not the
#: user's (Claude Code's reminders about git attribution, Codex's
#: environment): left out of the turn, or they outweigh the request.
_AGENT_BLOCKS = re.compile(
    r"<(system-reminder|environment_context|user_instructions)>.*?</\1>", re.DOTALL
)


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        content = " ".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if not isinstance(content, str):
        return ""
    return _AGENT_BLOCKS.sub(" ", content) if "</" in content else content


def turn_text(messages: Sequence[Any]) -> str:
    """The turn a tool is chosen for: the last user message, and the last
    tool result when the conversation ends with one."""
    parts: list[str] = []
    if follows_result(messages):
        parts.append(_text_of(messages[-1].get("content"))[:MAX_TURN_CHARS])
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            parts.insert(0, _text_of(m.get("content"))[:MAX_TURN_CHARS])
            break
    return "\n".join(parts)


def asked_text(messages: Sequence[Any]) -> str:
    """The last user message's text (agents' blocks out): what the user
    asked, without the tool result a turn may follow."""
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return _text_of(m.get("content"))[:MAX_TURN_CHARS]
    return ""


def follows_result(messages: Sequence[Any]) -> bool:
    """The conversation ends with a tool's result: the model may well
    answer from it in prose, which ends an agent's loop."""
    return bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"


def called_before(messages: Sequence[Any]) -> set[str]:
    """The names the conversation's assistant turns already called."""
    names: set[str] = set()
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return names


#: A coding agent's turn names an action ("create the file", "run the
#: tests") in words its tools' descriptions rarely use ("Writes a file",
#: "Executes a bash command", "Runs a command in a PTY"): each of these
#: verbs adds the words such tools are named and described by, at
#: ``EXPANSION_WEIGHT``. Every file action is one a shell can do (Codex
#: CLI offers no other tool for it), so those add ``shell`` too.
EXPANSIONS: dict[str, str] = {
    # make a file
    "create": "write file shell",
    "make": "write file shell",
    "write": "write file shell",
    "save": "write file shell",
    "script": "write file shell command",
    # change one
    "change": "edit replace patch shell",
    "modify": "edit replace patch shell",
    "fix": "edit replace patch shell",
    "rename": "edit replace patch shell",
    "replace": "edit patch",
    "refactor": "edit replace patch shell",
    "add": "edit write file",
    "docstring": "edit",
    # look at one
    "open": "read view file",
    "view": "read file",
    "contents": "read file shell",
    "print": "read file",
    "screenshot": "view image",
    # search
    "search": "grep glob shell",
    "grep": "search",
    "where": "search grep shell",
    "list": "ls glob",
    # run something
    "run": "bash shell command exec execute",
    "execute": "bash shell command exec",
    "test": "bash shell command",
    "tests": "bash shell command",
    "install": "bash shell command",
    "build": "bash shell command",
    "compile": "bash shell command",
    "commit": "bash shell command git",
    "git": "bash shell command",
    "npm": "bash shell command",
    "pytest": "bash shell command",
    "cargo": "bash shell command",
    "delete": "remove bash shell command",
    "remove": "delete bash shell command",
    # the web
    "download": "fetch url web",
    "url": "fetch web shell",
}
_EXPAND = {_stem(k): tuple({*words(v)}) for k, v in EXPANSIONS.items()}
#: The weight of a word a verb added, against one the user's message says.
EXPANSION_WEIGHT = 0.5
#: The weight of a word only the tool's result says: the user's request
#: still says what the loop is for; a result's code and logs say much.
RESULT_WEIGHT = 0.5

#: A URL, and a path of two parts or more: their parts (``tmp``, ``work``,
#: ``src``) are not the turn's request, and outweigh it in a short turn.
_URL = re.compile(r"\bhttps?://\S+")
_PATH = re.compile(r"(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?|\b[\w.@+-]+(?:/[\w.@+-]+)+/?")


def _plain(text: str) -> list[str]:
    text = _URL.sub(" url ", text)
    return words(
        _PATH.sub(lambda m: " file " + m.group(0).rstrip("/").rsplit("/", 1)[-1] + " ", text)
    )


def query_terms(turn: str, asked: str | None = None) -> dict[str, float]:
    """The lexical ranker's query for ``turn``: its words at weight 1 (a
    URL as ``url``, a path as ``file`` and its last part), and the words
    the verbs of ``asked`` (the user's message; default the whole turn)
    add (``EXPANSIONS``) at ``EXPANSION_WEIGHT``. The words of the turn
    that ``asked`` does not say (a tool's result) weigh ``RESULT_WEIGHT``
    and are not expanded (numbers are left out): a result's code and
    logs say ``run`` and ``open`` about other things."""
    said = _plain(turn) if asked is None else _plain(asked)
    terms = dict.fromkeys(said, 1.0)
    for w in said:
        for x in _EXPAND.get(w, ()):
            terms.setdefault(x, EXPANSION_WEIGHT)
    if asked is not None:
        for w in _plain(turn):
            if not w.isdigit():  # line numbers, sizes, counts
                terms.setdefault(w, RESULT_WEIGHT)
    return terms


class Bm25:
    """Okapi BM25 over a set of documents (the tools' texts)."""

    __slots__ = ("avg", "docs", "idf", "lengths", "names")

    def __init__(self, texts: Iterable[str], names: Iterable[str] = ()) -> None:
        self.docs = [Counter(words(t)) for t in texts]
        #: Each document's name words (a field of its own: ``NAME_WEIGHT``).
        self.names = [frozenset(words(n)) for n in names] or [frozenset()] * len(self.docs)
        self.lengths = [sum(d.values()) for d in self.docs]
        n = len(self.docs)
        self.avg = (sum(self.lengths) / n) if n else 0.0
        df: Counter[str] = Counter()
        for d in self.docs:
            df.update(d.keys())
        self.idf = {w: math.log(1 + (n - k + 0.5) / (k + 0.5)) for w, k in df.items()}

    def scores(self, query: str | Mapping[str, float]) -> list[float]:
        """Each document's score for ``query``: text, or words with their
        weights (``query_terms``)."""
        weights = dict.fromkeys(words(query), 1.0) if isinstance(query, str) else query
        terms = [(w, x * self.idf[w]) for w, x in weights.items() if w in self.idf]
        out = []
        for d, length, name in zip(self.docs, self.lengths, self.names, strict=True):
            norm = K1 * (1 - B + B * length / (self.avg or 1))
            s = 0.0
            for w, idf in terms:
                tf = d.get(w)
                if tf:
                    s += idf * tf * (K1 + 1) / (tf + norm)
                    if w in name:
                        s += NAME_WEIGHT * idf
            out.append(s)
        return out


def cosine(vectors: Sequence[Sequence[float]], query: Sequence[float]) -> list[float]:
    """Each vector's cosine with ``query`` (0 for a zero vector)."""
    qn = math.sqrt(sum(x * x for x in query)) or 1.0
    out = []
    for v in vectors:
        vn = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append(sum(a * b for a, b in zip(v, query, strict=False)) / (vn * qn))
    return out


def relative(scores: Sequence[float]) -> list[float]:
    """Scores as fractions of the best one's height above the median (a
    BM25 median is usually 0; a cosine median is the tools' common
    likeness), so one ratio serves both rankers. All zero when the best
    does not stand above the median."""
    if not scores:
        return []
    ordered = sorted(scores)
    median = ordered[len(ordered) // 2]
    top = ordered[-1] - median
    if top <= 1e-9:
        return [0.0] * len(scores)
    return [max(0.0, (s - median) / top) for s in scores]


@dataclass(slots=True)
class Decision:
    """What to show the model. ``kept`` is None when nothing is narrowed,
    and ``outcome`` says why (``few_tools``, ``not_confident``)."""

    offered: int
    kept: list[str] | None = None
    outcome: str = "narrowed"
    #: The kept tools' relative scores (for a recording), by name.
    scores: dict[str, float] = field(default_factory=dict)
    #: The turn follows a tool's result (``follows_result``): an answer in
    #: prose is then the loop's end, not a missed call (``reask.AskAgain``).
    after_result: bool = False

    @property
    def narrowed(self) -> bool:
        return self.kept is not None

    def note(self) -> dict[str, Any]:
        """What a recording and the reply's ``streamfix`` field say."""
        return {"kept": list(self.kept or ()), "of": self.offered}


def decide(
    names: Sequence[str],
    scores: Sequence[float],
    keep_also: Iterable[str] = (),
    threshold: int = THRESHOLD,
    keep: int = KEEP,
    ratio: float = RATIO,
) -> Decision:
    """Which of ``names`` (scored ``scores``, one ranker's) to show; see
    the module doc. ``keep_also``: names shown whatever their score (tools
    the conversation called)."""
    n = len(names)
    if n <= threshold:
        return Decision(n, outcome="few_tools")
    rel = relative(scores)
    order = sorted(range(n), key=lambda i: -rel[i])
    close = sum(1 for x in rel if x >= ratio)
    if not close or close > keep:
        return Decision(n, outcome="not_confident")
    chosen = [names[i] for i in order[:keep]]
    extra = [x for x in names if x in set(keep_also) and x not in chosen]
    if len(chosen) + len(extra) >= n:
        return Decision(n, outcome="not_confident")
    return Decision(n, chosen + extra, scores={names[i]: round(rel[i], 3) for i in order[:keep]})


#: Offered tools ranked on the caller's thread at most: a larger set is
#: indexed and scored off the event loop (``server/narrowing.py``).
INLINE_TOOLS = 32


class LexicalIndex(Bm25):
    """A tool set's BM25 index and its tools' names, made once per set
    (kept in a ``VectorCache``)."""

    __slots__ = ("tool_names",)

    def __init__(self, tools: Sequence[Any]) -> None:
        fns = [fn for fn in map(_function, tools) if fn is not None]
        self.tool_names = [fn["name"] for fn in fns]
        super().__init__([tool_text(fn) for fn in fns], self.tool_names)

    @staticmethod
    def key(tools: Sequence[Any]) -> tuple[str, str]:
        """The set's cache key: a hash of the tools as sent (one pass in C,
        so a set seen before costs nothing to find)."""
        try:
            raw = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            raw = repr(tools).encode("utf-8", "surrogatepass")
        return "bm25", hashlib.blake2b(raw, digest_size=16).hexdigest()

    def rank(self, turn: str, asked: str | None = None) -> tuple[list[str], list[float]]:
        return self.tool_names, self.scores(query_terms(turn, asked))


def lexical_index(tools: Sequence[Any], cache: VectorCache | None = None) -> LexicalIndex:
    """``tools``' index, from ``cache`` when the set was seen before."""
    key = LexicalIndex.key(tools)
    index = cache.get(key) if cache is not None else None
    if not isinstance(index, LexicalIndex):
        index = LexicalIndex(tools)
        if cache is not None:
            cache.put(key, index)
    return index


def rank_lexical(
    tools: Sequence[Any], turn: str, cache: VectorCache | None = None, asked: str | None = None
) -> tuple[list[str], list[float]]:
    """The function tools' names and their BM25 scores for ``turn``
    (``query_terms``: ``asked``, the user's message, is whose verbs are
    expanded); the index of a tool set seen before is taken from
    ``cache``."""
    return lexical_index(tools, cache).rank(turn, asked)


class NarrowNote:
    """A chain step on a narrowed attempt: the note on each choice's
    finish, and the names called (``called``, shared by the attempt's
    choices). It never touches text, so it stays off both lanes."""

    ignores_content = True
    ignores_reasoning = True

    __slots__ = ("called", "info")

    def __init__(self, info: dict[str, Any], called: set[str]) -> None:
        self.info = info
        self.called = called

    def feed(self, d: Delta) -> None:
        for c in d.calls or ():
            self.called.add(c.name)

    def close(self, d: Delta) -> None:
        self.feed(d)
        d.ext = {**(d.ext or {}), "narrowed": self.info}

    @classmethod
    def factory(cls, info: dict[str, Any], called: set[str]) -> Any:
        """A step factory (called with the request's ``Context``)."""

        def make(ctx: Context) -> NarrowNote:
            return cls(info, called)

        return make


#: Tool sets whose vectors are kept (each up to a request's tool limit).
MAX_TOOL_SETS = 64


class VectorCache:
    """What is made of a tool set once, per (embedding model or ``""``,
    tool set): the tools' vectors, or their BM25 index; least recently
    used out past ``size`` sets. A client sends the same tools every turn,
    so only the turn is embedded or scored then."""

    __slots__ = ("_sets", "size")

    def __init__(self, size: int = MAX_TOOL_SETS) -> None:
        self.size = size
        self._sets: OrderedDict[tuple[str, str], Any] = OrderedDict()

    @staticmethod
    def key(model: str, texts: Sequence[str]) -> tuple[str, str]:
        digest = hashlib.blake2b(digest_size=16)
        for t in texts:
            digest.update(t.encode("utf-8", "surrogatepass") + b"\0")
        return model, digest.hexdigest()

    def get(self, key: tuple[str, str]) -> Any:
        vectors = self._sets.get(key)
        if vectors is not None:
            self._sets.move_to_end(key)
        return vectors

    def put(self, key: tuple[str, str], value: Any) -> None:
        self._sets[key] = value
        self._sets.move_to_end(key)
        while len(self._sets) > self.size:
            self._sets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._sets)
