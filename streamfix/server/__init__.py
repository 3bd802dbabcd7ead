"""The aiohttp proxy app, upstreams, budgets, middlewares, metrics.

``create_app(ServerConfig(...))`` is the proxy (``streamfix serve``); it is
imported lazily so that ``streamfix.middleware`` users do not load
the proxy's dependencies (prometheus_client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .config import ServerConfig, UpstreamConfig

__all__ = ["ServerConfig", "UpstreamConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("ServerConfig", "UpstreamConfig"):
        from . import config

        return getattr(config, name)
    raise AttributeError(name)
