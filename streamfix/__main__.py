"""``python -m streamfix`` is the ``streamfix`` command."""

import sys

from .tools.cli import main

sys.exit(main())
