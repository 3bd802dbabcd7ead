"""Kept for one release: the local model server moved to
``streamfix.tools.local`` (``python -m streamfix.local`` still runs it)."""

import sys

from .tools.local import *  # noqa: F403
from .tools.local import __all__ as __all__
from .tools.local import _serve_without_extra_bufts

if __name__ == "__main__":
    _serve_without_extra_bufts(sys.argv[1:])
