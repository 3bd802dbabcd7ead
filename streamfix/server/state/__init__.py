"""What outlives a request, shared by every process of a fleet.

Without ``--state`` everything stays in the process, as it always did
(``local.LocalStore``: the limits' counters; what was learned about the
rows lives on the ``Upstream`` objects themselves). With
``--state redis://HOST:PORT/DB`` (``STREAMFIX_STATE``, ``state = "…"`` in
TOML) the same things live in Redis (``shared.RedisStore``), under a
prefix (``--state-prefix``, default ``streamfix:``) and each with a TTL,
so that every replica and worker naming that store shares them:

- what was learned per row and served model (``pool.Learned``: a window
  from an overflow, reasoning, a refused ``json_schema``, the token
  scale), and which rows are resting after failures;
- the tenants' limits (``limits.py``: concurrency, requests and tokens
  per minute).

``fleet.Fleet`` is what the request path talks to: one call as a chat
request starts (``admit``) and one as it ends (``finish``), each at most
one pipelined round trip, never one per chunk; learned facts are cached
locally for ``CACHE_SECONDS``. When the store cannot be reached the
request goes on with what this process knows and its own limits
(``state_failure = "closed"`` refuses limited tenants instead), a
warning is logged once a minute and ``/readyz`` says ``degraded``.
"""

from __future__ import annotations

from .store import Admission, Limits, Store, StoreDown

__all__ = ["Admission", "Limits", "Store", "StoreDown"]
