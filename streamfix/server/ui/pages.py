"""The operator page's views as HTML: pure functions from what the
routes gathered (``routes.py``) to ``Markup``. Everything shown goes
through ``html.tag``, which escapes every ``str``: model output,
recordings, names from the configuration. No key is ever passed here:
the configuration is shown through ``config_rows`` and ``upstream_rows``,
which say whether a key is set, never what it is."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import SETTINGS, ServerConfig, Setting, TenantConfig, UpstreamConfig
from ..metrics import SlowRead
from ..probe import CASES
from .activity import Sample
from .charts import repairs_chart
from .html import Markup, join, tag
from .probes import ProbeRun
from .recordings import Sides, Summary, fields_of

VIEWS = (
    ("models", "/ui", "Models"),
    ("recordings", "/ui/recordings", "Recordings"),
    ("unrecognised", "/ui/unrecognised", "Unrecognised markup"),
    ("shapes", "/ui/shapes", "Learned shapes"),
    ("config", "/ui/config", "Config"),
)

#: Settings never shown (credentials) or shown in their own tables.
HIDDEN_SETTINGS = frozenset({"api_keys", "tenants", "upstreams"})


def page(title: str, view: str, body: Markup, csrf: str | None, status_line: str = "") -> str:
    """A whole page: the head (our stylesheet and script only), the
    navigation, ``body``."""
    nav = tag(
        "nav",
        tag("span", "streamfix", class_="brand"),
        [
            tag("a", label, href=path, class_="here" if key == view else None)
            for key, path, label in VIEWS
        ],
        tag(
            "form",
            tag("input", type="hidden", name="csrf", value=csrf),
            tag("button", "Log out", type="submit"),
            method="post",
            action="/ui/logout",
            class_="logout",
        )
        if csrf is not None
        else None,
    )
    doc = tag(
        "html",
        tag(
            "head",
            tag("meta", charset="utf-8"),
            tag("meta", name="viewport", content="width=device-width, initial-scale=1"),
            tag("title", f"{title} · streamfix"),
            tag("link", rel="stylesheet", href="/ui/static/ui.css"),
            # ours: else the browser asks /favicon.ico, which the API answers 401
            tag("link", rel="icon", href="/ui/static/icon.svg", type="image/svg+xml"),
            tag("script", src="/ui/static/ui.js", defer=True),
        ),
        tag(
            "body",
            nav,
            tag(
                "main",
                tag("h1", title),
                tag("p", status_line, class_="status") if status_line else None,
                body,
            ),
        ),
        lang="en",
    )
    return "<!doctype html>\n" + doc


def login_page(message: str | None = None) -> str:
    form = tag(
        "form",
        tag("label", "The proxy's own API key (--api-key)", for_="key"),
        tag("input", type="password", name="key", id="key", autocomplete="off", required=True),
        tag("button", "Log in", type="submit"),
        method="post",
        action="/ui/login",
        class_="login",
    )
    body = join(
        [
            tag("p", message, class_="error") if message else None,
            form,
            tag(
                "p",
                "The key is sent once; the browser keeps a session cookie, never the key. "
                "Tenants' keys cannot open this page.",
                class_="muted",
            ),
        ]
    )
    return page("Log in", "", body, None)


def message_page(title: str, text: str) -> str:
    return page(title, "", tag("p", text), None)


# -- models ------------------------------------------------------------------


@dataclass
class ModelRow:
    """One row of the table in force, as the Models view shows it."""

    index: int
    label: str
    upstream: str
    kind: str
    weight: float
    state: str
    engine: str | None
    window: str
    reasoning: str
    dimensions: int | None
    resting: str
    requests: int
    errors: int
    p50: float | None
    p99: float | None
    minutes: list[dict[str, int]] = field(default_factory=list)
    probe: ProbeRun | None = None
    #: The model's slowest reads, slowest first (``metrics.SlowReads``).
    slow: list[SlowRead] = field(default_factory=list)


def read_at(reads: Sequence[SlowRead], p99: float | None) -> SlowRead | None:
    """The kept read the p99 stands for: the fastest of those at or above
    it (the p99 is estimated from buckets), else the slowest kept."""
    if not reads:
        return None
    above = [r for r in reads if p99 is not None and r.seconds >= p99]
    return min(above) if above else max(reads)


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.1f} ms"


def models_view(rows: Sequence[ModelRow], csrf: str | None, busy: bool) -> Markup:
    head = tag(
        "tr",
        [
            tag("th", h)
            for h in (
                "model",
                "upstream",
                "state",
                "engine",
                "window",
                "reasoning",
                "embedding size",
                "requests",
                "added latency p50 / p99",
                "repairs, last hour",
                "probe",
            )
        ],
    )
    body = []
    for r in rows:
        probe_cell = join(
            [
                tag(
                    "form",
                    tag("input", type="hidden", name="csrf", value=csrf),
                    tag("button", "Probe", type="submit", disabled=busy),
                    method="post",
                    action=f"/ui/probe/{r.index}",
                ),
                tag("a", _probe_state(r.probe), href=f"/ui/probe/{r.index}")
                if r.probe is not None
                else None,
            ]
        )
        body.append(
            tag(
                "tr",
                tag("td", tag("strong", r.label), tag("div", r.kind, class_="muted")),
                tag("td", r.upstream, tag("div", f"weight {r.weight:g}", class_="muted")),
                tag(
                    "td",
                    r.state,
                    tag("div", r.resting, class_="warn") if r.resting else None,
                    class_="state",
                ),
                tag("td", r.engine or "not recognised"),
                tag("td", r.window),
                tag("td", r.reasoning),
                tag("td", r.dimensions if r.dimensions is not None else "–"),
                tag(
                    "td",
                    r.requests,
                    tag("div", f"{r.errors} errors", class_="muted") if r.errors else None,
                    class_="num",
                ),
                tag("td", f"{_us(r.p50)} / ", _p99_link(r), class_="num"),
                tag("td", repairs_chart(r.minutes, r.label)),
                tag("td", probe_cell),
                data_row=r.index,
            )
        )
    note = tag(
        "p",
        "Requests and latency count since this process started; added latency is the time "
        "streamfix spends on each upstream read (the chain), by the route's model.",
        class_="muted",
    )
    return join([tag("table", tag("thead", head), tag("tbody", body), class_="models"), note])


def _p99_link(r: ModelRow) -> Markup | str:
    """The p99, linked to the model's slowest reads (the request ids)."""
    at = read_at(r.slow, r.p99)
    if at is None:
        return _us(r.p99)
    return tag(
        "a",
        _us(r.p99),
        href=f"/ui/slow/{r.index}",
        title=f"the read at the p99: request {at.request_id or '(none)'}",
        class_="p99",
    )


def slow_view(row: ModelRow) -> Markup:
    """A model's slowest reads with the requests they were in: a slow p99
    is findable (``X-Streamfix-Request-Id`` on the response, the proxy's
    log, a recording of the same time)."""
    if not row.slow:
        return tag("p", "No read of this model since this process started.")
    at = read_at(row.slow, row.p99)
    rows = [
        tag(
            "tr",
            tag("td", _us(r.seconds), class_="num"),
            tag("td", tag("code", r.request_id or "(outside a request)")),
            tag("td", _clock(r.at)),
            tag("td", "the p99" if r is at else ("above the p99" if at and r > at else "")),
            class_="at-p99" if r is at else None,
        )
        for r in row.slow
    ]
    return join(
        [
            tag(
                "p",
                f"Added latency of {row.label}: p50 {_us(row.p50)}, p99 {_us(row.p99)}. "
                f"The slowest {len(row.slow)} read(s) kept, one per request, slowest first; "
                "each response carries its request id as X-Streamfix-Request-Id (a client's "
                "own X-Request-Id is kept as the id).",
                class_="muted",
            ),
            _table(("time in streamfix", "request id", "when", ""), rows, "slow"),
        ]
    )


def limited_view(per_tenant: dict[str, dict[str, int]]) -> Markup:
    """Requests refused by the tenants' limits in the last hour (the
    fleet's, with ``--state``); nothing when there were none."""
    if not per_tenant:
        return join([])
    rows = [
        tag(
            "tr",
            tag("td", tenant),
            *(tag("td", counts.get(k, 0), class_="num") for k in LIMITS),
        )
        for tenant, counts in per_tenant.items()
    ]
    return join(
        [
            tag("h2", "Refused by limits, last hour"),
            _table(["tenant", *LIMITS], rows, "limited"),
        ]
    )


#: The limits a refusal names (``streamfix_limited_total``'s ``limit``).
LIMITS = ("requests", "tokens", "concurrency", "state")


def _table(headers: Sequence[str], rows: Sequence[Markup], class_: str) -> Markup:
    """A table with one header row of plain titles and ``rows``."""
    head = tag("thead", tag("tr", [tag("th", h) for h in headers]))
    return tag("table", head, tag("tbody", rows), class_=class_)


def _probe_state(run: ProbeRun) -> str:
    if run.running:
        return "probing…"
    if run.error:
        return "probe failed"
    return "last probe"


# -- probe -------------------------------------------------------------------


def probe_view(
    row: ModelRow, run: ProbeRun | None, csrf: str | None, busy: bool, clean: Any
) -> Markup:
    start = tag(
        "form",
        tag("input", type="hidden", name="csrf", value=csrf),
        tag("button", "Probe again" if run else "Probe", type="submit", disabled=busy),
        method="post",
        action=f"/ui/probe/{row.index}",
    )
    if run is None:
        return join([tag("p", "Not probed from this page yet."), start])
    if run.running:
        return join(
            [
                tag(
                    "p",
                    f"Probing since {_clock(run.started)}: {2 * len(CASES)} short requests, "
                    "one at a time…",
                    class_="running",
                    data_refresh="2",
                ),
            ]
        )
    if run.error or run.result is None:
        return join([tag("p", clean(run.error or "no result"), class_="error"), start])
    res = run.result
    head = tag(
        "tr", [tag("th", h) for h in ("request", "mode", "the backend did", "behind streamfix")]
    )
    body = []
    from ..probe import cells

    for title, mode, did, behind in cells(res):
        body.append(
            tag(
                "tr",
                tag("td", title),
                tag("td", mode),
                tag("td", clean(did)),
                tag("td", clean(behind)),
            )
        )
    from ..probe import verdict

    return join(
        [
            tag(
                "p",
                f"model {res.model or '?'} · engine {res.engine or 'not recognised'} · "
                f"window {res.window or 'not found'} · {res.seconds:.0f} s · "
                f"finished {_clock(run.ended or run.started)}",
            ),
            tag("table", tag("thead", head), tag("tbody", body), class_="probe"),
            tag("p", clean(verdict(res)), class_="verdict"),
            start,
        ]
    )


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


# -- recordings --------------------------------------------------------------


def recordings_view(
    shown: Sequence[Summary],
    every: Sequence[Summary],
    chosen: dict[str, str | None],
    reasons: Iterable[str],
    enabled: bool,
) -> Markup:
    if not enabled:
        return tag(
            "p",
            "Recordings are off: start streamfix serve with --record DIR to keep the replies "
            "that needed a repair.",
        )
    options = {
        "model": sorted({s.model for s in every}),
        "tenant": sorted({s.tenant for s in every}),
        "reason": list(reasons),
    }
    selects = []
    for name, values in options.items():
        selects.append(
            tag(
                "label",
                name,
                " ",
                tag(
                    "select",
                    tag("option", "any", value=""),
                    [tag("option", v, value=v, selected=v == chosen.get(name)) for v in values],
                    name=name,
                    class_="autosubmit",
                ),
            )
        )
    form = tag(
        "form",
        selects,
        tag("button", "Filter", type="submit"),
        method="get",
        action="/ui/recordings",
        class_="filters",
    )
    rows = [
        tag(
            "tr",
            tag("td", tag("a", s.at or s.name, href=f"/ui/recordings/{s.name}")),
            tag("td", s.model),
            tag("td", s.tenant),
            tag("td", s.reasons_words()),
            tag("td", s.path),
            tag("td", s.status if s.status is not None else "–", class_="num"),
        )
        for s in shown
    ]
    table = _table(("recorded", "model", "tenant", "reasons", "path", "status"), rows, "recordings")
    count = tag(
        "p",
        f"{len(shown)} shown of {len(every)} recording(s), newest first",
        class_="muted",
    )
    return join([form, count, table if shown else tag("p", "No recording matches.")])


def _cell(value: str | None) -> Markup:
    """One side's field: the text as it is, or a muted word for nothing
    (not text a reply could have held)."""
    if value is None:
        return tag("span", "(not available)", class_="empty")
    if value == "":
        return tag("span", "(none)", class_="empty")
    return tag("pre", value)


def recording_view(s: Sides) -> Markup:
    sm = s.summary
    facts = tag(
        "dl",
        [
            join([tag("dt", k), tag("dd", v)])
            for k, v in (
                ("recorded", sm.at),
                ("model", sm.model),
                ("tenant", sm.tenant),
                ("reasons", sm.reasons_words()),
                ("path", sm.path),
                ("status", str(sm.status)),
                ("upstream attempts", str(s.attempts)),
                ("today's chain", s.outcome.verdict),
            )
        ],
        class_="facts",
    )
    up, then, now = fields_of(s.upstream), fields_of(s.then), fields_of(s.now)
    names = ("content", "reasoning", "tool calls", "finish reason", "errors")
    rows = []
    for name in names:
        a, b, c = up.get(name), then.get(name), now.get(name)
        repaired = a is not None and b is not None and a != b
        changed = b is not None and c is not None and b != c
        rows.append(
            tag(
                "tr",
                tag("th", name),
                tag("td", _cell(a), class_="side upstream"),
                tag(
                    "td",
                    _cell(b),
                    tag("span", "repaired", class_="badge") if repaired else None,
                    class_="side client" + (" diff" if repaired else ""),
                ),
                tag(
                    "td",
                    _cell(c),
                    tag("span", "differs today", class_="badge") if changed else None,
                    class_="side now" + (" changed" if changed else ""),
                ),
                data_field=name,
            )
        )
    table = _table(
        ("", "the upstream sent", "the client got", "today's chain (replay)"), rows, "sides"
    )
    return join(
        [
            facts,
            tag("ul", [tag("li", n) for n in s.notes], class_="notes") if s.notes else None,
            tag(
                "p",
                "Marked: 'repaired' where the client got other than the upstream sent; "
                "'differs today' where today's chain gives other than the client got then.",
                class_="muted",
            ),
            table,
            tag(
                "details",
                tag("summary", "the upstream's raw reply (the last attempt's bytes)"),
                tag("pre", s.raw, class_="raw"),
            ),
            tag(
                "details",
                tag("summary", "the client's request"),
                tag("pre", s.request, class_="raw"),
            ),
        ]
    )


# -- unrecognised markup -----------------------------------------------------


def unrecognised_view(per_model: dict[str, int], samples: Sequence[Sample]) -> Markup:
    counts = _table(
        ("model", "unrecognised regions"),
        [
            tag("tr", tag("td", m), tag("td", n, class_="num"))
            for m, n in sorted(per_model.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "counts",
    )
    items = [
        tag(
            "li",
            tag("div", f"{_clock(s.at)} · {s.model}", class_="muted"),
            tag("pre", s.text, class_="sample"),
        )
        for s in samples
    ]
    if not per_model:
        return tag(
            "p",
            "No unrecognised markup since this process started: every call-like region "
            "matched a known shape.",
        )
    return join(
        [
            tag(
                "p",
                "Markup that looked like a call and matched no known shape: the next shape to "
                "teach (docs/extending.md). Newest first; counts since this process started.",
                class_="muted",
            ),
            counts,
            tag("ol", items, class_="samples"),
        ]
    )


# -- config ------------------------------------------------------------------


#: What a setting's 0 means, as its help says it (``0 = no limit (default 0)``).
_ZERO_MEANS = re.compile(r"\b0 = ([^(;]+?) \(default")

_SETTING: dict[str, Setting] = {s.name: s for s in SETTINGS}


def size_words(n: int) -> str:
    """A byte count as a person reads it: ``8388608`` is ``8 MiB``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} bytes"


def setting_words(name: str, value: object) -> str:
    """A setting's value in plain words: ``None`` is "not set", a 0 says
    what its help says it means ("no limit"), a byte count is in KiB/MiB,
    a flag is on or off."""
    setting = _SETTING.get(name)
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, int | float) and setting is not None:
        zero = _ZERO_MEANS.search(setting.help)
        if value == 0 and zero:
            return zero.group(1)
        if setting.metavar == "BYTES" and isinstance(value, int):
            return size_words(value)
        if setting.metavar == "SECONDS":
            return f"{value:g} s"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def config_rows(cfg: ServerConfig, own_keys: int) -> list[tuple[str, str]]:
    """Every setting but the credentials and the tables, in plain words
    (``setting_words``; the number of the proxy's own keys in force, not
    the keys)."""
    out = []
    for f in dataclasses.fields(cfg):
        if f.name in HIDDEN_SETTINGS:
            continue
        out.append((f.name, setting_words(f.name, getattr(cfg, f.name))))
    out.append(("api_keys", f"{own_keys} key(s) set"))
    return out


def upstream_rows(upstreams: Iterable[UpstreamConfig]) -> list[list[str]]:
    """The rows in force, each key said to be set or not."""
    return [
        [
            u.name,
            u.model or "(any: catch-all)",
            u.served or "–",
            u.kind,
            f"{u.weight:g}",
            str(u.window or "probed"),
            "yes" if u.reasoning else "no",
            "set" if u.api_key else ("in URL" if u.has_credentials else "none"),
            ", ".join(u.transforms) or "–",
        ]
        for u in upstreams
    ]


def config_view(
    cfg: ServerConfig,
    upstreams: Sequence[UpstreamConfig],
    tenants: Sequence[TenantConfig],
    own_keys: int,
    csrf: str | None,
    reloadable: bool,
) -> Markup:
    """The table in force (its rows and tenants: a reload changes them)
    and the other settings (as started: they take a restart)."""
    settings = tag(
        "table",
        tag(
            "tbody",
            [tag("tr", tag("th", k), tag("td", v)) for k, v in config_rows(cfg, own_keys)],
        ),
        class_="settings",
    )
    ups = _table(
        ("url", "model", "name", "kind", "weight", "window", "reasoning", "api key", "steps"),
        [tag("tr", [tag("td", c) for c in row]) for row in upstream_rows(upstreams)],
        "upstreams",
    )
    tenant_table = _table(
        ("tenant", "models", "keys"),
        [
            tag(
                "tr",
                tag("td", t.name),
                tag("td", ", ".join(t.models)),
                tag("td", f"{len(t.api_keys)} set"),
            )
            for t in tenants
        ],
        "tenants",
    )
    reload_form = tag(
        "form",
        tag("input", type="hidden", name="csrf", value=csrf),
        tag("button", "Reload the configuration", type="submit", disabled=not reloadable),
        tag(
            "span",
            " as SIGHUP does: upstreams, tenants and keys change for new requests; "
            "streams in flight finish on the old table."
            if reloadable
            else " this proxy was not started from a configuration source (streamfix serve).",
            class_="muted",
        ),
        method="post",
        action="/ui/reload",
        class_="reload",
    )
    return join(
        [
            reload_form,
            tag("h2", "Upstreams"),
            ups,
            tag("h2", "Tenants"),
            tenant_table if tenants else tag("p", "none", class_="muted"),
            tag("h2", "Settings"),
            settings,
        ]
    )
