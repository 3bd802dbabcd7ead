"""The turn ends at a family's end-of-turn markup the server did not stop
at (``transforms/turn_end.py``): the next turn the model goes on to write
(``<|im_start|>user``…) or PLaMo 3's ``<|plamo:tag|>`` is not the reply; the
text before it goes out, the upstream is told to stop, the finish is
``stop`` (``tool_calls`` after a call). A marker inside a call's arguments
is data."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from streamfix.chain import Chain
from streamfix.chunks import ChoiceView, ChunkView, DeltaView
from streamfix.context import Context

from .support.detectutil import check_split_invariant, result, run_pieces


def _request(model: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {"text": {"type": "string"}}}
    return {
        "model": model,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "note", "parameters": params}}],
    }


QWEN = _request("Qwen/Qwen2.5-7B-Instruct")

NEXT_TURN = "<|im_end|>\n<|im_start|>user\nAnd of Spain?<|im_end|>\n<|im_start|>assistant\nMadrid."


def test_the_users_turn_the_model_writes_is_not_the_reply() -> None:
    content, _, calls, finish = check_split_invariant("Paris is the capital." + NEXT_TURN, QWEN)
    assert content == "Paris is the capital.\n" and calls == [] and finish == "stop"


def test_plamo_3_end_of_turn() -> None:
    request = _request("pfnet/plamo-3") | {"chat_template_kwargs": {"enable_thinking": False}}
    assert check_split_invariant("answer<|plamo:tag|>ignored", request)[0] == "answer"


def test_llama_3_next_user_header() -> None:
    text = "Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd Spain?"
    content, _, _, finish = check_split_invariant(text, _request("meta-llama/Llama-3.1-8B"))
    assert content == "Paris." and finish == "stop"


def test_a_call_before_the_end_of_turn_is_the_calls_reply() -> None:
    text = '<tool_call>{"name": "note", "arguments": {"text": "hi"}}</tool_call>' + NEXT_TURN
    _, _, calls, finish = check_split_invariant(text, QWEN)
    assert calls == [("note", {"text": "hi"})] and finish == "tool_calls"


def test_the_marker_inside_a_calls_arguments_is_data() -> None:
    args = '{"text": "<|im_start|>user\\nhello"}'
    text = f'<tool_call>{{"name": "note", "arguments": {args}}}</tool_call>'
    _, _, calls, finish = check_split_invariant(text, QWEN)
    assert calls == [("note", {"text": "<|im_start|>user\nhello"})] and finish == "tool_calls"


def test_what_only_starts_like_a_marker_is_kept() -> None:
    text = "Use <|im_start|>userland or a < b <|im_start|>user"  # no newline: no turn
    content, _, _, finish = check_split_invariant(text, QWEN)
    assert "userland or a < b" in content and finish == "stop"


def test_the_upstream_is_told_to_stop() -> None:
    chain = Chain(Context.of(QWEN, {}))
    for piece in ("Paris.<|im_end|>\n<|im_st", "art|>user\nAnd"):
        view = ChunkView(choices=[ChoiceView(index=0, delta=DeltaView(content=piece))])
        chain.feed(view, {"choices": [{"index": 0, "delta": {"content": piece}}]})
    assert chain.stopped


@given(
    st.text(st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=40),
    st.text(max_size=30),
    st.lists(st.integers(min_value=1, max_value=8), max_size=12),
)
def test_any_split_gives_the_text_before_the_turn_end(
    before: str, after: str, sizes: list[int]
) -> None:
    text = before + "<|im_start|>user\n" + after
    pieces, pos = [], 0
    for n in sizes:
        pieces.append(text[pos : pos + n])
        pos += n
    pieces.append(text[pos:])
    got = result(run_pieces(pieces, QWEN)[0])
    assert got == result(run_pieces([text], QWEN)[0])  # the split does not matter
    alone = result(run_pieces([before], QWEN)[0])  # the reply as if it ended there
    assert got[0] == alone[0] and got[2] == alone[2]
