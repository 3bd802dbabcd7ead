"""Tool-call arguments: parse, repair when unambiguous, convert by schema.

Models write arguments that are almost JSON: Python dicts with single
quotes and ``True``/``None``, trailing commas, the whole object given as a
JSON string, an empty string for a tool with no parameters. Each repair
here is one that cannot change what the model meant. Arguments cut off
halfway (``{"city":``) are *not* repaired: that call was never finished
(see ``looks_truncated``), and completing it would invent a value.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import orjson

_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def parse_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The arguments object in ``text``, and whether a repair was needed.

    Returns ``(None, False)`` when no unambiguous reading exists.
    """
    s = text.strip()
    if not s:
        return {}, text != "{}"
    try:
        value: Any = orjson.loads(s)
        repaired = s != text
    except orjson.JSONDecodeError:
        value = _repair(s)
        repaired = True
    if isinstance(value, str):
        # Arguments given as a JSON string holding the object.
        inner, _ = parse_object(value)
        return inner, True
    if isinstance(value, dict):
        return value, repaired
    return None, False


def _repair(s: str) -> Any:
    no_commas = _strip_trailing_commas(s)
    if no_commas != s:
        try:
            return orjson.loads(no_commas)
        except orjson.JSONDecodeError:
            pass
    try:
        # A Python literal: single quotes, True/False/None, trailing commas.
        value = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return value if _json_safe(value) else None


def _strip_trailing_commas(s: str) -> str:
    """Remove ``,`` before ``}``/``]`` outside strings."""
    if "," not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    in_str = False
    while i < n:
        c = s[i]
        if in_str:
            if c == "\\":
                out.append(s[i : i + 2])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == ",":
            j = i + 1
            while j < n and s[j] in " \t\r\n":
                j += 1
            if j < n and s[j] in "}]":
                i += 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _json_safe(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False


def looks_truncated(text: str) -> bool:
    """True when ``text`` is the start of a JSON value that was cut off:
    it ends inside a string or with brackets still open."""
    depth = 0
    in_str = False
    esc = False
    seen = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
            seen = True
        elif c in "}]":
            depth -= 1
    return seen and (in_str or depth > 0)


def coerce(args: dict[str, Any], schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Convert argument values where the schema makes it unambiguous
    (``"5"`` -> ``5`` for an integer). Returns the arguments and whether
    anything changed. A string parameter keeps its string."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not args:
        return args, False
    changed = False
    out = dict(args)
    for key, value in args.items():
        prop = props.get(key)
        if not isinstance(prop, dict):
            continue
        new = convert_value(value, prop)
        if new is not value:
            out[key] = new
            changed = True
    return (out, True) if changed else (args, False)


def convert_value(value: Any, prop: dict[str, Any]) -> Any:
    """One value converted to the schema's type when the reading is certain;
    the same object back otherwise."""
    typ = prop.get("type")
    types = typ if isinstance(typ, list) else [typ]
    if isinstance(value, str):
        if "string" in types or typ is None:
            return value
        v = value.strip()
        if "integer" in types and re.fullmatch(r"-?\d+", v):
            return int(v)
        if "number" in types and re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", v):
            f = float(v)
            return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f
        if "boolean" in types and v.lower() in ("true", "false"):
            return v.lower() == "true"
        if "null" in types and v.lower() in ("null", "none"):
            return None
        if ("object" in types and v.startswith("{")) or ("array" in types and v.startswith("[")):
            try:
                parsed = orjson.loads(v)
            except orjson.JSONDecodeError:
                return value
            if isinstance(parsed, dict if "object" in types else list):
                return parsed
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and "string" in types and len(types) == 1:
        return str(value)
    if isinstance(value, float) and "integer" in types and value.is_integer():
        return int(value)
    return value


def dumps(args: dict[str, Any]) -> str:
    return orjson.dumps(args).decode()
