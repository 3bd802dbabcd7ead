"""Choosing an upstream: the routing table, one generation of the rows and
tenants.

A request's ``model`` picks its rows: the rows whose public name it is
(``UpstreamConfig.served``), or, for a name not in the table, the
catch-all rows (those with no ``model``, the one-upstream setup). A name
of another kind (an embedding model asked for a chat completion) is a 404
that says what the model is and which endpoint serves it. Within
those rows the choice is by weight with failover (``pool.send``);
never across models. A tenant's key reaches only the public names the
tenant lists; a name it may not use gets the very 404 an unknown name
gets, so an error never tells one tenant what another has.

The table is built whole from a ``ServerConfig`` and never changed: a
reload (SIGHUP) builds a new one and swaps ``Proxy.table``; each request
takes the table in force when it arrives (its ``Scope``) and keeps it to
its end, so streams in flight finish on the rows they started with. What
was probed or learned of a backend (``UpstreamConfig.identity``) carries
over to the new table: the probe, and per served model its window, token
scale and reasoning (``pool.Learned``), except that a window the new
configuration sets wins over the learned ones, which are dropped.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web

from ...errors import RequestError
from ..config import ServerConfig, TenantConfig, check_keys
from .pool import Upstream, UpstreamPool
from .secrets import Secrets

#: OpenAI's own wording for a model a key cannot use, existing or not.
NOT_FOUND: Final = "The model '{model}' does not exist or you do not have access to it."

#: The metrics' label for a request without a tenant, and for the model of
#: a request served by a catch-all row (any name: not a bounded label).
NO_TENANT: Final = "-"
ANY_MODEL: Final = "*"

#: The shortest upstream secret redacted from replies: a 1-3 character
#: "key" would garble bodies.
MIN_SECRET: Final = 4


@dataclass(frozen=True, slots=True)
class Route:
    """Where one request goes: the eligible rows, and the model's label."""

    rows: list[Upstream]
    model: str  # the public name, or ANY_MODEL for a catch-all row


def model_not_found(model: str) -> RequestError:
    return RequestError(
        NOT_FOUND.format(model=model), 404, "model", "model_not_found", "invalid_request_error"
    )


#: Each kind's endpoint, for the error that names the right one.
ENDPOINTS: Final = {"chat": "POST /v1/chat/completions", "embedding": "POST /v1/embeddings"}


def wrong_kind(model: str, is_kind: str, asked_kind: str) -> RequestError:
    """A model asked for on another kind's endpoint (only a name the
    caller may use gets here: a tenant's other names are not found)."""
    where = ENDPOINTS.get(is_kind, f"a {is_kind} endpoint")
    return RequestError(
        f"The model '{model}' is {_a(is_kind)} model, not {_a(asked_kind)} model: use {where}.",
        404,
        "model",
        "model_not_found",
        "invalid_request_error",
    )


def _a(kind: str) -> str:
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


class Table:
    """The rows by kind and public name, the tenants and inbound keys, and
    the upstream secrets to keep out of replies."""

    __slots__ = (
        "catch_all",
        "keys",
        "named",
        "pool",
        "protect_status",
        "redact",
        "secrets",
        "upstreams",
    )

    def __init__(self, cfg: ServerConfig, previous: Table | None = None) -> None:
        if not cfg.upstreams:
            raise ValueError("at least one upstream is needed")
        check_keys(cfg)  # however the config was made: no empty key opens a door
        old: dict[tuple[str, str | None, str], Upstream] = {}
        if previous is not None:
            old = {u.cfg.identity: u for u in previous.upstreams}
        self.upstreams: list[Upstream] = [Upstream(c, old.get(c.identity)) for c in cfg.upstreams]
        for n, up in enumerate(self.upstreams, 1):
            up.label = up.cfg.served or f"upstream {n}"
        self.pool = UpstreamPool(self.upstreams, rest=cfg.rest)
        self.named: dict[tuple[str, str], list[Upstream]] = {}
        self.catch_all: dict[str, list[Upstream]] = {}
        for up in self.upstreams:
            served = up.cfg.served
            if served is None:
                self.catch_all.setdefault(up.cfg.kind, []).append(up)
            else:
                self.named.setdefault((up.cfg.kind, served), []).append(up)
        #: Every inbound key with its tenant (None: the proxy's own keys,
        #: which reach every model).
        self.keys: list[tuple[bytes, TenantConfig | None]] = [
            (k.encode(), None) for k in cfg.api_keys
        ] + [(k.encode(), t) for t in cfg.tenants for k in t.api_keys]
        self.protect_status = cfg.protect_status
        self.secrets = [
            secret.encode()
            for u in cfg.upstreams
            for secret in (u.api_key, urlsplit(u.url).password)
            if secret and len(secret) >= MIN_SECRET
        ]
        #: ``redact(body)``: ``body`` without any configured upstream key (or
        #: URL password), plain or escaped (``secrets.Secrets``): some
        #: upstreams echo the key they were sent ("Incorrect API key
        #: provided: sk-…"), in an HTTP error body, an error event inside a
        #: stream or a header, and what they say is relayed to clients.
        self.redact = Secrets(self.secrets)

    # -- keys --------------------------------------------------------------

    def authenticate(self, token: bytes) -> tuple[bool, TenantConfig | None]:
        """Whether ``token`` is a key of this proxy, and whose. Every key
        is compared (no early exit: the time does not tell which matched).
        An empty token (no key sent) is never a key, whatever the table."""
        ok, tenant = False, None
        for key, owner in self.keys:
            if hmac.compare_digest(token, key) and token:
                ok, tenant = True, owner
        return ok, tenant

    # -- models ------------------------------------------------------------

    @property
    def has_names(self) -> bool:
        """Whether any row has a public name (then ``/v1/models`` lists the
        table instead of asking an upstream)."""
        return bool(self.named)

    def route(self, kind: str, model: Any, tenant: TenantConfig | None) -> Route:
        """The rows for a ``kind`` request naming ``model``; RequestError
        (404 ``model_not_found``) when there are none this key may use."""
        if not isinstance(model, str) or not model:
            if self.catch_all.get(kind) and (tenant is None or "*" in tenant.models):
                return Route(self.catch_all[kind], ANY_MODEL)
            raise RequestError("'model' must name a model (GET /v1/models)", param="model")
        if tenant is not None and not tenant.allows(model):
            raise model_not_found(model)
        rows = self.named.get((kind, model))
        if rows:
            return Route(rows, model)
        other = self._named_elsewhere(kind, model)
        if other is not None:
            raise wrong_kind(model, other, kind)
        rows = self.catch_all.get(kind)
        if rows:
            return Route(rows, ANY_MODEL)
        raise model_not_found(model)

    def _named_elsewhere(self, kind: str, model: str) -> str | None:
        """The kind of a public name of another kind: an embedding model
        asked for a chat completion is not the catch-all chat rows'
        business, and the caller is told what it is."""
        return next((k for k, name in self.named if k != kind and name == model), None)

    def visible(self, tenant: TenantConfig | None) -> list[tuple[str, str, list[Upstream]]]:
        """The public names this key may use: (name, kind, rows), in the
        order the table declares them."""
        return [
            (name, kind, rows)
            for (kind, name), rows in self.named.items()
            if tenant is None or tenant.allows(name)
        ]


TABLE: Final = web.RequestKey("streamfix_table", Table)
TENANT: Final = web.RequestKey("streamfix_tenant", TenantConfig)


def tenant_of(request: web.Request) -> TenantConfig | None:
    """The tenant whose key the request came with (None: the proxy's own
    key, or no keys configured)."""
    return request.get(TENANT)


def tenant_label(request: web.Request) -> str:
    t = request.get(TENANT)
    return t.name if t is not None else NO_TENANT
