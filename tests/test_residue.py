"""The residue stripper (streamfix/transforms/residue.py): markup that is
unmistakably debris is stripped at any split, prose and code are not, a
request without tools is never touched, and a reply left blank is
reported "empty after repair"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import streamfix
from streamfix.context import Context, Report
from streamfix.delta import Delta, ToolCall
from streamfix.session import SSESession
from streamfix.transforms.residue import MAX_PENDING, ResidueStripper

from .support.detectutil import check_split_invariant
from .support.streamutil import (
    SHAPES_REQUEST,
    assemble,
    fixed_whole,
    run_sse,
    split_at,
    text_stream,
)


def _strip(pieces: list[str]) -> tuple[str, Context]:
    """Feed content pieces straight to a stripper (the last one closes)."""
    ctx = Context.of(SHAPES_REQUEST, {})
    s = ResidueStripper(ctx)
    out = ""
    for i, piece in enumerate(pieces):
        d = Delta(content=piece)
        if i == len(pieces) - 1:
            s.close(d)
        else:
            s.feed(d)
        out += d.content or ""
    return out, ctx


#: (name, content, what the client sees, the strip kind counted)
STRIPPED: list[tuple[str, str, str, str]] = [
    ("im_end", "The answer is 4.<|im_end|>", "The answer is 4.", "special_token"),
    ("im_start", "<|im_start|>assistant\nHello", "Hello", "special_token"),
    ("im_start, no role", "<|im_start|>Hello", "Hello", "special_token"),
    ("im_start, a word", "<|im_start|>userland", "userland", "special_token"),
    ("eot_id", "Done.<|eot_id|>", "Done.", "special_token"),
    ("eom_id", "Calling.<|eom_id|>", "Calling.", "special_token"),
    ("python_tag", "<|python_tag|>", "", "special_token"),
    ("phi end", "Sure.<|end|>", "Sure.", "special_token"),
    ("harmony call", "ok<|call|>", "ok", "special_token"),
    ("harmony channel", "<|channel|>final<|message|>Hi there", "finalHi there", "special_token"),
    ("endoftext", "Bye<|endoftext|>", "Bye", "special_token"),
    ("reserved", "x<|reserved_special_token_250|>", "x", "special_token"),
    ("kimi", "ok<|tool_calls_section_end|>", "ok", "special_token"),
    ("deepseek fullwidth", "Hi<｜end▁of▁sentence｜>", "Hi", "special_token"),
    ("deepseek calls end", "Hi<｜tool▁calls▁end｜>", "Hi", "special_token"),
    ("mistral tool_calls", "[TOOL_CALLS]", "", "special_token"),
    ("mistral args", "text[ARGS]", "text", "special_token"),
    ("mistral call id", "a[CALL_ID]b", "ab", "special_token"),
    ("mistral inst", "[/INST]Hello", "Hello", "special_token"),
    ("mistral closing tool_calls", "Done.[/TOOL_CALLS]", "Done.", "special_token"),
    ("eos", "All done.</s>", "All done.", "special_token"),
    ("gemma", "Fine.<end_of_turn>", "Fine.", "special_token"),
    ("closing tool_call", "Here you go.</tool_call>", "Here you go.", "wrapper_tag"),
    ("closing tool_calls", "</tool_calls> rest", "rest", "wrapper_tag"),  # its blank: layout
    ("closing function_call", "x</function_call>", "x", "wrapper_tag"),
    ("closing tools", "x</tools>", "x", "wrapper_tag"),
    ("closing function", "x\n</function>\n", "x\n\n", "wrapper_tag"),
    ("closing parameter", "x</parameter>", "x", "wrapper_tag"),
    ("opening at the end", "Let me check.\n<tool_call>", "Let me check.\n", "wrapper_tag"),
    ("opening then blanks", "Let me see <tool_call>\n  \n", "Let me see \n  \n", "wrapper_tag"),
    ("opening function=", "ok <function=lookup_order>", "ok ", "wrapper_tag"),
    ("empty fence", "Here:\n```\n```\nDone.", "Here:\n\nDone.", "empty_fence"),
    ("empty json fence", "Here:\n```json\n\n```", "Here:\n", "empty_fence"),
    ("empty fence, blanks", "```json   \n \t \n  ```  \nok", "  \nok", "empty_fence"),
    ("indented empty fence", "1. step\n   ```json\n   ```\n", "1. step\n   \n", "empty_fence"),
    ("fence opener left alone", "Calling it now.\n```json\n", "Calling it now.\n", "empty_fence"),
    ("dsml closer", "Done.</｜DSML｜tool_calls>", "Done.", "special_token"),
    ("dsml closer, double bar", "Done.</｜｜DSML｜｜function_calls>", "Done.", "special_token"),
    ("gemma 4 closer", "ok<tool_call|>", "ok", "special_token"),
    ("gemma 4 tool response", "ok<|tool_response>", "ok", "special_token"),
    ("functiongemma", "ok<end_function_call>", "ok", "special_token"),
    ("closing invoke", "ok</invoke>", "ok", "wrapper_tag"),
    ("closing minimax", "ok</minimax:tool_call>", "ok", "wrapper_tag"),
    ("closing seed", "ok</seed:tool_call>", "ok", "wrapper_tag"),
    ("closing longcat", "ok</longcat_tool_call>", "ok", "wrapper_tag"),
    ("closing nemotron", "ok</TOOLCALL>", "ok", "wrapper_tag"),
    ("minimax arrow close", "ok[/TOOL_CALL]", "ok", "special_token"),
]


def test_blanks_after_markup_the_content_starts_with_are_layout() -> None:
    """``[TOOL_CALLS] not json at all`` (vLLM test_mistral_tool_parser.py):
    the token goes, and the blank after it; later blanks are text."""
    text = "[TOOL_CALLS]  not json [TOOL_CALLS] at all"
    for i in range(len(text) + 1):
        out, _ = _strip([text[:i], text[i:]])
        assert out == "not json  at all", f"split at {i}"
    out, _ = _strip(list(text))
    assert out == "not json  at all"
    out, _ = _strip(["Hi ", "[TOOL_CALLS] there"])
    assert out == "Hi  there"


@pytest.mark.parametrize(("name", "text", "want", "kind"), STRIPPED, ids=[x[0] for x in STRIPPED])
def test_markup_is_stripped_at_every_split(name: str, text: str, want: str, kind: str) -> None:
    for i in range(len(text) + 1):
        out, ctx = _strip([text[:i], text[i:]])
        assert out == want, f"split at {i}"
        assert ctx.report.counts[f"stripped.{kind}"] >= 1
    out, _ = _strip(list(text))
    assert out == want
    out, _ = _strip([text, ""])
    assert out == want


#: Prose and code that look a little like markup: never touched.
KEPT: list[tuple[str, str]] = [
    ("comparison", "if a < b and c > d: print(a<b)"),
    ("html", "Use <div class='x'> and <b>bold</b> or <br>."),
    ("strikethrough", "This is <s>wrong</s> right."),
    ("python list type", "def f(x: list[int]) -> dict[str, int]: ..."),
    ("log levels", "[INFO] started\n[ERROR] failed [1]"),
    ("markdown link", "See [the docs](https://example.com) and [1]."),
    ("code block", "```python\nprint('<|im_end|>')\nx = '</tool_call>'\n```\nok"),
    ("code block, no lang", "```\n[TOOL_CALLS] is a token\n```\n"),
    ("inline code", "The token `<|im_end|>` ends a ChatML turn; `[TOOL_CALLS]` too."),
    ("matched wrapper", "Write <tool_call>{...}</tool_call> to call a tool."),
    ("opening with text after", "<tools>\nlookup_order\n</tools>"),
    # a region given back (Ollama qwen3coder_bare_test.go): its opener's
    # value holds a '<', an opener all the same; its close is matched
    ("opener its value breaks", "<function=<<not xml>></function>"),
    ("inline triple backticks", "Type ``` to open a fence, then ``` again."),
    ("two code blocks", "```python\nx = 1\n```\n```bash\nls\n```\n"),
    ("not a fence", "a ```\n```"),
    ("pipes", "a <| b |> c and <|not a token because spaces|>"),
    ("a long pseudo token", "<|" + "x" * 100 + "|>"),
]


@pytest.mark.parametrize(("name", "text"), KEPT, ids=[x[0] for x in KEPT])
def test_prose_and_code_are_kept_at_every_split(name: str, text: str) -> None:
    for i in range(len(text) + 1):
        out, ctx = _strip([text[:i], text[i:]])
        assert out == text, f"split at {i}"
        assert not any(k.startswith("stripped.") for k in ctx.report.counts)


ALL = [x[1] for x in STRIPPED] + [x[1] for x in KEPT]


@pytest.mark.parametrize("text", ALL)
def test_without_tools_nothing_is_touched(text: str) -> None:
    """A request without tools: the stripper is not even built; the
    stream goes through byte-identical (tested through ``fix_sse``)."""
    data = text_stream([text[i : i + 3] for i in range(0, len(text), 3)])
    assert run_sse(data, None) == data
    assert run_sse(data, {"model": "m", "tools": []}) == data


def test_plain_text_passes_as_the_same_object() -> None:
    s = ResidueStripper(Context.of(SHAPES_REQUEST, {}))
    text = "Plain words, numbers 1 2 3, (parens) {braces} | pipes | and more."
    d = Delta(content=text)
    s.feed(d)
    assert d.content is text
    assert s.feed_text(text) is True
    assert s.feed_text("a < b") is False


def test_hold_is_bounded() -> None:
    """An opening tag followed by a long run of whitespace is released
    once the run passes MAX_PENDING: it is content, not debris."""
    s = ResidueStripper(Context.of(SHAPES_REQUEST, {}))
    d = Delta(content="<tool_call>")
    s.feed(d)
    assert d.content == ""
    out = ""
    for _ in range(MAX_PENDING):
        d = Delta(content=" ")
        s.feed(d)
        out += d.content or ""
    assert out.startswith("<tool_call>")


@given(
    st.lists(st.sampled_from(ALL), min_size=1, max_size=6),
    st.lists(st.integers(0, 400), max_size=12),
)
def test_split_invariance(parts: list[str], cuts: list[int]) -> None:
    text = "\n".join(parts)
    whole, _ = _strip([text])
    split, _ = _strip(split_at(text, cuts))
    assert split == whole


# -- empty after repair ------------------------------------------------------


def _session(pieces: list[str]) -> tuple[streamfix.SSESession, str]:
    session = streamfix.SSESession(SHAPES_REQUEST)
    out = session.feed(text_stream(pieces)) + session.close()
    return session, assemble(out).content


@pytest.mark.parametrize(
    "pieces",
    [
        ["<|im_end|>"],
        ["  ", "\n", "<|eot_id|>"],
        ["[TOOL_CALLS]", " "],
        ["```json\n", "\n```"],
        [" \n "],
        [],
    ],
)
def test_blank_reply_is_empty_after_repair(pieces: list[str]) -> None:
    session, content = _session(pieces)
    assert not content.strip()
    assert session.report.empty_after_repair


@pytest.mark.parametrize("pieces", [["ok"], ["<|im_end|>", "Hi"], ["  x  "]])
def test_reply_with_text_is_not_empty(pieces: list[str]) -> None:
    session, content = _session(pieces)
    assert content.strip()
    assert not session.report.empty_after_repair


def test_a_call_is_not_empty() -> None:
    ctx = Context.of(SHAPES_REQUEST, {})
    s = ResidueStripper(ctx)
    d = Delta(content="  ", calls=[ToolCall("refresh_cache", "{}")])
    s.close(d)
    assert s.saw_output


def test_without_tools_blank_is_not_reported() -> None:
    session = streamfix.SSESession(None)
    session.feed(text_stream([" "]))
    session.close()
    assert not session.report.empty_after_repair


@given(st.lists(st.sampled_from([*ALL, "plain words ", "\n", "  "]), min_size=1, max_size=8))
def test_plain_text_lane_agrees_with_feed(parts: list[str]) -> None:
    """What the chain's plain-text lane does (``feed_text`` where it
    accepts, ``feed`` where it declines) equals ``feed`` on every delta."""
    ctx = Context.of(SHAPES_REQUEST, {})
    lane, full = ResidueStripper(ctx), ResidueStripper(ctx)
    a = b = ""
    for part in parts:
        if lane.feed_text(part):
            a += part
        else:
            d = Delta(content=part)
            lane.feed(d)
            a += d.content or ""
        d = Delta(content=part)
        full.feed(d)
        b += d.content or ""
    for s in (lane, full):
        d = Delta()
        s.close(d)
        if s is lane:
            a += d.content or ""
        else:
            b += d.content or ""
    assert a == b
    assert lane.saw_output == full.saw_output


@given(
    st.lists(st.sampled_from(ALL), min_size=1, max_size=4),
    st.lists(st.integers(0, 2000), max_size=20),
)
def test_byte_splits_of_the_stream_do_not_matter(parts: list[str], cuts: list[int]) -> None:
    """Through ``fix_sse`` with tools: any split of the upstream's bytes
    (inside UTF-8 sequences too: ``｜`` is three bytes) gives the same
    result as the unsplit stream."""
    text = " ".join(parts)
    data = text_stream([text[i : i + 2] for i in range(0, len(text), 2)])
    whole = assemble(run_sse(data, SHAPES_REQUEST))
    split = assemble(run_sse(split_at(data, cuts), SHAPES_REQUEST))
    assert (split.content, split.calls(), split.finish_reason) == (
        whole.content,
        whole.calls(),
        whole.finish_reason,
    )


def test_non_streamed_completion_is_stripped() -> None:
    completion = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Answer: 4.<|im_end|>"},
                "finish_reason": "stop",
            }
        ],
    }
    out = streamfix.fix_completion(completion, SHAPES_REQUEST)
    assert out["choices"][0]["message"]["content"] == "Answer: 4."
    untouched = streamfix.fix_completion(completion)
    assert untouched["choices"][0]["message"]["content"] == "Answer: 4.<|im_end|>"


@pytest.mark.parametrize("token", ["<|tool_result|>", "<|im_end|>", "[TOOL_CALLS]"])
def test_a_fence_after_stripped_markup_opens_a_code_block_at_any_split(token: str) -> None:
    """Markup stripped in front of a fence leaves the fence at its line's
    start, whether the token came in the same chunk as the fence or its
    own: the code block and its closing fence stay (a closing fence taken
    for an empty opener was stripped when the text came whole)."""
    text = token + "```python\nx = 1\n```\n"
    want = "```python\nx = 1\n```\n"
    whole = streamfix.fix_completion(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]},
        SHAPES_REQUEST,
    )
    assert whole["choices"][0]["message"]["content"] == want
    for pieces in ([text], list(text), [token, text[len(token) :]]):
        assert assemble(run_sse(text_stream(pieces), SHAPES_REQUEST)).content == want


# -- one account per token: stripped, not also unrecognised ---------------------

CALL_TEXT = '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "7"}}\n</tool_call>'


def _report_of(pieces: list[str]) -> Report:
    """The chain's report for a streamed reply of content ``pieces``."""
    session = SSESession(SHAPES_REQUEST)
    session.feed(text_stream(pieces))
    session.close()
    return session.report


#: The tokens of ``STRIPPED``; but after a call ``<function=lookup_order>``
#: is one more (qwen_xml) call.
TOKENS = [
    x[1] for x in STRIPPED if x[3] in ("special_token", "wrapper_tag") and "function=" not in x[1]
]


@pytest.mark.parametrize("token", TOKENS)
def test_a_stripped_token_is_not_also_unrecognised(token: str) -> None:
    """The detector samples ``<|im_end|>`` as it goes out; the residue step
    then strips it: the report says stripped, and not unrecognised, at any
    split, streamed or whole."""
    text = CALL_TEXT + token
    for i in range(len(CALL_TEXT), len(text) + 1):
        report = _report_of([text[:i], text[i:]])
        assert report.counts["lifted.hermes"] == 1, (token, i)
        assert any(k.startswith("stripped.") for k in report.counts), (token, i)
        assert report.counts["unrecognised_markup"] == 0, (token, i, report.unrecognised)
        assert report.unrecognised == [], (token, i)
    _, whole = fixed_whole(text, SHAPES_REQUEST)
    assert whole.counts["unrecognised_markup"] == 0 and whole.unrecognised == [], token


def test_the_im_end_after_a_lifted_call_is_one_strip() -> None:
    report = _report_of([CALL_TEXT, "<|im_", "end|>"])
    assert report.counts["stripped.special_token"] == 1
    assert "unrecognised_markup" not in report.counts and not report.watched


@pytest.mark.parametrize(
    ("text", "sample"),
    [
        ("ok <|not a token because spaces|>", "<|not a token because spaces|>"),
        ("```\n<|im_end|>\n```\n", "<|im_end|>"),  # kept in code: counted, not stripped
        ("ok <|im_end|> and `<|im_end|>`", "<|im_end|>"),  # one stripped, one kept
    ],
)
def test_markup_nothing_handled_stays_unrecognised(text: str, sample: str) -> None:
    report = _report_of([CALL_TEXT, text])
    assert report.counts["unrecognised_markup"] == 1, report.unrecognised
    assert [s[: len(sample)] for s in report.unrecognised] == [sample]


def test_a_token_stripped_before_a_call_in_the_same_delta() -> None:
    """A call is no visible text for the blanks after stripped markup: whole
    (the call in the same delta as the token and its blank) and streamed
    (the call first, or after) alike, the blank is layout (hypothesis found
    the two ways apart)."""
    call = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
    got = check_split_invariant("<|tool_result|> " + call)
    assert got == ("", "", [("lookup_order", {"order_id": "A-1"})], "tool_calls")
