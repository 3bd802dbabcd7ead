"""The operator page's learned shapes (``GET /ui/shapes``): what
``streamfix learn`` infers from the recordings (``server/learn.py``),
each shape with the replies it came from, what replaying every recording
with it showed, and an "add to config" form (``POST /ui/shapes/add``:
operator key and CSRF as the page's other actions; it appends the shape
to the ``--shapes`` file and reloads)."""

from __future__ import annotations

from collections.abc import Sequence

from ..learn import Learned
from .html import Markup, href, join, tag


def _recording(name: str) -> Markup:
    return tag("a", name, href=href("/ui/recordings/" + name))


def shape_item(x: Learned, csrf: str | None, shapes_file: str | None) -> Markup:
    sources = tag(
        "ul",
        [
            tag("li", _recording(p.name), f" lifts {', '.join(x.lifted.get(p, [])) or 'nothing'}")
            for p in x.sources
        ],
    )
    changed = (
        tag(
            "ul",
            [
                tag("li", _recording(p.name), f" ({', '.join(reasons) or 'no reason'})")
                for p, reasons in sorted(x.changed.items())
            ],
        )
        if x.changed
        else tag("p", "No other recorded reply changes with it.", class_="muted")
    )
    if x.rejected:
        verdict = tag("p", "Rejected: ", x.rejected, class_="bad")
        action = None
    else:
        verdict = tag(
            "p",
            "Proved: the replies it came from now lift their calls; plain prose, the genuine "
            "answers and every other recording pass as before (except those listed).",
            class_="ok",
        )
        action = tag(
            "form",
            tag("input", type="hidden", name="csrf", value=csrf),
            tag("input", type="hidden", name="shape", value=x.shape.id),
            tag("button", "Add to config", type="submit", disabled=shapes_file is None),
            tag(
                "span",
                f" appends it to {shapes_file} and reloads"
                if shapes_file
                else " start the proxy with --shapes FILE to add shapes from here",
                class_="muted",
            ),
            method="post",
            action="/ui/shapes/add",
            class_="reload",
        )
    return tag(
        "section",
        tag("h2", x.shape.id),
        tag("pre", x.toml, class_="sample"),
        verdict,
        tag("h3", f"Learned from {len(x.sources)} replies"),
        sources,
        tag("h3", "Other replies that change"),
        changed,
        action,
    )


def learned_view(
    found: Sequence[Learned] | None, csrf: str | None, shapes_file: str | None, record: bool
) -> Markup:
    if not record:
        return tag(
            "p",
            "Shapes are learned from recordings: start the proxy with --record DIR "
            "(replies recorded as 'missed' or 'unrecognised' are read).",
        )
    if not found:
        return tag(
            "p",
            "No shape to learn: no two recorded replies ('missed' or 'unrecognised') agree on "
            "the markup around an offered tool's name and its arguments.",
        )
    return join(
        [
            tag(
                "p",
                "Call shapes inferred from the replies that went out badly, proved by replaying "
                "every recording with them (streamfix learn; docs/extending.md).",
            ),
            *(shape_item(x, csrf, shapes_file) for x in found),
        ]
    )
