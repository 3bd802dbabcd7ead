"""streamfix benchmarks: see ``bench/README.md``."""
