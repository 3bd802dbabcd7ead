"""Structured output, byte for byte: a valid JSON reply streamed for a
``response_format`` leaves as the upstream's own bytes, chunk by chunk, at
any tokenisation and any read size, and a chunk whose tail the rewriter
holds is kept back whole, not re-cut (``chain``'s module doc, "Chunks kept
back whole"). A reply that needed repair still assembles to its whole-text
result at every split."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfix
from streamfix import chain as chain_mod
from streamfix.session import SSESession
from tests.support.streamutil import (
    assemble,
    chunk,
    fixed_whole,
    split_at,
    split_sizes,
    sse,
    text_stream,
)


def request(strict: bool = False, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    js: dict[str, Any] = {"name": "out", "schema": schema or {"type": "object"}}
    if strict:
        js["strict"] = True
    return {
        "model": "m",
        "messages": [],
        "response_format": {"type": "json_schema", "json_schema": js},
    }


def through(data: bytes, req: dict[str, Any], reads: list[int] | None = None) -> bytes:
    session = SSESession(req)
    parts = split_at(data, reads or [])
    return b"".join(session.feed(p) for p in parts) + session.close()


# -- values ----------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFF), max_size=12
    ),
)
_keys = st.text(alphabet='abcdefghij_KLMNO "\\é', min_size=1, max_size=8)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)
_objects = st.dictionaries(_keys, _values, min_size=1, max_size=5)


def _dump(value: Any, layout: int) -> str:
    if layout == 0:
        return json.dumps(value, ensure_ascii=False)
    if layout == 1:
        return json.dumps(value, separators=(",", ":"))
    return json.dumps(value, indent=layout - 1, ensure_ascii=False)


@settings(max_examples=150, deadline=None)
@given(
    value=_objects,
    layout=st.integers(min_value=0, max_value=4),
    sizes=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8),
    reads=st.lists(st.integers(min_value=1, max_value=4000), max_size=6),
)
def test_valid_reply_is_the_upstreams_own_bytes_at_any_tokenisation(
    value: dict[str, Any], layout: int, sizes: list[int], reads: list[int]
) -> None:
    text = _dump(value, layout)
    data = text_stream(split_sizes(text, sizes))
    assert through(data, request(), reads) == data
    assert through(data, request(), [len(data) // 2]) == data


@settings(max_examples=60, deadline=None)
@given(value=_objects, sizes=st.lists(st.integers(min_value=1, max_value=5), min_size=1))
def test_valid_reply_chunks_pass_through_fix_chunks_as_the_same_objects(
    value: dict[str, Any], sizes: list[int]
) -> None:
    chunks = [chunk(role="assistant", content="")]
    chunks += [chunk(p) for p in split_sizes(json.dumps(value), sizes)]
    chunks.append(chunk(finish="stop"))

    async def go() -> list[dict[str, Any]]:
        async def src() -> AsyncIterator[dict[str, Any]]:
            for c in chunks:
                yield c

        return [c async for c in streamfix.fix_chunks(src(), request())]

    got = asyncio.run(go())
    assert len(got) == len(chunks)
    assert all(a is b for a, b in zip(got, chunks, strict=True))


_BROKEN = [
    "```json\n{'name': 'Ada', 'age': 36,}\n```",
    'Here is the data:\n{"name": "Ada", "tags": [True, None,], // c\n "n": 1.5}',
    '{"name": "Ada", "note": "a \\* b", "age": 36',
    '{name: "Ada", "age": 36, "x": [1, 2 3]}',
    '{"a": 1, "b": "tab\there"}',
]


@settings(max_examples=80, deadline=None)
@given(
    text=st.sampled_from(_BROKEN),
    sizes=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8),
    reads=st.lists(st.integers(min_value=1, max_value=3000), max_size=4),
)
def test_repaired_reply_equals_its_whole_text_result_at_any_split(
    text: str, sizes: list[int], reads: list[int]
) -> None:
    req = request()
    choice, _ = fixed_whole(text, req)
    want, note = choice["message"]["content"], choice.get("streamfix")
    got = assemble(through(text_stream(split_sizes(text, sizes)), req, reads))
    assert got.content == (want or "")
    assert got.ext == note
    assert got.done and not got.errors and got.comments == 0


def test_repaired_reply_at_every_split_in_two_and_by_character() -> None:
    req = request()
    for text in _BROKEN:
        choice, _ = fixed_whole(text, req)
        want, note = choice["message"]["content"], choice.get("streamfix")
        cuts = [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text)]
        for pieces in cuts:
            got = assemble(through(text_stream(pieces), req))
            assert got.content == want, pieces
            assert got.ext == note, pieces


def test_a_chunk_kept_back_then_repaired_keeps_its_own_fields() -> None:
    """A chunk kept back whole whose text turns out repaired goes out as it
    would have without the keeping: its other fields (logprobs, a vendor
    field) kept, in order, before the repaired text."""
    req = request()
    head = chunk(role="assistant", content="")
    first = chunk('{"a": 1,')
    first["choices"][0]["logprobs"] = {"content": [{"token": ",", "logprob": -0.5}]}
    first["vendor"] = "x"
    data = sse([head, first, chunk("}"), chunk(finish="stop")])
    out = through(data, req)
    objs = [orjson.loads(b[6:]) for b in out.split(b"\n\n") if b.startswith(b"data: {")]
    assert [o.get("vendor") for o in objs].count("x") == 1
    kept = next(o for o in objs if o.get("vendor") == "x")
    assert kept["choices"][0]["logprobs"] == first["choices"][0]["logprobs"]
    assert kept["choices"][0]["delta"]["content"] == '{"a": 1'
    assert assemble(out).content == '{"a": 1}'
    assert out.startswith(sse([head], done=False))


def test_kept_back_chunks_are_bounded() -> None:
    """A key longer than the bound: the chunks kept back are let go (sent
    as they would have been), never more than ``MAX_KEPT_CHUNKS`` held."""
    req = request()
    key = "k" * (chain_mod.MAX_KEPT_CHUNKS * 3)
    pieces = ['{"', *key, '": 1}']
    session = SSESession(req)
    session.feed(sse([chunk(role="assistant", content="")], done=False))
    outs, most = [], 0
    for p in pieces:
        outs.append(session.feed(sse([chunk(p)], done=False)))
        most = max(most, len(session._kept))
    assert most == chain_mod.MAX_KEPT_CHUNKS
    assert sum(1 for o in outs if o) >= 2  # let go on the way, not only at the end
    rest = session.feed(sse([chunk(finish="stop")])) + session.close()
    assert assemble(b"".join(outs) + rest).content == '{"' + key + '": 1}'


def test_no_response_format_and_strict_are_unchanged() -> None:
    """Without ``response_format`` nothing is kept back (the chain passes
    every chunk); under ``strict: true`` the reply is held whole and sent
    as one repaired delta, as before."""
    text = '{"name": "Ada", "age": 36}'
    data = text_stream(split_sizes(text, [3]))
    assert through(data, {"model": "m", "messages": []}) == data
    out = through(data, request(strict=True))
    assert assemble(out).content == text


def test_a_reply_that_ends_without_a_finish_chunk_is_resolved_at_close() -> None:
    """No finish chunk: the end decides. What the end released as it came
    leaves as the kept chunks' own bytes; what it completed (a bracket)
    leaves as rebuilt chunks."""
    req = request(schema={"type": "integer"})
    data = sse([chunk(role="assistant", content=""), chunk("4"), chunk("2")], done=False)
    session = SSESession(req)
    out = session.feed(data)
    assert assemble(out).content == ""  # the number waits
    assert out + session.close() == data
    req = request()
    data = sse([chunk(role="assistant", content=""), chunk('{"a": '), chunk("12")], done=False)
    session = SSESession(req)
    out = session.feed(data)
    assert assemble(out).content == ""  # the chunk ends in a key: kept whole
    out += session.close()
    assert assemble(out).content == '{"a": 12}'
