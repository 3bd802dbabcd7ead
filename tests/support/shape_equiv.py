"""A declared shape against the built-in format it stands for: the same
canitoolcall fixtures run with the built-in alone, then with the built-in's
format taken out of the registry and the TOML shape registered in its place
(``tests/test_declared.py``; ``python -m tests.support.shape_equiv`` prints
the table)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from canitoolcall.fixtures import Fixture
from canitoolcall.results import ParseResult

from streamfix.formats import registry
from streamfix.formats.declared import compile_shapes, load_shapes
from streamfix.testing import registered

from .conformance import STREAMINGS, fixtures, parse_nonstream, parse_stream

SHAPES = Path(__file__).resolve().parents[2] / "examples" / "shapes"


@dataclass(frozen=True)
class Case:
    toml: str  # file in examples/shapes
    module: str  # the built-in's module in streamfix.formats
    builtin: str  # the built-in format's name
    family: str  # canitoolcall family
    keep: Callable[[Fixture], bool] = lambda fx: True


CASES = (
    Case("hermes.toml", "hermes_tags", "hermes", "qwen3-hermes"),
    Case("qwen_xml.toml", "qwen_xml", "qwen_xml", "qwen3-xml"),
    Case(
        "mistral.toml",
        "mistral",
        "mistral",
        "mistral",
        lambda fx: "x-v3-json-array" not in fx.tags,  # the old style: a list after the marker
    ),
    Case("kimi_k2.toml", "kimi", "kimi", "kimi", lambda fx: "x-kimi-k3" not in fx.tags),
    Case("glm.toml", "glm", "glm", "glm"),
)


@contextlib.contextmanager
def without_builtin(module: str, name: str) -> Iterator[None]:
    """The registry with the built-in format ``name`` taken out (its
    module's reasoning and residue stay)."""
    mod = importlib.import_module(f"streamfix.formats.{module}")
    saved = mod.FORMATS
    mod.FORMATS = [f for f in saved if f.name != name]
    registry._changed()
    try:
        yield
    finally:
        mod.FORMATS = saved
        registry._changed()


def results(fx: Fixture) -> tuple[ParseResult, ...]:
    """What streamfix makes of ``fx``: whole, then streamed every way."""
    return (
        parse_nonstream(fx),
        *(parse_stream(fx, split(fx.raw_output)) for split in STREAMINGS.values()),
    )


def compare(case: Case) -> tuple[list[str], list[str]]:
    """The fixture ids of ``case``'s family whose results agree, and those
    that differ."""
    fxs = [fx for fx in fixtures() if fx.family == case.family and case.keep(fx)]
    want = {fx.id: results(fx) for fx in fxs}
    same, differ = [], []
    shapes = compile_shapes(load_shapes(SHAPES / case.toml))
    with without_builtin(case.module, case.builtin), registered(*shapes):
        for fx in fxs:
            (same if results(fx) == want[fx.id] else differ).append(fx.id)
    return same, differ


def main() -> int:
    for case in CASES:
        same, differ = compare(case)
        print(f"{case.toml:16} {len(same):3} / {len(same) + len(differ)}")
        for d in differ:
            print("   differs:", d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
