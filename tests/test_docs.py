"""The documentation stays true to the code and to itself: every flag of
``streamfix serve --help`` is in ``docs/settings.md`` (the README no longer
carries the table, so a new flag must land there), every relative link in
README.md and docs/*.md reaches a file (and a heading, by GitHub's slug),
and every ``.md`` file the README, the docs, the package or the benchmarks
name exists (text moved out of the README must not leave a dangling name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamfix.tools.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

#: ``.md`` names in the code that are other projects' files, not ours.
FOREIGN = {"tools/server/README.md"}  # llama.cpp's server README (engines.py)

FENCE = re.compile(r"^\s*(```+|~~~+)[\w-]*\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
MD_NAME = re.compile(r"[\w./-]*\w\.md\b")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped
    (hyphens and underscores kept), each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6} (.+)", line)
        if fenced or heading is None:
            continue
        base = slug(heading.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slug_is_githubs() -> None:
    assert slug("The operator page (`--ui`)") == "the-operator-page---ui"
    assert slug("Coding agents: Codex CLI and Claude Code") == (
        "coding-agents-codex-cli-and-claude-code"
    )
    assert slug("Probe a backend, record what went wrong, replay it") == (
        "probe-a-backend-record-what-went-wrong-replay-it"
    )


def test_every_serve_flag_is_in_the_settings_page(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    flags = set(FLAG.findall(capsys.readouterr().out)) - {"--help"}
    assert {"--upstream", "--record-max-bytes", "--transform", "--format"} <= flags
    settings = (ROOT / "docs" / "settings.md").read_text()
    missing = sorted(f for f in flags if not re.search(re.escape(f) + r"(?![\w-])", settings))
    assert not missing, f"flags of `streamfix serve` not in docs/settings.md: {missing}"


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or heading is missing."""
    broken = []
    for line in prose(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_heading(page: Path) -> None:
    assert not broken_links(page)


def test_every_named_md_file_exists() -> None:
    sources = [*PAGES, *(ROOT / "streamfix").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    sources += [*(ROOT / "bench").rglob("*.md")]
    missing = []
    for source in sources:
        for name in set(MD_NAME.findall(source.read_text())):
            if name in FOREIGN:
                continue
            if not any((base / name).exists() for base in (ROOT, source.parent)):
                missing.append(f"{source.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_the_checks_catch_a_broken_link(tmp_path: Path) -> None:
    """The link check is not vacuous: a missing file or heading is reported;
    links in inline code and code blocks are not links."""
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "c.png").write_bytes(b"")
    (tmp_path / "a.md").write_text(
        "# Title\n\n## Real heading\n\n## Real heading\n\n"
        "[ok](#real-heading-1) [ok](a.md#title) ![ok](ui/c.png) `[code](x.md)`\n"
        "```\n[code](y.md)\n```\n"
        "[bad](#gone) [bad](b.md) [bad](a.md#nowhere) [web](https://example.com/z.md)\n"
    )
    assert anchors(tmp_path / "a.md") == {"title", "real-heading", "real-heading-1"}
    assert broken_links(tmp_path / "a.md") == [
        "#gone: no heading #gone in a.md",
        "b.md: no such file",
        "a.md#nowhere: no heading #nowhere in a.md",
    ]
