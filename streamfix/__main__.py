"""``python -m streamfix`` is the ``streamfix`` command."""

import signal
import sys

# Before anything else, as ``cli.main`` does first (see ``tools/cli.py``):
# a signal that comes while the command is still loading waits for its handler.
if hasattr(signal, "pthread_sigmask"):
    signal.pthread_sigmask(
        signal.SIG_BLOCK,
        [getattr(signal, n) for n in ("SIGHUP", "SIGTERM", "SIGINT") if hasattr(signal, n)],
    )

from .tools.cli import main

sys.exit(main())
