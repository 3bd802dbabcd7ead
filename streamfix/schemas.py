"""A client's JSON Schema as data: checked without fetching anything, its
patterns in linear time, its work bounded.

A ``response_format`` schema comes from the client and is run by the proxy,
so nothing in it may make the proxy act or stall (issue 37):

- **No fetch.** jsonschema's fallback resolves a ``$ref`` to ``http://…``
  by fetching it (no timeout, on the event loop: request forgery from the
  proxy's position). Here the registry holds the schema itself and the
  JSON Schema meta-schemas and retrieves nothing; every ``$ref`` and
  ``$dynamicRef`` is looked up once when the schema is compiled, so a
  reference to anything else (a URL, a file, a ``#/$defs/…`` that is not
  there) is a ``SchemaRefused`` naming it: a 400 before anything is sent.
- **Linear-time patterns.** ``pattern`` and ``patternProperties`` run on
  RE2 (``google-re2``): ``^(a+)+$`` against 25 ``a`` and a ``!`` takes
  microseconds, not seconds. A pattern RE2 cannot compile (a
  backreference, a lookaround) is refused the same way: a check off the
  loop would still spend the CPU, and a 400 tells the client at once.
- **Bounded depth.** A recursive schema can follow a reply as deep as it
  goes, about four Python frames per level; a value nested deeper than
  ``MAX_CHECK_DEPTH`` is not checked against the schema and gets a note
  instead (``errors``), never a ``RecursionError``.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Any

import orjson

from . import jsoncodec

#: Deepest value checked against a schema (levels of arrays and objects).
#: jsonschema spends about four frames per level of a recursive schema;
#: 100 levels leave room under Python's limit of 1,000 wherever the check
#: runs. Real replies nest a few levels.
MAX_CHECK_DEPTH = 100

#: Compiled schemas kept (least recently used out).
_MAX_CACHED = 64

#: The keywords whose values are data, not schemas (not walked).
_DATA = frozenset({"enum", "const", "default", "examples"})


class SchemaRefused(ValueError):
    """A schema streamfix will not run, and why (the reference or pattern
    named)."""


@lru_cache(maxsize=1024)
def _re2(pattern: str) -> Any:
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options=options)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
    """jsonschema's ``pattern`` keyword on RE2."""
    if validator.is_type(instance, "string") and not _re2(patrn).search(instance):
        from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]

        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, props: dict[str, Any], instance: Any, schema: Any) -> Any:
    """jsonschema's ``patternProperties`` keyword on RE2."""
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in props.items():
        rx = _re2(patrn)
        for k, v in instance.items():
            if rx.search(k):
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _refuse(uri: str) -> Any:
    """The registry's retrieval: nothing is ever fetched."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]


_CLASSES: dict[Any, Any] = {}


def _class(schema: dict[str, Any]) -> Any:
    """The draft's validator class with ``pattern`` and
    ``patternProperties`` on RE2."""
    import jsonschema  # type: ignore[import-untyped]

    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = _CLASSES.get(base)
    if cls is None:
        cls = _CLASSES[base] = jsonschema.validators.extend(
            base, {"pattern": _pattern, "patternProperties": _pattern_properties}
        )
    return cls


def _walk(schema: dict[str, Any], registry: Any, spec: Any) -> None:
    """Every reference resolved and every pattern compiled, once, or
    ``SchemaRefused``. A subschema with its own ``$id`` is its own base
    (as jsonschema resolves it)."""
    from referencing.exceptions import Unresolvable

    stack: list[tuple[Any, Any]] = [
        (schema, registry.resolver_with_root(spec.create_resource(schema)))
    ]
    while stack:
        node, resolver = stack.pop()
        if isinstance(node, list):
            stack.extend((n, resolver) for n in node)
            continue
        if not isinstance(node, dict):
            continue
        if node is not schema and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(spec.create_resource(node))
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            try:
                resolver.lookup(ref)
            except Unresolvable:
                if ref.startswith("#"):
                    raise SchemaRefused(f"{key} {ref!r} points at nothing in the schema") from None
                raise SchemaRefused(
                    f"{key} {ref!r} is not in the schema; streamfix fetches no schema "
                    "(only references inside the schema itself are resolved)"
                ) from None
        patterns: list[str] = []
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            patterns.extend(node["patternProperties"])
        for p in patterns:
            try:
                _re2(p)
            except Exception as exc:  # re2.error; its message is bytes
                why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
                raise SchemaRefused(
                    f"pattern {p!r} is not supported (streamfix checks patterns with RE2, "
                    f"in linear time: no backreferences or lookaround): {why}"
                ) from None
        for key, value in node.items():
            if key not in _DATA and isinstance(value, dict | list):
                stack.append((value, resolver))


_COMPILED: OrderedDict[bytes, Any] = OrderedDict()


def compile_schema(schema: dict[str, Any]) -> Any:
    """A validator for ``schema`` (cached), or False for a schema that is
    not one (only the reply's syntax is then checked). Raises
    ``SchemaRefused`` for a reference outside the schema, a dangling one
    or a pattern RE2 cannot run (the same every time)."""
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    got = _COMPILED.get(key)
    if got is None:
        got = _compile(schema)
        _COMPILED[key] = got
        if len(_COMPILED) > _MAX_CACHED:
            _COMPILED.popitem(last=False)
    else:
        _COMPILED.move_to_end(key)
    if isinstance(got, SchemaRefused):
        raise SchemaRefused(str(got))
    return got


def _compile(schema: dict[str, Any]) -> Any:
    import jsonschema
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012, specification_with

    cls = _class(schema)
    try:
        cls.check_schema(schema)
    except (jsonschema.SchemaError, RecursionError):
        return False
    # The meta-schemas (jsonschema_specifications) and nothing that is fetched.
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]

    registry = Registry(retrieve=_refuse).combine(REGISTRY)  # type: ignore[call-arg]
    dialect = schema.get("$schema")
    spec = specification_with(dialect if isinstance(dialect, str) else "", default=DRAFT202012)
    try:
        _walk(schema, registry, spec)
    except SchemaRefused as exc:
        return exc
    return cls(schema, registry=registry)


def errors(validator: Any, value: Any) -> str | None:
    """Why ``value`` does not validate, in a sentence; None when it does.
    A value nested deeper than ``MAX_CHECK_DEPTH`` is not checked: the
    reason says so."""
    if jsoncodec.too_deep(value, MAX_CHECK_DEPTH):
        return f"nested deeper than {MAX_CHECK_DEPTH} levels: not checked against the schema"
    from referencing.exceptions import Unresolvable

    try:
        err = next(iter(validator.iter_errors(value)), None)
    except (Unresolvable, RecursionError) as exc:
        return f"not checked against the schema: {type(exc).__name__}"
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    msg = str(err.message)
    if len(msg) > 300:
        msg = msg[:300] + "…"
    return f"{msg} (at /{where})" if where else msg


def check(schema: Any) -> None:
    """``SchemaRefused`` unless ``schema`` can be run as it is."""
    if isinstance(schema, dict):
        compile_schema(schema)


__all__ = ["MAX_CHECK_DEPTH", "SchemaRefused", "check", "compile_schema", "errors"]
