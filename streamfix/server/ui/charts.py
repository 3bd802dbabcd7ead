"""The page's charts, drawn on the server as SVG (no script, no library):
repairs by kind per minute over the last hour, one stacked bar a minute.
Colours are presentation attributes from a fixed palette (the page's CSP
allows no inline style); the kinds are the chain's counter names,
escaped like any text (``html.tag``)."""

from __future__ import annotations

from collections.abc import Sequence

from .html import Markup, join, tag

#: Kinds shown by name, the most frequent first; the rest are summed.
MAX_KINDS = 6
REST = "other"

#: Kinds that always have their own series, however few beside the others
#: (a loop cut among a hundred JSON repairs is the one to see): lifted
#: calls (``lifted.<format>``), loop cuts, JSON repairs (``json_*``).
ALWAYS = ("lifted.", "loop_cut", "json_")

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#9c9c9c")

WIDTH = 180
HEIGHT = 48


def always_shown(kind: str) -> bool:
    """Whether ``kind`` has its own series whatever its count (``ALWAYS``)."""
    return kind.startswith(ALWAYS)


def kinds_of(minutes: Sequence[dict[str, int]]) -> list[str]:
    """The kinds to draw, most repairs first (ties by name): every kind of
    ``ALWAYS``, then the most frequent others while they fit in
    ``MAX_KINDS``; the long tail is summed as ``REST``."""
    totals: dict[str, int] = {}
    for counts in minutes:
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    if len(ranked) <= MAX_KINDS:
        return ranked
    pinned = {k for k in ranked if always_shown(k)}
    room = max(0, MAX_KINDS - 1 - len(pinned))
    others = [k for k in ranked if k not in pinned][:room]
    shown = pinned | set(others)
    return [*(k for k in ranked if k in shown), REST]


def repairs_chart(minutes: Sequence[dict[str, int]], label: str) -> Markup:
    """Stacked bars, oldest minute on the left; an empty hour is a line
    that says so."""
    kinds = kinds_of(minutes)
    if not kinds:
        return tag("span", "no repairs in the last hour", class_="muted")
    shown = set(kinds)
    stacks: list[list[tuple[str, int]]] = []
    for counts in minutes:
        summed: dict[str, int] = {}
        for kind, n in counts.items():
            key = kind if kind in shown else REST
            summed[key] = summed.get(key, 0) + n
        stacks.append([(k, summed[k]) for k in kinds if summed.get(k)])
    top = max(sum(n for _, n in s) for s in stacks) or 1
    bar = WIDTH / max(1, len(minutes))
    colour = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(kinds)}
    rects = []
    for i, stack in enumerate(stacks):
        y = float(HEIGHT)
        ago = len(stacks) - 1 - i
        for kind, n in stack:
            h = HEIGHT * n / top
            y -= h
            rects.append(
                tag(
                    "rect",
                    tag("title", f"{kind}: {n} ({ago} min ago)"),
                    x=f"{i * bar:.1f}",
                    y=f"{y:.1f}",
                    width=f"{max(bar - 1, 1):.1f}",
                    height=f"{h:.1f}",
                    fill=colour[kind],
                    data_kind=kind,
                )
            )
    svg = tag(
        "svg",
        tag("title", f"{label}: repairs per minute, last hour (most {top} a minute)"),
        tag("line", x1=0, y1=HEIGHT, x2=WIDTH, y2=HEIGHT, stroke="#bbb"),
        rects,
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {WIDTH} {HEIGHT}",
        width=WIDTH,
        height=HEIGHT,
        role="img",
        class_="chart",
    )
    legend = tag(
        "ul",
        [
            tag(
                "li",
                tag(
                    "svg",
                    tag("rect", width=10, height=10, fill=colour[k]),
                    width=10,
                    height=10,
                    viewBox="0 0 10 10",
                ),
                " ",
                k,
                f" {sum(c.get(k, 0) for c in minutes) if k != REST else _rest(minutes, shown)}",
            )
            for k in kinds
        ],
        class_="legend",
    )
    return join([svg, legend])


def _rest(minutes: Sequence[dict[str, int]], shown: set[str]) -> int:
    return sum(n for c in minutes for k, n in c.items() if k not in shown)
