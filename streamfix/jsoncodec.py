"""JSON read as the clients read it, and written back exactly.

orjson is the fast path everywhere, but it differs from what the OpenAI
SDKs (Python's ``json``) accept in three ways that lose or change what the
model said: it reads an integer beyond 64 bits as a float (a lossy value),
refuses to write one (``TypeError``), and refuses ``NaN``/``Infinity`` (a
logprob of ``-Infinity``) and lone surrogate escapes (``"\\ud800"``), both
in reading and in writing. Each function here keeps the fast call first
and pays for the exact one only when that fails, so the common path costs
what it did.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import msgspec
import orjson

#: msgspec reads JSON as strictly as orjson, as fast, and integers of any
#: size as ints.
_decode = msgspec.json.decode


#: Deepest value read (levels of arrays and objects): what orjson writes.
#: A model's reply or call arguments nested deeper are not a value to the
#: chain (``loads`` refuses them, as it refuses bad syntax): the text is
#: passed on as it came, or with the invalid note, never a
#: ``RecursionError`` in the Python that walks values. Real values nest a
#: few levels.
MAX_DEPTH = 255


def loads(data: bytes | str) -> Any:
    """Strict JSON, integers of any size exact, nested at most
    ``MAX_DEPTH`` levels. Raises ``orjson.JSONDecodeError`` (a
    ``ValueError``) like ``orjson.loads``."""
    try:
        value = _decode(data)
    except msgspec.DecodeError as exc:
        raise orjson.JSONDecodeError(str(exc), "", 0) from None
    except RecursionError:  # msgspec's own limit (about 1,000 levels)
        raise _too_deep() from None
    if _brackets(data) > MAX_DEPTH and too_deep(value, MAX_DEPTH):
        raise _too_deep()
    return value


def _too_deep() -> orjson.JSONDecodeError:
    return orjson.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0)


def _brackets(data: bytes | str) -> int:
    """Opening brackets in ``data``: as deep as ``MAX_DEPTH`` takes as many
    (two passes in C; most values stop here)."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (arrays and objects), counted up to
    ``limit + 1``; iterative, so any depth is safe to measure."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items: Any = v.values()
        elif isinstance(v, list | tuple):
            items = v
        else:
            continue
        if d > deepest:
            deepest = d
            if deepest > limit:
                return deepest
        stack.extend((x, d + 1) for x in items if isinstance(x, dict | list | tuple))
    return deepest


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels (up to 255:
    orjson's writer answers in C first)."""
    if limit >= MAX_DEPTH:
        try:
            orjson.dumps(value)
            return False
        except TypeError as exc:
            if str(exc) == "Recursion limit reached":
                return True
    return depth(value, limit) > limit


def loads_lenient(data: bytes | str) -> Any:
    """What Python's ``json.loads`` accepts (the SDKs' reading), for JSON
    forwarded to a client: strict first (integers of any size exact), then
    the standard library, with ``NaN``/``Infinity`` and numbers too large
    for a float kept as their own text (``orjson.Fragment``: ``dumps``
    writes them back as sent). Lone surrogates become ``str`` code points
    (``dumps`` escapes them again). Raises ``orjson.JSONDecodeError``."""
    try:
        return _decode(data)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(data, parse_constant=_verbatim, parse_float=_float)
    except (ValueError, RecursionError) as exc:
        raise orjson.JSONDecodeError(str(exc), "", 0) from None


def _verbatim(text: str) -> Any:
    return orjson.Fragment(text.encode())


def _float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _verbatim(text)


def dumps(obj: Any) -> bytes:
    """``orjson.dumps``, or, for what it refuses (an integer beyond 64
    bits, a lone surrogate), the same JSON written exactly."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return _exact(obj).encode()


def _exact(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError("dict key must be str")
            parts.append(f"{_string(k)}:{_exact(v)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_exact, value)) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__repr__(value)
    return orjson.dumps(value).decode()  # float, bool, None, Fragment; else its error


_SURROGATE = re.compile("[\ud800-\udfff]")


def _string(s: str) -> str:
    try:
        return orjson.dumps(s).decode()
    except TypeError:
        # A lone surrogate: written as the escape it was read from.
        out = json.dumps(s, ensure_ascii=False)
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
