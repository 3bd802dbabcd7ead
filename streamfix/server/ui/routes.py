"""The operator page's routes (``streamfix serve --ui``), wired by
``add_ui`` into the proxy's app (``server/app.py``).

``GET /ui`` (models), ``/ui/recordings`` (``?model=&tenant=&reason=``),
``/ui/recordings/{name}``, ``/ui/unrecognised``, ``/ui/shapes`` (learned
shapes, ``learned.py``), ``/ui/config``,
``/ui/probe/{row}``, ``/ui/slow/{row}`` (a model's slowest reads and their
requests); ``POST /ui/login``, ``/ui/logout``, ``/ui/reload``, ``/ui/shapes/add``,
``/ui/probe/{row}``; ``GET /ui/static/ui.css|ui.js`` (package data, the
only script and style the page's CSP allows). Who may see what and how a
browser logs in: ``auth.py``. The proxy's key check (``caller.guards.auth_mw``)
leaves ``/ui`` paths to this module.

What the views read is the proxy's own state, never an upstream: the
table in force, what was probed and learned of each row, the metrics
(requests by model, the per-model chunk histograms), the last hour kept by
``activity.Activity``; recordings and replay are read in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from aiohttp import web

from ...errors import PluginError
from ...shapes import add_to_file, use_shapes
from ..config import RECORD_REASONS, TenantConfig
from ..learn import learn
from ..proxy import PROXY, Proxy
from ..upstream.pool import Upstream
from ..upstream.table import ANY_MODEL, TABLE
from . import auth, pages
from .html import Markup, join, tag
from .learned import learned_view
from .pages import ModelRow
from .probes import Probes
from .recordings import NAME, Index, sides

if TYPE_CHECKING:
    from ..state.sessions import RedisSessionStore

#: Paths the page owns (``caller.guards.auth_mw`` leaves them to ``auth``).
PREFIX: Final = "/ui"

STATIC: Final = {
    "ui.css": "text/css",
    "ui.js": "text/javascript",
    "icon.svg": "image/svg+xml",
}

#: What a redirect after an action may say (fixed texts: nothing from the
#: query string is shown).
DONE: Final = {
    "reloaded": "Reloaded: the new table serves new requests.",
    "refused": "Reload refused: the configuration did not load; the old table stays "
    "(see the proxy's log).",
    "busy": "A probe is already running; wait for it to end.",
    "added": "Shape added to the shapes file and reloaded: it lifts calls in new replies.",
    "not_added": "Shape not added: it is no longer offered, or the shapes file or the reload "
    "refused it (see the proxy's log).",
}


class Ui:
    """The page's state in one app."""

    shared_sessions: RedisSessionStore | None = None

    def __init__(self, proxy: Proxy) -> None:
        store: auth.SessionStore
        if proxy.cfg.state:  # every replica's logouts (state/sessions.py)
            from ..state.sessions import RedisSessionStore

            store = self.shared_sessions = RedisSessionStore(
                proxy.cfg.state, proxy.cfg.state_prefix
            )
        else:
            store = auth.FileSessionStore(auth.state_dir(proxy.cfg.state_dir) / auth.SESSIONS_FILE)
        self.sessions = auth.Sessions(store)
        self.throttle = auth.LoginThrottle()
        self.probes = Probes()
        self.index = Index(proxy.cfg.record) if proxy.cfg.record else None
        self.static = {
            name: (resources.files(__package__).joinpath("static", name).read_bytes(), ctype)
            for name, ctype in STATIC.items()
        }


UI: Final = web.AppKey("streamfix_ui", Ui)

Handler = Callable[[web.Request, auth.Session], Awaitable[web.StreamResponse]]


R = TypeVar("R", bound=web.StreamResponse)

log = logging.getLogger("streamfix.ui")


def _secured(resp: R) -> R:
    for k, v in auth.HEADERS.items():
        resp.headers[k] = v
    return resp


def html(text: str, status: int = 200) -> web.Response:
    return _secured(web.Response(text=text, status=status, content_type="text/html"))


def see_other(location: str) -> web.Response:
    return _secured(web.Response(status=303, headers={"Location": location}))


def guarded(
    handler: Handler, post: bool = False
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler`` for the proxy's own keys only (``auth.who``); a POST
    also needs the same origin and the session's CSRF token."""

    async def guard(request: web.Request) -> web.StreamResponse:
        ui = request.app[UI]
        source = auth.source_of(request)
        keyed = bool(auth.bearer(request))  # a script's key: a guess to slow
        if keyed and (wait := ui.throttle.begin(source)) is not None:
            return too_many(wait)
        status, session = auth.who(request, ui.sessions)
        if keyed:
            if status == 200:
                ui.throttle.succeeded(source)
            elif status == 401:
                await asyncio.sleep(ui.throttle.delay(source))
        if status == 403 or session is None:
            if status == 403:
                return html(
                    pages.message_page(
                        "Not for tenants", "This page needs one of the proxy's own keys."
                    ),
                    403,
                )
            return html(pages.login_page(), 401)
        if post:
            form = await request.post()
            if not auth.same_origin(request) or not auth.csrf_ok(session, form.get("csrf")):
                return html(
                    pages.message_page(
                        "Refused", "The form's CSRF token is missing or wrong: reload the page."
                    ),
                    403,
                )
        return _secured(await handler(request, session))

    return guard


# -- login -------------------------------------------------------------------


async def login_form(request: web.Request) -> web.StreamResponse:
    status, _ = auth.who(request, request.app[UI].sessions)
    if status == 200:
        return see_other(PREFIX)
    return html(pages.login_page())


def too_many(wait: int) -> web.Response:
    """The answer to a source past its failed logins (``auth.LoginThrottle``)."""
    resp = html(
        pages.message_page("Too many attempts", "Too many failed logins: try again later."), 429
    )
    resp.headers["Retry-After"] = str(wait)
    return resp


async def login(request: web.Request) -> web.StreamResponse:
    if not auth.same_origin(request):
        return html(pages.message_page("Refused", "A login from another site."), 403)
    throttle, source = request.app[UI].throttle, auth.source_of(request)
    if (wait := throttle.begin(source)) is not None:
        return too_many(wait)
    form = await request.post()
    key = form.get("key")
    token = key.strip().encode() if isinstance(key, str) else b""
    ok, tenant = request[TABLE].authenticate(token)
    if not ok:
        await asyncio.sleep(throttle.delay(source))  # others are served meanwhile
        return html(pages.login_page("That is not one of the proxy's keys."), 401)
    if tenant is not None:
        return html(
            pages.message_page("Not for tenants", "This page needs one of the proxy's own keys."),
            403,
        )
    throttle.succeeded(source)
    resp = see_other(PREFIX)
    auth.set_cookie(resp, request, request.app[UI].sessions.issue(token))
    return resp


async def logout(request: web.Request, session: auth.Session) -> web.StreamResponse:
    request.app[UI].sessions.revoke(session)
    resp = see_other(PREFIX + "/login")
    auth.clear_cookie(resp)
    return resp


# -- views -------------------------------------------------------------------


def _status_line(request: web.Request) -> str:
    proxy = request.app[PROXY]
    done = DONE.get(request.query.get("done", ""), "")
    if proxy.cfg.workers > 1:
        where = f"Worker {os.getpid()} of {proxy.cfg.workers}: counts are this process's."
        return f"{done} {where}".strip()
    return done


def _requests_by_model(proxy: Proxy) -> dict[str, tuple[int, int]]:
    """(answered, of which errors) per model label, from the counter."""
    out: dict[str, tuple[int, int]] = {}
    for family in proxy.metrics.requests.collect():
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            model = sample.labels["model"]
            total, errors = out.get(model, (0, 0))
            status = sample.labels["status"]
            bad = int(sample.value) if status.isdigit() and int(status) >= 400 else 0
            out[model] = (total + int(sample.value), errors + bad)
    return out


def _label(up: Upstream) -> str:
    return up.cfg.served or ANY_MODEL


def model_rows(proxy: Proxy, ui: Ui) -> list[ModelRow]:
    table = proxy.table
    now = time.monotonic()
    requests = _requests_by_model(proxy)
    ui.probes.keep({u.cfg.identity for u in table.upstreams})
    rows = []
    for i, up in enumerate(table.upstreams):
        label = _label(up)
        learned = {m: f for m, f in up.learned.items()}
        windows = [f"{m}: {f.window}" for m, f in learned.items() if f.window]
        window = str(up.window or "unknown")
        if windows:
            window += " (learned " + ", ".join(windows) + ")"
        why = []
        if up.cfg.reasoning:
            why.append("configured")
        elif up.info.reasoning:
            why.append("probed")
        seen = sorted(m for m, f in learned.items() if f.reasoning)
        if seen:
            why.append("seen: " + ", ".join(seen))
        check = proxy.check_of(up)
        state = check.state + (f": {check.problem}" if check.problem else "")
        resting = ""
        if up.resting(now):
            resting = f"resting {up.rested_until - now:.0f} s more after {up.failures} failure(s)"
        hist = proxy.metrics.chunk_seconds.models.get(label)
        total, errors = requests.get(label, (0, 0))
        rows.append(
            ModelRow(
                index=i,
                label=label,
                upstream=up.name,
                kind=up.cfg.kind,
                weight=up.cfg.weight,
                state=state,
                engine=up.info.engine,
                window=window,
                reasoning=", ".join(why) or "no",
                dimensions=up.dimensions,
                resting=resting,
                requests=total,
                errors=errors,
                p50=hist.quantile(0.5) if hist else None,
                p99=hist.quantile(0.99) if hist else None,
                minutes=proxy.activity.last_hour(label) if proxy.activity else [],
                probe=ui.probes.runs.get(up.cfg.identity),
                slow=hist.slow.slowest() if hist and hist.slow else [],
            )
        )
    return rows


async def models_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    proxy, ui = request.app[PROXY], request.app[UI]
    body = pages.models_view(model_rows(proxy, ui), session.csrf, ui.probes.busy)
    if proxy.activity is not None:
        body = join([body, pages.limited_view(proxy.activity.limited_last_hour())])
    return html(pages.page("Models", "models", body, session.csrf, _status_line(request)))


async def recordings_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    ui = request.app[UI]
    chosen = {k: request.query.get(k) or None for k in ("model", "tenant", "reason")}
    if ui.index is None:
        body = pages.recordings_view([], [], chosen, RECORD_REASONS, enabled=False)
    else:
        shown, every = await asyncio.to_thread(
            ui.index.listed, chosen["model"], chosen["tenant"], chosen["reason"]
        )
        body = pages.recordings_view(shown, every, chosen, RECORD_REASONS, enabled=True)
    return html(pages.page("Recordings", "recordings", body, session.csrf, _status_line(request)))


async def recording_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    ui = request.app[UI]
    name = request.match_info["name"]
    found = None
    if ui.index is not None and NAME.match(name):
        found = await asyncio.to_thread(sides, ui.index, name)
    if found is None:
        body: Markup = tag("p", "No such recording (it may have been pruned).")
        return html(pages.page("Recording", "recordings", body, session.csrf), 404)
    body = pages.recording_view(found)
    return html(pages.page(f"Recording {name}", "recordings", body, session.csrf))


async def unrecognised_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    activity = request.app[PROXY].activity
    per_model = dict(activity.unrecognised) if activity else {}
    samples = list(activity.samples) if activity else []
    body = pages.unrecognised_view(per_model, samples)
    return html(
        pages.page("Unrecognised markup", "unrecognised", body, session.csrf, _status_line(request))
    )


async def config_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    proxy = request.app[PROXY]
    table = proxy.table
    tenants: dict[str, TenantConfig] = {}
    for _, tenant in table.keys:
        if tenant is not None:
            tenants.setdefault(tenant.name, tenant)
    body = pages.config_view(
        proxy.cfg,
        [u.cfg for u in table.upstreams],
        list(tenants.values()),
        len(auth.own_keys(table)),
        session.csrf,
        proxy.source is not None,
    )
    return html(pages.page("Config in force", "config", body, session.csrf, _status_line(request)))


async def shapes_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    cfg = request.app[PROXY].cfg
    found = await asyncio.to_thread(learn, Path(cfg.record)) if cfg.record else None
    body = learned_view(found, session.csrf, cfg.shapes, cfg.record is not None)
    return html(pages.page("Learned shapes", "shapes", body, session.csrf, _status_line(request)))


async def shape_add(request: web.Request, session: auth.Session) -> web.StreamResponse:
    """Learn again (the recordings may have changed since the page was
    shown), append the shape named to the ``--shapes`` file, reload."""
    proxy = request.app[PROXY]
    wanted = (await request.post()).get("shape")
    cfg = proxy.cfg

    def add() -> bool:
        if not (cfg.record and cfg.shapes):
            return False
        found = learn(Path(cfg.record))
        pick = next((x for x in found if x.shape.id == wanted and x.rejected is None), None)
        if pick is None:
            return False
        try:
            add_to_file(cfg.shapes, pick.toml)
            if proxy.source is None:
                use_shapes(cfg.shapes)
                return True
        except PluginError as exc:
            log.warning("shape %s not added: %s", wanted, exc)
            return False
        return proxy.reload()

    ok = await asyncio.to_thread(add)
    return see_other(PREFIX + "/shapes?done=" + ("added" if ok else "not_added"))


async def reload(request: web.Request, session: auth.Session) -> web.StreamResponse:
    """The same as SIGHUP (``Proxy.reload``), run in a thread: it reads
    the configuration file."""
    ok = await asyncio.to_thread(request.app[PROXY].reload)
    return see_other(PREFIX + "/config?done=" + ("reloaded" if ok else "refused"))


def _row(request: web.Request) -> tuple[int, Upstream] | None:
    raw = request.match_info["row"]
    ups = request.app[PROXY].table.upstreams
    if not raw.isdigit() or int(raw) >= len(ups):
        return None
    return int(raw), ups[int(raw)]


async def probe_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    proxy, ui = request.app[PROXY], request.app[UI]
    found = _row(request)
    if found is None:
        body: Markup = tag("p", "No such row in the table in force.")
        return html(pages.page("Probe", "models", body, session.csrf), 404)
    i, up = found
    row = model_rows(proxy, ui)[i]

    redact = request[TABLE].redact

    def clean(text: str) -> str:
        """What the backend said, as text, before it is escaped for the
        page: the URL as configured (it may hold a password) named, and
        any upstream key redacted (``&``, ``<`` or a quote in a key would
        not match once escaped)."""
        return redact.text(text.replace(up.cfg.url, up.name))

    run = ui.probes.runs.get(up.cfg.identity)
    body = pages.probe_view(row, run, session.csrf, ui.probes.busy, clean)
    title = f"Probe of {row.label} ({up.name})"
    return html(pages.page(title, "models", body, session.csrf, _status_line(request)))


async def slow_page(request: web.Request, session: auth.Session) -> web.StreamResponse:
    proxy, ui = request.app[PROXY], request.app[UI]
    found = _row(request)
    if found is None:
        body: Markup = tag("p", "No such row in the table in force.")
        return html(pages.page("Slowest reads", "models", body, session.csrf), 404)
    row = model_rows(proxy, ui)[found[0]]
    body = pages.slow_view(row)
    return html(pages.page(f"Slowest reads of {row.label}", "models", body, session.csrf))


async def probe_start(request: web.Request, session: auth.Session) -> web.StreamResponse:
    found = _row(request)
    if found is None:
        return see_other(PREFIX)
    i, up = found
    started = request.app[UI].probes.start(up)
    return see_other(f"{PREFIX}/probe/{i}" + ("" if started else "?done=busy"))


async def static(request: web.Request) -> web.StreamResponse:
    found = request.app[UI].static.get(request.match_info["name"])
    if found is None:
        return _secured(web.Response(status=404, text="not found"))
    data, ctype = found
    resp = web.Response(body=data, content_type=ctype)
    return _secured(resp)


def add_ui(app: web.Application, proxy: Proxy) -> None:
    """The page's routes and state on ``app`` (``--ui``)."""
    ui = app[UI] = Ui(proxy)
    app.cleanup_ctx.append(ui.probes.lifecycle)
    if ui.shared_sessions is not None:
        app.cleanup_ctx.append(ui.shared_sessions.lifecycle)
    r = app.router
    r.add_get(PREFIX, guarded(models_page))
    r.add_get(PREFIX + "/login", login_form)
    r.add_post(PREFIX + "/login", login)
    r.add_post(PREFIX + "/logout", guarded(logout, post=True))
    r.add_get(PREFIX + "/recordings", guarded(recordings_page))
    r.add_get(PREFIX + "/recordings/{name}", guarded(recording_page))
    r.add_get(PREFIX + "/unrecognised", guarded(unrecognised_page))
    r.add_get(PREFIX + "/config", guarded(config_page))
    r.add_post(PREFIX + "/reload", guarded(reload, post=True))
    r.add_get(PREFIX + "/shapes", guarded(shapes_page))
    r.add_post(PREFIX + "/shapes/add", guarded(shape_add, post=True))
    r.add_get(PREFIX + "/probe/{row}", guarded(probe_page))
    r.add_post(PREFIX + "/probe/{row}", guarded(probe_start, post=True))
    r.add_get(PREFIX + "/slow/{row}", guarded(slow_page))
    r.add_get(PREFIX + "/static/{name}", static)


def is_ui_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")
