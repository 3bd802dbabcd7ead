"""streamfix: repair OpenAI-style chat streams from small open models.

Three entry points, one chain:

- ``fix_sse(source, request=None, **options)``: raw SSE bytes in (any
  chunking), repaired SSE bytes out.
- ``fix_chunks(source, request=None, **options)``: decoded
  ``chat.completion.chunk`` dicts in and out.
- ``fix_completion(completion, request=None, **options)``: one non-streamed
  ``chat.completion`` dict in, the repaired dict out.

``request`` is the body the client sent: its ``tools`` decide what may be
lifted (no tools, nothing is rewritten). ``options`` are the fields of
``streamfix.context.Options``; ``transforms=[factory, …]`` adds your own
steps (a ``Transform`` made per choice from the request's ``Context``; see
docs/extending.md). The sans-I/O classes underneath (``SSESession``,
``Chain``) are public too, for mounts that need the ``Report`` of what was
repaired. ``streamfix.formats.register`` teaches the chain a call shape;
``streamfix.testing`` holds the property checks for plugin authors.

The names are imported on first use (``__getattr__``): ``import
streamfix`` itself loads nothing, so that the ``streamfix`` command can
hold its signals before the chain's modules (a few hundred milliseconds
of imports) are loaded (``tools/cli.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import fix_chunks, fix_completion, fix_sse
    from .chain import Chain
    from .context import Context, Options, Report
    from .delta import Delta, ToolCall, Transform
    from .errors import (
        PluginError,
        RequestError,
        StreamfixError,
        TransformError,
        UpstreamProtocolError,
    )
    from .session import SSESession

__version__ = "0.1.0"

__all__ = [
    "Chain",
    "Context",
    "Delta",
    "Options",
    "PluginError",
    "Report",
    "RequestError",
    "SSESession",
    "StreamfixError",
    "ToolCall",
    "Transform",
    "TransformError",
    "UpstreamProtocolError",
    "__version__",
    "fix_chunks",
    "fix_completion",
    "fix_sse",
]

#: Where each public name lives.
_HOMES = {
    "fix_chunks": ".api",
    "fix_completion": ".api",
    "fix_sse": ".api",
    "Chain": ".chain",
    "Context": ".context",
    "Options": ".context",
    "Report": ".context",
    "Delta": ".delta",
    "ToolCall": ".delta",
    "Transform": ".delta",
    "PluginError": ".errors",
    "TransformError": ".errors",
    "RequestError": ".errors",
    "StreamfixError": ".errors",
    "UpstreamProtocolError": ".errors",
    "SSESession": ".session",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streamfix' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
