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

A URL given on the command line or in the environment may carry the same
options after ``#``: ``http://h:8080/v1#weight=2,window=32768``.
Keys are never logged: ``UpstreamConfig.__repr__`` hides them.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ENV_PREFIX = "STREAMFIX_"


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    url: str  # base URL ending in /v1
    weight: float = 1.0
    api_key: str | None = field(default=None, repr=False)
    window: int | None = None
    reasoning: bool = False

    def __repr__(self) -> str:  # no key, no password from the URL
        return f"UpstreamConfig(url={self.name!r}, weight={self.weight}, window={self.window})"

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
    host: str = "127.0.0.1"
    port: int = 8787
    api_keys: list[str] = field(default_factory=list, repr=False)
    required: str = "soft"
    workers: int = 1
    max_reasks: int = 2
    # budgets (streamfix.server.budget.BudgetPolicy)
    output_reservation: int = 1024
    safety_margin: int = 64
    floor: int = 256
    reasoning_reserve: int = 2048
    probe_interval: float = 300.0
    # network
    connect_timeout: float = 10.0
    read_timeout: float = 300.0
    body_limit: int = 8 * 1024 * 1024
    pool_limit: int = 256
    pool_wait: float = 10.0
    retries: int = 2
    backoff: float = 0.25
    rest: float = 30.0
    log_level: str = "info"
    # recordings (streamfix.server.record)
    record: str | None = None
    record_on: str = "repair,unrecognised,loop,empty,upstream_error"
    record_max_files: int = 1000
    record_max_bytes: int = 256 * 1024 * 1024
    record_sample: float = 1.0
    record_redact: str = "none"


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
        "log_level",
        str,
        "debug, info, warning or error (default info)",
        choices=("debug", "info", "warning", "error"),
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
        "(default repair,unrecognised,loop,empty,upstream_error)",
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
)

#: What ``--record-on`` may name (``streamfix.server.record`` decides each).
RECORD_REASONS = ("repair", "unrecognised", "loop", "empty", "upstream_error")


class ConfigError(ValueError):
    """A setting has a value that cannot be used."""


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
    """``URL`` or ``URL#weight=2,window=32768,api_key=…,reasoning=true``."""
    url, _, opts = spec.partition("#")
    kw: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in opts.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"upstream option {item!r}: expected key=value")
        kw[key.strip()] = value.strip()
    return upstream_of({"url": url, **kw})


def upstream_of(table: Mapping[str, Any]) -> UpstreamConfig:
    known = {"url", "weight", "api_key", "window", "reasoning"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"upstream: unknown option(s) {', '.join(unknown)}")
    url = str(table.get("url") or "").strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"upstream URL {url!r}: expected http(s)://host[:port]/v1")
    weight = _convert(float, "weight", table.get("weight", 1.0))
    if weight <= 0:
        raise ConfigError(f"upstream {url}: weight must be > 0")
    window = table.get("window")
    return UpstreamConfig(
        url=url,
        weight=weight,
        api_key=str(table["api_key"]) if table.get("api_key") else None,
        window=_convert(int, "window", window) if window not in (None, "") else None,
        reasoning=_convert(bool, "reasoning", table.get("reasoning", False)),
    )


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
    keys = data.pop("api_key", None)
    if keys is not None:
        out["api_keys"] = [keys] if isinstance(keys, str) else [str(k) for k in keys]
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
    if env.get(ENV_PREFIX + "API_KEY"):
        out["api_keys"] = _split_list(env[ENV_PREFIX + "API_KEY"])
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
    validate(cfg)
    return cfg


def validate(cfg: ServerConfig) -> None:
    if cfg.required not in ("soft", "off"):
        raise ConfigError("required: expected 'soft' or 'off'")
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
        "                        weight=… api_key=… window=… reasoning=…)",
        "  STREAMFIX_API_KEY     comma-separated inbound API keys (TOML: api_key)",
    ]
    for s in SETTINGS:
        lines.append(f"  {s.env:<33} TOML: {s.name}")
    lines += [
        "",
        "An upstream URL may carry options after '#':",
        "  --upstream 'http://127.0.0.1:8080/v1#weight=2,window=32768'",
    ]
    return "\n".join(lines)


def default_fields() -> dict[str, Any]:
    """Defaults by name (for tests and docs)."""
    cfg = ServerConfig()
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}
