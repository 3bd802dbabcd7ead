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
import math
import re
from typing import Any

import orjson

from . import jsoncodec
from .pycalls import read_args

#: JSON read with integers of any size exact (orjson reads one beyond 64
#: bits as a float); raises ``orjson.JSONDecodeError``.
_loads = jsoncodec.loads

_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


class _Invalid:
    __slots__ = ()

    def __repr__(self) -> str:
        return "INVALID"


#: ``parse_value``'s answer for text with no unambiguous reading.
INVALID: Any = _Invalid()


def parse_value(text: str) -> Any:
    """Any JSON value in ``text`` (an object, a list, a string…), read
    leniently: JSON, then JSON without trailing commas, then a Python
    literal (single quotes, ``True``/``None``). ``INVALID`` if none fits."""
    s = text.strip()
    if not s:
        return INVALID
    try:
        return _loads(s)
    except orjson.JSONDecodeError:
        pass
    value = _repair(s)
    if value is None and s not in ("None", "null"):
        return INVALID
    return value


def too_deep(text: str) -> bool:
    """Whether ``text`` nests deeper than the chain reads
    (``jsoncodec.MAX_DEPTH``): arguments that are then passed on as they
    came, never parsed, repaired or coerced."""
    if text.count("[") + text.count("{") <= jsoncodec.MAX_DEPTH:
        return False
    level = deepest = 0
    quoted = escaped = False
    for ch in text:  # bracket depth outside strings
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > jsoncodec.MAX_DEPTH:
                    return True
        elif ch in "]}":
            level -= 1
    return False


def parse_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The arguments object in ``text``, and whether a repair was needed.

    Returns ``(None, False)`` when no unambiguous reading exists.
    """
    s = text.strip()
    if not s:
        return {}, text != "{}"
    try:
        value: Any = _loads(s)
        repaired = s != text
    except orjson.JSONDecodeError:
        value = _repair(s)
        repaired = True
    if isinstance(value, str):
        # Arguments given as a JSON string holding the object.
        if value.strip() == text.strip():
            return None, False
        inner, _ = parse_object(value)
        return inner, True
    if isinstance(value, dict):
        return value, repaired
    return None, False


def _repair(s: str) -> Any:
    no_commas = _strip_trailing_commas(s)
    if no_commas != s:
        try:
            return _loads(no_commas)
        except orjson.JSONDecodeError:
            pass
    value = _literal_eval(s)
    if value is None:
        # Mixed spellings: JSON's true/null with single quotes, or object
        # keys without quotes ({order_id: "E-5"}, as some families write them).
        mixed = _MIXED.sub(_mixed_token, s)
        if mixed != s:
            value = _literal_eval(mixed)
    return value


def _literal_eval(s: str) -> Any:
    try:
        # A Python literal: single quotes, True/False/None, trailing commas.
        value = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not _json_safe(value):
        return None
    return _lists(value)


_MIXED = re.compile(
    r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""  # strings: kept as they are
    r"|\b(true|false|null)\b"
    r"|(?<=[{,])(\s*)([A-Za-z_][\w-]*)(?=\s*:)"  # a bare key
)
_PY_NAMES = {"true": "True", "false": "False", "null": "None"}


def _mixed_token(m: re.Match[str]) -> str:
    if m.group(1):
        return _PY_NAMES[m.group(1)]
    if m.group(3):
        return f'{m.group(2)}"{m.group(3)}"'
    return m.group(0)


def _lists(value: Any) -> Any:
    """A Python literal's tuples as lists (JSON has no tuples)."""
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


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
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)  # JSON has no inf (``1e999`` in a literal)
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


#: Type names that are not JSON Schema's but that tool schemas use (Python's
#: and C's names, Java's ``long``/``short`` and the sized integers; the
#: engines' XML parsers read them so, SGLang's MiMo and vLLM's Qwen3-Coder by
#: prefix): the JSON type each means.
TYPE_ALIASES = {
    "float": "number",
    "double": "number",
    "float32": "number",
    "float64": "number",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "unsigned": "integer",
    **{f"{u}int{n}": "integer" for u in ("", "u") for n in (8, 16, 32, 64)},
    "bool": "boolean",
    "str": "string",
    "dict": "object",
    "list": "array",
}


def schema_types(prop: dict[str, Any]) -> frozenset[str]:
    """The JSON types a parameter's schema admits: its ``type`` (a name or a
    list; ``TYPE_ALIASES`` read as the JSON types they mean), the types of
    its ``anyOf``/``oneOf`` branches (how Pydantic writes
    ``Optional[int]``), and ``null`` for ``nullable: true`` (OpenAPI).
    Empty when the schema names none (anything goes)."""
    out: set[str] = set()
    typ = prop.get("type")
    for t in typ if isinstance(typ, list) else [typ]:
        if isinstance(t, str):
            out.add(TYPE_ALIASES.get(t, t))
    for key in ("anyOf", "oneOf"):
        branches = prop.get(key)
        if isinstance(branches, list):
            for b in branches:
                if isinstance(b, dict):
                    out |= schema_types(b)
    if prop.get("nullable") is True:
        out.add("null")
    return frozenset(out)


def convert_value(value: Any, prop: dict[str, Any]) -> Any:
    """One value converted to the schema's type when the reading is certain;
    the same object back otherwise. Text as XML-style formats hand it over:
    ``null`` (or Python's ``None``) is null for a parameter that admits null,
    even a string one (vLLM's XML tool parser does the same: the
    templates write a null argument as that word); else a parameter that
    admits a string keeps its text, even text that looks like JSON; else
    the first type the text reads as exactly (integer, number, boolean,
    array, object)."""
    types = schema_types(prop)
    if isinstance(value, str):
        v = value.strip()
        # A string parameter's text is null only as the exact spellings.
        nulls = ("null", "None") if "string" in types else ("null", "none")
        if "null" in types and (v if "string" in types else v.lower()) in nulls:
            return None
        if "string" in types or not types:
            return value
        # Never through a float: digits are that exact int, of any size.
        if ("integer" in types or "number" in types) and re.fullmatch(r"-?\d+", v):
            return _int(v, value)
        if "number" in types and re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", v):
            f = float(v)
            return f if math.isfinite(f) else value
        if "boolean" in types and v.lower() in ("true", "false"):
            return v.lower() == "true"
        if ("object" in types and v.startswith("{")) or ("array" in types and v.startswith("[")):
            try:
                parsed = _loads(v)
            except orjson.JSONDecodeError:
                # A Python dict or list literal (single quotes, True), as
                # mlx-lm reads it (``literal_eval``).
                parsed = _repair(v)
            if isinstance(parsed, dict if v.startswith("{") else list):
                return parsed
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and types == {"string"}:
        return str(value)
    if (
        isinstance(value, float)
        and "integer" in types
        and value.is_integer()
        and abs(value) <= _EXACT_FLOAT_INT
    ):
        # ``5.0`` is 5; ``1e30`` is left alone: its int would be another number.
        return int(value)
    return value


#: Integers up to this size are exact as floats: a float beyond it may
#: stand for a number other than its ``int``.
_EXACT_FLOAT_INT = 2**53


def _int(digits: str, value: str) -> Any:
    """``digits`` as an int; ``value`` back when Python will not read that
    many digits (its 4300-digit limit)."""
    try:
        return int(digits)
    except ValueError:
        return value


def dumps(args: dict[str, Any]) -> str:
    """Arguments as JSON text, integers of any size exact."""
    return jsoncodec.dumps(args).decode()


def to_object(raw: Any) -> tuple[dict[str, Any] | None, bool]:
    """Arguments as a format handed them over (a dict, text to parse,
    ``None`` for none) -> the object and whether a repair was needed."""
    if raw is None:
        return {}, False
    if isinstance(raw, dict):
        return (raw, False) if _json_safe(raw) else (None, False)
    if isinstance(raw, str):
        return parse_object(raw)
    return None, False


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def validate(args: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What is wrong with ``args`` for ``schema`` (empty list: nothing).

    A deliberately small subset of JSON Schema, the part tool schemas use:
    ``required``, ``properties`` with ``type`` and ``enum`` (one level deep,
    the level a model gets wrong), and ``additionalProperties: false``.
    Anything else in the schema is accepted as is.
    """
    if not isinstance(schema, dict):
        return []
    errors: list[str] = []
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    if isinstance(required, list):
        errors.extend(f"missing {k}" for k in required if isinstance(k, str) and k not in args)
    if schema.get("additionalProperties") is False:
        errors.extend(f"unexpected {k}" for k in args if k not in props)
    for key, value in args.items():
        prop = props.get(key)
        if not isinstance(prop, dict):
            continue
        typ = prop.get("type")
        types = typ if isinstance(typ, list) else [typ] if isinstance(typ, str) else []
        if types and not any(_is_type(value, t) for t in types):
            errors.append(f"{key}: not {'/'.join(map(str, types))}")
        enum = prop.get("enum")
        if isinstance(enum, list) and value not in enum:
            errors.append(f"{key}: not one of the enum")
    return errors


def _is_type(value: Any, typ: str) -> bool:
    return typ not in _JSON_TYPES or is_instance(value, typ)


def is_instance(value: Any, typ: str) -> bool:
    """``value`` (as JSON reads) is of the JSON Schema type ``typ``; False
    for a name that is no JSON type (a bool is no integer or number)."""
    py = _JSON_TYPES.get(typ)
    if py is None or (isinstance(value, bool) and typ in ("integer", "number")):
        return False
    return isinstance(value, py)


def parse_call_args(text: str) -> tuple[list[Any], dict[str, Any]] | None:
    """The arguments of a call written as code, ``text`` being what stands
    between its parentheses: Python keyword arguments (``order_id="D-4"``,
    ``key=True``), JSON-ish values, or positional literals. Returns
    ``(positional, keywords)``; None when any argument is not a literal
    (a variable, an expression): that is code, not a call to lift. What
    Python does not parse is read as models write it (``pycalls``)."""
    src = text.strip()
    if not src:
        return [], {}
    try:
        node = ast.parse(f"f({src})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        got = read_args(src)
        return got if got is not None else _json_args(src)
    if not isinstance(node, ast.Call):
        return None
    return call_node_args(node)


def call_node_args(node: ast.Call) -> tuple[list[Any], dict[str, Any]] | None:
    """Literal positional and keyword arguments of a parsed call (see
    ``parse_call_args``)."""
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    try:
        for a in node.args:
            positional.append(_literal(a))
        for kw in node.keywords:
            if kw.arg is None:
                return None
            keywords[kw.arg] = _literal(kw.value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return positional, keywords


_JSON_NAMES = {"true": True, "false": False, "null": None}


def _literal(node: ast.expr) -> Any:
    """A literal's value: what ``ast.literal_eval`` reads, and JSON's
    ``true``/``false``/``null`` at any depth (Olmo 3 and LFM2 write them in
    Python syntax); a set is a list (JSON has none)."""
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]  # JSON spellings inside Python syntax
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                raise ValueError("** in a dict")
            key = _literal(k)
            if not isinstance(key, str):
                raise ValueError("a key that is not a string")
            out[key] = _literal(v)
        return out
    value = ast.literal_eval(node)
    if not _json_safe(value):
        raise ValueError("not JSON")
    return _lists(value)


def _json_args(src: str) -> tuple[list[Any], dict[str, Any]] | None:
    value = parse_value(src)
    if isinstance(value, dict):
        return [value], {}
    return None
