"""The tool-tag detector: tool calls written as text in ``content`` become
structured ``tool_calls``, while the text streams.

One pass over the text as it arrives (docs/design.md, "The detector"):

- **Outside a call**, a search of the new text only finds the next
  marker that applies to this request: the registry's fixed markers (one
  regex compiled from their trie, ``_Trie``), markers made from the
  offered tool names (``NAME(``, ``[NAME(``, ``functions.NAME(``:
  ``_Names``, below), and while nothing but whitespace has been released,
  the leading markers ``{``, ``[``, ``{{``…. Text is released at once, except the
  longest suffix that is a proper prefix of a marker, and the run of
  blanks just before it (at most ``MAX_GAP_WS`` characters: the layout
  between text and a call, dropped when a call follows). A chunk with
  nothing to hold is forwarded as the same ``str`` object, which keeps the
  chain on its fast path.
- **Inside a region** (from a marker on), the format's ``EndFinder`` is fed
  each piece once; the text is held, at most ``Options.max_call_chars``.
  When the region ends it is parsed once, by each format sharing the
  marker in priority order. A call: names resolved among the offered tools,
  arguments repaired, converted and validated by ``toolargs``; lifted through
  ``Delta.add_call``; ``finish_reason`` becomes ``tool_calls`` at the end.
  One call of several that does not read is dropped
  (``dropped_call.unreadable``), the others lifted. Not a call: inside
  unmistakable syntax, a call to a tool not offered is markup (stripped,
  sampled); one in which nothing reads is given back as text
  (``given_back.unreadable``), or, for a caller that asks again
  (``Options.hold_unreadable``), held while it is all the reply has: given
  back in place when anything else comes, dropped at the end
  (``stripped.unparsed_call``) so the empty reply is asked again; a bare
  candidate is text, released verbatim.
- **A mention is not a call.** A wrapped marker is unmistakable only when
  a body follows it: while the region's head is short (``SHAPE_MAX``) each
  format sharing the marker says whether it reads as its body
  (``Format.body_shape``: ``<tool_call>`` then ``{``, ``[``, a fence,
  ``<function=`` or a tool's name; ``<function=NAME>`` then ``{`` or
  ``<parameter=``). When none does ("such models wrap each call in
  <tool_call> tags, and …"), the marker and everything after it are text,
  released at once and scanned on (counted ``released.mentioned_marker``).
  So markup that does not become a call is released, not dropped; only a
  region that reads as a call and does not parse (cut off, broken JSON in
  a closed wrapper, an empty wrapper) is stripped.
- **Code is text.** A marker inside inline code or a code block of the
  released text (``codespans``) starts no region; a line of code is a call
  only when it stands on its own line (``formats/code_call.py``) and nothing
  but blanks or further calls follows it to the end of the reply (the
  code-line rule, ``Format.ends_reply``): its calls are held
  (``_pending``) until the next text that is not blank, which releases
  their text in place, or the end, which lifts them.
- **Answer channels.** After an answer header of a family whose calls have
  their own channel (the answer channel, ``Reasoning.calls_apart``;
  the reasoning splitter says so, ``watch_answer``), a bare candidate
  (JSON, a fence, a line of code) is the answer: released as text.
- **At the end of the stream** inside a region: a complete call whose
  closing tag never came is a call; an unfinished one under a ``length``
  finish is a cut-off call (``Report.truncated_call``; nothing shown, no
  call); otherwise markup or text as above.
- **Unrecognised markup** (``<|…|>`` and the families' other barred
  tokens, ``Residue.bars``; ``<…tool…>`` tags,
  ``[NAME]``…) left in released text is counted and sampled in the
  Report (the proxy's metrics read it); it is not stripped here (the
  residue stripper does that).

Cost per chunk is proportional to the chunk (plus the longest marker), never
to the text so far: nothing released is searched again, the finders keep
their own state, and the text of a region is joined once, when it ends.

Cost per new set of tools (``Matcher``, built on a set's first request,
then cached): the names' markers are never compiled into a regex.
Compiling them (a trie per set, as before) cost 230 ms of CPU for 50 real
tool names, 10 s for 512 names of 64 characters and 51 s for 256 (Python's
``re`` parses a deep nest of groups slowly). Now the registry's markers are
compiled once for every set (about 40 ms, at the first matcher), and a set
costs a regex of one fixed shape (its pattern holds only the names' first
characters), a frozenset and a sorted list of its markers: linear in the
names' length, measured 0.6 ms for 50 tools, 3.1 ms for 512 x 64 and
3.3 ms for 512 x 256 characters (``python -m bench.matcher``, medians);
so the proxy's limits (``MAX_TOOLS``, ``MAX_TOOL_NAME_CHARS``) bound it to a
few milliseconds, and it is built on the event loop. Names no API allows (a
``(`` or NUL in them, or a blank first) are not looked for as ``NAME(``
(``_name_marker``).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..context import Context
from ..delta import Delta, ToolCall, take_each
from ..formats import ABORT, OPAQUE, UNREADABLE, EndFinder, Format, RawCall, markers_for
from ..formats.base import SHAPE_MAX, resolve_name
from ..formats.registry import all_residue, on_change
from ..spec import ToolSpec
from ..toolargs import coerce, dumps, to_object, validate
from .codespans import CodeSpans

#: Blanks held where they are layout if a call follows: the templates put
#: a newline or a space between the text and a call, and the reference
#: parsers leave it out of the content (canitoolcall's fixtures). So blanks
#: that may be layout (``_layout_after``) are held until the next text shows
#: whether a call follows (dropped then; also at the end after a call).
#: Longer runs are released (their tail is still held).
MAX_GAP_WS = 32

#: The characters after which blanks are layout before a call: the end of
#: a sentence or of an introduction ("Let me check.", "Here it is:"), as
#: the templates write the text before a call. Blanks after anything else
#: (code, a word) go out at once: holding every newline token of a code
#: block would cost a rebuilt chunk each, for nothing.
_SENTENCE_END = ".:!?。：！？"


#: ``ToolTagDetector._prev`` right after an opaque code block's closing
#: fence: a fence glued to it (a run of six backticks, then ``json``: the
#: block's close, then a fenced call's opening) is not "after a backtick"
#: (inline code naming the markup). The opaque finder closed the block at
#: the run's first three backticks, at any split; the rest opens the next
#: fence, and the call is lifted with it. Any text released after it sets
#: ``_prev`` to a character again; it is neither a word character nor a
#: sentence's end.
FENCE_SHUT = "```"


#: A region of markup alone (an empty wrapper, or one around an empty call
#: list: LFM2's ``<|tool_call_start|>[]<|tool_call_end|>``, vLLM
#: ``test_lfm2_tool_parser.py``): nothing in it to give back.
_MARKUP_ONLY = re.compile(r"(?:\s|<[^<>]*>|\[/?[A-Z_]+\]|\[\s*\])*")


def _layout_after(before: str) -> bool:
    """Whether blanks after the character ``before`` ("" at the reply's
    start or right after a call) may be layout before a call."""
    return not before or before in _SENTENCE_END


#: Matchers kept per distinct set of offered tool names (requests of one
#: deployment offer the same few sets).
MATCHER_CACHE = 64

_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_WORD_CLASS = "[A-Za-z0-9_]"  # the characters of ``_WORD``
_NOT_AFTER_WORD = f"(?<!{_WORD_CLASS})"


def _unrecognised() -> re.Pattern[str]:
    """Call syntax that no format recognised (counted and sampled, not
    stripped): a ``<|…|>`` token or one barred by a family's other bar
    (``Residue.bars``), a tool or function tag, a control bracket."""
    barred = "".join(
        f"<{e}[^{e}<>\\n]{{1,48}}{e}>|" for e in map(re.escape, all_residue().barring())
    )
    return re.compile(
        barred + r"</?[A-Za-z_]*(?:tool|function)[A-Za-z_]*(?:[ =][^<>\n]{0,48})?>"
        r"|\[/?(?:TOOL_[A-Z_]+|ARGS|CALL_ID|AVAILABLE_TOOLS|/?INST)\]"
    )


UNRECOGNISED = _unrecognised()
#: UNRECOGNISED starts with ``<`` or ``[``: released text without them is
#: not searched. Text kept between pieces so a token split over two chunks
#: is still seen: at most this long.
_CARRY_MAX = 64
#: ``Matcher.quiet``: pieces of text remembered as holding no marker and no
#: marker prefix. Model output is made of a few thousand distinct tokens,
#: so most pieces are seen again: a set lookup then stands in for the scan.
#: Only pieces this short are kept; at this many the set starts over (so it
#: follows what the streams now say, at O(1) amortised cost).
QUIET_LEN = 24
QUIET_MAX = 8192
#: Joins the texts of a run for ``Matcher.run_scan``. A text that holds
#: one itself (``\u0000`` in the JSON) only makes the check more cautious:
#: a marker's prefix before it is taken for one that ends a text.
RUN_SEP = "\x00"
#: A text of a run that ends in blanks after a sentence's end (or at the
#: run's start, after what came before): held, so the run goes one by one.
_BLANK_END = re.compile(r"(?:\A|[" + _SENTENCE_END + r"])[\s\x00]*\s(?:\x00|\Z)")


def _trie(words: Iterable[str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for w in words:
        node = root
        for c in w:
            node = node.setdefault(c, {})
        node[""] = {}
    return root


def _rx(node: dict[str, Any], partial: bool, top: bool = False, guard_words: bool = True) -> str:
    """Regex of a trie: ``partial=False`` matches a whole marker (longest
    first); ``partial=True`` any non-empty prefix of one. ``guard_words``:
    a marker starting with a word character must not follow one."""
    alts = []
    for c in sorted(k for k in node if k):
        guard = _NOT_AFTER_WORD if top and guard_words and c in _WORD else ""
        sub = _rx(node[c], partial)
        if partial:
            alts.append(f"{guard}{re.escape(c)}(?:{sub})?" if sub else f"{guard}{re.escape(c)}")
        else:
            alts.append(f"{guard}{re.escape(c)}{sub}")
    if not partial and "" in node and not top:
        alts.append("")
    if not alts:
        return ""
    return alts[0] if len(alts) == 1 and not top else "(?:" + "|".join(alts) + ")"


def _run_rx(root: dict[str, Any]) -> str:
    """``Matcher.run_scan``'s regex: a whole marker, or a marker's prefix
    that ends a text (``RUN_SEP`` or the end), not glued to a word before
    it. One alternative per first character, each starting with that
    character: the regex engine then skips along the text to candidates
    with a character-set scan (a lookahead or lookbehind in front would
    make it try every position)."""
    alts = []
    for c in sorted(k for k in root if k):
        node = root[c]
        esc = re.escape(c)
        guard = f"(?<!{_WORD_CLASS}{esc})" if c in _WORD else ""  # c not after a word
        part = _rx(node, True)
        options = [_rx(node, False), (f"(?:{part})?" if part else "") + r"(?:\x00|\Z)"]
        alts.append(f"{esc}{guard}(?:{'|'.join(options)})")
    return "|".join(alts) or r"(?!x)x"


def _prefixes(words: Iterable[str]) -> frozenset[str]:
    return frozenset(w[:i] for w in words for i in range(1, len(w)))


class _Trie:
    """The registry's own markers, found by regexes made from their trie
    (``_rx``): compiled once, shared by every request (``_fixed_markers``)."""

    __slots__ = ("lead", "lead_prefixes", "lead_tail", "prefixes", "run_scan", "scan", "tail")

    def __init__(self, anywhere: tuple[str, ...], leading: tuple[str, ...]) -> None:
        every = tuple(dict.fromkeys((*anywhere, *leading)))
        never = r"(?!x)x"
        # One search per piece finds the leftmost of: a whole marker
        # (group 1), or a marker's prefix running to the end of the text.
        # The lookahead of the markers' first characters lets the regex
        # engine skip along the text; the word boundary before a name marker
        # is checked by the caller (a lookbehind per position is slower).
        first = "".join(sorted({w[0] for w in anywhere}))
        whole = _rx(_trie(anywhere), False, True, False) or never
        part = _rx(_trie(anywhere), True, True, False) or never
        self.scan = re.compile(
            f"(?=[{re.escape(first)}])(?:({whole})|(?:{part})\\Z)" if anywhere else never
        )
        #: ``scan`` for a run of texts joined by ``RUN_SEP`` (no marker holds
        #: it): a prefix that ends any text is found as one that ends the
        #: string is (``ToolTagDetector.feed_texts``). Name markers glued to
        #: a word are left out here, in the regex (``_search`` does it after).
        self.run_scan = re.compile(_run_rx(_trie(anywhere)))
        #: A marker's prefix running from a given position to the end of the
        #: text.
        self.tail = re.compile(r"(?:" + part + r")\Z")
        self.lead = re.compile(r"\s*(" + (_rx(_trie(every), False, True) or never) + ")")
        self.lead_tail = re.compile(r"\s*(?:" + (_rx(_trie(every), True, True) or never) + r")?\Z")
        self.prefixes = _prefixes(anywhere)
        self.lead_prefixes = _prefixes(every)


_BLANKS = re.compile(r"\s*")


def _name_marker(marker: str) -> bool:
    """Whether ``_Names`` looks for ``marker``: it ends with ``(``, has no
    other ``(`` and no NUL, and starts with no blank. So do the ``NAME(``,
    ``[NAME(`` and ``functions.NAME(`` of every name but absurd ones (no
    API allows a ``(``, NUL or blank in a name); those are left out: such a
    name's ``NAME(`` call stays text (its JSON and XML calls still count).
    """
    body = marker[:-1]
    return marker[-1:] == "(" and body[:1].strip() != "" and "(" not in body and "\x00" not in body


class _Names:
    """The markers made from the offered tool names (``NAME(`` and its
    kin), found without a regex made from them: one cost 20 ms of CPU per
    64-character name to compile (a deep nest of groups), paid by the
    first request of every new set of tools. Such a marker is a run
    without a blank, ``(`` or NUL, then ``(``. So one small regex, the same
    shape for every set, finds the places a marker (or a prefix of one
    running to the end) could start: a character markers start with, not
    glued to a word character before it, then such a run (at most as long
    as the longest marker) that ends at ``(`` or at the end. There a set
    lookup decides, or, for a prefix, ``bisect`` in the sorted markers.
    Building is sorting the markers."""

    __slots__ = ("markers", "maxlen", "rx", "sorted")

    def __init__(self, markers: Iterable[str]) -> None:
        self.markers = frozenset(markers)
        self.sorted = sorted(self.markers)
        self.maxlen = max(map(len, self.markers))
        first = "".join(re.escape(c) for c in sorted({m[0] for m in self.markers}))
        # A run stops at a blank too, unless a name has one (then the regex
        # stops at more places that are not a marker, in prose).
        blank = any(len(m[:-1].split(None, 1)) > 1 for m in self.markers)
        run = "[^(\\x00]" if blank else "[^\\s(\\x00]"
        # Group 1: the run ends at ``(`` (a whole marker); else at the end of
        # the text, or before a NUL (the end of a text of a run).
        self.rx = re.compile(
            f"[{first}](?<!{_WORD_CLASS}{{2}}){run}{{0,{self.maxlen - 1}}}+(?:(\\()|\\Z|(?=\\x00))"
        )

    def is_prefix(self, x: str) -> bool:
        """Whether ``x`` (not empty) starts one of the markers (or is one)."""
        if len(x) > self.maxlen:
            return False
        ms = self.sorted
        k = bisect_left(ms, x)
        return k < len(ms) and ms[k].startswith(x)

    def is_proper_prefix(self, x: str) -> bool:
        """Whether a marker longer than ``x`` starts with it."""
        if len(x) >= self.maxlen:
            return False
        ms = self.sorted
        k = bisect_left(ms, x)
        if k < len(ms) and ms[k] == x:
            k += 1
        return k < len(ms) and ms[k].startswith(x)

    def whole_at(self, s: str, i: int) -> str | None:
        """The marker that starts at ``s[i]``, if any (one at most: it ends
        at the first ``(``)."""
        j = s.find("(", i, i + self.maxlen)
        if j <= i:
            return None
        w = s[i : j + 1]
        return w if w in self.markers else None

    def find(self, s: str, pos: int) -> tuple[int, str | None] | None:
        """``Matcher.scan``'s answer for these markers: the leftmost place
        from ``pos`` where one starts (and it), or where a prefix of one
        runs to the end (and None). Places glued to a word character before
        them are left out (``_search`` would pass them by); the text's first
        place is not (that depends on the text before it)."""
        mm = self.rx.search(s, pos)
        return None if mm is None else self.verify(s, mm)

    def verify(self, s: str, mm: re.Match[str] | None) -> tuple[int, str | None] | None:
        """``find`` from the place ``rx`` found (``mm``) on."""
        search = self.rx.search
        markers = self.markers
        end = len(s)
        while mm is not None:
            i = mm.start()
            if mm.group(1) is not None:
                w = mm.group()
                if w in markers:
                    return i, w
            elif mm.end() == end and self.is_prefix(mm.group()):
                return i, None
            mm = search(s, i + 1)
        return None

    def run_hit(self, run: str) -> bool:
        """Whether a text of a run (texts joined by ``RUN_SEP``) holds one of
        the markers or ends with a prefix of one (``Matcher.run_scan``)."""
        search = self.rx.search
        mm = search(run)
        while mm is not None:
            w = mm.group()
            if w in self.markers if mm.group(1) is not None else self.is_prefix(w):
                return True
            mm = search(run, mm.start() + 1)
        return False


class _RunScan:
    """``Matcher.run_scan``: the regex of the ``_Trie``, then ``_Names``."""

    __slots__ = ("names", "rx")

    def __init__(self, rx: re.Pattern[str], names: _Names | None) -> None:
        self.rx = rx
        self.names = names

    def search(self, run: str) -> object | None:
        """Something (not None) when a text of the run holds a marker or
        ends with a marker's prefix, not glued to a word before it."""
        hit = self.rx.search(run)
        if hit is None and self.names is not None and self.names.run_hit(run):
            return True
        return hit


_fixed: tuple[_Trie, frozenset[str]] | None = None


def _fixed_markers() -> tuple[_Trie, frozenset[str]]:
    """The registry's own markers (no tool names) and their ``_Trie``,
    built once (about 40 ms)."""
    global _fixed
    if _fixed is None:
        mk = markers_for({})
        _fixed = (_Trie(mk.anywhere, mk.leading), frozenset(mk.anywhere))
    return _fixed


class Matcher:
    """The markers of one request (see module docstring): the registry's,
    in a shared ``_Trie``; those from the offered tool names, in
    ``_Names``. Building one costs a few microseconds per tool."""

    __slots__ = ("groups", "line_start", "maxlen", "names", "quiet", "run_scan", "trie")

    def __init__(self, tools: Mapping[str, ToolSpec]) -> None:
        mk = markers_for(tools)
        self.groups: Mapping[str, tuple[Format, ...]] = mk.groups
        self.maxlen = max((len(m) for m in (*mk.anywhere, *mk.leading)), default=1)
        trie, fixed = _fixed_markers()
        named = [m for m in mk.anywhere if m not in fixed and _name_marker(m)]
        self.trie = trie
        self.names = _Names(named) if named else None
        #: ``scan`` for a run of texts joined by ``RUN_SEP`` (no marker
        #: holds it); ``search`` is not None when one may be in it.
        self.run_scan = _RunScan(self.trie.run_scan, self.names)
        #: Markers that count only at the start of a line.
        self.line_start = frozenset(
            mk for mk, fs in self.groups.items() if all(f.line_start for f in fs)
        )
        #: Texts ``scan`` finds nothing in (see ``QUIET_LEN``); shared by
        #: every stream with these tools, filled as they run.
        self.quiet: set[str] = set()

    def is_quiet(self, text: str) -> bool:
        """Whether no marker and no marker's prefix to the end is in
        ``text`` (but glued to a word before it); remembered for short
        texts (``QUIET_LEN``)."""
        if self.trie.scan.search(text) is not None:
            return False
        names = self.names
        if (
            names is not None
            and (mm := names.rx.search(text)) is not None
            and names.verify(text, mm) is not None
        ):
            return False
        if len(text) <= QUIET_LEN:
            if len(self.quiet) >= QUIET_MAX:
                self.quiet.clear()
            self.quiet.add(text)
        return True

    def has_marker(self, s: str) -> bool:
        """Whether a whole marker (the registry's or an offered name's)
        stands anywhere in ``s``: the reasoning splitter's question about a
        cut reply (did a call begin in it?)."""
        if any(mm.group(1) for mm in self.trie.scan.finditer(s)):
            return True
        names = self.names
        if names is None:
            return False
        hit = names.find(s, 0)
        while hit is not None:
            if hit[1] is not None:
                return True
            hit = names.find(s, hit[0] + 1)
        return False

    def at_tail(self, s: str, i: int) -> bool:
        """Whether ``s[i:]`` (not empty) starts a marker (or is one)."""
        if self.trie.tail.match(s, i) is not None:
            return True
        return self.names is not None and self.names.is_prefix(s[i:])

    def is_prefix(self, x: str) -> bool:
        """Whether a longer marker starts with ``x``."""
        if x in self.trie.prefixes:
            return True
        return self.names is not None and self.names.is_proper_prefix(x)

    def is_lead_prefix(self, x: str) -> bool:
        """``is_prefix``, the markers of a reply's start included."""
        if x in self.trie.lead_prefixes:
            return True
        return self.names is not None and self.names.is_proper_prefix(x)

    def lead(self, s: str) -> tuple[int, str] | None:
        """The longest marker (any, those of a reply's start included) after
        the blanks that start ``s``: (where, which)."""
        lm = self.trie.lead.match(s)
        names = self.names
        if names is not None:
            blanks = _BLANKS.match(s)
            k = 0 if blanks is None else blanks.end()
            w = names.whole_at(s, k)
            # The regex takes all the blanks first; a marker of the trie
            # found after fewer of them (one that starts with a blank)
            # counts only when none starts after all of them.
            if w is not None and (lm is None or lm.start(1) < k or len(w) > lm.end(1) - k):
                return k, w
        return None if lm is None else (lm.start(1), lm.group(1))

    def lead_tail(self, s: str) -> bool:
        """Whether ``s`` is blanks, then nothing or a marker's prefix (any,
        those of a reply's start included)."""
        if self.trie.lead_tail.match(s) is not None:
            return True
        if self.names is None:
            return False
        blanks = _BLANKS.match(s)
        k = 0 if blanks is None else blanks.end()
        return k < len(s) and self.names.is_prefix(s[k:])


_matchers: dict[tuple[str, ...], Matcher] = {}


def _forget() -> None:
    """A format was registered or taken back: the registry's markers and
    every matcher are made anew."""
    global _fixed, UNRECOGNISED
    _fixed = None
    _matchers.clear()
    UNRECOGNISED = _unrecognised()


on_change(_forget)


def matcher_for(tools: Mapping[str, ToolSpec]) -> Matcher:
    """The matcher for this set of tool names (cached)."""
    key = tuple(sorted(tools))
    m = _matchers.get(key)
    if m is None:
        if len(_matchers) >= MATCHER_CACHE:
            _matchers.pop(next(iter(_matchers)))
        m = _matchers[key] = Matcher(tools)
    return m


def _trailing_ws(s: str, end: int) -> int:
    """Start of the run of blanks ending at ``end`` (at most MAX_GAP_WS)."""
    i = end
    stop = max(0, end - MAX_GAP_WS)
    while i > stop and s[i - 1].isspace():
        i -= 1
    return i


class ToolTagDetector:
    """Lifts tool calls written as text (see module docstring)."""

    #: Calls are lifted from content only: a reasoning-only delta passes
    #: ``feed`` untouched, so the chain leaves the detector out of the
    #: reasoning lane (``delta.TextLane``).
    ignores_reasoning = True

    __slots__ = (
        "_answer",
        "_calls",
        "_carry",
        "_closer",
        "_code",
        "_discard",
        "_echo",
        "_echo_got",
        "_echo_held",
        "_finder",
        "_fmts",
        "_gap",
        "_held",
        "_leading",
        "_lifted",
        "_line_blank",
        "_marker",
        "_opaque",
        "_over",
        "_parts",
        "_pending",
        "_pending_size",
        "_plain",
        "_prev",
        "_quiet",
        "_shaping",
        "_since_call",
        "_size",
        "_truncated",
        "_unfinished",
        "_unread",
        "ctx",
        "m",
    )

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.m = matcher_for(ctx.tools)
        self._quiet = self.m.quiet
        #: Outside any region, nothing held, past the reply's start: the
        #: state in which ``feed_text`` can pass text through.
        self._plain = False
        self._held = ""  # outside a region: blanks + a marker's prefix
        self._leading = True  # nothing but blanks released yet
        self._since_call = False  # nothing but blanks since the last call
        self._line_blank = True  # nothing but blanks released on this line
        #: The last character released (word boundaries), or ``FENCE_SHUT``.
        self._prev = ""
        self._finder: EndFinder | None = None
        self._fmts: tuple[Format, ...] = ()
        self._marker = ""
        self._parts: list[str] = []
        self._size = 0
        self._gap = ""  # blanks before the region's marker
        self._discard = False  # an oversized wrapped region, dropped as it comes
        self._opaque: EndFinder | None = None
        self._lifted = 0
        self._truncated = False
        self._carry = ""
        self._calls: list[ToolCall] = []  # lifted in this delta
        #: Inline code and code blocks in the released text: a marker
        #: there is text (``_search``).
        self._code = CodeSpans()
        #: A wrapped region whose head does not yet show call syntax or
        #: prose (``Format.body_shape``).
        self._shaping = False
        #: Whether the reply is now in an answer channel of a family whose
        #: calls have their own (``watch_answer``).
        self._answer: Callable[[], bool] | None = None
        #: The code-line rule (``Format.ends_reply``): what followed a call
        #: written as code while it is undecided whether prose follows it,
        #: in order: (call, its text) for such a call, (call, None) for a
        #: wrapped call lifted after it, (None, blanks) for blanks released
        #: meanwhile. ``_pending_size``: the characters of its text.
        self._pending: list[tuple[ToolCall | None, str | None]] = []
        self._pending_size = 0
        #: The held text passed its bound: calls written as code are text
        #: for the rest of the reply.
        self._over = False
        #: The stream ended with no finish reason (the upstream died): a
        #: region open then is cut off, not given back.
        self._unfinished = False
        #: Recognised regions in which nothing reads, held for a caller that
        #: asks again (``Options.hold_unreadable``) while they are all the
        #: reply has (with the blanks after them): anything else visible
        #: gives them back, in place; at the end they are dropped, and the
        #: reply left empty is asked again.
        self._unread = ""
        #: The stray closing token that may follow the last call
        #: (``Format.closer_after``) until the next text shows it is not.
        self._closer = ""
        #: The last call written again that may follow it
        #: (``Format.echo_after``), how much of it has come (``_echo_got``)
        #: and the text held meanwhile (its blanks before it, then it).
        self._echo = ""
        self._echo_got = 0
        self._echo_held: list[str] = []

    def watch_answer(self, answer: Callable[[], bool]) -> None:
        """Ask ``answer`` (the reasoning splitter's, which runs before us)
        whether the text is in an answer channel that never holds calls
        (``Reasoning.calls_apart``): a bare candidate there (JSON, a fence,
        a line of code) is the answer, released as text."""
        self._answer = answer

    @property
    def held(self) -> int:
        """Characters held outside any region (the hold-back bound's subject)."""
        return len(self._held)

    @property
    def hold_bound(self) -> int:
        """The most ``held`` can be now: the longest proper prefix of a
        marker, after blanks that are layout (``MAX_GAP_WS``)."""
        return MAX_GAP_WS + self.m.maxlen - 1

    @property
    def in_region(self) -> bool:
        return self._finder is not None

    def holds_call(self, pending: str) -> bool:
        """Whether the text seen so far, then ``pending`` (text not fed
        yet), ends inside a call region: one is open now, or ``pending``
        has a marker that would open one. For the repetition cutter, which
        runs before us (``RepetitionCutter.watch_calls``); it changes
        nothing. Cautious: a marker whose region turns out to be text, or
        a region that ends within ``pending``, still counts (and ``{`` or
        ``[`` at a line's start, which is one anywhere)."""
        if self._finder is not None:
            return True
        if not pending:
            return False
        hit = self._search(self._held + pending)
        return hit is not None and hit[1] is not None

    # -- Transform ---------------------------------------------------------

    def feed_text(self, text: str) -> bool:
        """The chain's plain-text lane (``delta.TextLane``): True, with the
        text taken in, when ``feed`` would pass it through unchanged;
        False, with nothing changed, otherwise."""
        if not text:
            return True  # feed() would not look at it either
        if not self._plain:
            return False
        last = text[-1]
        blank = last.isspace()
        if blank:
            body = text.rstrip()
            if _layout_after(body[-1] if body else self._prev):
                return False  # blanks that may be layout before a call are held: feed()
        if text not in self._quiet and not self.m.is_quiet(text) and self._search(text) is not None:
            return False  # a marker or a marker's prefix: feed()
        if blank:
            self._note(text)
            return True
        # Released as is (``_note`` inlined: this is the hot path).
        self._prev = last
        self._since_call = False
        self._line_blank = False  # ``last`` is not blank
        code = self._code
        if code.tick_end or "`" in text:
            code.note(text)
        if self._carry or "<" in text or "[" in text:
            self._watch(text)
        return True

    def feed_texts(self, texts: list[str], joined: str) -> int:
        """A run of texts for the lane (``delta.TextLane``): taken at once
        when one search of the run finds no marker and no marker's prefix
        at the end of any text (then ``feed_text`` would take each, and the
        state after them is ``_note``'s on the joined text); else one by
        one. The search is cautious: a marker that counts only at a line's
        start, or a name marker at a text's start (the word before it is in
        the text before), sends the run one by one, where ``_search``
        decides with the per-text rules."""
        if (
            not self._plain
            or self._since_call
            or self._carry
            or "<" in joined
            or "[" in joined
            or self.m.run_scan.search(run := RUN_SEP.join(texts)) is not None
            or _BLANK_END.search(run) is not None
        ):
            return take_each(self.feed_text, texts)
        if joined:
            self._note(joined)
        return len(texts)

    def _search(self, s: str) -> tuple[int, str | None] | None:
        """The leftmost marker or marker prefix (to the end) in ``s``:
        (where, the marker or None for a prefix)."""
        m = self.m
        scan = m.trie.scan.search
        mm = scan(s)
        names = m.names
        if names is not None and (nm := names.rx.search(s)) is not None:
            hit = names.verify(s, nm)
            if hit is not None:
                return self._search_names(s, mm, hit, names)
        while mm is not None:
            i = mm.start()
            verdict = self._verdict(s, i, mm.group(1))
            if verdict is not None:
                return verdict
            mm = scan(s, i + 1)
        return None

    def _search_names(
        self, s: str, mm: re.Match[str] | None, hit: tuple[int, str | None] | None, names: _Names
    ) -> tuple[int, str | None] | None:
        """``_search`` when ``s`` has a place for a tool-name marker
        (``hit``) too: the leftmost of the two; at one place, a marker
        before a prefix, and the longer marker."""
        scan = self.m.trie.scan.search
        while mm is not None or hit is not None:
            if hit is None or (mm is not None and mm.start() < hit[0]):
                assert mm is not None
                i, marker = mm.start(), mm.group(1)
            elif mm is None or hit[0] < mm.start():
                i, marker = hit
            else:
                i, marker = hit
                other = mm.group(1)
                if other is not None and (marker is None or len(other) > len(marker)):
                    marker = other
            verdict = self._verdict(s, i, marker)
            if verdict is not None:
                return verdict
            if mm is not None and mm.start() <= i:
                mm = scan(s, i + 1)
            if hit is not None and hit[0] <= i:
                hit = names.find(s, i + 1)
        return None

    def _verdict(self, s: str, i: int, marker: str | None) -> tuple[int, str | None] | None:
        """What the marker (or prefix, None) found at ``s[i]`` is: (where,
        the marker) or (where, None) to hold from there; None: not one."""
        before = s[i - 1] if i else self._prev
        if s[i] in _WORD and before in _WORD:
            return None  # a name marker glued to a word: not one
        if before == "`" or self._code.inside_at(s, i):
            return None  # inline code or a code block that names the markup: text
        if marker in self.m.line_start and not self._at_line_start(s, i):
            # Code calls start their line. But the text from here may still
            # be the start of a longer marker that counts anywhere (``[`` is
            # a list's start, a bracketed token is not bound to a line): hold
            # it then.
            return (i, None) if self.m.at_tail(s, i) else None
        return i, marker

    def _at_line_start(self, s: str, i: int) -> bool:
        j = s.rfind("\n", 0, i)
        before = s[j + 1 : i]
        return (not before or before.isspace()) and (j >= 0 or self._line_blank)

    def feed(self, d: Delta) -> None:
        text = d.content
        if not text:
            return
        out = self._process(text, False, False)
        if self._calls:
            self._flush(d)
        if len(out) == 1 and out[0] is text:
            return  # unchanged: the same object, the chain's fast path
        d.content = "".join(out)

    def close(self, d: Delta) -> None:
        text = d.content or ""
        self._unfinished = d.finish_reason is None
        out = self._process(text, True, d.finish_reason == "length")
        self._flush(d)
        joined = "".join(out)
        if joined != text:
            d.content = joined
        if self._truncated:
            self.ctx.report.truncated_call = True
        elif self._lifted:
            d.finish_reason = "tool_calls"

    def _flush(self, d: Delta) -> None:
        for c in self._calls:
            d.add_call(c)
        self._calls = []

    # -- the pass ----------------------------------------------------------

    def _process(self, text: str, final: bool, length: bool) -> list[str]:
        out: list[str] = []
        s: str | None = text
        while s is not None:
            if self._finder is not None:
                s = self._in_region(s, out, final, length)
            elif self._echo:
                s = self._in_echo(s, final)
            elif self._opaque is not None:
                e = self._opaque.feed(s)
                if e is None or e < 0:
                    self._release(out, s)
                    s = None
                else:
                    self._release(out, s[:e])
                    s = s[e:]
                    self._opaque = None
                    self._prev = FENCE_SHUT
            else:
                held = self._held
                self._held = ""
                s = self._scan(held + s if held else s, out, final)
        if final and self._held:
            held, self._held = self._held, ""
            if not (self._since_call and held.isspace()):
                self._release(out, held)
        if final and self._pending:
            self._settle(out, lift=True)  # nothing but blanks or calls followed
        if final and self._unread:
            if self._lifted or self._calls:
                self._give_back(out)  # the reply has calls: it is not asked again
            else:
                self.ctx.report.count("stripped.unparsed_call")
                self._unread = ""
        self._plain = not (
            self._held
            or self._leading
            or self._finder is not None
            or self._opaque is not None
            or self._pending
            or self._unread
            or self._closer
            or self._echo
        )
        return out

    def _scan(self, s: str, out: list[str], final: bool) -> str | None:
        """Outside a region: release text, hold a marker's prefix, or start
        a region (then return the region's text for the finder)."""
        if self._closer:
            rest = self._after_closer(s, final)
            if rest is None:
                self._held = s
                return None
            s = rest
        m = self.m
        if self._leading:
            lead = m.lead(s)
            if lead is not None:
                start, marker = lead
                if final or not m.is_lead_prefix(s[start:]):
                    return self._open(s, start, marker, out)
                self._hold(s, start, out)
                return None
            if not final and m.lead_tail(s):
                self._hold(s, len(s) - len(s.lstrip()), out)
                return None
        hit = self._search(s)
        if hit is not None and hit[1] is not None:
            start = hit[0]
            if final or not m.is_prefix(s[start:]):
                return self._open(s, start, hit[1], out)
            self._hold(s, start, out)  # a longer marker may still follow
            return None
        if final:
            self._held = s  # released (or dropped) by _process
            return None
        self._hold(s, len(s) if hit is None else hit[0], out)
        return None

    def _in_echo(self, s: str, final: bool) -> str | None:
        """After a call its format says the model may write again
        (``Format.echo_after``): held while the text is that echo, after
        at most ``MAX_GAP_WS`` blanks; dropped whole once it is (counted
        ``stripped.echoed_call``), the rest scanned on. Anything else
        sends all held back to the scan as text. Each piece is compared
        once (O(delta))."""
        echo, got, held = self._echo, self._echo_got, self._echo_held
        i = 0
        if got == 0:
            i = len(s) - len(s.lstrip())
            if sum(map(len, held)) + i > MAX_GAP_WS:
                return self._echo_fails(s)
        n = min(len(s) - i, len(echo) - got)
        if s[i : i + n] != echo[got : got + n]:
            return self._echo_fails(s)
        held.append(s[: i + n])
        self._echo_got = got + n
        if self._echo_got == len(echo):
            self._echo, self._echo_got, self._echo_held = "", 0, []
            self.ctx.report.count("stripped.echoed_call")
            return s[i + n :] or None
        return self._echo_fails("") if final else None

    def _echo_fails(self, s: str) -> str | None:
        """Not the echo: the held text, then ``s``, are scanned as text."""
        text = "".join(self._echo_held) + s
        self._echo, self._echo_got, self._echo_held = "", 0, []
        return text or None

    def _after_closer(self, s: str, final: bool) -> str | None:
        """``s`` without the stray closer (and the blanks before it) that
        the last call's format said may follow it; None while ``s`` may
        still grow into it."""
        closer = self._closer
        body = s.lstrip()
        if body.startswith(closer):
            self._closer = ""
            self.ctx.report.count("stripped.stray_closer")
            return body[len(closer) :]
        if not final and closer.startswith(body) and len(s) - len(body) <= MAX_GAP_WS:
            return None
        self._closer = ""
        return s

    def _hold(self, s: str, at: int, out: list[str]) -> None:
        """Release ``s`` up to ``at`` (less the blanks before it, where
        they are layout); hold the rest."""
        at = self._layout_from(s, at)
        if at >= len(s):
            self._release(out, s)
        else:
            if at:
                self._release(out, s[:at])
            self._held = s[at:]

    def _layout_from(self, s: str, at: int) -> int:
        """Where the blanks just before ``s[at]`` start, if they are layout
        (at most ``MAX_GAP_WS``, after a sentence's end, at the reply's start
        or after a call); else ``at``."""
        if not (at and s[at - 1].isspace()):
            return at
        gap_at = _trailing_ws(s, at)
        return gap_at if _layout_after(s[gap_at - 1] if gap_at else self._prev) else at

    def _release(self, out: list[str], text: str) -> None:
        if not text:
            return
        if self._unread:
            if text.isspace():
                self._unread += text  # still all the reply has
                return
            self._give_back(out)
        if self._pending:
            if text.isspace():
                self._pending.append((None, text))  # still undecided
                self._note(text)
                return
            self.ctx.report.count("released.example_call")
            self._settle(out, lift=False)  # prose follows: they were examples
        if self._leading and self._since_call:
            # Blanks after a call (or stripped markup) that the reply
            # starts with are layout: the content starts at its text.
            text = text.lstrip()
            if not text:
                return
        out.append(text)
        self._note(text)

    def _settle(self, out: list[str], lift: bool) -> None:
        """The code-line rule decided (``_pending``): the calls written as
        code are lifted (``lift``), or their text goes out in place; wrapped
        calls after them are lifted either way, in order."""
        pending, self._pending, self._pending_size = self._pending, [], 0
        for call, text in pending:
            if call is not None and (lift or text is None):
                self.ctx.report.count(f"lifted.{call.source}")
                self._lifted += 1
                self._add(call)
            else:
                assert text is not None
                out.append(text)
                self._note(text)

    def _note(self, text: str) -> None:
        """Take released ``text`` into the state the next scan needs."""
        self._prev = text[-1]
        nl = text.rfind("\n")
        tail = text[nl + 1 :]
        blank = not tail or tail.isspace()
        self._line_blank = blank if nl >= 0 else self._line_blank and blank
        if (self._leading or self._since_call) and not text.isspace():
            self._leading = self._since_call = False
        code = self._code
        if code.tick_end or "`" in text:
            code.note(text)
        if self._carry or "<" in text or "[" in text:
            self._watch(text)

    def _watch(self, text: str) -> None:
        buf = self._carry + text
        base = len(self._carry)
        report = self.ctx.report
        for mm in UNRECOGNISED.finditer(buf):
            if mm.end() > base:
                # Passed as a token: if the residue step strips it, it
                # was handled after all (``Report.handled``).
                report.sample_unrecognised(buf[mm.start() : mm.start() + 200], mm.group())
        cut = max(buf.rfind("<"), buf.rfind("["))
        self._carry = buf[cut:] if cut >= 0 and len(buf) - cut <= _CARRY_MAX else ""

    # -- regions -----------------------------------------------------------

    def _open(self, s: str, start: int, marker: str, out: list[str]) -> str:
        """Start a region at ``s[start:]``; but in an answer channel that
        never holds calls (``watch_answer``), a bare candidate's marker is
        text: released, and the scan goes on after it."""
        answer = self._answer
        if answer is not None and answer() and not any(f.wrapped for f in self.m.groups[marker]):
            end = start + len(marker)
            self._release(out, s[:end])
            return s[end:]
        return self._start(s, start, marker, out)

    def _start(self, s: str, start: int, marker: str, out: list[str]) -> str:
        gap_at = self._layout_from(s, start)
        if (
            gap_at < start
            and not self.m.groups[marker][0].layout_before
            and not ((self._leading or self._since_call) and s[:gap_at].isspace())
        ):
            gap_at = start  # this family's parser keeps blanks after text
        if gap_at:
            self._release(out, s[:gap_at])
        self._gap = s[gap_at:start]
        self._fmts = self.m.groups[marker]
        self._marker = marker
        self._finder = self._fmts[0].end_finder(marker)
        self._parts = []
        self._size = 0
        self._shaping = any(f.wrapped for f in self._fmts)
        return s[start:]

    def _clear(self) -> None:
        self._finder = None
        self._parts = []
        self._size = 0
        self._gap = ""
        self._discard = False
        self._shaping = False

    def _in_region(self, s: str, out: list[str], final: bool, length: bool) -> str | None:
        finder = self._finder
        assert finder is not None
        e = finder.feed(s) if s else None
        if self._shaping and e is None:
            region = "".join(self._parts) + s
            # Cut by the token limit while the head could still be a call:
            # a cut-off call (``_end``), not a mention.
            shape = self._shape(region, final and not length)
            if shape is False:
                self.ctx.report.count("released.mentioned_marker")
                self._release(out, self._gap)
                self._release(out, self._marker)
                self._clear()
                return region[len(self._marker) :]
            if shape or len(region) - len(self._marker) > SHAPE_MAX:
                self._shaping = False
        if self._discard:
            if e is None or e < 0:
                if final:
                    self._clear()
                return None
            self._clear()
            return s[e:]
        if e is None:
            if s:
                self._parts.append(s)
                self._size += len(s)
            if self._size > self.ctx.options.max_call_chars:
                self._oversized(out)
            elif final:
                region = "".join(self._parts)
                self._end(region, out, at_end=True, length=length)
            return None
        region = "".join(self._parts) + (s if e < 0 else s[:e])
        if e != ABORT and self._shaping and self._shape(region, True) is False:
            # It ended before its head read as call syntax: a mention.
            self.ctx.report.count("released.mentioned_marker")
            region = "".join(self._parts) + s  # all of it is scanned again
            e = ABORT
        if e == ABORT:
            self._release(out, self._gap)
            self._release(out, self._marker)
            self._clear()
            return region[len(self._marker) :]
        if e == OPAQUE:
            self._release(out, self._gap)
            self._opaque = self._fmts[0].opaque_finder(self._marker)
            self._clear()
            return region
        self._end(region, out, at_end=False, length=length)
        return s[e:]

    def _shape(self, region: str, final: bool) -> bool | None:
        """Whether the head of the open region reads as call syntax for
        any format sharing its marker (``Format.body_shape``): True, False
        when it reads as none of them (prose that mentions the marker), or
        None while that is not clear."""
        tools = self.ctx.tools
        undecided = False
        for fmt in self._fmts:
            got = fmt.body_shape(region, tools, final) if fmt.wrapped else False
            if got:
                return True
            undecided = undecided or got is None
        return None if undecided else False

    def _oversized(self, out: list[str]) -> None:
        if self._fmts[0].wrapped:
            self.ctx.report.count("stripped.oversized_call")
            self.ctx.report.sample_unrecognised("".join(self._parts))
            self._parts = []
            self._discard = True
        else:
            self._release(out, self._gap)
            self._release(out, "".join(self._parts))
            self._clear()

    def _end(self, region: str, out: list[str], at_end: bool, length: bool) -> None:
        """A region is complete (or the stream ended inside it): lift, strip
        or release it."""
        tools = self.ctx.tools
        verdict = "none"
        failed: Format = self._fmts[0]
        # At a ``length`` cut the model stopped mid-region: only a region its
        # finder saw through (just optional closing tokens missing) counts;
        # a section cut after its first call is cut off as a whole, so the
        # proxy asks again instead of running half the calls.
        finder_done = getattr(self._finder, "complete", True)
        for fmt in self._fmts:
            if at_end and length and not (finder_done and fmt.is_complete(region)):
                continue
            raws = fmt.parse(region, tools)
            if not raws:
                continue
            calls, verdict = self._resolve(raws, fmt, cut=at_end and length)
            if calls is not None and fmt.ends_reply and self._over:
                break  # past the bound: text
            if calls is not None:
                if fmt.ends_reply or self._pending:
                    self._hold_calls(calls, (self._gap + region) if fmt.ends_reply else None, out)
                else:
                    for c in calls:
                        self.ctx.report.count(f"lifted.{fmt.name}")
                        self._add(c)
                    self._lifted += len(calls)
                self._closer = fmt.closer_after(self._marker)
                self._echo = fmt.echo_after(region)
                self._since_call = True
                self._prev = ""
                self._line_blank = True
                # What follows is not glued to a backtick before the call.
                self._code.tick_end = False
                self._clear()
                return
            failed = fmt
            break
        report = self.ctx.report
        if (
            verdict in ("none", "bad_arguments")
            and at_end
            and length
            and failed.partial_is_call(region, tools)
        ):
            self._truncated = True
            report.count("dropped_call.truncated")
            self._since_call = True
        elif verdict == "none" and failed.is_header(region):
            report.count("stripped.header")
            self._since_call = True
        elif verdict == "unoffered" and failed.markup_if_unoffered:
            report.count("stripped.unoffered_call")
            if region[len(self._marker) :].strip():  # a bare marker: debris, no shape
                report.sample_unrecognised(region)
            self._since_call = True
        elif verdict in ("none", "bad_arguments") and failed.wrapped:
            # Recognised, and nothing in it reads: held back only for a
            # caller that asks again (``Options.hold_unreadable``); else given
            # back as text, never as nothing.
            if region[len(self._marker) :].strip():  # a bare marker: debris, no shape
                report.sample_unrecognised(region)
            if _MARKUP_ONLY.fullmatch(region) or (at_end and self._unfinished):
                report.count("stripped.unparsed_call")  # or the upstream died inside it
                self._since_call = True
            elif (
                self.ctx.options.hold_unreadable
                and self._leading
                and not (self._lifted or self._calls or self._pending)
                and len(self._unread) + len(region) <= self.ctx.options.max_call_chars
            ):
                self._unread += self._gap + failed.given_back(region)  # all the reply has
                self._since_call = True
            else:
                report.count("given_back.unreadable")
                self._release(out, self._gap)
                self._release(out, failed.given_back(region))
        else:
            self._release(out, self._gap)
            self._release(out, region)
        self._clear()

    def _resolve(
        self, raws: list[RawCall], fmt: Format, cut: bool = False
    ) -> tuple[list[ToolCall] | None, str]:
        """The calls of a region, each read on its own: one that does not
        read (``UNREADABLE``, arguments that parse as nothing) beside ones
        that do is dropped, counted ``dropped_call.unreadable``; the others
        are lifted. A call to a tool not offered, or one whose arguments do
        not fit the schema in a bare candidate, still decides the region; so
        does one that does not read in a region ``cut`` by the token limit
        (cut off as a whole: the proxy asks again rather than run half).
        In a wrapped region, a call to a tool not offered beside calls to
        offered ones is dropped (``dropped_call.unoffered``): it is markup,
        and its siblings are still calls."""
        tools = self.ctx.tools
        report = self.ctx.report
        calls: list[ToolCall] = []
        unreadable = unoffered = 0
        for raw in raws:
            if raw is UNREADABLE:
                unreadable += 1
                continue
            name = resolve_name(raw.name, tools)
            if name is None:
                if not fmt.markup_if_unoffered:
                    return None, "unoffered"
                unoffered += 1
                continue
            args, repaired = to_object(raw.arguments)
            if args is None:
                unreadable += 1
                continue
            schema = tools[name].parameters
            args, converted = coerce(args, schema)
            if validate(args, schema):
                if not fmt.call_if_invalid:
                    return None, "invalid"
                report.count("invalid_arguments")
            if repaired or converted:
                report.count("repaired_arguments")
            calls.append(ToolCall(name, dumps(args), source=fmt.name))
        if unreadable and cut:
            return None, "bad_arguments"
        if not calls:
            if unoffered:
                return None, "unoffered"
            return None, "bad_arguments" if len(raws) == 1 and unreadable else "none"
        if unreadable:
            report.count("dropped_call.unreadable", unreadable)
        if unoffered:
            report.count("dropped_call.unoffered", unoffered)
        return calls, "ok"

    def _give_back(self, out: list[str]) -> None:
        """The held unreadable regions (``_unread``) go out as text: the
        reply has something else, so it will not be asked again."""
        held, self._unread = self._unread, ""
        self._since_call = False  # it was no call: its blanks are its text
        self.ctx.report.count("given_back.unreadable")
        self._release(out, held)

    def _hold_calls(self, calls: list[ToolCall], text: str | None, out: list[str]) -> None:
        """Hold the calls of a region under the code-line rule: ``text``
        (the region as written) for calls written as code, released in
        place if prose follows; None for wrapped calls after such a call.
        Bounded: held text beyond ``max_call_chars`` goes out as text, and
        so does every call written as code after it in the reply (a run of
        code that long is a listing, not calls anyone can check)."""
        if text is not None:
            self._pending.append((calls[0], text))
            self._pending.extend((c, "") for c in calls[1:])
            self._pending_size += len(text)
        else:
            self._pending.extend((c, None) for c in calls)
        if self._pending_size > self.ctx.options.max_call_chars:
            self.ctx.report.count("released.example_call")
            self._over = True
            self._settle(out, lift=False)

    def _add(self, call: ToolCall) -> None:
        self._calls.append(call)
