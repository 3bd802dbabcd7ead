"""What a request asks of the chain: the tools it offers and the JSON its
``response_format`` asks for, read from the client's body.

Plain data, read once per request, below everything that uses it: the
formats (which match calls against the offered tools), the request's
``Context`` and the JSON step (``transforms/jsonout.py``).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ToolSpec(NamedTuple):
    """One offered tool: its name and JSON schema of parameters. (A named
    tuple: a request builds one per offered tool before its first byte, and
    a tuple is made several times faster than a frozen dataclass.)"""

    name: str
    parameters: dict[str, Any]


def tools_of(request: dict[str, Any] | None) -> dict[str, ToolSpec]:
    """The offered tools by name. Malformed entries are skipped: the
    request is validated where it arrives (the proxy), not here."""
    tools: dict[str, ToolSpec] = {}
    if not request:
        return tools
    raw = request.get("tools")
    if not isinstance(raw, list):
        return tools
    for t in raw:
        if not isinstance(t, dict):
            continue
        fn = t.get("function") if t.get("type", "function") == "function" else None
        if not isinstance(fn, dict):
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            continue
        params = fn.get("parameters")
        tools[name] = ToolSpec(name, params if isinstance(params, dict) else {})
    return tools


class JsonSpec(NamedTuple):
    """What a request's ``response_format`` asks for."""

    kind: str  # "json_object" or "json_schema"
    schema: dict[str, Any] | None
    strict: bool


def json_spec(request: dict[str, Any] | None) -> JsonSpec | None:
    """The JSON a request asks for, or None (then nothing here runs)."""
    fmt = (request or {}).get("response_format")
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return JsonSpec("json_object", None, False)
    if kind != "json_schema":
        return None
    js = fmt.get("json_schema")
    js = js if isinstance(js, dict) else {}
    schema = js.get("schema")
    return JsonSpec(
        "json_schema", schema if isinstance(schema, dict) else None, js.get("strict") is True
    )


__all__ = ["JsonSpec", "ToolSpec", "json_spec", "tools_of"]
