"""The model-family format modules, without the detector: each table entry
is a text that starts with a family's marker, the region the end finder
must cut (trailing text after it must not be swallowed), and the calls its
``parse`` must give. Every entry is also fed to the end finder split at
every character boundary and at random (hypothesis): same end offset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.formats import _family, deepseek, glm, kimi, minimax, mistral
from streamfix.formats.base import ABORT, Format, RawCall
from streamfix.spec import tools_of
from streamfix.toolargs import parse_object
from tests.support.streamutil import SHAPES_REQUEST

from .support.family_cases import CASES, MARKUP, NOT_THIS, Case

TOOLS = tools_of(SHAPES_REQUEST)
FAMILY_MODULES = (
    *("mistral", "llama", "deepseek", "kimi", "glm", "harmony", "granite", "phi4", "minimax"),
    *("gemma", "seed_oss", "internlm", "lfm2", "apertus", "cohere", "longcat", "nemotron"),
    *("gigachat", "hunyuan", "k2_horizon"),
)


def feed_pieces(fmt: Format, marker: str, pieces: Sequence[str]) -> int | None:
    """Absolute end offset the format's finder reports (or ABORT/None)."""
    finder = fmt.end_finder(marker)
    pos = 0
    for piece in pieces:
        r = finder.feed(piece)
        if r is None:
            pos += len(piece)
            continue
        if r == ABORT:
            return ABORT
        assert 0 <= r <= len(piece)
        return pos + r
    return None


def norm(calls: list[RawCall] | None) -> list[tuple[str, Any]] | None:
    if calls is None:
        return None
    out: list[tuple[str, Any]] = []
    for c in calls:
        args = c.arguments
        if isinstance(args, str):
            args, _ = parse_object(args)
        out.append((c.name, args))
    return out


def ids(cases: Sequence[Case]) -> list[str]:
    return [c.id for c in cases]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_whole(case: Case) -> None:
    text = case.region + case.after
    assert feed_pieces(case.fmt, case.marker, [text]) == case.end
    if case.end is not None and case.end != ABORT:
        assert norm(case.fmt.parse(text[: case.end], TOOLS)) == case.calls


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_every_split(case: Case) -> None:
    text = case.region + case.after
    for k in range(len(text) + 1):
        assert feed_pieces(case.fmt, case.marker, [text[:k], text[k:]]) == case.end, k
    assert feed_pieces(case.fmt, case.marker, list(text)) == case.end


@given(data=st.data())
def test_random_splits(data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(CASES))
    text = case.region + case.after
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert feed_pieces(case.fmt, case.marker, pieces) == case.end


@pytest.mark.parametrize(("fmt", "region"), MARKUP, ids=[r[:40] for _, r in MARKUP])
def test_not_a_call_is_none(fmt: Format, region: str) -> None:
    """Regions with the family's marker that hold no call: None (markup)."""
    assert fmt.parse(region, TOOLS) is None


@pytest.mark.parametrize(("fmt", "region"), NOT_THIS, ids=[r[:40] for _, r in NOT_THIS])
def test_other_format_bodies_are_left_alone(fmt: Format, region: str) -> None:
    """A shared marker whose body is another format's (JSON in ``<tool_call>``
    for GLM): None, so the registry tries the next parser."""
    assert fmt.parse(region, TOOLS) is None


def test_every_family_declares_formats() -> None:
    import importlib

    for mod in FAMILY_MODULES:
        m = importlib.import_module(f"streamfix.formats.{mod}")
        assert m.FORMATS and all(isinstance(f, Format) and f.markers and f.name for f in m.FORMATS)
    assert _family.FORMATS == []


def test_every_family_format_has_cases() -> None:
    """Each family format class has at least one lifted case in the table."""
    import importlib

    covered = {type(c.fmt) for c in CASES if c.calls}
    for mod in FAMILY_MODULES:
        for f in importlib.import_module(f"streamfix.formats.{mod}").FORMATS:
            assert type(f) in covered, f


def test_steps_complete_only_optional_left() -> None:
    """``Steps.complete``: at the end of the stream a region waiting only
    for an optional closing token (Harmony's ``<|call|>``, a stop token most
    engines never send) is a whole call."""
    f = _family.Steps(3, _family.Json("{"), _family.Opt("<|call|>"))
    assert f.feed("abc{") is None and not f.complete
    assert f.feed('"a": 1}') is None and f.complete
    assert f.feed("<|ca") is None and f.complete
    assert f.feed("ll|> rest") == 4


def test_more_is_incomplete_inside_a_further_value() -> None:
    f = _family.Steps(0, _family.Json("{"), _family.More(";"))
    assert f.feed("{}") is None and f.complete
    assert f.feed("; {") is None and not f.complete
    assert f.feed('"a": 1}') is None and f.complete
    assert f.feed(" x") == 0


def test_opt_takes_either_of_its_tokens() -> None:
    """Harmony's call message may end with ``<|call|>`` or ``<|end|>``: both
    share ``<|``, and either is taken whole, at any split."""
    for tail in ("<|end|>", "<|call|>"):
        for cut in range(len(tail) + 1):
            f = _family.Steps(0, _family.Json("{"), _family.Opt("<|call|>", "<|end|>"))
            whole = cut == len(tail)
            assert f.feed("{}" + tail[:cut]) == (2 + len(tail) if whole else None)
            if not whole:
                assert f.feed(tail[cut:] + " x") == len(tail) - cut
    f = _family.Steps(0, _family.Json("{"), _family.Opt("<|call|>", "<|end|>"))
    assert f.feed("{}<|e x") == 5  # a broken token is swallowed up to where it broke


def test_opt_mismatch_at_piece_start_ends_at_zero() -> None:
    f = _family.Steps(0, _family.Json("{"), _family.Opt("<|eom_id|>"))
    assert f.feed("{}") is None
    assert f.feed(" text") == 0


def test_header_prose_aborts_before_limit() -> None:
    f = mistral.Mistral().end_finder("[TOOL_CALLS]")
    assert f.feed("[TOOL_CALLS]lookup") is None
    assert f.feed("_order is the tool") == ABORT


@pytest.mark.parametrize(
    ("fmt", "region"),
    [
        (glm.Glm(), "<tool_call>f" + "<arg_key>k</arg_key><arg_value>v" * 8000),
        (
            minimax.MiniMax(),
            '<minimax:tool_call><invoke name="x">' + '<parameter name="a">v' * 8000,
        ),
        (minimax.MiniMaxM3(), ']<]minimax[>[<tool_call><invoke name="x">' + "<a>v" * 8000),
        (kimi.KimiK3(), '<|open|>call tool="x"<|sep|>' + '<|open|>argument key="a"<|sep|>v' * 8000),
        (
            deepseek.Dsml(),
            '<｜DSML｜tool_calls><｜DSML｜invoke name="x">' + '<｜DSML｜parameter name="a">' * 8000,
        ),
    ],
    ids=["glm", "minimax", "minimax_m3", "kimi_k3", "dsml"],
)
def test_unclosed_elements_parse_in_linear_time(fmt: Format, region: str) -> None:
    """A cut-off region full of unclosed elements is rejected after one scan,
    not one scan per element (regex retries at every position)."""
    import time

    t0 = time.perf_counter()
    assert fmt.parse(region, TOOLS) is None
    assert time.perf_counter() - t0 < 0.5


def test_typed_value_keeps_text_for_a_nullable_string() -> None:
    """GLM / DSML / Step values: a parameter whose schema admits a string
    (``anyOf`` with null, as Pydantic writes ``Optional[str]``) keeps its
    text; only other parameters are read as JSON."""
    tools = tools_of(
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                                "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                            },
                        },
                    },
                }
            ]
        }
    )
    assert _family.typed_value("5", tools, "f", "note") == "5"
    assert _family.typed_value("5", tools, "f", "n") == 5


def test_apertus_reply_ending_inside_the_list() -> None:
    """vLLM ``test_incomplete_tool_call``: the reply ends after a call's
    arguments closed, before the call object's ``}`` and the list's ``]``:
    the envelope is closed and the call read; arguments cut short are not
    closed for them."""
    from streamfix.formats import apertus

    f = apertus.Apertus()
    head = '<|tools_prefix|>[{"lookup_order": {"order_id": "F-6"}'
    assert norm(f.parse(head, TOOLS)) == [("lookup_order", {"order_id": "F-6"})]
    assert norm(f.parse(head + "}", TOOLS)) == [("lookup_order", {"order_id": "F-6"})]
    assert f.parse('<|tools_prefix|>[{"lookup_order": {"order_id": "F-6"', TOOLS) is None
    assert f.parse('<|tools_prefix|>[{"lookup_order": {"order_id": "F-', TOOLS) is None
