"""Engine test cases (``tests/data/engine_cases.json``) streamfix does
differently, each with the reason.

A reason starts "better:" when the engine's expectation is worse for a
client and streamfix keeps its own behaviour (the reason says why), or
"open: <class>:" for a gap still to close. ``tests/test_engine_suites.py``
expects each listed case to fail (strictly: one that starts passing must
leave this list).
"""

KNOWN: dict[str, str] = {}
