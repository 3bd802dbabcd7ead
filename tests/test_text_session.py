"""The text-completions core (streamfix/completions.py): a reply passes as
the upstream's bytes, a choice that loops is cut as the chat chain cuts it,
whatever the chunking of the bytes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix import text_session as completions
from streamfix.context import Context
from streamfix.delta import Delta
from streamfix.errors import UpstreamProtocolError
from streamfix.text_session import CompletionSession, expected_choices, fix_text_completion
from streamfix.transforms.repetition import RepetitionCutter

from .support.streamutil import split_at, split_sizes, sse
from .test_repetition import LOOPS, NOT_LOOPS, PARAGRAPH, PROSE, _bound, _loop_text, _pieces

#: Real prose, with no loop in it (non-ASCII too, so byte splits fall
#: inside UTF-8 sequences).
STORY = (
    "The ferry left the harbour a little after six, when the fog had thinned enough "
    "for the pilot to see the first buoy. Marta stood at the rail with her coffee and "
    "watched the town fall away: the church with its green copper roof, the row of "
    "warehouses that had become flats, the café where her grandfather used to play "
    "cards every Thursday until the owner retired and nobody bought the place.\n\n"
    "She had not been back in eleven years. The letter from the notary had been short "
    "and oddly formal, as if the house were a matter of paperwork rather than the place "
    "where she had learned to swim, to lie, and to make bread without a recipe. "
    "«You are the only heir», it said, and then a list of dates, none of them convenient.\n\n"
    "On the island the road from the jetty climbed between stone walls covered in "
    "lichen. A boy on a bicycle passed her twice — once going up, once coming down — "
    "and the second time he slowed to look at her suitcase, which was far too large "
    "for a weekend. She wondered what the neighbours would say, then decided that she "
    "did not care, which surprised her more than anything else that morning.\n\n"
    "The key was where the notary had said it would be, under the third flowerpot. "
    "Inside, the kitchen smelled of dust and thyme. Someone had covered the table with "
    "a sheet; under it she found a bowl of dried lemons, a pencil, and a note in her "
    "grandmother's hand: 北风 means the north wind, and it always brings guests. 🌬️ "
    "Marta laughed out loud, alone in the house, and opened every window."
)


def tchunk(
    text: str | None = "",
    finish: str | None = None,
    index: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """One streamed text-completion chunk, as vLLM sends it."""
    choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None}
    choice["finish_reason"] = finish
    return {
        "id": "cmpl-test",
        "object": "text_completion",
        "created": 1,
        "model": "test-model",
        "choices": [choice],
        **extra,
    }


def text_sse(pieces: Sequence[str], finish: str = "stop", done: bool = True) -> bytes:
    """A one-choice upstream stream: one chunk per piece, then the finish."""
    return sse([tchunk(p) for p in pieces] + [tchunk("", finish)], done)


def interleaved(pieces: list[list[str]]) -> list[dict[str, Any]]:
    """Choice ``i`` gets ``pieces[i]``: one chunk of each choice in turn."""
    turns = zip_longest(*([tchunk(p, index=i) for p in ps] for i, ps in enumerate(pieces)))
    return [c for turn in turns for c in turn if c is not None]


def run(
    parts: bytes | Sequence[bytes], request: dict[str, Any] | None = None, **options: Any
) -> tuple[bytes, CompletionSession]:
    """Feed ``parts`` as ``fix_sse`` feeds a session (stop once it has
    finished; a protocol error goes to ``fail``); the output."""
    if isinstance(parts, bytes):
        parts = [parts]
    s = CompletionSession(request, **options)
    out: list[bytes] = []
    try:
        for part in parts:
            out.append(s.feed(part))
            if s.finished:
                break
        out.append(s.close())
    except UpstreamProtocolError as exc:
        out.append(s.fail(exc))
    return b"".join(out), s


@dataclass
class Choice:
    text: str = ""
    finish_reason: str | None = None
    ext: dict[str, Any] | None = None


@dataclass
class Reply:
    """What a client assembles from a text-completion stream."""

    choices: dict[int, Choice] = field(default_factory=dict)
    done: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)

    def add(self, obj: dict[str, Any]) -> None:
        for ch in obj.get("choices") or []:
            c = self.choices.setdefault(ch.get("index", 0), Choice())
            c.text += ch.get("text") or ""
            if ch.get("finish_reason"):
                c.finish_reason = ch["finish_reason"]
            if ch.get("streamfix"):
                c.ext = ch["streamfix"]


def assemble_text(data: bytes) -> Reply:
    r = Reply()
    for block in data.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [ln for ln in block.split(b"\n") if ln.startswith(b"data:")]
        if not lines:
            continue
        assert not r.done, "an event after [DONE]"
        payload = b"\n".join(ln[6:] if ln.startswith(b"data: ") else ln[5:] for ln in lines)
        if payload == b"[DONE]":
            r.done = True
            continue
        obj = orjson.loads(payload)
        if "error" in obj:
            r.errors.append(obj["error"])
        else:
            r.add(obj)
    return r


def cut_of(pieces: list[str]) -> tuple[int, str, int]:
    """Where the repetition cutter, fed ``pieces`` as one channel, cuts:
    the piece it cuts in, the text of it kept, the period (so the expected
    bytes below do not restate the cutter's rules)."""
    cutter = RepetitionCutter(Context.of(None, {}))
    for k, piece in enumerate(pieces):
        d = Delta(content=piece)
        cutter.feed(d)
        if d.stop:
            assert d.ext is not None
            return k, d.content or "", d.ext["period"]
    raise AssertionError("no cut")


def cut_choice(text: str, period: int, index: int = 0) -> dict[str, Any]:
    return {
        "index": index,
        "text": text,
        "logprobs": None,
        "finish_reason": "length",
        "streamfix": {"cut": "repetition", "period": period},
    }


def frame(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"
LOOP_TEXT, LOOP_START, LOOP_P = _loop_text("Here is the answer. ", "the cat sat on the mat. ")
LOOP_PIECES = _pieces(LOOP_TEXT, 3)

# -- exact output ----------------------------------------------------------

PASSING: list[tuple[str, bytes]] = [
    ("plain", text_sse(_pieces(STORY, "random"))),
    ("one chunk", text_sse([STORY])),
    ("no [DONE]", text_sse(_pieces(STORY, 7), done=False)),
    ("crlf", text_sse(_pieces(STORY, 7)).replace(b"\n", b"\r\n")),
    ("comments", b": ping\n\n" + text_sse(["Hello", " world"], done=False) + b": bye\n\n" + DONE),
    (
        "vendor fields and usage",
        sse(
            [
                tchunk("Hi", system_fingerprint="fp_1", extra={"x": [1, 2]}),
                tchunk("", "stop"),
                {**tchunk(), "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
            ]
        ),
    ),
    (
        "logprobs",
        sse(
            [
                {
                    **tchunk(),
                    "choices": [
                        {
                            "index": 0,
                            "text": " Paris",
                            "logprobs": {"tokens": [" Paris"], "token_logprobs": [-0.1]},
                            "finish_reason": None,
                        }
                    ],
                },
                tchunk("", "stop"),
            ]
        ),
    ),
    (
        "n=2 interleaved",
        sse(
            [
                *interleaved([_pieces(STORY, 5), _pieces(PARAGRAPH + PROSE, 3)]),
                tchunk("", "stop", 0),
                tchunk("", "length", 1),
            ]
        ),
    ),
    (
        "another server's JSON (spaces, escapes)",
        b"".join(b"data: " + json.dumps(tchunk(p)).encode() + b"\n\n" for p in _pieces(STORY, 9))
        + DONE,
    ),
    ("error object", b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n'),
    ("a text that is not a string", sse([tchunk(None), {**tchunk(), "choices": [{"text": 5}]}])),
    ("multi-line data", b'data: {"choices":\ndata: [{"index": 0, "text": "a"}]}\n\n' + DONE),
]


@pytest.mark.parametrize(("name", "data"), PASSING, ids=[x[0] for x in PASSING])
def test_a_reply_with_no_loop_passes_byte_identical(name: str, data: bytes) -> None:
    out, s = run(data, {"n": 2} if "n=2" in name else None)
    assert out == data
    assert not s.stopped and s.report.cut is None
    assert s.saw_done == (b"[DONE]" in data)
    # …and one byte at a time.
    assert run([data[i : i + 1] for i in range(len(data))])[0] == data


def test_a_looping_choice_is_cut_with_length_and_the_field() -> None:
    data = text_sse(LOOP_PIECES, "length")
    k, kept, p = cut_of(LOOP_PIECES)
    assert p == LOOP_P == len("the cat sat on the mat. ")
    out, s = run(data)
    assert out == (
        sse([tchunk(piece) for piece in LOOP_PIECES[:k]], done=False)
        + frame({**tchunk(), "choices": [cut_choice(kept, p)]})
        + DONE
    )
    assert s.finished and s.stopped and not s.saw_done
    assert s.report.cut == {"cut": "repetition", "period": p}
    assert s.report.counts["loop_cut"] == 1
    text = assemble_text(out).choices[0].text
    assert LOOP_TEXT.startswith(text) and len(text) - LOOP_START <= max(4 * p, 400)


def test_the_cut_keeps_every_other_field_of_the_chunk() -> None:
    pieces = LOOP_PIECES
    k, kept, p = cut_of(pieces)
    logprobs = {"tokens": ["x"], "token_logprobs": [-1.0]}
    chunks = [tchunk(piece, system_fingerprint="fp_9") for piece in pieces]
    chunks[k]["choices"][0]["logprobs"] = logprobs
    chunks[k]["choices"][0]["vendor"] = {"seed": 7}
    chunks[k]["usage"] = {"completion_tokens": 99}
    out, _ = run(sse(chunks))
    last = orjson.loads(out.split(b"\n\n")[-3][6:])
    assert last == {
        **tchunk(system_fingerprint="fp_9"),
        "usage": {"completion_tokens": 99},
        "choices": [{**cut_choice(kept, p), "logprobs": logprobs, "vendor": {"seed": 7}}],
    }


def test_the_cut_of_a_whole_reply_in_one_chunk() -> None:
    out, s = run(text_sse([LOOP_TEXT]))
    kept = LOOP_TEXT[: LOOP_START + LOOP_P]  # the text before the loop and one copy
    assert out == frame({**tchunk(), "choices": [cut_choice(kept, LOOP_P)]}) + DONE
    assert s.stopped


def test_a_cut_in_the_finish_chunk() -> None:
    """The chunk that completes the loop also carries the finish: the cut
    overrides it."""
    data = sse([tchunk(LOOP_TEXT, "stop")])
    out, s = run(data)
    kept = LOOP_TEXT[: LOOP_START + LOOP_P]
    assert out == frame({**tchunk(), "choices": [cut_choice(kept, LOOP_P)]}) + DONE
    assert s.stopped and not s.saw_done


def _interleaved(loop_index: int, story_finish_at: int | None = None) -> list[dict[str, Any]]:
    """n=2: choice ``loop_index`` loops, the other tells the story; one
    chunk of each in turn, the story's finish after its piece
    ``story_finish_at`` (or after its last piece)."""
    story = _pieces(STORY, 3)
    if story_finish_at is not None:
        story = story[:story_finish_at]
    other = 1 - loop_index
    chunks: list[dict[str, Any]] = []
    for i in range(max(len(story), len(LOOP_PIECES))):
        if i < len(story):
            chunks.append(tchunk(story[i], index=other))
        if i == len(story):
            chunks.append(tchunk("", "stop", other))
        if i < len(LOOP_PIECES):
            chunks.append(tchunk(LOOP_PIECES[i], index=loop_index))
    chunks.append(tchunk("", "length", loop_index))
    if len(story) >= len(LOOP_PIECES):
        chunks.append(tchunk("", "stop", other))
    return chunks


@pytest.mark.parametrize("loop_index", [0, 1])
@pytest.mark.parametrize("request_", [None, {"n": 2, "prompt": "Once"}])
def test_n2_one_looping_choice(loop_index: int, request_: dict[str, Any] | None) -> None:
    """The looping choice is cut and says no more; the other goes on as the
    upstream's bytes; once it finishes too the session ends the stream."""
    chunks = _interleaved(loop_index)
    k, kept, p = cut_of(LOOP_PIECES)
    loop_chunks = [i for i, c in enumerate(chunks) if c["choices"][0]["index"] == loop_index]
    at = loop_chunks[k]
    expected = [frame(c) for c in chunks[:at]]
    expected.append(frame({**tchunk(), "choices": [cut_choice(kept, p, loop_index)]}))
    expected += [frame(c) for c in chunks[at + 1 :] if c["choices"][0]["index"] != loop_index]
    out, s = run(sse(chunks))
    assert out == b"".join(expected) + DONE
    assert s.stopped and not s.saw_done
    reply = assemble_text(out)
    assert reply.choices[1 - loop_index] == Choice(STORY, "stop")
    assert reply.choices[loop_index].finish_reason == "length"
    assert reply.choices[loop_index].ext == {"cut": "repetition", "period": p}


def test_n2_the_other_choice_already_finished() -> None:
    """The story finished before the loop was cut: the cut ends the stream
    at once."""
    chunks = _interleaved(1, story_finish_at=10)
    out, s = run(sse(chunks))
    assert out.endswith(b'"streamfix":{"cut":"repetition","period":24}}]}\n\n' + DONE)
    assert s.stopped
    assert assemble_text(out).choices[0] == Choice(STORY[:30], "stop")


def test_n2_a_choice_not_seen_yet_keeps_the_stream_going() -> None:
    """With ``n: 2`` asked, a cut of choice 0 before choice 1 has started
    does not end the stream: choice 1 is still to come."""
    chunks = [tchunk(p) for p in LOOP_PIECES] + [
        tchunk("Later.", index=1),
        tchunk("", "stop", 1),
    ]
    out, s = run(sse(chunks), {"n": 2})
    reply = assemble_text(out)
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[1] == Choice("Later.", "stop")
    assert s.stopped and s.finished and not s.saw_done
    # Not asked: the cut of the only choice seen ends the stream.
    out, s = run(sse(chunks))
    assert 1 not in assemble_text(out).choices and s.stopped


def test_n2_two_choices_in_one_chunk() -> None:
    """Both choices in every chunk: the cut choice is rewritten, the other
    stays as it came, in the same chunk; after the cut the chunk carries
    only the other choice."""
    story = _pieces(STORY, 3)
    k, kept, p = cut_of(LOOP_PIECES)
    chunks = []
    for i, piece in enumerate(LOOP_PIECES):
        c = tchunk(piece)
        c["choices"].insert(0, tchunk(story[i], index=1)["choices"][0])
        chunks.append(c)
    out, s = run(sse(chunks, done=False))
    assert not s.finished  # choice 1 is open
    events = out.split(b"\n\n")[:-1]
    assert len(events) == len(chunks)
    assert events[:k] == [frame(c)[:-2] for c in chunks[:k]]
    assert orjson.loads(events[k][6:])["choices"] == [
        chunks[k]["choices"][0],
        cut_choice(kept, p),
    ]
    after = orjson.loads(events[k + 1][6:])["choices"]
    assert after == [chunks[k + 1]["choices"][0]]


# -- the end of the stream -------------------------------------------------


def test_done_passes_and_ends_the_stream() -> None:
    data = text_sse(["Hello", " world"])
    s = CompletionSession()
    assert s.feed(data + b"data: late\n\n") == data  # nothing after [DONE]
    assert s.saw_done and s.finished and not s.stopped
    assert s.feed(b"data: more\n\n") == b"" and s.close() == b""


def test_done_after_a_cut_is_not_sent_twice() -> None:
    """The cut sends ``[DONE]``; the upstream's own, read in the same read
    or a later one, is not sent again."""
    data = text_sse(LOOP_PIECES)
    for parts in ([data], split_at(data, range(0, len(data), 100))):
        out, s = run(parts)
        assert out.count(b"[DONE]") == 1 and out.endswith(DONE)
        assert not s.saw_done
    s = CompletionSession()
    s.feed(data)
    assert s.finished and s.feed(DONE) == b"" and s.close() == b""


def test_a_stream_that_ends_without_done() -> None:
    """``close`` adds no ``[DONE]`` (the I/O layer decides what a
    truncated stream means); a last event with no blank line after it is
    ended properly."""
    data = sse([tchunk("Hello"), tchunk(" world")], done=False)
    s = CompletionSession()
    assert s.feed(data[:-2]) == data[: data.index(b"data: ", 1)]
    assert s.close() == frame(tchunk(" world"))
    assert not s.saw_done and not s.finished
    # The I/O layer then says why, with ``fail``.
    tail = s.fail(UpstreamProtocolError("upstream ended the stream before [DONE]"))
    assert assemble_text(tail).errors == [
        {
            "message": "upstream ended the stream before [DONE]",
            "type": "upstream_protocol_error",
            "code": None,
        }
    ]
    assert s.finished and s.fail(RuntimeError("again")) == b""


def test_a_loop_in_a_stream_without_done_is_still_cut() -> None:
    out, s = run(text_sse(LOOP_PIECES, done=False))
    assert out.endswith(DONE) and s.stopped
    assert assemble_text(out).choices[0].finish_reason == "length"


def test_what_a_cutter_releases_at_the_end_goes_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each open choice's cutter is closed at the end of the stream (the
    Transform protocol: ``close`` releases what is held). Today's cutter
    holds nothing; one that did would have it sent, in a chunk made after
    the last one seen."""

    def close(self: RepetitionCutter, d: Delta) -> None:
        if not d.content and d.finish_reason is None:
            d.content = "[held]"

    monkeypatch.setattr(RepetitionCutter, "close", close)
    data = sse([tchunk("Hello", index=1, usage={"total_tokens": 1})], done=False)
    made = {**tchunk("[held]", index=1)}
    assert run(data)[0] == data + frame(made)
    assert run(data + DONE)[0] == data + frame(made) + DONE


# -- broken input ----------------------------------------------------------

ERRORS: list[tuple[str, bytes, str]] = [
    ("not json", b"data: {not json\n\n", "chunk is not JSON"),
    ("truncated json", b'data: {"choices": [{"text": "a"\n\n', "chunk is not JSON"),
    ("empty data", b"data: \n\n", "chunk is not JSON"),
    ("a number", b"data: 42\n\n", "chunk is not a JSON object"),
    ("an array", b"data: [1, 2]\n\n", "chunk is not a JSON object"),
    ("bad json after a type error", b'data: {"choices": 5, x\n\n', "chunk is not JSON"),
]


@pytest.mark.parametrize(("name", "bad", "message"), ERRORS, ids=[x[0] for x in ERRORS])
def test_broken_json_ends_with_an_error_event(name: str, bad: bytes, message: str) -> None:
    """As ``SSESession``: ``feed`` raises UpstreamProtocolError, ``fail``
    sends what the good events of the same read gave, then the error."""
    good = sse([tchunk("Hello")], done=False)
    s = CompletionSession()
    with pytest.raises(UpstreamProtocolError, match=message):
        s.feed(good + bad + frame(tchunk("never")))
    tail = s.fail(UpstreamProtocolError("x"))
    assert tail.startswith(good)
    [err] = assemble_text(tail).errors
    assert err["type"] == "upstream_protocol_error" and err["message"] == "x"
    assert s.finished and s.feed(b"data: {}\n\n") == b""
    out, _ = run([good, bad])
    assert out.startswith(good) and message in assemble_text(out).errors[0]["message"]


def test_an_event_over_the_size_limit_ends_with_an_error_event() -> None:
    good = frame(tchunk("Hello"))
    out, s = run([good, b"data: " + b"x" * 2000], max_event_bytes=1000)
    assert out.startswith(good) and s.finished
    assert "larger than 1000 bytes" in assemble_text(out).errors[0]["message"]


def test_an_upstream_failure_is_an_upstream_error() -> None:
    s = CompletionSession()
    s.feed(frame(tchunk("Hel")))
    [err] = assemble_text(s.fail(ConnectionResetError())).errors
    assert err == {"message": "ConnectionResetError", "type": "upstream_error", "code": None}


def test_loose_fields_are_read_loosely() -> None:
    """A server that sends the index as a string: read as the chat chain
    reads it, and the loop is cut all the same (the index goes back out as
    the server wrote it)."""
    data = sse([{**tchunk(p), "choices": [{"index": "0", "text": p}]} for p in LOOP_PIECES])
    out, s = run(data)
    assert s.stopped
    assert b'{"index":"0","text":"' in out.split(b"\n\n")[-3]
    assert out.split(b"\n\n")[-3].endswith(
        b'"finish_reason":"length","streamfix":{"cut":"repetition","period":24}}]}'
    )


def test_option_off_never_cuts() -> None:
    data = text_sse(LOOP_PIECES)
    out, s = run(data, repetition=False)
    assert out == data and not s.stopped


def test_choices_past_the_bound_pass_unwatched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(completions, "MAX_CHOICES", 1)
    chunks = [tchunk("Hi", index=0)] + [tchunk(p, index=1) for p in LOOP_PIECES]
    out, s = run(sse(chunks))
    assert out == sse(chunks) and not s.stopped


@pytest.mark.parametrize(
    ("request_", "n"),
    [
        (None, 1),
        ({"prompt": "Once"}, 1),
        ({"prompt": "Once", "n": 3}, 3),
        ({"prompt": ["a", "b"], "n": 2}, 4),
        ({"prompt": [[1, 2], [3]]}, 2),
        ({"prompt": [1, 2, 3], "n": 2}, 2),  # token ids: one prompt
        ({"prompt": [], "n": True}, 1),
        ({"n": 0}, 1),
        ({"n": "2"}, 1),
    ],
)
def test_expected_choices(request_: dict[str, Any] | None, n: int) -> None:
    assert expected_choices(request_) == n


# -- non-streamed ------------------------------------------------------------


def completion(*texts: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "test-model",
        "choices": [
            {"text": t, "index": i, "logprobs": None, "finish_reason": "length"}
            for i, t in enumerate(texts)
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 400, "total_tokens": 401},
        **extra,
    }


def test_a_non_streamed_completion_is_cut() -> None:
    obj = completion(STORY, LOOP_TEXT, system_fingerprint="fp")
    before = orjson.dumps(obj)
    out = fix_text_completion(obj)
    assert orjson.dumps(obj) == before  # the argument is not modified
    assert out == {
        **obj,
        "choices": [
            obj["choices"][0],
            {
                "text": LOOP_TEXT[: LOOP_START + LOOP_P],
                "index": 1,
                "logprobs": None,
                "finish_reason": "length",
                "streamfix": {"cut": "repetition", "period": LOOP_P},
            },
        ],
    }
    s = CompletionSession()
    assert s.complete(obj) == out and s.report.cut == {"cut": "repetition", "period": LOOP_P}


@pytest.mark.parametrize(
    "obj",
    [
        completion(STORY),
        completion(STORY, PROSE),
        {"error": {"message": "boom"}},
        {"choices": "no"},
        {"choices": [None, {"text": 5}]},
    ],
)
def test_a_non_streamed_completion_with_no_loop_is_unchanged(obj: dict[str, Any]) -> None:
    out = fix_text_completion(obj)
    assert out == obj and out is not obj


def _assembled(obj: dict[str, Any]) -> dict[int, Choice]:
    r = Reply()
    r.add(obj)
    return r.choices


_TEXTS = st.one_of(
    st.sampled_from(LOOPS).map(lambda x: _loop_text(x[1], x[2])[0]),
    st.builds(lambda a, n: STORY[a : a + n], st.integers(0, len(STORY)), st.integers(0, 2000)),
)


@given(st.lists(_TEXTS, min_size=1, max_size=3), st.lists(st.integers(0, 30_000), max_size=12))
def test_the_whole_reply_is_cut_as_the_stream_of_it_in_one_chunk(
    texts: list[str], cuts: list[int]
) -> None:
    obj = completion(*texts)
    data = sse([obj])  # the whole reply as one chunk
    out, _ = run(split_at(data, cuts), {"n": len(texts)})
    assert assemble_text(out).choices == _assembled(fix_text_completion(obj))


# -- properties --------------------------------------------------------------


@given(
    st.sampled_from(LOOPS),
    st.lists(st.integers(1, 40), min_size=1, max_size=20),
    st.lists(st.integers(0, 40_000), max_size=40),
)
def test_byte_splits_do_not_matter(
    loop: tuple[str, str, str], sizes: list[int], cuts: list[int]
) -> None:
    """Any split of the upstream's bytes (inside UTF-8 sequences and SSE
    lines too) gives the same bytes out as the unsplit stream."""
    text, start, p = _loop_text(loop[1], loop[2])
    data = text_sse(split_sizes(text, sizes))
    whole, _ = run(data)
    assert run(split_at(data, cuts))[0] == whole
    got = assemble_text(whole).choices[0]
    assert got.ext == {"cut": "repetition", "period": p}
    assert text.startswith(got.text) and len(got.text) - start <= _bound(loop[2])


def test_single_byte_reads_and_utf8_cut_between_reads() -> None:
    loop = _loop_text("答案如下：", "我们需要重新考虑这个问题。")[0]
    for text in (loop, STORY):
        data = text_sse(_pieces(text, "random"))
        whole, _ = run(data)
        assert run([data[i : i + 1] for i in range(len(data))])[0] == whole
        # every read ends just after the first byte of a character of two or more
        cuts = [i + 1 for i in range(len(data)) if data[i] >= 0xC0]
        assert run(split_at(data, cuts))[0] == whole


#: Text with no loop: the story from any point on (wrapping round once),
#: or the cutter's own corpus of legitimate repetitive structure (tables,
#: JSON arrays, numbered lists, code).
_NO_LOOP = st.one_of(
    st.integers(0, len(STORY)).map(lambda i: STORY[i:] + "\n\n" + STORY[:i] + PROSE),
    st.sampled_from(NOT_LOOPS).map(lambda x: x[1]),
)


@given(
    _NO_LOOP,
    st.one_of(st.none(), _NO_LOOP),
    st.lists(st.integers(1, 30), min_size=1, max_size=10),
    st.lists(st.integers(0, 40_000), max_size=30),
)
def test_text_with_no_loop_comes_through_byte_identical(
    text: str, second: str | None, sizes: list[int], cuts: list[int]
) -> None:
    """At any chunking of the text and of the bytes; with a ``second``
    choice, the two choices' chunks in turn."""
    texts = [text] if second is None else [text, second]
    chunks = interleaved([split_sizes(t, sizes) for t in texts])
    chunks += [tchunk("", "stop", i) for i in range(len(texts))]
    data = sse(chunks)
    out, s = run(split_at(data, cuts), {"n": len(texts)})
    assert out == data
    assert s.saw_done and not s.stopped and s.report.cut is None
