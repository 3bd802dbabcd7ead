"""The command-line tools around the library: ``streamfix serve`` and the
others (``cli``), the no-model ``demo``, ``probe`` (what a backend gets
wrong), ``replay`` (recordings through today's chain), ``seen`` (what a
client assembles from a stream, shared by the three) and ``local`` (a
llama.cpp server with the bundled SmolLM2, for tests and benchmarks).

Nothing in the library or the proxy imports from here.
"""
