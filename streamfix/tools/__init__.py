"""The command-line tools around the library: ``streamfix serve`` and the
others (``cli``, with ``plugin_flags`` and ``ports`` shared by several),
the no-model ``demo``, ``probe`` (what a backend gets wrong) and ``replay``
(recordings through today's chain), the command lines over
``server/probe.py`` and ``server/replay.py``; ``model`` (the bundled small
model on a port) and ``local`` (a llama.cpp server with the bundled
SmolLM2, for tests and benchmarks).

Nothing in the library or the proxy imports from here.
"""
