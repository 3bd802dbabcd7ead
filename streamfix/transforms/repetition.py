"""Repetition cutter: end the turn when a channel falls into a loop.

A small model stuck in a loop emits the same fragment until ``max_tokens``.
Sampler penalties (DRY, repetition penalty) break JSON tool calls, so the
loop is cut in the stream instead: the turn ends with ``finish_reason:
"length"`` and ``{"cut": "repetition", "period": N}`` on the choice, and the
chain tells the I/O layer to close the upstream request (``Chain.stopped``).
Channels are watched separately: ``content``, ``reasoning`` and each tool
call's argument text (``Delta.arg_text``). A loop in a call's arguments
breaks the call: it is never emitted.

**Exact loops.** Real text repeats its syntax, not its content (JSON arrays
of similar objects, tables, code, lists), so a loop is *exact* repetition:
the last ``required_span(p)`` characters have period ``p``, with
``required_span(p) = max(4 * p, 400) - check_interval(p) - MARGIN``: the
loosest span that keeps what reaches the client past the loop's start
within max(4 copies, 400 characters), given how often we look. Published
detectors choose similar figures (vLLM's ``RepetitionDetectionParams``,
llama.cpp's proposed ``--repetition-detection``, gemini-cli's
``LoopDetectionService``, which had to exempt code, tables and lists).

**Structured repetition** can be what the user asked for (an empty grid or
timesheet, a table of zeros, one letter 600 times); only its length tells
it from a model that cannot stop. A copy that is ``structured`` (at most
``STRUCTURED_MAX_PERIOD`` characters, at least half ASCII non-letters or
box drawing, or one such character) needs ``STRUCTURED_SPAN`` characters
of periodicity: it is cut within ``STRUCTURED_BOUND`` of its start. Blanks
alone are not structured (a flood of newlines is JSON mode's classic loop),
nor is a copy of mostly letters. The shortest period decides.

**Numbered loops**: numbered-list lines (``12. text``) whose text after the
number is identical, consecutive, each at most ``NUMBERED_MAX_LINE``
characters, over ``NUMBERED_SPAN`` (``NUMBERED_STRUCTURED_SPAN`` for a
form's blank items). Digits elsewhere are left alone: numeric CSV and
arrays whose numbers differ are not loops.

**Counted loops** (``Step 5: Check the file again.`` / ``Step 6: …``): a
unit that is the same but for numbers moving by a constant step. Its
canonical form (every run of digits replaced by ``0``) is exactly
periodic, and the numbers at corresponding positions form arithmetic
progressions. Real enumerations fail one or the other (steps that say
different things; a list of numbers says nothing), so the evidence is:
``COUNTED_COPIES`` whole copies and ``COUNTED_CHARS`` characters of
canonical periodicity (period up to ``COUNTED_MAX_PERIOD``); an arithmetic
progression at every number position, one of them moving; and a unit that
is mostly text (``COUNTED_LETTERS_PER_COUNTER``,
``COUNTED_LETTERS_PER_DIGIT``, ``COUNTED_PROBE``). A copy made of
several records each counted once (ids 7, 8 in a copy, moving by 2: rows
whose names come in turn, ``Alice``, ``Bob``, ``Alice``…) with
``ROTATION_FIELDS`` field boundaries a record (JSON keys, table bars, tabs,
CSV commas) is an enumeration too (``_rotation``): the copy is the
shortest canonical period, so its records differ by more than their
numbers; records whose names all differ have no canonical period at all.
Prose that turns between sentences while it counts is still a loop. They
are looked for at
the long checks (every ``LONG_AT`` characters), so at most max(16 copies,
1,000 characters) pass before the cut. The canonical form is computed
only when cheap evidence appears (a digit-free run recurring one and two
copies back, within ``COUNTED_REACH``, give or take ``COUNTED_SHIFT``).

**In arguments** data counts (a file of numbered lines, seed rows), so a
counted loop there is cut only once it has run ``COUNTED_ARG_CHARS`` from
its start: far longer than numbered data usually is, well before the
budget a looping ``write_file`` call would burn. Exact loops in arguments
are cut as in prose. The same holds for content the tool-tag detector
holds as a call written as text: the detector runs after the cutter, so
the cutter asks it (``watch_calls``, ``ToolTagDetector.holds_call``);
the question errs towards "in a call", which only makes the cut later.
The JSON value a ``response_format`` asked for is data the same way:
the JSON output step, last in the chain, answers the same question
(``JsonOutput.holds_value``: a ``{`` or ``[`` has come), and content is
data when either step says so; a lead of prose before the value is not. A
run is followed from check to check (``_Channel.run_from``), so a check
that continues it skips the walk back to the loop's start.

**Cost.** Text is never held back. Each channel appends to a list and,
only at every ``CHECK_EVERY``-th character (absolute positions, so the
verdict does not depend on chunking), joins its bounded tail (``WINDOW``)
and runs a C-speed check: ``rfind`` the last ``PROBE`` characters within
``SHORT_PERIOD`` (every ``LONG_EVERY``-th check: ``MAX_PERIOD``) to get
candidate periods, each verified with one slice compare. A run of texts
that reaches several checks screens up to three of them with one search
(``quiet``). The measured bounds are pinned by ``tests/test_repetition.py``
and ``tests/test_faithful_structured.py``; the figures are in ``docs/repairs.md``.

**An upstream's own cut.** vLLM's ``repetition_detection`` ends a looping
stream with ``finish_reason: "repetition"``; the chain ends that turn as
this step ends one (``upstream_cut``: ``length``, the note ``{"cut":
"repetition", "by": "upstream"}``, counted as ``loop_cut``), with or
without this step.

**Cutting.** The text already sent stays sent; of this delta's text only
what comes before the end of the loop's first copy is kept, so at most the
bound above reaches the client in total.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any, Final

from ..context import Context, Report
from ..delta import Delta, take_each

#: Look for a loop every this many characters of a channel. Larger is
#: cheaper but leaves less of the 400-character budget for the span.
CHECK_EVERY: Final = 64
#: Issue 4's bound: at most max(4 repeats, 400 characters) past the start
#: of a loop reach the client.
BOUND_COPIES: Final = 4
BOUND_CHARS: Final = 400
#: Slack under the bound, for safety against off-by-ones at check edges.
MARGIN: Final = 8
#: Longest period caught ("at least 2 KB": a paragraph or code block).
MAX_PERIOD: Final = 2048
#: Periods up to this are looked for at every check; longer ones at every
#: ``LONG_EVERY``-th check only (their ``rfind`` range is four times as
#: long, and a long period's bound, 4 copies, leaves room for the wait).
SHORT_PERIOD: Final = 512
LONG_EVERY: Final = 4
#: Length of the suffix searched for an earlier copy. Long enough that in
#: ordinary text it rarely recurs (so a check usually ends at one failed
#: ``rfind``), short enough to be found in any loop long enough to cut.
PROBE: Final = 64
#: Candidate periods verified per check, nearest first. A period's probe
#: recurring this often inside one period would be a loop of its own.
MAX_CANDIDATES: Final = 32

#: Numbered-list loops (see module doc): longest line, the span of
#: identical consecutive items required, and the fewest items.
#: NUMBERED_SPAN + CHECK_EVERY + NUMBERED_MAX_LINE stays under BOUND_CHARS.
NUMBERED_MAX_LINE: Final = 64
NUMBERED_SPAN: Final = 264
NUMBERED_MIN_LINES: Final = 4
_DIGITS: Final = "0123456789"


def check_interval(period: int) -> int:
    """Characters between two checks that can find ``period``."""
    return CHECK_EVERY if period <= SHORT_PERIOD else CHECK_EVERY * LONG_EVERY


def required_span(period: int) -> int:
    """Characters of exact periodicity that make a loop of ``period``."""
    return max(BOUND_COPIES * period, BOUND_CHARS) - check_interval(period) - MARGIN


MIN_SPAN: Final = required_span(1)
#: Tail kept per channel: the longest span checked plus the text between
#: two checks. The joined buffer is trimmed back to it when it reaches
#: twice that, so trimming costs O(1) amortised.
WINDOW: Final = required_span(MAX_PERIOD) + CHECK_EVERY


#: Structured repetition (module doc): the bound past the start of a loop
#: whose copy is short and mostly not letters, the span it needs (the
#: check spacing and MARGIN under the bound), and its longest copy (a
#: longer one needs 4 copies, over 2,048 characters, anyway).
STRUCTURED_BOUND: Final = 4096
STRUCTURED_SPAN: Final = STRUCTURED_BOUND - CHECK_EVERY - MARGIN
STRUCTURED_MAX_PERIOD: Final = SHORT_PERIOD
#: The same bound for numbered items: the check spacing and a line under it.
NUMBERED_STRUCTURED_SPAN: Final = STRUCTURED_BOUND - CHECK_EVERY - NUMBERED_MAX_LINE - MARGIN
#: What a structured copy is mostly made of: ASCII that is not a letter
#: (digits, punctuation, blanks) and box drawing (``─│┌``, ``█``).
_STRUCTURAL: Final = re.compile("[\x00-@\\[-`{-\x7f\u2500-\u259f]+")


def structured(unit: str) -> bool:
    """Whether a loop's copy ``unit`` is structured (module doc): at most
    ``STRUCTURED_MAX_PERIOD`` characters, not only blanks, and at least
    half ASCII non-letters or box drawing, or one ASCII or box-drawing
    character (``aaaa``, ``----``)."""
    p = len(unit)
    if p > STRUCTURED_MAX_PERIOD or unit.isspace():
        return False
    if p == 1:
        return unit.isascii() or "\u2500" <= unit <= "\u259f"
    return 2 * len(_STRUCTURAL.sub("", unit)) <= p


def find_loop(s: str, t: int, long: bool = True) -> tuple[int, int] | None:
    """A loop ending at ``s[:t]``: ``(period, start of the checked span)``
    for the shortest period whose required span is periodic, or None.
    Periods over ``SHORT_PERIOD`` are looked for only when ``long``. A
    structured copy (``structured``) needs ``STRUCTURED_SPAN`` instead;
    it decides alone: a longer period over the same text is made of its
    copies, so structured too."""
    if t < MIN_SPAN:
        return None
    probe = s[t - PROBE : t]
    lo = max(0, t - PROBE - (MAX_PERIOD if long else SHORT_PERIOD))
    end = t - 1
    for _ in range(MAX_CANDIDATES):
        i = s.rfind(probe, lo, end)
        if i < 0:
            return None
        p = t - PROBE - i
        a = t - required_span(p)
        if a >= 0 and s.startswith(s[a + p : t], a):
            if p > STRUCTURED_MAX_PERIOD or not structured(s[t - p : t]):
                return p, a
            a = t - STRUCTURED_SPAN
            return (p, a) if a >= 0 and s.startswith(s[a + p : t], a) else None
        end = i + PROBE - 1
    return None


#: Every this many characters, a check looks for long periods too.
LONG_AT: Final = CHECK_EVERY * LONG_EVERY
#: Checks at most this far apart share one screen (``quiet``): for any
#: period, a loop found by the last of them spans the first one's probe and
#: the probe one period before it.
SCREEN_REACH: Final = min(required_span(p) - PROBE - p for p in range(1, MAX_PERIOD + 1))


def quiet(s: str, t: int, last: int, long: int) -> bool:
    """True when no check at ``t``, ``t + CHECK_EVERY`` … ``last`` (at most
    ``SCREEN_REACH`` apart, ``t >= MIN_SPAN``) can find a loop, a
    numbered run or a counted loop, with two searches instead of two per
    check: a loop of period ``p`` found by any of them makes the text
    periodic from before ``t``'s probe, so that probe recurs ``p``
    characters earlier (``long``: the check among them that looks for long
    periods and counted loops, or -1); a numbered run needs a line end in
    the last ``CHECK_EVERY`` characters before a check; a counted loop, the
    long check's own screen. Text without loops passes; text that fails
    goes check by check."""
    if s.find("\n", t - CHECK_EVERY, last) >= 0:
        return False
    reach = MAX_PERIOD if long >= 0 else SHORT_PERIOD
    if s.rfind(s[t - PROBE : t], max(0, t - PROBE - reach), t - 1) >= 0:
        return False
    return long < 0 or not counted_screen(s, long)


def loop_start(s: str, p: int, a: int) -> int:
    """Extend a periodic run starting at ``a`` backwards: where it began."""
    while a >= p and s[a - p : a] == s[a : a + p]:
        a -= p
    while a > 0 and s[a - 1] == s[a - 1 + p]:
        a -= 1
    return a


def _item(line: str) -> str | None:
    """The text of a numbered-list line (``12. text`` -> ``. text``)."""
    if not line[:1].isdigit():
        return None
    rest = line.lstrip(_DIGITS)
    if rest[:2] not in (". ", ") ") or not any(c.isalpha() for c in rest):
        return None
    return rest


def find_numbered(s: str, t: int) -> tuple[int, int] | None:
    """A run of identical numbered-list items ending before ``s[t]``:
    ``(line length, start of the first item)``, or None. Only a line
    completed since the previous check can complete a run, so the last
    newline is looked for in the last ``CHECK_EVERY`` characters only."""
    j = s.rfind("\n", max(0, t - CHECK_EVERY), t)
    if j < 0:
        return None
    i = s.rfind("\n", max(0, j - NUMBERED_MAX_LINE), j)
    if i < 0:
        return None
    item = _item(s[i + 1 : j])
    if item is None:
        return None
    h = s.rfind("\n", max(0, i - NUMBERED_MAX_LINE - 1), i)
    if h < 0 or _item(s[h + 1 : i]) != item:
        return None  # the common case ends here: two cheap slices
    lines = 2
    first = h + 1
    while True:
        g = s.rfind("\n", max(0, first - 1 - NUMBERED_MAX_LINE - 1), first - 1)
        if g < 0 or _item(s[g + 1 : first - 1]) != item:
            break
        first = g + 1
        lines += 1
    # A structured item (``. Name: ______``: a form's numbered blank lines)
    # needs the structured span. The walk back is at most that long (a
    # longer run is cut), a constant per check.
    need = NUMBERED_STRUCTURED_SPAN if structured(item) else NUMBERED_SPAN
    if lines < NUMBERED_MIN_LINES or j + 1 - first < need:
        return None
    return s.find("\n", first) + 1 - first, first


#: Counted loops (module doc). Issue 18's bound: at most max(16 copies,
#: 1000 characters) past the start of a counted loop reach the client.
COUNTED_BOUND_COPIES: Final = 16
COUNTED_BOUND_CHARS: Final = 1000
#: Longest digit run read as a counter: longer ones (ids, phone numbers,
#: timestamps in ms) are not counted, and ``int`` stays cheap on them.
COUNTED_MAX_DIGITS: Final = 9
#: Whole copies of canonical periodicity required. With the check spacing
#: (``LONG_AT``) and a copy of slack, 10 + 1 copies + 265 characters stay
#: within 16 copies for every copy over 44 characters; shorter copies
#: reach ``COUNTED_CHARS`` first.
COUNTED_COPIES: Final = 10
#: Characters of canonical periodicity required (in the original text):
#: the bound less the check spacing, a counter cut at the check, MARGIN.
COUNTED_CHARS: Final = COUNTED_BOUND_CHARS - LONG_AT - COUNTED_MAX_DIGITS - MARGIN
#: A unit that says something: letters in one copy per counter (a
#: progression that moves; a number that stays is text, and ``12. Step
#: 12`` counts once), and per digit. ``17,pending`` (7 letters), ``Day 1:
#: Push`` / ``Day 2: Pull`` / ``Day 3: Legs`` (21 letters, 3 counters),
#: ``N. Step N: check the pump`` / ``… gauge`` / ``… valve`` (50 letters,
#: 3 counters) and ``2026-05-01 12:00:07 INFO heartbeat received`` (21
#: letters, 14 digits) are enumerations, not loops; ``Step 5: Check the
#: configuration file again.`` (34 letters) is one.
COUNTED_LETTERS_PER_COUNTER: Final = 20
COUNTED_LETTERS_PER_DIGIT: Final = 2
#: Longest copy looked for, and the shortest: a number and the letters.
COUNTED_MAX_PERIOD: Final = SHORT_PERIOD
COUNTED_MIN_PERIOD: Final = COUNTED_LETTERS_PER_COUNTER + 1
#: The screen's probe: characters in a row without a digit (at least this
#: many, at most ``PROBE``), searched for within ``COUNTED_MAX_PERIOD``
#: before them (the nearest
#: ``COUNTED_CANDIDATES`` occurrences: a copy may repeat a phrase inside
#: it, ``server server server``), then one copy further back within
#: ``COUNTED_SHIFT`` characters (counters that gained or lost a digit
#: between two copies: one per counter, up to four counters).
COUNTED_PROBE: Final = 16
#: How far back from a check the probe is looked for: two probes' length.
#: A copy whose text near a check has no ``COUNTED_PROBE`` characters
#: without a digit in this reach is looked at by the checks where it has.
COUNTED_REACH: Final = 2 * PROBE
COUNTED_CANDIDATES: Final = 8
COUNTED_SHIFT: Final = 4
#: Counted loops in a call's arguments (module doc, "In arguments"): the
#: characters from the loop's start to the check that cuts it. A file of
#: numbered lines is data; 32 KiB of it (at least 64 copies: a copy is at
#: most ``COUNTED_MAX_PERIOD``) is a model that lost count of its task.
COUNTED_ARG_CHARS: Final = 32 * 1024
#: A counted loop found at most this far after the last check that found
#: one continues its run for sure: the evidence alone reaches back
#: ``COUNTED_CHARS``, past that check.
COUNTED_RUN_GAP: Final = 2 * LONG_AT
#: How far back a counted check reads (the loop's start for the cut, too):
#: the tail a channel always keeps, so the verdict does not depend on how
#: the text was chunked.
COUNTED_WINDOW: Final = required_span(MAX_PERIOD) + CHECK_EVERY
_DIGIT: Final = re.compile(r"[0-9]")
_RUN: Final = re.compile(r"[0-9]+")
_STRETCH: Final = re.compile(f"[^0-9]{{{COUNTED_PROBE},{PROBE}}}")
_NO_DIGITS: Final = re.compile("[^0-9]*")
#: Runs of fewer than ``COUNTED_PROBE`` non-digits, each with the digits
#: after it (in reversed text): linear, unlike searching for the probe.
_SHORT_RUNS: Final = re.compile(f"(?>[^0-9]{{0,{COUNTED_PROBE - 1}}}[0-9]+)*+")


def _probe_before(w: str, n: int) -> re.Match[str] | None:
    """In reversed text ``w`` with a digit at ``n``: the first run of
    ``COUNTED_PROBE`` to ``PROBE`` non-digits after it, if any."""
    runs = _SHORT_RUNS.match(w, n)
    return None if runs is None else _STRETCH.match(w, runs.end())


def counted_screen(s: str, t: int) -> int:
    """The cheap evidence of a counted loop ending at ``s[:t]``: the
    distance one copy back, or 0. The probe is the last run of
    ``COUNTED_PROBE`` to ``PROBE`` characters without a digit (as long as
    it goes, between two numbers); it recurs one and two copies back, with
    a number wherever it has one here, and the text from one occurrence to
    the next is the same but for its numbers. In text that counts but does
    not loop the numbers fall elsewhere in each round, so the long probe
    recurs nowhere and a check costs a few C calls."""
    if t < COUNTED_CHARS:
        return 0
    lim = t - COUNTED_WINDOW if t > COUNTED_WINDOW else 0
    w = s[t - PROBE : t][::-1]
    m = _NO_DIGITS.match(w)
    n = m.end() if m else 0
    if n >= COUNTED_PROBE:
        ps, pe = t - n, t
    else:
        m = _probe_before(w, n)
        if m is None:
            m = _probe_before(s[t - COUNTED_REACH : t][::-1], n)
            if m is None:
                return 0
        pe = t - m.start()  # ``s[pe]`` is a digit
        ps = t - m.end()
    probe = s[ps:pe]
    lo = ps - COUNTED_MAX_PERIOD if ps - COUNTED_MAX_PERIOD > lim else lim
    i = s.rfind(probe, lo, pe - COUNTED_MIN_PERIOD)
    return 0 if i < 0 else _counted_copy(s, t, lim, ps, pe, lo, i)


def _counted_copy(s: str, t: int, lim: int, ps: int, pe: int, lo: int, i: int) -> int:
    """``counted_screen`` once its probe ``s[ps:pe]`` recurs at ``i``."""
    size = pe - ps
    probe = s[ps:pe]
    after = pe < t  # a number follows the probe
    before = ps > lim and s[ps - 1] in _DIGITS  # and one comes before it
    for _ in range(COUNTED_CANDIDATES):
        if (after and s[i + size] not in _DIGITS) or (before and s[i - 1] not in _DIGITS):
            i = s.rfind(probe, lo, i + size - 1)
            if i < 0:
                return 0
            continue  # the numbers are not where they are in this copy
        d = ps - i
        a = i - d - COUNTED_SHIFT
        if a < lim:
            return 0  # and the next candidates are farther
        j = s.find(probe, a, i - d + COUNTED_SHIFT + size)
        # From one occurrence to the next: a copy, with a number, the same
        # as the copy before but for its numbers.
        if (
            j >= 0
            and (after or before or _DIGIT.search(s, i, ps))
            and _RUN.sub("0", s[i:pe]) == _RUN.sub("0", s[j : i + size])
        ):
            return d
        i = s.rfind(probe, lo, i + size - 1)
        if i < 0:
            return 0
    return 0


class _Canon:
    """``s[r0:e]`` in canonical form (each digit run one ``0``) and where
    its runs are: canonical index, end in ``s``, value (-1: too long)."""

    __slots__ = ("at", "ends", "r0", "text", "values")

    def __init__(self, s: str, r0: int, e: int) -> None:
        if r0 > 0 and s[r0 - 1] in _DIGITS:  # start after a run cut in two
            m = _RUN.match(s, r0, e)
            if m is not None:
                r0 = m.end()
        self.r0 = r0
        parts: list[str] = []
        self.at: list[int] = []
        self.ends: list[int] = []
        self.values: list[int] = []
        prev = c = r0
        for m in _RUN.finditer(s, r0, e):
            a, b = m.span()
            parts.append(s[prev:a])
            c += a - prev
            self.at.append(c - r0)
            self.ends.append(b)
            self.values.append(int(s[a:b]) if b - a <= COUNTED_MAX_DIGITS else -1)
            parts.append("0")
            c += 1
            prev = b
        parts.append(s[prev:e])
        self.text = "".join(parts)

    def raw(self, c: int) -> int:
        """Where canonical index ``c`` is in ``s``."""
        j = bisect_left(self.at, c)
        return self.r0 + c if j == 0 else self.ends[j - 1] + c - self.at[j - 1] - 1

    def canonical(self, x: int) -> int:
        """The last canonical index at or before ``s[x]``."""
        j = bisect_right(self.ends, x)
        c = x - self.r0 if j == 0 else self.at[j - 1] + 1 + x - self.ends[j - 1]
        return min(c, self.at[j]) if j < len(self.at) else c


def _steps(values: list[int], k: int, n: int) -> list[int] | None:
    """The step of each of ``k`` numbers over ``n`` copies (``values``
    copy by copy), if each is an arithmetic progression."""
    if -1 in values:
        return None
    steps = []
    for col in range(k):
        v = values[col::k]
        step = v[1] - v[0]
        if (v != list(range(v[0], v[0] + step * n, step))) if step else v.count(v[0]) != n:
            return None
        steps.append(step)
    return steps


#: A field boundary of a record: a JSON key's colon, a table's bar, a tab,
#: a CSV comma (one that no blank follows: prose writes ``, ``).
_FIELD: Final = re.compile(r'":|[|\t]|,(?=[^\s,])')
#: Fields per record that make a copy's items records.
ROTATION_FIELDS: Final = 2


def _rotation(first_copy: list[int], steps: list[int], unit: str) -> bool:
    """Whether a counted copy (canonical ``unit``, its numbers
    ``first_copy`` moving by ``steps``) is several records, each counted
    once: a progression takes ``m >= 2`` values in the copy within one
    step (ids 7, 8 moving by 2), and the copy has ``ROTATION_FIELDS``
    field boundaries per record (``_FIELD``). The copy is the shortest
    canonical period, so its records differ by more than their numbers:
    an enumeration of rows (``Alice``, ``Bob``, ``Alice``… with their ids),
    not a loop. Prose that rotates (``Step 5: open the file`` / ``Step 6:
    save it`` / ``Step 7: open the file``…) is still a loop."""
    items = 1
    by_step: dict[int, set[int]] = {}
    for v, step in zip(first_copy, steps, strict=True):
        if step:
            by_step.setdefault(step, set()).add(v)
    for step, found in by_step.items():
        vs = sorted(found)  # other counters may move by the same step
        lo = 0
        for hi, v in enumerate(vs):
            while v - vs[lo] >= abs(step):
                lo += 1
            items = max(items, hi + 1 - lo)
    return items > 1 and len(_FIELD.findall(unit)) >= ROTATION_FIELDS * items


def _canonical_period(cf: _Canon, e: int) -> tuple[int, int] | None:
    """The shortest canonical period of ``cf`` and where the evidence it
    needs starts (-1: before ``cf``'s text, which is periodic so far)."""
    c = cf.text
    n_c = len(c)
    if n_c < PROBE + COUNTED_MIN_PERIOD:
        return None
    probe = c[n_c - PROBE :]
    lo = max(0, n_c - PROBE - COUNTED_MAX_PERIOD)
    end = n_c - 1
    for _ in range(MAX_CANDIDATES):
        i = c.rfind(probe, lo, end)
        if i < 0:
            return None
        q = n_c - PROBE - i
        a = min(n_c - COUNTED_COPIES * q, cf.canonical(e - COUNTED_CHARS))
        if c.startswith(c[max(a, 0) + q :], max(a, 0)):
            return q, max(a, -1)
        end = i + PROBE - 1
    return None


def find_counted(s: str, t: int, d: int, extend: bool = True) -> tuple[int, int] | None:
    """A counted loop ending at ``s[:t]`` whose screen found the distance
    ``d``: ``(length of its last copy, end of its first copy)``, or None.
    The shortest canonical period decides; a number cut by the check is
    left out. Without ``extend``, the first copy is the first of the
    evidence (the loop is not followed back to where it began: a run in
    arguments that the last check found already has its start)."""
    lim = max(0, t - COUNTED_WINDOW)
    e = t
    while e > lim and s[e - 1] in _DIGITS:
        e -= 1
    # The text of eleven copies of ``d`` is canonicalised; if the period is
    # longer (``d`` was a repeat inside a copy), once more for that copy.
    reach = max((COUNTED_COPIES + 1) * (d + COUNTED_SHIFT), COUNTED_CHARS) + 2 * PROBE
    for _ in range(2):
        cf = _Canon(s, max(lim, e - reach), e)
        found = _canonical_period(cf, e)
        if found is None:
            return None
        q, a = found
        if a >= 0:
            break
        if e - reach <= lim:
            return None
        copy = e - cf.raw(len(cf.text) - q)
        reach = max((COUNTED_COPIES + 1) * (copy + COUNTED_SHIFT), COUNTED_CHARS) + 2 * PROBE
    else:
        return None
    c = cf.text
    n_c = len(c)
    k = len(cf.at) - bisect_left(cf.at, n_c - q)  # numbers in a copy
    if k == 0:
        return None
    n = (n_c - a) // q
    steps = _steps(cf.values[len(cf.values) - n * k :], k, n)
    if steps is None:
        return None
    # Counters: the numbers that move, one per progression (``12. Step 12``
    # is one count written twice).
    first_copy = cf.values[len(cf.values) - n * k :][:k]
    counters = len({(v, step) for v, step in zip(first_copy, steps, strict=True) if step})
    letters = sum(map(str.isalpha, c[n_c - q :]))
    digits = e - cf.raw(n_c - q) - q + k
    if not counters or letters < max(
        COUNTED_LETTERS_PER_COUNTER * counters, COUNTED_LETTERS_PER_DIGIT * digits
    ):
        return None
    if _rotation(first_copy, steps, c[n_c - q :]):
        return None
    if not extend:
        return e - cf.raw(n_c - q), cf.raw(n_c - (n - 1) * q)
    # A loop: where it began, to keep the text before it and one copy.
    cf = _Canon(s, lim, e)
    c = cf.text
    n_c = len(c)
    values = cf.values
    first = n_c - n * q  # the earliest whole copy known to count
    j = len(values) - n * k  # its first number
    while (
        first >= q
        and j >= k
        and c.startswith(c[first : first + q], first - q)
        and all(values[j - k + x] == values[j + x] - steps[x] for x in range(k))
    ):
        first -= q
        j -= k
    x = k  # counters of the copy before ``first``, from its last
    while first > 0 and c[first - 1] == c[first - 1 + q]:
        if c[first - 1] == "0":  # a number: it must count too
            x -= 1
            if x < 0 or j - k + x < 0 or values[j - k + x] != values[j + x] - steps[x]:
                break
        first -= 1
    return e - cf.raw(n_c - q), cf.raw(first + q)


#: A loop found: its period (for a counted loop, the length of its last
#: copy), how much of the text that completed it to keep, whether counted.
Hit = tuple[int, int, bool]


def _always(pending: str) -> bool:
    """``_Channel.in_call`` of a call's arguments: all of it is argument."""
    return True


class _Channel:
    """One watched text stream: a bounded tail and the text since."""

    __slots__ = (
        "base",
        "in_call",
        "new",
        "next_check",
        "run_from",
        "run_seen",
        "synced",
        "tail",
        "total",
    )

    def __init__(self, in_call: Callable[[str], bool] | None = None) -> None:
        self.tail = ""  # text from absolute position ``base``
        self.base = 0
        self.new: list[str] = []  # pieces after the tail
        self.total = 0  # characters seen
        self.next_check = CHECK_EVERY  # absolute position of the next check
        #: Whether a counted loop found here is in a call's arguments, asked
        #: with the text of this feed (or run) before the loop, which the
        #: detector has not seen yet: ``_always`` for arguments, the detector's
        #: ``holds_call`` and the JSON step's ``holds_value`` for content
        #: (``watch_calls``), None for prose only (module doc).
        self.in_call = in_call
        #: A counted loop in arguments: the absolute position where it
        #: started and of the last check that found it (-1: none yet).
        self.run_from = -1
        self.run_seen = -1
        #: In a run of texts (``_take_run``), the position the detector has
        #: seen up to: the run's start, also while its texts go one by one
        #: (the detector gets them after us). -1: the start of each feed.
        self.synced = -1

    def _counted_cut(self, s: str, first: int, p: int, t_abs: int, start: int) -> bool:
        """A counted loop is found at the check ``t_abs``, the end of its
        first copy (of length about ``p``) at ``s[first]``: whether to cut.
        In prose at once; in a call's arguments when the run it continues
        is ``COUNTED_ARG_CHARS`` long. A loop found by one check continues
        the run of the last if its first two copies end before that check
        (the window read back is far longer than the checks' spacing, and
        the evidence of a run that goes on reaches ten copies or 727
        characters back); a loop that starts where another ended begins
        less than a copy before the last check that saw the other."""
        in_call = self.in_call
        if in_call is None:
            return True
        base = self.base
        at = base + first - p  # where the loop starts, give or take a digit
        if self.synced >= 0:
            start = self.synced  # the text of the run before this feed, too
        pending = s[start - base : first - p] if at > start else ""
        if in_call is not _always and not in_call(pending):
            return True  # prose
        if self.run_from < 0 or at + 2 * p > self.run_seen:
            self.run_from = at  # a new run
        elif at < self.run_from:
            self.run_from = at
        self.run_seen = t_abs
        return t_abs - self.run_from >= COUNTED_ARG_CHARS

    def feed(self, text: str, undo_on_hit: bool = False) -> Hit | None:
        """Append ``text``; on a loop, ``(period, characters of text to
        keep, counted)``, and with ``undo_on_hit`` the channel as it was before
        (``RepetitionCutter.feed_texts``: no copy of the state is made
        beforehand, which would keep a second reference to the tail and
        make the append below copy it)."""
        self.new.append(text)
        start = self.total
        self.total += len(text)
        if self.total < self.next_check:
            return None
        s = self.tail
        self.tail = ""  # ``s`` is the only reference: ``+=`` grows it in place
        held = len(s)
        s += "".join(self.new)
        self.new.clear()
        base = self.base
        found: Hit | None = None
        first_check = t_abs = self.next_check
        total = self.total
        screened = 0  # checks before this one were screened together
        while t_abs <= total:
            t = t_abs - base
            if t_abs >= screened and total - t_abs >= CHECK_EVERY and t >= MIN_SPAN:
                # Several checks due (a run of texts): one screen for up
                # to ``SCREEN_REACH`` characters of them.
                last = t_abs + min(total - t_abs, SCREEN_REACH) // CHECK_EVERY * CHECK_EVERY
                long = last // LONG_AT * LONG_AT
                if quiet(s, t, last - base, long - base if long >= t_abs else -1):
                    t_abs = last + CHECK_EVERY
                    continue
                screened = last + CHECK_EVERY  # not quiet: each check of them
            long = t_abs % LONG_AT == 0
            counted = False
            hit = find_loop(s, t, long)
            if hit is not None:
                p, a = hit
                first = loop_start(s, p, a) + p  # end of the first copy
            else:
                hit = find_numbered(s, t)
                if hit is not None:
                    p, first = hit[0], hit[1] + hit[0]
                elif long:
                    d = counted_screen(s, t)
                    if d:
                        # A run in arguments that the last checks found goes
                        # on: its start is known, the evidence is enough.
                        seen = self.run_seen
                        hit = find_counted(s, t, d, seen < 0 or t_abs - seen > COUNTED_RUN_GAP)
                        if hit is not None:
                            p, first = hit
                            counted = True
                            if not self._counted_cut(s, first, p, t_abs, start):
                                hit = None
            if hit is not None:
                found = (p, max(0, min(len(text), base + first - start)), counted)
                if undo_on_hit:
                    # ``s`` is the old tail, the old pieces, then ``text``
                    self.tail = s[:held]
                    if start - base > held:
                        self.new.append(s[held : start - base])
                    self.total = start
                    self.next_check = first_check
                    return found
                break
            t_abs += CHECK_EVERY
        self.next_check = t_abs
        if len(s) > 2 * WINDOW:
            cut = len(s) - WINDOW
            s = s[cut:]
            self.base = base + cut
        self.tail = s
        return found


def _take_run(ch: _Channel, feed_one: Callable[[str], bool], texts: list[str], joined: str) -> int:
    """A lane's run of ``texts`` into channel ``ch`` at once; if that finds
    a loop, the channel as it was, and the texts one by one (``feed_one``).
    The steps after us see the run after we have taken it: ``synced``."""
    ch.synced = ch.total
    try:
        if ch.feed(joined, undo_on_hit=True) is None:
            return len(texts)
        return take_each(feed_one, texts)
    finally:
        ch.synced = -1


class RepetitionCutter:
    """Cuts exact and counted loops in content, reasoning and arguments
    (module doc)."""

    __slots__ = ("_args", "_content", "_lane_hit", "_reasoning", "ctx")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._content = _Channel()
        self._reasoning = _Channel()
        self._args: dict[int, _Channel] = {}
        #: A loop found on the plain-text lane, for the ``feed`` that follows.
        self._lane_hit: tuple[str, Hit] | None = None

    def watch_calls(self, holds_call: Callable[[str], bool]) -> None:
        """Content may hold data: calls written as text (the tool-tag
        detector's ``holds_call``) or the JSON value a ``response_format``
        asked for (``JsonOutput.holds_value``). ``holds_call(pending)``, from
        a step that runs after us, tells whether the text it has seen, then
        ``pending``, leaves it inside its data; a counted loop there is data
        as in a call's arguments (module doc). Each step watched adds its
        own: the text is data when any of them says so."""
        prev = self._content.in_call
        if prev is None:
            self._content.in_call = holds_call
        else:
            self._content.in_call = lambda pending: prev(pending) or holds_call(pending)

    def feed_text(self, text: str) -> bool:
        """The plain-text lane (``delta.TextLane``): True unless ``text``
        completes a loop. Then the verdict is kept for the ``feed`` the
        chain makes next with the same text (``_lane_hit``), so the text
        is taken into the channel once, as ``feed`` would have."""
        ch = self._content
        n = ch.total + len(text)
        if n < ch.next_check:  # no check due: just append
            ch.new.append(text)
            ch.total = n
            return True
        hit = ch.feed(text)
        if hit is None:
            return True
        self._lane_hit = (text, hit)
        return False

    def feed_texts(self, texts: list[str], joined: str) -> int:
        """A run of texts for the lane: appended at once. The checks are
        at absolute positions, so the joined text meets the same ones; if
        one finds a loop, the channel goes back to before the run and the
        texts go one by one, to decline the very text ``feed_text`` would."""
        return _take_run(self._content, self.feed_text, texts, joined)

    def feed_reasoning(self, text: str) -> bool:
        """The reasoning lane (``delta.TextLane``): ``feed_text`` for
        reasoning text, on its own channel."""
        hit = self._reasoning.feed(text)
        if hit is None:
            return True
        self._lane_hit = (text, hit)
        return False

    def feed_reasonings(self, texts: list[str], joined: str) -> int:
        """``feed_texts`` for reasoning text."""
        return _take_run(self._reasoning, self.feed_reasoning, texts, joined)

    def feed(self, d: Delta) -> None:
        # A lane's verdict on this very text (it declined it: the text is
        # already in its channel); a declined text is the delta's only one.
        lane = self._lane_hit
        if lane is not None:
            self._lane_hit = None
        r = d.reasoning
        if r:
            hit = lane[1] if lane is not None and r is lane[0] else self._reasoning.feed(r)
            if hit is not None:
                d.reasoning = r[: hit[1]]
                return self._cut(d, hit)
        c = d.content
        if lane is not None and c is lane[0]:
            d.content = c[: lane[1][1]]
            return self._cut(d, lane[1])
        if c:
            hit = self._content.feed(c)
            if hit is not None:
                d.content = c[: hit[1]]
                return self._cut(d, hit)
        pieces = d.arg_text
        if pieces:
            args = self._args
            for key, text in pieces:
                ch = args.get(key)
                if ch is None:
                    ch = args[key] = _Channel(_always)
                hit = ch.feed(text)
                if hit is not None:
                    # The accumulator is abandoned on stop: no call is emitted.
                    return self._cut(d, hit)
        return None

    def close(self, d: Delta) -> None:
        self.feed(d)

    def _cut(self, d: Delta, hit: Hit) -> None:
        ext: dict[str, Any] = {"cut": "repetition", "period": hit[0]}
        if hit[2]:
            ext["counted"] = True
        end_turn(d, self.ctx.report, ext)


def end_turn(d: Delta, report: Report, ext: dict[str, Any]) -> None:
    """End the turn as a cut loop: ``finish_reason: "length"`` (the turn
    was stopped short, as by the token limit: every door maps it to its
    own), the note ``ext`` on the choice, the I/O layer told to stop
    reading, counted as ``loop_cut``."""
    d.stop = True
    d.finish_reason = "length"
    d.ext = ext
    report.cut = ext
    report.count("loop_cut")


#: The finish reason of an engine that cut a loop itself (vLLM's
#: ``repetition_detection``): no OpenAI client knows it.
UPSTREAM_CUT: Final = "repetition"
#: The note on a turn the upstream cut (no period: the engine's own verdict).
UPSTREAM_NOTE: Final = {"cut": "repetition", "by": "upstream"}


def upstream_cut(d: Delta, report: Report) -> None:
    """The upstream ended the turn with ``finish_reason: "repetition"``: it
    ends as a loop this step cut does (``end_turn``), whichever steps run,
    so every door shows its own loop-cut ending."""
    end_turn(d, report, dict(UPSTREAM_NOTE))
