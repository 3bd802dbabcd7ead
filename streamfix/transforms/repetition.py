"""Repetition cutter: end the turn when a channel falls into an exact loop.

A small model stuck in a loop emits the same fragment until ``max_tokens``
(``tests/captures/…/e_repetition_cat_mat_exact_loop.sse``). Sampler
penalties (DRY, repetition penalty) break JSON tool calls, so the loop is
cut in the stream instead: the turn ends with ``finish_reason: "length"``
and ``{"cut": "repetition", "period": N}`` on the choice, and the chain
tells the I/O layer to close the upstream request (``Chain.stopped``).

Channels are watched separately: ``content``, ``reasoning`` and each tool
call's argument text (``Delta.arg_text``, one channel per call key). A loop
in a call's arguments breaks the call: the chain abandons the accumulator
(which runs before us) when we stop, so the call is never emitted.

**Signature.** Real text repeats its syntax, not its content (JSON arrays
of similar objects, markdown tables, code, lists). A loop is *exact*
repetition: the last ``required_span(p)`` characters of the channel have
period ``p``. Short periods need many copies, long ones few:

    required_span(p) = max(4 * p, 400) - check_interval(p) - MARGIN

which is the loosest span that still meets issue 4's bound (no more than
``max(4 repeats, 400 chars)`` past the start of the loop reach the client)
given how often we look: 328 characters for periods up to 100 (328
copies of one character, 109 of ``"ha "``), then a little under 4 copies
(3.6 to 3.9 for periods over ``SHORT_PERIOD``, looked for less often).
Measured, the cut comes 330-385 characters past the start of a short
loop and at 3.8-3.96 copies of a long one, at any chunking.
Published detectors choose similar or tighter figures: vLLM's
``RepetitionDetectionParams`` (``min_pattern_size``,
``max_pattern_size``, ``min_count`` over token ids), llama.cpp's proposed
``--repetition-detection`` (patterns of 16..1024 tokens, 4 copies,
ggml-org/llama.cpp#26039), gemini-cli's ``LoopDetectionService`` (a
50-character chunk seen 10 times close together; it resets on code
fences, tables and list markup because those false-positived). We need no
such markup exceptions: an 80-character ``=====`` rule, a table separator
row or ``ha ha ha`` is far below the span, and the false-positive corpus
(``tests/test_corpus_false_positives.py``: the standard library's sources,
JSON, CSV, markdown) runs through with zero cuts.

**Numbered loops.** A loop where only a running number changes
(``e_repetition_fruits_numbered_loop.sse``: ``N. Ananasaki (Agra)``) has
no exact period. Normalising digit runs everywhere would cut numeric CSV
and JSON arrays of objects whose numbers differ, so a second, narrow check
catches only *numbered-list lines* (``12. text`` / ``12) text``) whose text
after the number is identical, on consecutive lines of at most
``NUMBERED_MAX_LINE`` characters covering ``NUMBERED_SPAN`` characters.
A list of identical items is not legitimate output. Multi-line list items
that loop with a running number are not caught (no exact period either).

**Cost.** Text is never held back. Each channel appends to a list and,
only at every ``CHECK_EVERY``-th character (absolute positions, so the
verdict does not depend on chunking), joins its bounded tail and runs a
C-speed check: ``rfind`` the last ``PROBE`` characters within
``SHORT_PERIOD`` (every ``LONG_EVERY``-th check: ``MAX_PERIOD``) before
them to get candidate periods, verify each with one ``startswith`` slice
compare. Amortised O(1) per character; the tail is bounded by ``WINDOW``.
A piece of text that reaches several checks at once (a run of chunks read
together) screens up to three of them with one search (``quiet``): if the
first one's probe recurs nowhere and no line ends near them, none of them
can find anything; otherwise each is made.

**Cutting.** On a cut, the text already sent stays sent; of this delta's
text only what comes before the end of the loop's first copy is kept (the
text before the loop and one copy), so at most the bound above reaches the
client in total.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ..context import Context
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


def find_loop(s: str, t: int, long: bool = True) -> tuple[int, int] | None:
    """A loop ending at ``s[:t]``: ``(period, start of the checked span)``
    for the shortest period whose required span is periodic, or None.
    Periods over ``SHORT_PERIOD`` are looked for only when ``long``."""
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
            return p, a
        end = i + PROBE - 1
    return None


#: Every this many characters, a check looks for long periods too.
LONG_AT: Final = CHECK_EVERY * LONG_EVERY
#: Checks at most this far apart share one screen (``quiet``): for any
#: period, a loop found by the last of them spans the first one's probe and
#: the probe one period before it.
SCREEN_REACH: Final = min(required_span(p) - PROBE - p for p in range(1, MAX_PERIOD + 1))


def quiet(s: str, t: int, last: int, long: bool) -> bool:
    """True when no check at ``t``, ``t + CHECK_EVERY`` … ``last`` (at most
    ``SCREEN_REACH`` apart, ``t >= MIN_SPAN``) can find a loop or a
    numbered run, with two searches instead of two per check: a loop of
    period ``p`` found by any of them makes the text periodic from before
    ``t``'s probe, so that probe recurs ``p`` characters earlier (``long``:
    a check among them looks for long periods); a numbered run needs a
    line end in the last ``CHECK_EVERY`` characters before a check. Text
    without loops passes; text that fails goes check by check."""
    if s.find("\n", t - CHECK_EVERY, last) >= 0:
        return False
    reach = MAX_PERIOD if long else SHORT_PERIOD
    return s.rfind(s[t - PROBE : t], max(0, t - PROBE - reach), t - 1) < 0


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
    if lines < NUMBERED_MIN_LINES or j + 1 - first < NUMBERED_SPAN:
        return None
    return s.find("\n", first) + 1 - first, first


class _Channel:
    """One watched text stream: a bounded tail and the text since."""

    __slots__ = ("base", "new", "next_check", "tail", "total")

    def __init__(self) -> None:
        self.tail = ""  # text from absolute position ``base``
        self.base = 0
        self.new: list[str] = []  # pieces after the tail
        self.total = 0  # characters seen
        self.next_check = CHECK_EVERY  # absolute position of the next check

    def feed(self, text: str, undo_on_hit: bool = False) -> tuple[int, int] | None:
        """Append ``text``; on a loop, ``(period, characters of text to
        keep)``, and with ``undo_on_hit`` the channel as it was before
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
        found: tuple[int, int] | None = None
        first_check = t_abs = self.next_check
        total = self.total
        screened = 0  # checks before this one were screened together
        while t_abs <= total:
            t = t_abs - base
            if t_abs >= screened and total - t_abs >= CHECK_EVERY and t >= MIN_SPAN:
                # Several checks due (a run of texts): one screen for up
                # to ``SCREEN_REACH`` characters of them.
                last = t_abs + min(total - t_abs, SCREEN_REACH) // CHECK_EVERY * CHECK_EVERY
                if quiet(s, t, last - base, last // LONG_AT * LONG_AT >= t_abs):
                    t_abs = last + CHECK_EVERY
                    continue
                screened = last + CHECK_EVERY  # not quiet: each check of them
            hit = find_loop(s, t, t_abs % LONG_AT == 0)
            if hit is not None:
                p, a = hit
                first = loop_start(s, p, a) + p  # end of the first copy
            else:
                hit = find_numbered(s, t)
                if hit is not None:
                    p, first = hit[0], hit[1] + hit[0]
            if hit is not None:
                found = (p, max(0, min(len(text), base + first - start)))
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
    a loop, the channel as it was, and the texts one by one (``feed_one``)."""
    if ch.feed(joined, undo_on_hit=True) is None:
        return len(texts)
    return take_each(feed_one, texts)


class RepetitionCutter:
    """Cuts exact loops in content, reasoning and arguments (module doc)."""

    __slots__ = ("_args", "_content", "_lane_hit", "_reasoning", "ctx")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._content = _Channel()
        self._reasoning = _Channel()
        self._args: dict[int, _Channel] = {}
        #: A loop found on the plain-text lane, for the ``feed`` that follows.
        self._lane_hit: tuple[str, tuple[int, int]] | None = None

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
                return self._cut(d, hit[0])
        c = d.content
        if lane is not None and c is lane[0]:
            d.content = c[: lane[1][1]]
            return self._cut(d, lane[1][0])
        if c:
            hit = self._content.feed(c)
            if hit is not None:
                d.content = c[: hit[1]]
                return self._cut(d, hit[0])
        pieces = d.arg_text
        if pieces:
            args = self._args
            for key, text in pieces:
                ch = args.get(key)
                if ch is None:
                    ch = args[key] = _Channel()
                hit = ch.feed(text)
                if hit is not None:
                    # The accumulator is abandoned on stop: no call is emitted.
                    return self._cut(d, hit[0])
        return None

    def close(self, d: Delta) -> None:
        self.feed(d)

    def _cut(self, d: Delta, period: int) -> None:
        ext: dict[str, Any] = {"cut": "repetition", "period": period}
        d.stop = True
        d.finish_reason = "length"
        d.ext = ext
        report = self.ctx.report
        report.cut = ext
        report.count("loop_cut")
