"""The proxy's settings: one table of fields, four sources.

Each setting is declared once (``SETTINGS``) with its type, default, help
text, command-line flag and ``STREAMFIX_*`` environment variable; the
``--help`` text, the environment reader and the TOML reader are all made
from that table, so they cannot drift apart. Precedence: command line >
environment > TOML file > defaults.

Upstreams: ``--upstream URL`` (repeatable), ``STREAMFIX_UPSTREAM`` (comma
separated), or TOML tables::

    [[upstream]]
    url = "http://127.0.0.1:8080/v1"
    weight = 2          # share of the traffic (default 1)
    api_key = "sk-..."  # sent upstream instead of the client's Authorization
    window = 32768      # context window in tokens; overrides the probe
    reasoning = true    # the model reasons before answering
    vision = true       # the model takes images (else the doors omit them)
    model = "org/model-8B"  # the name the server knows (sent upstream)
    name = "fast"       # the name clients ask for (default: model)
    kind = "chat"       # or "embedding" (default chat)
    transform = ["mypkg.steps:Redact"]  # user steps for this row's replies
    narrow_tools = "auto"  # show the model only the tools a turn needs (or "off")

User steps and shapes (docs/extending.md): ``--transform module:factory``
(repeatable; ``transform = [...]`` in TOML, ``STREAMFIX_TRANSFORM``
comma separated) runs a step on every reply, after the row's own;
``--format module:NAME`` (``format = [...]``, ``STREAMFIX_FORMAT``)
registers a call shape. Installed ``streamfix.formats`` entry points are
registered with no flag.

A URL given on the command line or in the environment may carry the same
options after ``#``: ``http://h:8080/v1#weight=2,window=32768,model=m,name=fast``.
A row with a ``model`` serves only requests naming its public name; a row
without one serves every model name not in the table, sent on as it is
(the one-upstream setup). Several rows with one public name share its
traffic by weight and fail over to each other, never to another model's.

Tenants (TOML only) scope inbound keys to models::

    [[tenant]]
    name = "team-a"
    api_key = ["sk-team-a"]
    models = ["fast"]   # public names this tenant may use; "*" for all
    narrow_tools = "off"  # outranks the row's and the global setting

Tool narrowing (``streamfix/narrow.py``, ``server/narrowing.py``) is off
unless ``--narrow-tools auto`` (``narrow_tools``), a row's
``narrow_tools`` or a tenant's says so; the tenant's word comes first,
then the row's, then the global one. ``narrow_embedding = "NAME"`` ranks
with the table's embedding row of that public name instead of BM25.

Keys are never logged: ``UpstreamConfig.__repr__`` hides them. An empty
or blank key, or one with blanks around it, is refused wherever keys are
read (flags, environment, TOML; inbound, tenant and upstream keys alike,
``check_keys``): an empty inbound key would match a request that sent
none, and a blank upstream key is a mistake, not "no key".
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .state.store import Limits

ENV_PREFIX = "STREAMFIX_"


#: The kinds of upstream row: what each serves.
KINDS = ("chat", "embedding")

#: ``narrow_tools`` values: globally, per row, per tenant.
NARROW_MODES = ("off", "auto")


def _narrow_mode(value: Any, where: str) -> str | None:
    """A ``narrow_tools`` value (None: not set)."""
    if value is None:
        return None
    mode = str(value).strip().lower()
    if mode not in NARROW_MODES:
        raise ConfigError(f"{where}: narrow_tools must be 'off' or 'auto'")
    return mode


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    url: str  # base URL ending in /v1
    weight: float = 1.0
    api_key: str | None = field(default=None, repr=False)
    window: int | None = None
    reasoning: bool = False
    #: The model takes images: the doors pass them on (else each is
    #: replaced by a note; also learned from llama.cpp's ``/props``).
    vision: bool = False
    #: The model name the server knows, sent upstream; None: the client's
    #: own name is sent on, and the row serves any name not in the table.
    model: str | None = None
    #: The name clients ask for (``name`` in TOML); defaults to ``model``.
    public: str | None = None
    kind: str = "chat"
    #: User steps (``module:factory``) for replies from this row: the
    #: global ``--transform`` ones, then the row's own (``build_config``).
    transforms: tuple[str, ...] = ()
    #: Tool narrowing for this row's requests ("auto", "off"; None: the
    #: global setting).
    narrow_tools: str | None = None

    def __repr__(self) -> str:  # no key, no password from the URL
        return (
            f"UpstreamConfig(url={self.name!r}, model={self.model!r}, public={self.public!r}, "
            f"kind={self.kind!r}, weight={self.weight}, window={self.window})"
        )

    @property
    def served(self) -> str | None:
        """The public name this row serves (None: a catch-all row)."""
        return self.public or self.model

    @property
    def identity(self) -> tuple[str, str | None, str]:
        """What makes two rows the same backend across a reload (what was
        probed or learned of it carries over)."""
        return (self.url, self.model, self.kind)

    @property
    def has_credentials(self) -> bool:
        """``user:password@`` in the URL: aiohttp sends them as Basic auth,
        and no ``Authorization`` header is added (aiohttp refuses both)."""
        return "@" in urlsplit(self.url).netloc

    @property
    def name(self) -> str:
        """The URL without credentials or query: safe for logs and metrics."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}"


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """A tenant: its inbound keys and the public model names it may use."""

    name: str
    api_keys: tuple[str, ...] = field(repr=False)
    models: tuple[str, ...]  # public names; "*" for every model
    #: Tool narrowing for this tenant ("auto", "off"; None: the row's).
    narrow_tools: str | None = None
    #: Its limits (``max_concurrent``, ``rpm``, ``tpm``; None: ``[limits]``'s).
    limits: Limits | None = None

    def allows(self, model: str) -> bool:
        return "*" in self.models or model in self.models


#: Most tenants: their names are a metrics label, which must stay bounded.
MAX_TENANTS = 256


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # attribute of ServerConfig and TOML key
    type: type
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


@dataclass(slots=True)
class ServerConfig:
    """Every setting of ``streamfix serve`` (see ``SETTINGS`` for each)."""

    upstreams: list[UpstreamConfig] = field(default_factory=list)
    tenants: list[TenantConfig] = field(default_factory=list, repr=False)
    host: str = "127.0.0.1"
    port: int = 8787
    api_keys: list[str] = field(default_factory=list, repr=False)
    required: str = "soft"
    narrow_tools: str = "off"
    narrow_embedding: str | None = None
    workers: int = 1
    max_reasks: int = 2
    # budgets (streamfix.server.upstream.budget.BudgetPolicy)
    output_reservation: int = 1024
    safety_margin: int = 64
    floor: int = 256
    reasoning_reserve: int = 2048
    probe_interval: float = 300.0
    # network
    connect_timeout: float = 10.0
    read_timeout: float = 300.0
    request_timeout: float = 0.0
    client_timeout: float = 30.0
    protect_status: bool = False
    body_limit: int = 8 * 1024 * 1024
    pool_limit: int = 256
    pool_wait: float = 10.0
    retries: int = 2
    backoff: float = 0.25
    rest: float = 30.0
    keepalive_interval: float = 5.0
    log_level: str = "info"
    # recordings (streamfix.server.record)
    record: str | None = None
    record_on: str = "repair,unrecognised,missed,loop,empty,upstream_error"
    record_max_files: int = 1000
    record_max_bytes: int = 256 * 1024 * 1024
    record_sample: float = 1.0
    record_redact: str = "none"
    # OpenTelemetry traces (streamfix.server.tracing; also on when OTEL_* ask for an exporter)
    traces: bool = False
    # the operator page (streamfix.server.ui)
    ui: bool = False
    state_dir: str | None = None
    # the fleet (streamfix.server.state): shared state, limits, drain
    state: str | None = None
    state_prefix: str = "streamfix:"
    state_failure: str = "open"
    limits: Limits = field(default_factory=Limits)
    drain_grace: float = 5.0
    drain_timeout: float = 600.0
    # plugins (streamfix.plugins)
    transforms: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    shapes: str | None = None


#: Settings other than the upstreams and the API keys, in --help order.
SETTINGS: tuple[Setting, ...] = (
    Setting("host", str, "address to listen on (default 127.0.0.1)", "HOST"),
    Setting("port", int, "port to listen on (default 8787)", "PORT"),
    Setting(
        "required",
        str,
        "tool_choice 'required': 'soft' sends 'auto' upstream and asks once more "
        "when the reply has no call; 'off' forwards it unchanged (default soft)",
        choices=("soft", "off"),
    ),
    Setting(
        "narrow_tools",
        str,
        "'auto' ranks the offered tools against each turn and shows the model only the "
        "few it needs, when the ranking is sure (more than 8 tools, tool_choice auto or "
        "required); a reply without a call is asked again with every tool (default off)",
        choices=NARROW_MODES,
    ),
    Setting(
        "narrow_embedding",
        str,
        "rank tools for --narrow-tools with this embedding row (its public name) instead "
        "of the lexical ranker (default off)",
        "NAME",
    ),
    Setting("workers", int, "processes serving the same port with SO_REUSEPORT (default 1)", "N"),
    Setting("max_reasks", int, "most times one request is asked again upstream (default 2)", "N"),
    Setting(
        "output_reservation",
        int,
        "tokens kept for the reply when clamping (default 1024)",
        "TOKENS",
    ),
    Setting("safety_margin", int, "tokens of slack for prompt estimates (default 64)", "TOKENS"),
    Setting("floor", int, "smallest max_tokens a clamp leaves (default 256)", "TOKENS"),
    Setting(
        "reasoning_reserve",
        int,
        "extra output tokens for models that reason first (default 2048)",
        "TOKENS",
    ),
    Setting(
        "probe_interval",
        float,
        "seconds between context-window probes of each upstream; 0 = at start only (default 300)",
        "SECONDS",
    ),
    Setting("connect_timeout", float, "upstream connect timeout (default 10)", "SECONDS"),
    Setting(
        "read_timeout", float, "longest silence from an upstream mid-reply (default 300)", "SECONDS"
    ),
    Setting(
        "request_timeout",
        float,
        "longest a whole request may take, from its arrival to the end of the reply; "
        "0 = no limit (default 0)",
        "SECONDS",
    ),
    Setting(
        "client_timeout",
        float,
        "longest a client may take to send a request, its headers and then its body "
        "(a slower one is answered 408 and its connection closed); also how long an "
        "idle kept-alive connection stays open, at most 75; 0 = no limit (default 30)",
        "SECONDS",
    ),
    Setting(
        "protect_status",
        bool,
        "require one of the proxy's own --api-key keys (not a tenant's) on /healthz and "
        "/metrics, which are open otherwise (default off)",
    ),
    Setting("body_limit", int, "largest request body accepted, bytes (default 8 MiB)", "BYTES"),
    Setting("pool_limit", int, "concurrent upstream requests (default 256)", "N"),
    Setting(
        "pool_wait",
        float,
        "longest wait for a free upstream connection before 503 (default 10)",
        "SECONDS",
    ),
    Setting("retries", int, "retry rounds over all upstreams after the first (default 2)", "N"),
    Setting("backoff", float, "first retry delay, doubled each round (default 0.25)", "SECONDS"),
    Setting("rest", float, "how long a failing upstream is skipped (default 30)", "SECONDS"),
    Setting(
        "keepalive_interval",
        float,
        "seconds between keep-alive comments while output is held (a ping event on "
        "/v1/messages, in_progress on /v1/responses); 0 = none (default 5)",
        "SECONDS",
    ),
    Setting(
        "log_level",
        str,
        "debug, info, warning or error (default info)",
        choices=("debug", "info", "warning", "error"),
    ),
    Setting(
        "shapes",
        str,
        "declared call shapes (a TOML file of [shapes.NAME] tables, docs/extending.md); "
        "re-read on SIGHUP (default off)",
        "FILE",
    ),
    Setting(
        "record",
        str,
        "write one file per reply that needed streamfix into DIR; replay them with "
        "'streamfix replay DIR' (default off)",
        "DIR",
    ),
    Setting(
        "record_on",
        str,
        "which replies are recorded, comma separated "
        "(default repair,unrecognised,missed,loop,empty,upstream_error)",
        "REASONS",
    ),
    Setting("record_max_files", int, "most recordings kept, oldest removed (default 1000)", "N"),
    Setting(
        "record_max_bytes",
        int,
        "most bytes of recordings kept, oldest removed (default 256 MiB)",
        "BYTES",
    ),
    Setting(
        "record_sample",
        float,
        "share of the qualifying replies recorded, 0..1 (default 1)",
        "FRACTION",
    ),
    Setting(
        "record_redact",
        str,
        "'messages' replaces the text of every message in a recorded request by its "
        "length; credentials are never written (default none)",
        choices=("none", "messages"),
    ),
    Setting(
        "traces",
        bool,
        "OpenTelemetry spans for each request and upstream attempt, exported as the "
        "OTEL_* variables say (OTLP/HTTP by default); on too when OTEL_TRACES_EXPORTER or "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set; needs the otel extra (default off)",
    ),
    Setting(
        "ui",
        bool,
        "serve the operator page at /ui (models, recordings, unrecognised markup, probe, "
        "config, reload); needs one of the proxy's own --api-key keys to log in (default off)",
    ),
    Setting(
        "state_dir",
        str,
        "directory for state shared by the workers and kept across restarts: the operator "
        "page's logged-out sessions; unset: $XDG_STATE_HOME/streamfix, else "
        "~/.local/state/streamfix (default off)",
        "DIR",
    ),
    Setting(
        "state",
        str,
        "share what is learned about the rows, resting rows and the tenants' limits with "
        "every process naming the same Redis, redis://HOST:PORT/DB; needs the state extra; "
        "without it all stays in process (default off)",
        "URL",
    ),
    Setting(
        "state_prefix",
        str,
        "prefix of every key in the shared state, one per fleet (default streamfix:)",
        "PREFIX",
    ),
    Setting(
        "state_failure",
        str,
        "while the shared state is unreachable: 'open' limits each process on its own, "
        "'closed' refuses limited tenants with 503 (default open)",
        choices=("open", "closed"),
    ),
    Setting(
        "drain_grace",
        float,
        "on SIGTERM, seconds /readyz answers 503 while new requests are still taken, for a "
        "load balancer to notice (default 5)",
        "SECONDS",
    ),
    Setting(
        "drain_timeout",
        float,
        "on SIGTERM, longest wait for replies in flight once no new one is taken (default 600)",
        "SECONDS",
    ),
)

#: What ``--record-on`` may name (``streamfix.server.record`` decides each).
RECORD_REASONS = ("repair", "unrecognised", "missed", "loop", "empty", "upstream_error")


class ConfigError(ValueError):
    """A setting has a value that cannot be used."""


def check_key(key: Any, where: str) -> str:
    """``key`` if it is a usable key: a non-empty string with no blanks
    around it (the inbound check strips what a client sends, so a padded
    key could never match, and an empty one would match a missing one)."""
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(f"{where}: an api_key must not be empty or blank")
    if key != key.strip():
        raise ConfigError(f"{where}: an api_key must not start or end with blanks")
    return key


def check_keys(cfg: ServerConfig) -> None:
    """Every key of ``cfg`` (the proxy's own, each tenant's, each
    upstream's) is usable (``check_key``); ConfigError otherwise."""
    for key in cfg.api_keys:
        check_key(key, "api_key")
    for t in cfg.tenants:
        for key in t.api_keys:
            check_key(key, f"tenant {t.name}")
    for u in cfg.upstreams:
        if u.api_key is not None:
            check_key(u.api_key, f"upstream {u.name}")


def _convert(setting_type: type, name: str, value: Any) -> Any:
    try:
        if setting_type is bool:
            if isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            return bool(value)
        return setting_type(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: cannot read {value!r} as {setting_type.__name__}") from exc


def parse_upstream(spec: str) -> UpstreamConfig:
    """``URL`` or ``URL#weight=2,window=32768,api_key=…,reasoning=true,
    vision=true,model=…,name=…,kind=embedding``."""
    url, _, opts = spec.partition("#")
    kw: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in opts.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"upstream option {item!r}: expected key=value")
        kw[key.strip()] = value.strip()
    return upstream_of({"url": url, **kw})


def check_url(url: str) -> str:
    """An upstream's base URL, without a trailing ``/``, or a ConfigError
    that says what is wrong (``serve``'s rows and ``probe`` alike)."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"upstream URL {url!r}: expected http(s)://host[:port]/v1")
    return url


def upstream_of(table: Mapping[str, Any]) -> UpstreamConfig:
    known = {"url", "weight", "api_key", "window", "reasoning", "vision", "model", "name", "kind"}
    known.update(("transform", "narrow_tools"))
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"upstream: unknown option(s) {', '.join(unknown)}")
    url = check_url(str(table.get("url") or ""))
    weight = _convert(float, "weight", table.get("weight", 1.0))
    if weight <= 0:
        raise ConfigError(f"upstream {url}: weight must be > 0")
    window = table.get("window")
    kind = str(table.get("kind") or "chat")
    if kind not in KINDS:
        raise ConfigError(f"upstream {url}: kind must be one of {', '.join(KINDS)}")
    model = str(table["model"]).strip() if table.get("model") else None
    public = str(table["name"]).strip() if table.get("name") else None
    if public is not None and model is None:
        raise ConfigError(f"upstream {url}: name={public!r} needs the model the server knows")
    return UpstreamConfig(
        url=url,
        weight=weight,
        api_key=check_key(table["api_key"], f"upstream {url}") if "api_key" in table else None,
        window=_convert(int, "window", window) if window not in (None, "") else None,
        reasoning=_convert(bool, "reasoning", table.get("reasoning", False)),
        vision=_convert(bool, "vision", table.get("vision", False)),
        model=model,
        public=public,
        kind=kind,
        transforms=tuple(_specs("transform", table.get("transform"))),
        narrow_tools=_narrow_mode(table.get("narrow_tools"), f"upstream {url}"),
    )


def _specs(name: str, value: Any) -> list[str]:
    """A plugin list from TOML (a string or a list of strings) or the
    environment (comma separated)."""
    if value is None:
        return []
    items = _split_list(value) if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() for x in items):
        raise ConfigError(f"{name}: expected module:name or a list of them")
    return [x.strip() for x in items]


def parse_tenant(table: Any) -> TenantConfig:
    """One ``[[tenant]]`` table."""
    if not isinstance(table, dict):
        raise ConfigError("config file: [[tenant]] must be tables")
    unknown = sorted(set(table) - {"name", "api_key", "models", "narrow_tools", *LIMIT_KEYS})
    if unknown:
        raise ConfigError(f"tenant: unknown option(s) {', '.join(unknown)}")
    name = str(table.get("name") or "").strip()
    if not name:
        raise ConfigError("tenant: a name is needed")
    keys, models = table.get("api_key"), table.get("models")
    keys = [keys] if isinstance(keys, str) else keys
    models = [models] if isinstance(models, str) else models
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"tenant {name}: api_key must be a key or a list of keys")
    for k in keys:
        check_key(k, f"tenant {name}")
    if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
        raise ConfigError(f"tenant {name}: models must be a list of model names")
    return TenantConfig(
        name=name,
        api_keys=tuple(keys),
        models=tuple(models),
        narrow_tools=_narrow_mode(table.get("narrow_tools"), f"tenant {name}"),
        limits=limits_of(table, f"tenant {name}") if LIMIT_KEYS & set(table) else None,
    )


#: A tenant's limits, in ``[[tenant]]`` and in ``[limits]`` (the default).
LIMIT_KEYS = frozenset({"max_concurrent", "rpm", "tpm"})


def limits_of(table: Mapping[str, Any], where: str) -> Limits:
    """``max_concurrent``, ``rpm``, ``tpm`` of a table (0 or absent: none)."""
    values = {}
    for key in sorted(LIMIT_KEYS):
        value = table.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}: {key} must be a whole number, 0 or more")
        values[key] = value
    return Limits(**values)


def _split_list(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def from_toml(path: str | Path) -> dict[str, Any]:
    """The settings in a TOML file, as ``ServerConfig`` keyword arguments."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    out: dict[str, Any] = {}
    ups = data.pop("upstream", None)
    if ups is not None:
        if isinstance(ups, dict):
            ups = [ups]
        if not isinstance(ups, list) or not all(isinstance(u, dict) for u in ups):
            raise ConfigError("config file: [[upstream]] must be tables")
        out["upstreams"] = [upstream_of(u) for u in ups]
    tenants = data.pop("tenant", None)
    if tenants is not None:
        out["tenants"] = [
            parse_tenant(t) for t in (tenants if isinstance(tenants, list) else [tenants])
        ]
    limits = data.pop("limits", None)
    if limits is not None:
        if not isinstance(limits, dict) or set(limits) - LIMIT_KEYS:
            raise ConfigError("config file: [limits] takes max_concurrent, rpm and tpm")
        out["limits"] = limits_of(limits, "limits")
    keys = data.pop("api_key", None)
    if keys is not None:
        keys = [keys] if isinstance(keys, str) else keys
        if not isinstance(keys, list):
            raise ConfigError("config file: api_key must be a key or a list of keys")
        out["api_keys"] = [check_key(k, "config file api_key") for k in keys]
    for key, field_name in (("transform", "transforms"), ("format", "formats")):
        if key in data:
            out[field_name] = _specs(key, data.pop(key))
    by_name = {s.name: s for s in SETTINGS}
    for key, value in data.items():
        key = key.replace("-", "_")
        setting = by_name.get(key)
        if setting is None:
            raise ConfigError(f"config file: unknown setting {key!r}")
        out[key] = _convert(setting.type, key, value)
    return out


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings in ``STREAMFIX_*`` variables."""
    out: dict[str, Any] = {}
    if env.get(ENV_PREFIX + "UPSTREAM"):
        out["upstreams"] = [parse_upstream(u) for u in _split_list(env[ENV_PREFIX + "UPSTREAM"])]
    if env.get(ENV_PREFIX + "API_KEY"):  # set but empty: unset, as every variable
        # every comma-separated part is a key: an empty one is refused, not skipped
        keys = [p.strip() for p in env[ENV_PREFIX + "API_KEY"].split(",")]
        out["api_keys"] = [check_key(k, ENV_PREFIX + "API_KEY") for k in keys]
    for key, field_name in (("TRANSFORM", "transforms"), ("FORMAT", "formats")):
        if env.get(ENV_PREFIX + key):
            out[field_name] = _specs(ENV_PREFIX + key, env[ENV_PREFIX + key])
    for s in SETTINGS:
        if env.get(s.env):
            out[s.name] = _convert(s.type, s.env, env[s.env])
    return out


def build_config(
    cli: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> ServerConfig:
    """Merge the four sources. ``cli`` holds only the flags actually given
    (``None`` for the rest); the config file comes from ``--config`` or
    ``STREAMFIX_CONFIG``."""
    env = os.environ if env is None else env
    merged: dict[str, Any] = {}
    path = config_file or env.get(ENV_PREFIX + "CONFIG")
    if path:
        merged.update(from_toml(path))
    merged.update(from_env(env))
    for key, value in cli.items():
        if value is None or value == []:
            continue
        if key == "upstreams":
            value = [parse_upstream(u) for u in value]
        merged[key] = value
    cfg = ServerConfig(**merged)
    if cfg.transforms:
        cfg.upstreams = [
            replace(u, transforms=(*cfg.transforms, *u.transforms)) for u in cfg.upstreams
        ]
    validate(cfg)
    return cfg


def validate(cfg: ServerConfig) -> None:
    if cfg.required not in ("soft", "off"):
        raise ConfigError("required: expected 'soft' or 'off'")
    _narrow_mode(cfg.narrow_tools, "config")
    for name in ("workers", "pool_limit", "body_limit"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    for name in ("max_reasks", "retries", "output_reservation", "safety_margin", "floor"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{name} must not be negative")
    if not 0 < cfg.port < 65536:
        raise ConfigError("port must be 1..65535")
    unknown = set(record_reasons(cfg)) - set(RECORD_REASONS)
    if unknown:
        raise ConfigError(
            f"record_on: unknown reason(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(RECORD_REASONS)}"
        )
    if cfg.record_redact not in ("none", "messages"):
        raise ConfigError("record_redact: expected 'none' or 'messages'")
    if not 0.0 <= cfg.record_sample <= 1.0:
        raise ConfigError("record_sample must be between 0 and 1")
    if cfg.record_max_files < 1 or cfg.record_max_bytes < 1:
        raise ConfigError("record_max_files and record_max_bytes must be at least 1")
    if cfg.request_timeout < 0:
        raise ConfigError("request_timeout must not be negative (0 = no limit)")
    if cfg.client_timeout < 0:
        raise ConfigError("client_timeout must not be negative (0 = no limit)")
    for name in ("connect_timeout", "read_timeout"):
        if not getattr(cfg, name) > 0:  # NaN too
            raise ConfigError(f"{name} must be more than 0 seconds (got {getattr(cfg, name):g})")
    for name in ("pool_wait", "backoff", "rest", "probe_interval", "keepalive_interval"):
        if not getattr(cfg, name) >= 0:
            raise ConfigError(f"{name} must not be negative (got {getattr(cfg, name):g})")
    if cfg.state_failure not in ("open", "closed"):
        raise ConfigError("state_failure: expected 'open' or 'closed'")
    if cfg.state is not None and urlsplit(cfg.state).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"state: expected redis://HOST:PORT/DB, got {cfg.state!r}")
    for name in ("drain_grace", "drain_timeout"):
        if not getattr(cfg, name) >= 0:
            raise ConfigError(f"{name} must not be negative (got {getattr(cfg, name):g})")
    if cfg.ui and not cfg.api_keys:
        raise ConfigError(
            "ui: the operator page needs one of the proxy's own keys (--api-key) to log in "
            "with: it shows prompts and replies and can reload the configuration"
        )
    validate_table(cfg)
    from ..errors import PluginError
    from ..plugins import factories

    try:
        for u in cfg.upstreams:
            factories(u.transforms)
    except PluginError as exc:
        raise ConfigError(str(exc)) from exc


def validate_table(cfg: ServerConfig) -> None:
    """The upstream table and the tenants make sense together: every
    tenant's model is served, no key opens two doors, no public name
    stands for two server models, no key is empty or blank."""
    check_keys(cfg)
    served: dict[tuple[str, str], str] = {}
    for u in cfg.upstreams:
        if u.served is None or u.model is None:
            continue
        other = served.setdefault((u.kind, u.served), u.model)
        if other != u.model:
            raise ConfigError(
                f"upstream name {u.served!r} ({u.kind}) stands for two models: "
                f"{other!r} and {u.model!r}"
            )
    names = {name for _, name in served}
    if cfg.narrow_embedding is not None and ("embedding", cfg.narrow_embedding) not in served:
        raise ConfigError(f"narrow_embedding: no embedding row is named {cfg.narrow_embedding!r}")
    if len(cfg.tenants) > MAX_TENANTS:
        raise ConfigError(f"at most {MAX_TENANTS} tenants")
    seen_keys = set(cfg.api_keys)
    tenant_names: set[str] = set()
    for t in cfg.tenants:
        if t.name in tenant_names:
            raise ConfigError(f"tenant {t.name!r} is declared twice")
        tenant_names.add(t.name)
        missing = sorted(m for m in t.models if m != "*" and m not in names)
        if missing:
            raise ConfigError(
                f"tenant {t.name}: no upstream serves {', '.join(map(repr, missing))}"
            )
        for key in t.api_keys:
            if key in seen_keys:
                raise ConfigError(f"tenant {t.name}: an api_key is used twice")
            seen_keys.add(key)


def record_reasons(cfg: ServerConfig) -> tuple[str, ...]:
    """``record_on`` as a tuple of reasons."""
    return tuple(_split_list(cfg.record_on))


def with_upstreams(cfg: ServerConfig, urls: Sequence[str]) -> ServerConfig:
    """A copy of ``cfg`` with these upstream URLs (tests, the demo)."""
    return replace(cfg, upstreams=[parse_upstream(u) for u in urls])


def settings_epilog() -> str:
    """The environment variables and TOML keys, for ``--help``."""
    lines = [
        "Every setting can also come from a STREAMFIX_* environment variable or a TOML",
        "file (--config FILE or STREAMFIX_CONFIG). Precedence: command line > environment",
        "> TOML > defaults.",
        "",
        "  STREAMFIX_UPSTREAM    comma-separated upstream URLs (TOML: [[upstream]] url=…",
        "                        weight=… api_key=… window=… reasoning=… vision=… model=…",
        "                        name=… kind=chat|embedding narrow_tools=auto|off)",
        "  STREAMFIX_API_KEY     comma-separated inbound API keys (TOML: api_key)",
        "  STREAMFIX_TRANSFORM   comma-separated user steps, module:factory (TOML: transform,",
        "                        also per [[upstream]])",
        "  STREAMFIX_FORMAT      comma-separated call shapes, module:NAME (TOML: format)",
    ]
    for s in SETTINGS:
        lines.append(f"  {s.env:<33} TOML: {s.name}")
    lines += [
        "",
        "An upstream URL may carry options after '#':",
        "  --upstream 'http://127.0.0.1:8080/v1#weight=2,window=32768'",
        "  --upstream 'http://127.0.0.1:8000/v1#model=org/model-8B,name=fast'",
        "Tenants ([[tenant]] name=… api_key=[…] models=[…] max_concurrent=… rpm=… tpm=…)",
        "and the default limits ([limits] max_concurrent=… rpm=… tpm=…) come from the TOML",
        "file only.",
        "SIGHUP re-reads the configuration: upstreams, tenants and api keys change for",
        "new requests; streams in flight finish on the old table.",
    ]
    return "\n".join(lines)


def default_fields() -> dict[str, Any]:
    """Defaults by name (for tests and docs)."""
    cfg = ServerConfig()
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}
