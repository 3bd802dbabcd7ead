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
"""

from __future__ import annotations

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
