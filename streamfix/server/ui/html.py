"""HTML built so that nothing is unescaped by accident.

Every ``str`` given to ``tag`` (as a child or an attribute value) is
escaped; only ``Markup`` (what ``tag``, ``raw`` and ``join`` return) goes
in as it is. Model output, recordings, config values and URLs are plain
``str``, so they always come out as text: a reply holding ``<script>``,
``</textarea>`` or ``javascript:`` reads as those characters. The pages
hold no inline script, no inline style and no event attribute (the
Content-Security-Policy, ``auth.HEADERS``, forbids them); attribute names
are ours, never data's.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import urlencode

#: Elements written without a closing tag.
VOID = frozenset({"br", "hr", "img", "input", "link", "meta"})


class Markup(str):
    """Text that is already HTML (made here, never from data)."""

    __slots__ = ()


Child = str | int | float | None | Iterable["Child"]


def esc(value: object) -> Markup:
    """``value`` as text in HTML (``&``, ``<``, ``>``, both quotes)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def raw(text: str) -> Markup:
    """``text`` taken as HTML: only for literals of this package."""
    return Markup(text)


def join(children: Iterable[Child]) -> Markup:
    out: list[str] = []
    for child in children:
        _put(out, child)
    return Markup("".join(out))


def _put(out: list[str], child: Child) -> None:
    if child is None or child is False:
        return
    if isinstance(child, str | int | float):
        out.append(esc(child))
    else:
        for c in child:
            _put(out, c)


def tag(element: str, /, *children: Child, **attrs: object) -> Markup:
    """``<name attrs>children</name>``; a trailing ``_`` (``class_``,
    ``for_``: Python keywords) is dropped, another ``_`` is ``-``; an
    attribute ``True`` is written bare, ``None`` or ``False`` left out."""
    parts = [element]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        attr = key.removesuffix("_").replace("_", "-")
        parts.append(attr if value is True else f'{attr}="{esc(value)}"')
    head = "<" + " ".join(parts) + ">"
    if element in VOID:
        return Markup(head)
    return Markup(head + join(children) + f"</{element}>")


def href(path: str, **query: str | None) -> str:
    """A link to one of the page's own paths with a query string (values
    URL-encoded; ``tag`` escapes the whole for the attribute)."""
    params = {k: v for k, v in query.items() if v}
    return path + ("?" + urlencode(params) if params else "")
