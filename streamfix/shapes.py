"""A shapes file in effect: ``--shapes FILE.toml`` (``shapes = "…"`` in the
configuration), registered as one plugin and swapped whole on a reload.

``use_shapes(path)`` compiles the file's declared shapes
(``formats/declared.py``) and registers them, checked as any plugin is (the
static rules and the prose check); the file registered before is taken
back first and put back if the new one is refused, so a bad edit leaves the
running shapes as they were. ``use_shapes(None)`` takes them back. A file
that does not exist yet, or is empty, declares none (the page's "add to
config" and ``streamfix learn --write`` make it).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from . import plugins  # noqa: F401  (hands register its measured check)
from .formats import registry
from .formats.base import Plugin
from .formats.declared import compile_shapes, load_shapes

log = logging.getLogger("streamfix.shapes")
_lock = threading.Lock()
_current: list[Plugin] = []


def use_shapes(path: str | Path | None) -> Plugin | None:
    """Put the shapes of ``path`` in effect in place of the file's before
    (None: none). Raises ``PluginError`` (``ShapeError``: the file, the
    shape and the field) and keeps the shapes in effect before."""
    with _lock:
        old = _current[0] if _current else None
        new = None
        formats = []
        if path is not None:
            if Path(path).exists():
                formats = compile_shapes(load_shapes(path))  # raises before anything changes
            else:  # to be written (``streamfix learn --write``, the page's "add")
                log.warning("shapes file %s does not exist (yet): no declared shapes", path)
        if old is not None:
            registry.unregister(old)
        try:
            if formats:
                new = registry.register(*formats, name=f"shapes:{path}")
        except BaseException:
            if old is not None:
                registry.register(*old.FORMATS, name=old.name, check=False)
                _current[:] = [next(p for p in registry.registered() if p.name == old.name)]
            raise
        _current[:] = [new] if new is not None else []
        return new


def in_effect() -> Plugin | None:
    """The shapes file's plugin now registered, if any."""
    return _current[0] if _current else None


def add_to_file(path: str | Path, toml: str) -> None:
    """Append the ``[shapes.…]`` tables of ``toml`` to the shapes file at
    ``path`` (made if missing), once the whole reads as a shapes file
    (``ShapeError`` otherwise, and the file is left as it was). Written
    to a temporary file beside it, then renamed over it."""
    import os
    import tomllib

    from .formats.declared import ShapeError, shapes_of

    p = Path(path)
    old = p.read_text(encoding="utf-8") if p.exists() else ""
    new = old + ("\n" if old and not old.endswith("\n\n") else "") + toml
    try:
        data = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise ShapeError(f"{p}: would not be valid TOML: {exc}") from None
    shapes_of(data, str(p))
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, p)
