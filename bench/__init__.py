"""streamfix benchmarks: ``python -m bench.chain``, ``python -m bench.proxy``, ``python -m bench``."""
