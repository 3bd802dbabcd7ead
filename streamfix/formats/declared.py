"""Call shapes as data: a shape declared in TOML, compiled to a ``Format``.

A shape that is an ordinary arrangement of markers, a name and a body
needs no Python (docs/extending.md, "Shapes as data")::

    [shapes.atcall]
    start = "@@call"          # or a list; at_start_only = true: only at a reply's start
    name = "after_marker"     # or "json_field", "attribute"
    body = "json"             # "object", "parameter", "param", "key_value", "tag_pairs"
    end = "@@end"             # may be left out for a JSON body: it ends where the JSON closes

How the name is given (``name``):

- ``after_marker``: the text after the marker, up to ``separator`` (a
  string or a list; default: none, the name is a run of name characters
  and blanks follow);
- ``json_field``: inside a JSON body (``{"name": …, "arguments": …}``: the
  body is ``object``);
- ``attribute``: ``name="…"`` (``attribute`` says which) in the head after
  the marker, which ends at ``separator`` (default ``>``).

The body (``body``): ``json`` (the arguments object), ``object`` (one or
more objects with name and arguments, a list of them), ``parameter``
(``<parameter=K>V</parameter>``), ``param`` (``<param name="K">V</param>``;
``param_tag`` renames the element), ``key_value`` (``k=v`` pairs, values
JSON, quoted or bare), ``tag_pairs`` (``<key_tag>k</key_tag><value_tag>v
</value_tag>``, GLM's ``arg_key``/``arg_value`` by default). XML values are
text for a string parameter and JSON otherwise, as the templates write them.

It compiles to the same pieces as a built-in (``scan.py``'s finders, the
parsers of ``_family.py``), and is registered like one (``register``), so
the same refusals hold: a marker under 3 characters looked for anywhere, a
shape that changes plain prose. ``load_shapes(path)`` reads a file; an
error is one line naming the file, the shape and the field
(``ShapeError``). ``shape_toml`` writes a shape back (``streamfix learn``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..errors import PluginError
from ..spec import ToolSpec
from ..toolargs import INVALID, parse_value
from ._family import Header, Json, Steps, contiguous, strip_value, typed_value
from .base import SHAPE_MAX, EndFinder, Format, RawCall, lead_shape
from .glm import kv_calls
from .hermes_tags import json_calls
from .scan import END, JSON_ESCAPE, Peek, Structural, UntilMarker, literal

NAME_MODES = ("after_marker", "json_field", "attribute")
BODIES = ("json", "object", "parameter", "param", "key_value", "tag_pairs")
#: Bodies whose region may end where their JSON closes (no ``end``).
JSON_BODIES = ("json", "object")
#: The characters of a call's name written after a marker
#: (``functions.get_weather:0`` included: ``resolve_name`` reads it).
NAME_CHARS = r"\w.\-:/"
_NAME = re.compile(f"[{NAME_CHARS}]+")
_KEYS = frozenset(
    {
        "start",
        "name",
        "separator",
        "body",
        "end",
        "at_start_only",
        "attribute",
        "param_tag",
        "key_tag",
        "value_tag",
        "layout_before",
        "priority",
        "around",
    }
)


class ShapeError(PluginError):
    """A declared shape that cannot be used: one line naming the file, the
    shape and the field."""


@dataclass(frozen=True, slots=True)
class Shape:
    """One declared shape, as read from TOML (``load_shapes``) or inferred
    (``streamfix learn``). ``Declared(shape)`` is its ``Format``."""

    id: str
    start: tuple[str, ...]
    name: str = "after_marker"
    body: str = "json"
    end: tuple[str, ...] = ()
    separator: tuple[str, ...] = ()
    at_start_only: bool = False
    attribute: str = "name"
    param_tag: str = "param"
    key_tag: str = "arg_key"
    value_tag: str = "arg_value"
    layout_before: bool = True
    priority: int = 100
    around: tuple[str, ...] = ()
    source: str = field(default="", compare=False)


def _strs(value: Any, where: str, empty_ok: bool = False) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise ValueError(f"{where}: expected a string or a list of strings")
    if not empty_ok and (not items or not all(items)):
        raise ValueError(f"{where}: expected non-empty strings")
    return tuple(items)


def shape_of(sid: str, table: Any, source: str = "") -> Shape:
    """The ``Shape`` a TOML table declares; ``ValueError`` naming the field."""
    if not isinstance(table, dict):
        raise ValueError("expected a table ([shapes.NAME])")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown field (known: {', '.join(sorted(_KEYS))})")
    if "start" not in table:
        raise ValueError("start: missing (the marker(s) a call begins with)")
    start = _strs(table["start"], "start")
    name = table.get("name", "json_field" if table.get("body") == "object" else "after_marker")
    if name not in NAME_MODES:
        raise ValueError(f"name: {name!r} is not one of {', '.join(NAME_MODES)}")
    body = table.get("body", "object" if name == "json_field" else "json")
    if body not in BODIES:
        raise ValueError(f"body: {body!r} is not one of {', '.join(BODIES)}")
    if (name == "json_field") != (body == "object"):
        raise ValueError(
            "body: name = 'json_field' goes with body = 'object' (a JSON object with name "
            "and arguments), and only with it"
        )
    end = _strs(table["end"], "end") if "end" in table else ()
    if not end and body not in JSON_BODIES:
        raise ValueError(f"end: missing (a {body} body has no end of its own)")
    sep = _strs(table.get("separator", []), "separator", empty_ok=True)
    if name == "attribute" and not sep:
        sep = (">",)
    flags: dict[str, Any] = {}
    for key in ("at_start_only", "layout_before"):
        if key in table:
            if not isinstance(table[key], bool):
                raise ValueError(f"{key}: expected true or false")
            flags[key] = table[key]
    for key in ("attribute", "param_tag", "key_tag", "value_tag"):
        if key in table:
            v = table[key]
            if not isinstance(v, str) or not re.fullmatch(r"[\w.\-:]+", v):
                raise ValueError(f"{key}: expected a tag or attribute name")
            flags[key] = v
    if "around" in table:
        around = _strs(table["around"], "around")
        if len(around) != 2:
            raise ValueError("around: expected [open, close], the wrapper of one or more calls")
        flags["around"] = around
    if "priority" in table:
        if not isinstance(table["priority"], int) or isinstance(table["priority"], bool):
            raise ValueError("priority: expected an integer")
        flags["priority"] = table["priority"]
    return Shape(sid, start, name, body, end, sep, source=source, **flags)


def load_shapes(path: str | Path) -> list[Shape]:
    """The shapes of a TOML file (``[shapes.NAME]`` tables; none in an
    empty file). ``ShapeError``: one line naming the file, the shape and
    the field."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ShapeError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ShapeError(f"{p}: not valid TOML: {exc}") from None
    return shapes_of(data, str(p))


def shapes_of(data: Mapping[str, Any], source: str) -> list[Shape]:
    """The shapes of a decoded TOML document (see ``load_shapes``)."""
    if not data:
        return []  # an empty file (or comments only): no shapes yet
    tables = data.get("shapes")
    if not isinstance(tables, dict) or not tables:
        raise ShapeError(f"{source}: no [shapes.NAME] table")
    out = []
    for sid, table in tables.items():
        try:
            out.append(shape_of(sid, table, source))
        except ValueError as exc:
            raise ShapeError(f"{source}: shape {sid}: {exc}") from None
    return out


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _list(items: Sequence[str]) -> str:
    return _q(items[0]) if len(items) == 1 else "[" + ", ".join(map(_q, items)) + "]"


def shape_toml(shape: Shape) -> str:
    """``shape`` as a ``[shapes.ID]`` table (what ``load_shapes`` reads)."""
    lines = [f"[shapes.{shape.id}]", f"start = {_list(shape.start)}"]
    lines.append(f"name = {_q(shape.name)}")
    if shape.separator:
        lines.append(f"separator = {_list(shape.separator)}")
    lines.append(f"body = {_q(shape.body)}")
    if shape.end:
        lines.append(f"end = {_list(shape.end)}")
    if shape.around:
        lines.append(f"around = {_list(shape.around)}")
    if shape.at_start_only:
        lines.append("at_start_only = true")
    default = Shape("x", ("x",))
    for key in ("attribute", "param_tag", "key_tag", "value_tag"):
        if getattr(shape, key) != getattr(default, key):
            lines.append(f"{key} = {_q(getattr(shape, key))}")
    if not shape.layout_before:
        lines.append("layout_before = false")
    if shape.priority != default.priority:
        lines.append(f"priority = {shape.priority}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# The compiled format


def _json_table(ends: tuple[str, ...]) -> dict[str, list[tuple[str, str]] | Peek]:
    """An end rule for a JSON body closed by ``ends``: an end marker inside
    a JSON string is data (a raw newline cannot be in a string, so a
    marker after one ends the region even there). Strings count from the
    body's first ``{`` on: the head before it (a name, ``name="…"``) is not
    JSON."""
    closes = [(literal(e), END) for e in ends]
    return {
        "head": [(literal("{"), "out"), *closes],
        "out": [(literal('"'), "str"), *closes],
        "str": [
            (JSON_ESCAPE, "str"),
            (literal('"'), "out"),
            *((literal("\n" + e), END) for e in ends),
        ],
    }


def _prefixes(sep: str) -> str:
    return "|".join(re.escape(sep[:k]) for k in range(1, len(sep)))


class Declared(Format):
    """The ``Format`` of a declared ``Shape``."""

    wrapped: ClassVar[bool] = True

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.name = shape.id  # type: ignore[misc]
        self.priority = shape.priority  # type: ignore[misc]
        self.layout_before = shape.layout_before  # type: ignore[misc]
        opens = (*shape.start, *shape.around[:1])
        if shape.at_start_only:
            self.leading = opens  # type: ignore[misc]
        else:
            self.markers = opens  # type: ignore[misc]
        seps = shape.separator
        self._seps = tuple(sorted((s for s in seps if s.strip()), key=len, reverse=True))
        self._bare_ok = not seps or any(not s.strip() for s in seps)
        self._opener = {"json": "{", "object": "{[`", "key_value": "\\w"}.get(shape.body, "<")
        self._param = self._param_re()

    # -- end finder --------------------------------------------------------

    def end_finder(self, marker: str) -> EndFinder:
        s = self.shape
        skip = len(marker)
        if s.around and marker == s.around[0]:
            if s.body in JSON_BODIES:
                return Structural(skip, "head", _json_table(s.around[1:]))
            return UntilMarker(s.around[1], skip=skip)
        if s.end:
            if s.body in JSON_BODIES:
                return Structural(skip, "head", _json_table(s.end))
            return UntilMarker(*s.end, skip=skip)
        if s.name == "after_marker":
            return Steps(skip, self._header(), Json("{"))
        if s.name == "attribute":
            return Steps(skip, self._header(), Json("{"))
        return Steps(skip, Json("{["))

    def _header(self) -> Header:
        """The head between the marker and a JSON body (a name, a
        separator), given up on at the first character it cannot hold."""
        seps = self._seps
        sep_chars = "".join(sorted({re.escape(c) for s in seps for c in s}))
        if self.shape.name == "attribute":
            attr = re.escape(self.shape.attribute)
            valid_head = rf"[^{{]*?{attr}\s*=\s*\"[^\"]*\"[^{{]*"
            return Header("{", r"\s\S", valid_head, r"[^{]*")
        name = f"[{NAME_CHARS}]+"
        alts = "|".join(re.escape(x) for x in seps)
        tail = f"(?:{alts})" if seps else ""
        if seps and self._bare_ok:
            tail += "?"
        valid = rf"\s*{name}\s*{tail}\s*"
        pre = "|".join(filter(None, (_prefixes(x) for x in seps)))
        prefix = (
            rf"\s*(?:{name}\s*(?:(?:{alts})\s*{'|' + pre if pre else ''})?)?"
            if seps
            else (rf"\s*(?:{name}\s*)?")
        )
        return Header("{", rf"{NAME_CHARS}\s{sep_chars}", valid, prefix)

    # -- telling call syntax from prose --------------------------------------

    def body_shape(self, region: str, tools: Mapping[str, ToolSpec], final: bool) -> bool | None:
        around = self.shape.around
        if around and region.startswith(around[0]):
            return lead_shape(region[len(around[0]) :], (*self.shape.start, around[1]), final)
        marker = next((m for m in self.shape.start if region.startswith(m)), None)
        if marker is None:
            return False
        rest = region[len(marker) :]
        if self.shape.name == "json_field":
            return lead_shape(rest, ("{", "[", "`"), final)
        if self.shape.name == "attribute":
            s = rest.lstrip()
            if not s:
                return True if final else None
            want = self.shape.attribute + "="
            if s.startswith(want) or (not final and want.startswith(s)):
                return True if s.startswith(want) else None
            return False
        return self._name_shape(rest, final)

    def _name_end(self, s: str) -> int:
        """Where the name at the start of ``s`` ends (0: none): a run of
        name characters, cut at the first separator or end marker in it."""
        m = _NAME.match(s)
        if m is None:
            return 0
        end = m.end()
        for sep in (*self._seps, *self.shape.end):
            i = s.find(sep, 0, end)
            if 0 < i < end:
                end = i
        return end

    def _name_shape(self, rest: str, final: bool) -> bool | None:
        s = rest.lstrip()
        n = self._name_end(s)
        if not n:
            return (True if final else None) if not s else False
        after = s[n:]
        if not after:
            return None if not final and n <= SHAPE_MAX else False
        stripped = after.lstrip()
        if not stripped:
            return None if not final else False
        starts = list(self._seps)
        if self._bare_ok:
            starts.append("{" if self._opener == "{" else "<")
            starts.extend(self.shape.end)
        return lead_shape(after, tuple(starts), final)

    # -- parsing -----------------------------------------------------------

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        around = self.shape.around
        if around and region.startswith(around[0]):
            return self._parse_around(
                region[len(around[0]) :].rstrip().removesuffix(around[1]), tools
            )
        return self._parse_one(region, tools)

    def _parse_around(self, inner: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        """The calls inside the wrapper, one after another (blanks between)."""
        calls: list[RawCall] = []
        pos, n = 0, len(inner)
        while True:
            while pos < n and inner[pos].isspace():
                pos += 1
            if pos >= n:
                return calls or None
            marker = next((m for m in self.shape.start if inner.startswith(m, pos)), None)
            if marker is None:
                return None
            end = self.end_finder(marker).feed(inner[pos:])
            stop = n if end is None or end < 0 else pos + end
            got = self._parse_one(inner[pos:stop], tools)
            if got is None:
                return None
            calls.extend(got)
            pos = stop

    def _parse_one(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        s = self.shape
        marker = next((m for m in s.start if region.startswith(m)), None)
        if marker is None:
            return None
        rest = region[len(marker) :].rstrip()
        for e in s.end:
            if rest.endswith(e):
                rest = rest[: -len(e)]
                break
        if s.name == "json_field":
            return json_calls(rest)
        head = self._split_head(rest)
        if head is None:
            return None
        name, body = head
        if s.body == "tag_pairs":
            return kv_calls(name + body, tools, s.key_tag, s.value_tag, exact=True)
        args = self._arguments(body, tools, name)
        return None if args is None else [RawCall(name, args)]

    def _split_head(self, rest: str) -> tuple[str, str] | None:
        """The name and the body after it, or None."""
        if self.shape.name == "attribute":
            sep_at = min((i for i in (rest.find(x) for x in self._seps) if i >= 0), default=-1)
            if sep_at < 0:
                return None
            head = rest[:sep_at]
            m = re.search(rf'(?:^|\s){re.escape(self.shape.attribute)}\s*=\s*"([^"]*)"', head)
            if m is None:
                m = re.match(rf'\s*{re.escape(self.shape.attribute)}\s*=\s*"([^"]*)"', head)
            if m is None or not m.group(1).strip():
                return None
            sep = next(x for x in self._seps if rest.startswith(x, sep_at))
            return m.group(1).strip(), rest[sep_at + len(sep) :]
        s = rest.lstrip()
        n = self._name_end(s)
        if not n:
            return None
        name, after = s[:n], s[n:]
        body = after.lstrip()
        for sep in self._seps:
            if body.startswith(sep):
                return name, body[len(sep) :]
        if not self._bare_ok:
            return None
        return name, after

    def _arguments(self, body: str, tools: Mapping[str, ToolSpec], name: str) -> Any:
        kind = self.shape.body
        b = body.strip()
        if kind == "json":
            if not b:
                return {}
            if not b.startswith("{"):
                return None
            value = parse_value(b)
            return value if isinstance(value, dict) else None
        if not b:
            return {}
        if kind == "key_value":
            return _key_values(b)
        assert self._param is not None
        found = contiguous(self._param, body)
        if not found:
            return None
        return {
            p.group(1).strip(): typed_value(
                strip_value(p.group(2)), tools, name, p.group(1).strip()
            )
            for p in found
        }

    def _param_re(self) -> re.Pattern[str] | None:
        if self.shape.body == "parameter":
            return re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)
        if self.shape.body == "param":
            tag = re.escape(self.shape.param_tag)
            return re.compile(rf"<{tag}\s+name\s*=\s*\"([^\"\n]+)\"\s*>(.*?)</{tag}>", re.DOTALL)
        return None

    def __repr__(self) -> str:
        return f"<declared shape {self.name}>"


_KV = re.compile(
    r"\s*([A-Za-z_][\w.\-]*)\s*=\s*"
    r"(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\{[^{}]*\}|\[[^\[\]]*\]|[^\s,;]+)\s*[,;]?",
    re.DOTALL,
)


def _key_values(body: str) -> dict[str, Any] | None:
    """``k=v`` pairs (blanks, commas or semicolons between): a value in
    quotes or brackets is read as JSON (a Python literal), a bare one as
    JSON (a number, ``true``) or else as text."""
    found = contiguous(_KV, body)
    if not found:
        return None
    out: dict[str, Any] = {}
    for m in found:
        raw = m.group(2)
        if raw[0] in "'\"{[":
            v = parse_value(raw)
            out[m.group(1)] = raw.strip("'\"") if v is INVALID else v
        else:
            v = parse_value(raw)
            out[m.group(1)] = raw if v is INVALID or isinstance(v, str) else v
    return out


def compile_shapes(shapes: Sequence[Shape]) -> list[Format]:
    """The formats of ``shapes`` (what ``register`` takes)."""
    return [Declared(s) for s in shapes]
