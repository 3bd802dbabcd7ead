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
``streamfix.context.Options``. The sans-I/O classes underneath
(``SSESession``, ``Chain``) are public too, for mounts that need the
``Report`` of what was repaired.
"""

from __future__ import annotations

from .api import fix_chunks, fix_completion, fix_sse
from .chain import Chain
from .context import Context, Options, Report
from .errors import RequestError, StreamfixError, UpstreamProtocolError
from .session import SSESession

__version__ = "0.1.0"

__all__ = [
    "Chain",
    "Context",
    "Options",
    "Report",
    "RequestError",
    "SSESession",
    "StreamfixError",
    "UpstreamProtocolError",
    "__version__",
    "fix_chunks",
    "fix_completion",
    "fix_sse",
]
