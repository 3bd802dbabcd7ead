"""``python -m bench``: the user-facing benchmark (``bench/run.py``)."""

from bench.run import main

raise SystemExit(main())
