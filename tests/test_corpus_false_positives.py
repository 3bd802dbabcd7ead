"""The false-positive corpus (issue 4): several megabytes of real text
streamed through the chain in token-sized pieces, without tools and with
tools offered, come out byte-identical with zero cuts.

The corpus: the Python standard library's own sources, read from the
running interpreter's installation (its regression-test suites and
site-packages left out: tests are full of deliberately repeated literal
data), JSON arrays of similar objects, CSV records, markdown documents
with tables, rules, lists and code blocks, enumerations that count
without looping (issue 18: numbered procedures, CSV exports and tables
with ids, the primes below 1,000), and structured repetition a user asks
for (issue 24, ``tests/support/structuredcorpus.py``: empty grids and tables,
arrays of zeros, runs of one character, borders and rules). The one
stdlib module whose text was a loop by issue 4's definition
(``encodings/iso8859_8.py``: 28 identical lines of ``'\\ufffe'``) is a
table too, and passes since issue 24: a test below pins it.

Run ``python -m tests.test_corpus_false_positives`` for the figures.
"""

from __future__ import annotations

import csv
import io
import random
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from streamfix.chain import KEEPALIVE, PASS, Chain
from streamfix.chunks import ChoiceView, ChunkView, DeltaView
from streamfix.context import Context
from streamfix.transforms.repetition import COUNTED_CHARS, _Channel, structured

from .support.streamutil import SHAPES_REQUEST
from .support.structuredcorpus import STRUCTURED

STDLIB = Path(sysconfig.get_paths()["stdlib"])
#: Bytes of stdlib source streamed through the chain (the whole non-test
#: stdlib, ~13 MB, goes through the cutter alone in a separate test).
STDLIB_BUDGET = 5_000_000
#: The stdlib module that was a loop by issue 4's definition (module doc).
KNOWN_TABLE = "encodings/iso8859_8.py"
#: Token-sized pieces, 1..8 characters, in a fixed pseudo-random order.
_SIZES = [random.Random(7).randint(1, 8) for _ in range(4096)]


def stdlib_files() -> list[Path]:
    """The stdlib's own modules, tests and third-party packages left out."""
    out = []
    for f in sorted(STDLIB.rglob("*.py")):
        rel = f.relative_to(STDLIB)
        parts = rel.parts
        if parts[0] in ("site-packages", "dist-packages", "test") or any(
            p in ("tests", "idle_test") for p in parts
        ):
            continue
        out.append(f)
    return out


def stdlib_docs(budget: int) -> list[str]:
    docs, size = [], 0
    for f in stdlib_files():
        text = f.read_text(encoding="utf-8", errors="replace")
        docs.append(text)
        size += len(text.encode())
        if size >= budget:
            break
    return docs


_WORDS = [
    *(
        [
            "order",
            "ticket",
            "cache",
            "refresh",
            "customer",
            "status",
            "pending",
            "shipped",
            "delivered",
            "invoice",
        ]
    ),
    *(
        [
            "amount",
            "total",
            "discount",
            "region",
            "north",
            "south",
            "east",
            "west",
            "priority",
            "low",
            "medium",
            "high",
        ]
    ),
    *(
        [
            "alpha",
            "beta",
            "gamma",
            "delta",
            "the",
            "a",
            "of",
            "to",
            "and",
            "in",
            "for",
            "with",
            "on",
            "by",
            "from",
        ]
    ),
]


def _sentence(rnd: random.Random, n: int) -> str:
    return " ".join(rnd.choice(_WORDS) for _ in range(n)).capitalize() + "."


def json_docs() -> list[str]:
    rnd = random.Random(1)
    docs = []
    for k in range(40):
        records = [
            {
                "id": 10_000 + k * 1000 + i,
                "customer": f"{rnd.choice(_WORDS)}_{rnd.randint(1, 999)}",
                "status": rnd.choice(["pending", "shipped", "delivered", "cancelled"]),
                "amount": round(rnd.uniform(1, 500), 2),
                "items": [
                    {"sku": f"SKU-{rnd.randint(1000, 9999)}", "qty": rnd.randint(1, 5)}
                    for _ in range(rnd.randint(1, 3))
                ],
                "note": _sentence(rnd, rnd.randint(3, 9)) if rnd.random() < 0.5 else None,
                "active": rnd.random() < 0.8,
            }
            for i in range(rnd.randint(20, 80))
        ]
        opt = orjson.OPT_INDENT_2 if k % 2 else 0
        docs.append(orjson.dumps(records, option=opt).decode())
    return docs


def csv_docs() -> list[str]:
    rnd = random.Random(2)
    docs = []
    for _ in range(20):
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["date", "region", "product", "units", "unit_price", "total", "comment"])
        for _ in range(rnd.randint(150, 400)):
            units = rnd.randint(1, 40)
            price = round(rnd.uniform(0.5, 80), 2)
            w.writerow(
                [
                    f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}",
                    rnd.choice(["north", "south", "east", "west"]),
                    rnd.choice(["widget", "gadget", "gizmo", "doohickey"]),
                    units,
                    price,
                    round(units * price, 2),
                    rnd.choice(["", "", "late", "returned, refunded", _sentence(rnd, 4)]),
                ]
            )
        docs.append(buf.getvalue())
    return docs


CODE = "\n```python\nfor row in rows:\n    total += row.amount\n    count += 1\n```\n\n"


def markdown_docs() -> list[str]:
    rnd = random.Random(3)
    docs = []
    for n in range(60):
        intro = _sentence(rnd, 20) + " " + _sentence(rnd, 15)
        parts = [f"# Report {n}\n\n", intro + "\n\n", "---\n\n"]
        for s in range(rnd.randint(3, 6)):
            parts.append(f"## Section {s + 1}\n\n{_sentence(rnd, 25)}\n\n")
            cols = rnd.randint(3, 6)
            parts.append("| " + " | ".join(f"col{c}" for c in range(cols)) + " |\n")
            parts.append("|" + "|".join([" --- "] * cols) + "|\n")
            for _ in range(rnd.randint(5, 25)):
                cells = [
                    rnd.choice([str(rnd.randint(0, 999)), rnd.choice(_WORDS), "", "-", "n/a"])
                    for _ in range(cols)
                ]
                parts.append("| " + " | ".join(cells) + " |\n")
            parts.append("\n")
            for _ in range(rnd.randint(2, 6)):
                parts.append(f"- {_sentence(rnd, rnd.randint(3, 8))}\n")
            for i in range(1, rnd.randint(2, 8)):
                parts.append(f"{i}. {_sentence(rnd, rnd.randint(3, 8))}\n")
            parts.append(CODE)
            parts.append("=" * 80 + "\n\n" if rnd.random() < 0.3 else "***\n\n")
        docs.append("".join(parts))
    return docs


_NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
_STATUS = ["pending", "shipped", "delivered", "cancelled", "on hold"]


def _primes(below: int) -> list[int]:
    return [n for n in range(2, below) if all(n % d for d in range(2, int(n**0.5) + 1))]


def enumeration_docs() -> list[str]:
    """Real enumerations that count (issue 18: not counted loops): long
    numbered procedures whose steps say different things, CSV exports with
    ids and varying fields, markdown tables of 100 rows with a counter, a
    name and a status that varies, the primes below 1,000, and the numbers
    counting themselves."""
    rnd = random.Random(4)
    docs = []
    for _ in range(4):
        docs.append(
            "".join(f"Step {i}: {_sentence(rnd, rnd.randint(4, 12))}\n" for i in range(1, 151))
        )
        docs.append("".join(f"{i}. {_sentence(rnd, rnd.randint(3, 10))}\n" for i in range(1, 151)))
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["id", "name", "email", "status", "amount", "created"])
        for i in range(1, 401):
            name = rnd.choice(_NAMES)
            w.writerow(
                [
                    1000 + i,
                    name.title(),
                    f"{name}{rnd.randint(1, 99)}@example.com",
                    rnd.choice(_STATUS),
                    round(rnd.uniform(1, 900), 2),
                    f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}",
                ]
            )
        docs.append(buf.getvalue())
        rows = "".join(
            f"| {i} | {rnd.choice(_NAMES).title()} | {rnd.choice(_STATUS)} |\n"
            for i in range(1, 101)
        )
        docs.append("| # | name | status |\n|---|---|---|\n" + rows)
    primes = _primes(1000)
    docs.append("The primes below 1,000: " + ", ".join(map(str, primes)) + ".")
    docs.append("".join(f"- {p}\n" for p in primes))
    docs.append("".join(f"{n}\n" for n in range(1, 3001)))
    return docs


def corpus() -> dict[str, list[str]]:
    return {
        "stdlib": stdlib_docs(STDLIB_BUDGET),
        "json": json_docs(),
        "csv": csv_docs(),
        "markdown": markdown_docs(),
        "enumerations": enumeration_docs(),
        "structured": [text for _, text in STRUCTURED],
    }


def _pieces(text: str) -> Iterator[str]:
    i, k = 0, 0
    n = len(text)
    while i < n:
        size = _SIZES[k & 4095]
        yield text[i : i + size]
        i += size
        k += 1


def _content_of(out: dict[str, Any]) -> str:
    return "".join((c.get("delta") or {}).get("content") or "" for c in out.get("choices") or [])


def stream_through_chain(text: str, request: dict[str, Any] | None) -> tuple[str, Context]:
    """Stream ``text`` through a sans-I/O ``Chain`` as one reply in
    token-sized pieces; what a client receives as content."""
    ctx = Context.of(request, {})
    chain = Chain(ctx)
    got: list[str] = []
    for piece in _pieces(text):
        view = ChunkView(choices=[ChoiceView(index=0, delta=DeltaView(content=piece))])
        original = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for out in chain.feed(view, original):
            if out is PASS:
                got.append(piece)
            elif out is not KEEPALIVE:
                assert isinstance(out, dict)
                got.append(_content_of(out))
        assert not chain.stopped
    fin = ChunkView(choices=[ChoiceView(index=0, delta=DeltaView(), finish_reason="stop")])
    for out in chain.feed(fin, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}):
        if isinstance(out, dict):
            got.append(_content_of(out))
    for out in chain.close():
        if isinstance(out, dict):
            got.append(_content_of(out))
    return "".join(got), ctx


def run_corpus(request: dict[str, Any] | None) -> tuple[int, int, list[str]]:
    """(bytes streamed, cuts, names of documents that changed)."""
    total = cuts = 0
    changed: list[str] = []
    for kind, docs in corpus().items():
        for n, doc in enumerate(docs):
            got, ctx = stream_through_chain(doc, request)
            total += len(doc.encode())
            cuts += ctx.report.counts["loop_cut"]
            if got != doc:
                changed.append(f"{kind}[{n}]")
    return total, cuts, changed


def test_corpus_without_tools_is_byte_identical_with_no_cut() -> None:
    total, cuts, changed = run_corpus(None)
    assert total >= 5_000_000
    assert cuts == 0
    assert changed == []


def test_corpus_with_tools_offered_is_byte_identical_with_no_cut() -> None:
    total, cuts, changed = run_corpus(SHAPES_REQUEST)
    assert total >= 5_000_000
    assert cuts == 0
    assert changed == []


def test_enumerations_through_the_cutter_at_every_long_check() -> None:
    """The enumerations reach the counted check (each is longer than its
    evidence) and the counted screen passes on some of them, yet none is
    cut: their numbers are not a loop."""
    docs = enumeration_docs()
    assert all(len(doc) > COUNTED_CHARS for doc in docs)
    assert [doc for doc in docs if _Channel().feed(doc)] == []


def test_whole_stdlib_through_the_cutter() -> None:
    """Every non-test stdlib module (~13 MB), one delta each (checks run
    at the same absolute positions whatever the chunking): no loop."""
    hits = [f.name for f in stdlib_files() if _Channel().feed(f.read_text("utf-8", "replace"))]
    assert hits == []


def test_the_stdlib_table_that_was_a_loop() -> None:
    """``encodings/iso8859_8.py`` decodes 28 unassigned bytes as 28
    identical lines ``    '\\ufffe'`` in a row: 13-character period, 364
    characters of exact repetition, cut under issue 4's bound alone. The
    copy is 8 of 13 characters punctuation and blanks, a table's row:
    structured, it needs ``STRUCTURED_SPAN`` (issue 24), and passes."""
    path = STDLIB / KNOWN_TABLE
    if not path.exists():  # pragma: no cover - other interpreters
        return
    text = path.read_text("utf-8")
    assert "    '\\ufffe'\n" * 28 in text
    assert structured("    '\\ufffe'\n")
    assert _Channel().feed(text) is None
    got, ctx = stream_through_chain(text, None)
    assert got == text and ctx.report.cut is None


if __name__ == "__main__":
    for req in (None, SHAPES_REQUEST):
        t0 = time.perf_counter()
        total, cuts, changed = run_corpus(req)
        dt = time.perf_counter() - t0
        tools = "yes" if req else "no "
        print(f"tools={tools} bytes={total} cuts={cuts} changed={len(changed)} {dt:.1f}s")
