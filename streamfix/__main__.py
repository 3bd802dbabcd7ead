"""``python -m streamfix`` is the ``streamfix`` command."""

import sys

from .cli import main

sys.exit(main())
