"""``streamfix learn``: invented call shapes (markup no family uses), each
recorded in three replies, are learned, lift their held-out replies, and
change no genuine answer; a shape is never learned from one reply, nor with
a marker of letters only; a shape that would change a reply recorded for
another reason is rejected; the command prints TOML and writes a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamfix.formats.declared import compile_shapes, load_shapes
from streamfix.genuine import GENUINE
from streamfix.passthrough import reply, run, sse_stream
from streamfix.server.learn import infer, learn, read_replies
from streamfix.testing import registered
from streamfix.tools.cli import main

from .support.learncases import HELD_OUT, LEARN, REQUEST, SHAPES, record, render
from .test_negative_corpus import CORPUS


@pytest.fixture(scope="module")
def learned_all(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    d = tmp_path_factory.mktemp("recordings")
    for template in SHAPES.values():
        for call in LEARN:
            assert record(d, render(template, call)) is not None, render(template, call)
    # replies recorded for other reasons: a repair, plain prose that needed nothing
    assert record(d, '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A1"}}')
    assert record(d, "Order A1 ships today.") is None
    return d, learn(d)


def test_most_invented_shapes_are_learned_and_lift_held_out_replies(
    learned_all: tuple[Path, list[Any]],
) -> None:
    _, found = learned_all
    offered = [x for x in found if x.rejected is None]
    lifted = 0
    with registered(*compile_shapes([x.shape for x in offered])):
        for template in SHAPES.values():
            ok = True
            for call in HELD_OUT:
                got = reply(run(sse_stream([render(template, call)]), REQUEST))
                ok = ok and got.calls == ((call[1], call[2]),)
            lifted += ok
    print(f"learned and lifted: {lifted} / {len(SHAPES)}")
    assert lifted >= 0.8 * len(SHAPES)
    for x in offered:  # each came from three replies that now lift their calls
        assert len(x.sources) == 3
        assert all(x.lifted[p] for p in x.sources)


def test_no_genuine_answer_changes_with_every_learned_shape(
    learned_all: tuple[Path, list[Any]],
) -> None:
    _, found = learned_all
    shapes = [x.shape for x in found if x.rejected is None]
    texts = [*GENUINE, *CORPUS]
    before = [reply(run(sse_stream([t]), REQUEST)) for t in texts]
    with registered(*compile_shapes(shapes)):
        after = [reply(run(sse_stream([t]), REQUEST)) for t in texts]
    changed = [t for t, a, b in zip(texts, before, after, strict=True) if a != b]
    assert changed == []


def test_never_from_one_reply(tmp_path: Path) -> None:
    record(tmp_path, render(SHAPES["at-call"], LEARN[0]))
    assert learn(tmp_path) == []
    record(tmp_path, render(SHAPES["at-call"], LEARN[1]))
    assert [x.shape.start for x in learn(tmp_path)] == [("@@call",)]
    with pytest.raises(ValueError, match="never learned from one reply"):
        infer(read_replies(tmp_path), min_replies=1)
    assert all(s is None for s, _, _ in infer(read_replies(tmp_path), min_replies=3))


def test_a_marker_of_letters_and_digits_is_refused(tmp_path: Path) -> None:
    for call in LEARN:
        record(tmp_path, render("CALL {name} {args} END", call))
    (shape, _, why), *_ = infer(read_replies(tmp_path))
    assert shape is None
    assert why is not None and "letters and digits only" in why


def test_a_shape_that_changes_a_reply_recorded_for_another_reason_is_rejected(
    tmp_path: Path,
) -> None:
    for call in LEARN[:2]:
        record(tmp_path, render("@@call {name} {args} @@end", call))
    # a reply recorded as a repair that holds the same markup around a call
    record(
        tmp_path,
        '<tool_call>{"name": "refresh_cache", "arguments": {}}</tool_call>'
        ' and @@call lookup_order {"order_id": "A1"} @@end',
    )
    (x,) = learn(tmp_path)
    assert x.rejected is not None and "recorded for repair" in x.rejected


def test_the_command_prints_toml_and_writes_the_shapes_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    for call in LEARN:
        record(rec, render(SHAPES["angle-fn"], call))
    shapes = tmp_path / "shapes.toml"
    assert main(["learn", str(rec), "--write", str(shapes)]) == 0
    out = capsys.readouterr().out
    assert "# learned from 3 replies:" in out
    assert 'start = "<<fn:"' in out and 'end = "<</fn>>"' in out
    (shape,) = load_shapes(shapes)
    assert shape.start == ("<<fn:",) and shape.separator == (">>",)
    assert main(["learn", str(tmp_path / "none")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["learn", str(empty)]) == 1


def test_replies_lifted_today_teach_nothing(tmp_path: Path) -> None:
    from streamfix.shapes import use_shapes

    for call in LEARN:
        record(tmp_path, render(SHAPES["dollar"], call))
    (x,) = learn(tmp_path)
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(x.toml)
    try:
        use_shapes(shapes)
        assert learn(tmp_path) == []
    finally:
        use_shapes(None)
