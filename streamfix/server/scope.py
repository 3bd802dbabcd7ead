"""One request as the layers below its route see it.

A ``Scope`` is built once, when a request reaches its endpoint: the
proxy's state, the routing table the request started with (a reload
meanwhile does not change it), whose key it came with, how it is counted
(endpoint, tenant and model labels) and, once routed, the rows that may
serve it. It is made from the ``web.Request``, not from the body: what the
body asks (streamed or not, the model) comes as values (``route``,
``answer``'s client stream). It is what is passed down instead of the
``web.Request``, so that the exchange with an upstream (``exchange.py``)
reads one object and no layer looks things up on the request again.

``Scope.answer`` is where every endpoint's reply is finished (and where a
traced request's span starts and ends, ``tracing.py``): the
``--request-timeout`` bound (from the request's arrival, so the time its
body took counts), a failure to reach any upstream or to read a
reply turned into its error (a response before the stream began, an error
event after it), a client that went away, and the status counted once.

*Who hears what.* Errors name an upstream as ``Scope.shown`` says: a
tenant's request hears the row's public name (or ``upstream N``, its place
in the table, for a catch-all row), never a host, port or path of the
operator's network; the operator's own keys (and every caller when no key
is configured, who can read ``/healthz`` anyway) hear its URL, without
credentials. Upstream keys are redacted from everything a caller gets
(``Scope.redact``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from multidict import CIMultiDictProxy

from ..errors import RequestError, TransformError
from ..session import error_event
from .caller.replies import failure_response, json_error
from .caller.stream import ClientGone, ClientStream, ModelName
from .caller.validate import arrived
from .config import TenantConfig
from .proxy import PROXY, Proxy
from .upstream.pool import Upstream, UpstreamFailure
from .upstream.table import NO_TENANT, TABLE, TENANT, Table

if TYPE_CHECKING:
    from .state.fleet import Ticket
    from .tracing import RequestTrace

log = logging.getLogger("streamfix.proxy")


class Answered(Exception):
    """The request is answered now with ``response`` (an upstream that
    could not be read, an error to relay): raised from the depth where it
    is known, answered by ``Scope.answer``."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


@dataclass(slots=True)
class Scope:
    """What one request carries down the path (see the module doc)."""

    proxy: Proxy
    table: Table
    tenant: TenantConfig | None
    #: The caller's headers: what is forwarded upstream is chosen from them.
    headers: CIMultiDictProxy[str]
    endpoint: str
    #: The route's label for the metrics (``-`` until routed).
    model: str = NO_TENANT
    #: The rows that may serve the request, once routed.
    rows: list[Upstream] = field(default_factory=list)
    #: When the request arrived (the loop's clock): ``--request-timeout``
    #: counts from there, the body's reading included.
    arrived: float | None = None
    #: The model as the client named it: replies say this name
    #: (``caller.stream.ModelName``). None when it named none.
    asked: str | None = None
    #: The request's OpenTelemetry span (``tracing.py``): None when
    #: traces are off or the endpoint has none.
    trace: RequestTrace | None = None
    #: The request's place in its tenant's limits and what it tells the
    #: shared state as it ends (``state.fleet``); None: nothing.
    ticket: Ticket | None = None

    @classmethod
    def of(cls, request: web.Request, endpoint: str) -> Scope:
        proxy = request.app[PROXY]
        table = request.get(TABLE)
        tracer = proxy.tracer
        return cls(
            proxy,
            table if table is not None else proxy.table,
            request.get(TENANT),
            request.headers,
            endpoint,
            arrived=arrived(request),
            trace=tracer.request(endpoint) if tracer is not None else None,
        )

    @property
    def tenant_label(self) -> str:
        return self.tenant.name if self.tenant is not None else NO_TENANT

    @property
    def redact(self) -> Callable[[bytes], bytes] | None:
        """Upstream keys out of what reaches the caller (None: no keys)."""
        return self.table.redact if self.table.secrets else None

    def shown(self, up: Upstream) -> str:
        """What errors call ``up`` for this caller (module doc)."""
        return up.name if self.tenant is None else up.label

    def annotate(self, attributes: Mapping[str, Any]) -> None:
        """Attributes for the request's span (``streamfix.narrowing…``,
        say), whether it started yet or not; nothing when traces are off."""
        if self.trace is not None:
            self.trace.note(attributes)

    def count(self, status: int, stream: bool = False) -> None:
        self.proxy.count(self.endpoint, stream, status, self.tenant_label, self.model)

    def route(self, kind: str, model: Any, stream: bool = False) -> list[Upstream]:
        """The rows of the request's table for ``model`` (``Table.route``);
        a refusal (404 ``model_not_found``, 400 without a model) is counted
        (``stream``: the request asked for a stream) and raised."""
        try:
            route = self.table.route(kind, model, self.tenant)
        except RequestError as exc:
            self.count(exc.status, stream)
            raise
        self.model = route.model
        self.rows = route.rows
        self.asked = model if isinstance(model, str) and model else None
        return self.rows

    def client(self, request: web.Request, encoder: Any = None) -> ClientStream:
        """The caller's streamed response, redacted as the table says, in
        the model's name as the client asked (a fresh ``ModelName``: each
        learns its server's name)."""
        return ClientStream(
            request,
            encoder,
            self.redact,
            ModelName.of(self.asked),
            self.proxy.cfg.keepalive_interval,
        )

    def named(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A whole reply in the model's name as the client asked."""
        asked, model = self.asked, obj.get("model")
        if asked is None or not isinstance(model, str) or model == asked:
            return obj
        return {**obj, "model": asked}

    async def answer(
        self, run: Awaitable[web.StreamResponse], client: ClientStream | None = None
    ) -> web.StreamResponse:
        """What the endpoint answers: ``run`` within ``--request-timeout``,
        its status counted once (as streamed when ``client`` is given: a
        streamed request's stream to the caller). When the time runs out, no upstream could
        be reached, or a reply could not be used: an error response before
        the reply began, else the stream (``client``) ends with an error
        event. A streamed client that went away counts as 499 (nginx's
        "client closed request")."""
        limit = self.proxy.cfg.request_timeout
        if limit <= 0:
            deadline = asyncio.timeout(None)
        elif self.arrived is None:
            deadline = asyncio.timeout(limit)
        else:
            deadline = asyncio.timeout_at(self.arrived + limit)
        # A whole reply is counted once answered; a stream however it ends.
        streamed = client is not None
        status: int | None = 200 if streamed else None
        trace, error = self.trace, None
        if trace is not None:
            trace.start(
                self.asked or self.model, self.tenant_label, streamed, self.headers, self.arrived
            )
        try:
            try:
                async with deadline:
                    out = await run
            except TimeoutError:
                if not deadline.expired():
                    raise
                message = f"the request took longer than --request-timeout ({limit:g} s)"
                error = "request_timeout"
                out = await _error(
                    client,
                    json_error(504, message, "timeout", "request_timeout"),
                    error_event(message, "timeout", "request_timeout"),
                    quiet=True,
                )
            except UpstreamFailure as f:
                told = f.told(self.shown)
                error = f.kind
                out = await _error(
                    client,
                    failure_response(f, told, self.redact, f.attempts > 1),
                    error_event(told, "upstream_error", f.kind),
                )
            except TransformError as exc:  # a user step (--transform) raised
                log.error("%s", exc, exc_info=exc)
                error = "transform_error"
                out = await _error(
                    client,
                    json_error(500, str(exc), "transform_error", "transform_error"),
                    error_event(str(exc), "transform_error", "transform_error"),
                )
            except Answered as a:
                out = a.response
            status = out.status  # a 200 stream, or an error answered before it began
            return out
        except ClientGone:
            assert client is not None
            status = 499
            return client.resp or web.Response(status=499)
        except asyncio.CancelledError:
            if client is not None:
                status = 499
            raise
        finally:
            if status is not None:
                self.count(status, streamed)
            if trace is not None:
                trace.end(status, error)


async def _error(
    client: ClientStream | None, response: web.Response, event: bytes, quiet: bool = False
) -> web.StreamResponse:
    """``response`` when nothing was sent yet, else ``event`` ends the
    stream already begun (``quiet``: a client gone meanwhile is not news)."""
    if client is None or not client.prepared:
        return response
    try:
        await client.commit()
        await client.write(event)
    except ClientGone:
        if not quiet:
            raise
    return client.response
