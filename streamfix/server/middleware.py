"""Kept for one release: the middlewares moved to ``streamfix.middleware``."""

from ..middleware import *  # noqa: F403
from ..middleware import __all__ as __all__
