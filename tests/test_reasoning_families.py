"""The reasoning markup each family declares in its ``formats/`` module,
split by the generic splitter (``transforms/reasoning.py``): every rule at
every cut into two pieces, one character at a time, and (hypothesis) any
chunking, the same as whole."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamfix.transforms.reasoning import DRAFT_MAX

from .support.detectutil import check_split_invariant, result, run_pieces
from .support.streamutil import SHAPES_REQUEST

CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
A1 = ("lookup_order", {"order_id": "A-1"})
KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup_order:0"
    '<|tool_call_argument_begin|>{"order_id": "A-1"}<|tool_call_end|><|tool_calls_section_end|>'
)
GLM_CALL = (
    "<tool_call>lookup_order<arg_key>order_id</arg_key><arg_value>A-1</arg_value></tool_call>"
)


def req(model: str, thinking: bool | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {**SHAPES_REQUEST, "model": model}
    if thinking is not None:
        r["chat_template_kwargs"] = {"enable_thinking": thinking}
    return r


CASES: list[tuple[str, str, dict[str, Any], str, str, list[Any]]] = [
    # (id, text, request, content, reasoning, calls)
    (
        "cohere-thinking",
        "<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_RESPONSE|>Hi!\n<|END_RESPONSE|>",
        req("CohereForAI/c4ai-command-r7b-12-2024"),
        "Hi!",
        "I'm\nthinking",
        [],
    ),
    (
        "cohere-prompt-opened",
        "plan<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>",
        req("CohereLabs/command-a-reasoning-08-2025"),
        "answer",
        "plan",
        [],
    ),
    (
        "cohere-north-prompt-opened",
        "plan<|END_THINKING|><|START_TEXT|>answer<|END_TEXT|>",
        req("CohereLabs/North-Mini-Code-1.0"),
        "answer",
        "plan",
        [],
    ),
    (
        "seed-oss",
        "<seed:think>plan</seed:think>Hello",
        req("ByteDance-Seed/Seed-OSS-36B-Instruct"),
        "Hello",
        "plan",
        [],
    ),
    (
        "seed-oss-prompt-opened",
        "Some reasoning</seed:think>This is the rest",
        req("ByteDance-Seed/Seed-OSS-36B-Instruct"),
        "This is the rest",
        "Some reasoning",
        [],
    ),
    (
        "kimi-vl",
        "◁think▷Let me consider◁/think▷The answer is 42.",
        req("moonshotai/Kimi-VL-A3B-Thinking"),
        "The answer is 42.",
        "Let me consider",
        [],
    ),
    (
        "apertus-repeats",
        "<|inner_prefix|>a<|inner_suffix|>x<|inner_prefix|>b<|inner_suffix|>y",
        req("swiss-ai/Apertus-8B-Instruct-2509"),
        "xy",
        "ab",
        [],
    ),
    (
        "minimax-m3",
        "<mm:think>plan</mm:think>Hello",
        req("MiniMaxAI/MiniMax-M3", thinking=True),
        "Hello",
        "plan",
        [],
    ),
    (
        "minimax-m3-thinking-mode",
        "plan</mm:think>answer",
        {**req("MiniMaxAI/MiniMax-M3"), "chat_template_kwargs": {"thinking_mode": "enabled"}},
        "answer",
        "plan",
        [],
    ),
    (
        "minimax-m3-not-reasoning-by-default",
        "XXX</mm:think>YYY",
        req("MiniMaxAI/MiniMax-M3"),
        "XXXYYY",  # the stray close is stripped, as any family's
        "",
        [],
    ),
    (
        "gemma4-no-header",
        "This should be reasoning<channel|>The answer.",
        req("google/gemma-4-31B-it", thinking=True),
        "The answer.",
        "This should be reasoning",
        [],
    ),
    (
        "gemma4-doubled-open",
        "<|channel><|channel>thought\n<channel|>Hello",
        req("google/gemma-4-31B-it"),
        "Hello",
        "",
        [],
    ),
    (
        "gemma4-empty-channel-after-answer",
        "<|channel>thought\n<channel|>Hello<|channel>thought<channel|>",
        req("google/gemma-4-31B-it"),
        "Hello",
        "",
        [],
    ),
    (
        "magistral-prompt-opened",
        "This is a reasoning section[/THINK]This is the rest",
        req("mistralai/Magistral-Small-2509"),
        "This is the rest",
        "This is a reasoning section",
        [],
    ),
    (
        "magistral-think-after-text",
        "Answer text [THINK]inner[/THINK]rest",
        req("mistralai/Magistral-Small-2509", thinking=True),
        "Answer text rest",
        "inner",
        [],
    ),
    (
        "granite-sections",
        "Here is my thought process:This is a reasoning section"
        "Here is my response:This is the rest",
        req("ibm-granite/granite-3.2-8b-instruct"),
        "This is the rest",
        "This is a reasoning section",
        [],
    ),
    (
        "granite-words-from-another-model",
        "Here is my thought process: none.",
        req("some-other-model"),
        "Here is my thought process: none.",
        "",
        [],
    ),
    (
        "hunyuan-answer-wrapper",
        "<think>\nplan\n</think>\n<answer>\nThe rest\n\nmore\n</answer>",
        req("tencent/Hunyuan-A13B-Instruct"),
        "The rest\n\nmore",  # the blanks before </answer> are layout
        "plan",
        [],
    ),
    (
        "answer-tags-of-another-model",
        "<think>plan</think><answer>42</answer>",
        req("some-other-model"),
        "<answer>42</answer>",
        "plan",
        [],
    ),
    (
        "minimax-m2-stray-close",
        "reasoning</think>answer A</think>answer B",
        req("MiniMaxAI/MiniMax-M2"),
        "answer Aanswer B",
        "reasoning",
        [],
    ),
    (
        "stray-close-thinking-off",
        "Some content</think>More content",
        req("Qwen/Qwen3-8B", thinking=False),
        "Some content</think>More content",
        "",
        [],
    ),
    (
        "nested-open-in-prompt-opened-reasoning",
        "Outer thinking <think>inner</think> content</think>Final content",
        req("Qwen/Qwen3-8B", thinking=True),
        "content</think>Final content",
        "Outer thinking <think>inner",
        [],
    ),
    (
        "doubled-think-open",
        "<think><think>Let me think</think>The answer is 42.",
        req("Qwen/Qwen3-8B"),
        "The answer is 42.",
        "Let me think",
        [],
    ),
    (
        "step3p5-think-after-text",
        "Intro<think>reasoning</think>Answer",
        req("stepfun-ai/Step-3.5-Flash"),
        "IntroAnswer",
        "reasoning",
        [],
    ),
    (
        "think-after-text-of-another-model",
        "Intro<think>reasoning</think>Answer",
        req("Qwen/Qwen3-8B"),
        "Intro<think>reasoning</think>Answer",
        "",
        [],
    ),
    (
        "olmo3-think-prompt-opened",
        "Let me think</think>ok",
        req("allenai/Olmo-3-7B-Think"),
        "ok",
        "Let me think",
        [],
    ),
    (
        "nemotron-nano-v2-prompt-opened",
        "I'm\nthinking\n</think>\nHello",
        req("nvidia/NVIDIA-Nemotron-Nano-9B-v2"),
        "Hello",
        "I'm\nthinking",
        [],
    ),
    # a call that ends unclosed reasoning is the call
    (
        "call-ends-open-reasoning-glm",
        "<think>first reason" + GLM_CALL,
        req("zai-org/GLM-5.2-FP8"),
        "",
        "first reason",
        [A1],
    ),
    (
        "call-ends-open-reasoning-kimi",
        "<think>I need to call it" + KIMI_CALL,
        req("moonshotai/Kimi-K2-Thinking"),
        "",
        "I need to call it",
        [A1],
    ),
    # Kimi K2.5's template opens the reasoning: its call section ends it,
    # and one in which nothing reads goes out as text, not as reasoning
    (
        "call-section-ends-prompt-opened-reasoning-kimi",
        "I need to call it" + KIMI_CALL,
        req("moonshotai/Kimi-K2.5"),
        "",
        "I need to call it",
        [A1],
    ),
    (
        "unreadable-call-section-ends-prompt-opened-reasoning-kimi",
        "some reasoning<|tool_calls_section_begin|>tool call data",
        req("moonshotai/Kimi-K2.5"),
        "tool call data",
        "some reasoning",
        [],
    ),
    (
        "call-ends-prompt-opened-reasoning",
        "Need to look it up.\n" + CALL,
        req("Qwen/Qwen3.5-9B"),
        "",
        "Need to look it up.",
        [A1],
    ),
    # a call drafted inside reasoning that goes on is reasoning, not run
    (
        "call-drafted-then-reasoning-closes",
        "<think>I could write " + CALL + " but no</think>Done.",
        req("Qwen/Qwen3-8B"),
        "Done.",
        "I could write " + CALL + " but no",
        [],
    ),
    (
        "call-mention-then-more-reasoning",
        "<think>maybe " + CALL + " then think more",
        req("Qwen/Qwen3-8B"),
        "",
        "maybe " + CALL + " then think more",
        [],
    ),
    (
        "kimi-markers-in-a-json-string-in-reasoning",
        '<think>The args are {"note": "<|tool_call_begin|>x"} fine</think>' + KIMI_CALL,
        req("moonshotai/Kimi-K2-Thinking"),
        "",
        'The args are {"note": "<|tool_call_begin|>x"} fine',
        [A1],
    ),
    # families from vLLM's reasoning-parser tests (issue 35)
    (
        "plamo3",
        "<|plamo:begin_think:plamo|>plan<|plamo:end_think:plamo|>Hello",
        req("pfnet/plamo-3"),
        "Hello",
        "plan",
        [],
    ),
    (
        "plamo3-prompt-opened",
        "plan<|plamo:end_think:plamo|>answer",
        req("pfnet/plamo-3"),
        "answer",
        "plan",
        [],
    ),
    (
        "solar-open2-prompt-opened",
        "I need to analyze<|think:end|>The answer is 42",
        req("upstage/Solar-Open2"),
        "The answer is 42",
        "I need to analyze",
        [],
    ),
    (
        "k2-horizon-medium-effort",
        "<ifm|think_fast>plan</ifm|think_fast>answer",
        req("k2-horizon"),
        "answer",
        "plan",
        [],
    ),
    (
        "k2-horizon-prompt-opened",
        "plan</ifm|think>answer",
        req("k2-horizon"),
        "answer",
        "plan",
        [],
    ),
    (
        "hyperclovax-14b-turn-boundary",
        "/think\nthinking<|im_end|>\n<|im_start|>assistant\nanswer",
        req("naver-hyperclovax/HyperCLOVAX-SEED-Think-14B"),
        "answer",
        "thinking",
        [],
    ),
    (
        "hyperclovax-14b-prompt-opened",
        "reason<|im_end|>\n<|im_start|>assistant\nanswer",
        req("naver-hyperclovax/HyperCLOVAX-SEED-Think-14B"),
        "answer",
        "reason",
        [],
    ),
    # reasoning skipped: the template's newline begins the reply (vLLM
    # test_hyperclovax_seed_think_14b_reasoning_parser.py)
    (
        "hyperclovax-14b-skipped-reasoning-newline",
        "\nanswer",
        req("naver-hyperclovax/HyperCLOVAX-SEED-Think-14B", thinking=False),
        "answer",
        "",
        [],
    ),
    (
        "leading-newline-kept-for-other-models",
        "\nanswer",
        req("Qwen/Qwen2.5-7B-Instruct", thinking=False),
        "\nanswer",
        "",
        [],
    ),
    (
        "slash-think-is-words-for-other-models",
        "/think\nabout it",
        req("Qwen/Qwen2.5-7B-Instruct"),
        "/think\nabout it",
        "",
        [],
    ),
    (
        "kimi-k2.5-reasons-by-default",
        "plan</think>answer",
        req("moonshotai/Kimi-K2.5"),
        "answer",
        "plan",
        [],
    ),
    (
        "gemma4-channel-after-text",
        "Before\n<|channel>plan<channel|>\nAfter",
        req("google/gemma-4-31B-it"),
        "Before\nAfter",
        "plan",
        [],
    ),
    # text before a call from a model that writes its own <think>: the answer
    (
        "call-after-text-reasoning-model-not-prompt-opened",
        "Hello.\n" + KIMI_CALL,
        req("moonshotai/Kimi-K2-Thinking"),
        "Hello.\n",  # Kimi K2's reference parser keeps the blanks before a call
        "",
        [A1],
    ),
    # Harmony: the recipient in the role header, then the commentary channel
    # with no content type: the channel is the call's header, not a preamble
    (
        "harmony-recipient-in-header-bare-commentary",
        "<|start|>assistant to=functions.lookup_order<|channel|>commentary<|message|>"
        '{"order_id": "A-1"}<|end|>',
        req("openai/gpt-oss-20b"),
        "",
        "",
        [A1],
    ),
    # a preamble ended by <|end|>, then the call (canitoolcall
    # gpt-oss/vllm-preamble-call-end-terminated): no "end|>" left
    (
        "harmony-preamble-then-call",
        "<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant"
        ' to=functions.lookup_order<|channel|>commentary<|message|>{"order_id": "A-1"}<|end|>',
        req("openai/gpt-oss-20b"),
        "Let me look.",
        "",
        [A1],
    ),
    # a header to the assistant itself left without a message, the real
    # header right after it (llama.cpp test-chat.cpp, gpt-oss)
    (
        "harmony-header-to-assistant-before-analysis",
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>plan<|end|>"
        "<|start|>assistant<|channel|>final<|message|>42",
        req("openai/gpt-oss-20b"),
        "42",
        "plan",
        [],
    ),
    (
        "harmony-header-to-assistant-before-final",
        "<|channel|>analysis<|message|>plan<|end|><|start|>assistant"
        "<|channel|>commentary to=assistant<|channel|>final<|message|>42",
        req("openai/gpt-oss-20b"),
        "42",
        "plan",
        [],
    ),
    # analysis left unclosed: the next message's header ends it
    (
        "harmony-analysis-closed-by-final-header",
        "<|channel|>analysis<|message|>Let me think<|start|>assistant<|channel|>final<|message|>42",
        req("openai/gpt-oss-20b"),
        "42",
        "Let me think",
        [],
    ),
    # the short answer header right after <|end|> is the answer's header
    (
        "harmony-short-final-after-end",
        "<|start|><|channel|>analysis<|message|>thinking hard<|end|><|channel|>final<|message|>"
        "the answer<|end|>",
        req("openai/gpt-oss-20b"),
        "the answer",
        "thinking hard",
        [],
    ),
    # a message to the built-in python tool is the engine's, not the client's
    (
        "harmony-builtin-python",
        "<|channel|>analysis<|message|>I will run python<|end|><|start|>assistant"
        '<|channel|>commentary to=python <|constrain|>code<|message|>print("hello")',
        req("openai/gpt-oss-20b"),
        "",
        "I will run python",
        [],
    ),
    # the channels with their special tokens stripped (skip_special_tokens):
    # "analysis" opens the reply, "assistantfinal" heads the answer
    # (Xinference's test_harmony.py)
    (
        "harmony-stripped-tokens",
        "analysisThe user says hello. Greet back.assistantfinalHello! How can I help?",
        req("openai/gpt-oss-20b"),
        "Hello! How can I help?",
        "The user says hello. Greet back.",
        [],
    ),
    # after text, even within the start's hold, the word is the reply's
    (
        "harmony-stripped-word-after-text",
        "Done: analysis of the logs, assistantfinal step.",
        req("openai/gpt-oss-20b"),
        "Done: analysis of the logs, assistantfinal step.",
        "",
        [],
    ),
    # the reply stops inside an answer end it began with a special token
    # (Xinference's test_kimi_k3_reasoning_parser.py): no 'res' left over
    (
        "kimi-k3-stops-inside-answer-end",
        "reason<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>res",
        req("moonshotai/Kimi-K3"),
        "answer",
        "reason",
        [],
    ),
    # those words mean nothing to another model's reply
    (
        "harmony-stripped-words-other-model",
        "analysis of the logs: the assistantfinal step failed.",
        req("Qwen/Qwen2.5-7B-Instruct"),
        "analysis of the logs: the assistantfinal step failed.",
        "",
        [],
    ),
]


@pytest.mark.parametrize(
    ("text", "request_", "content", "reasoning", "calls"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_family_reasoning_at_every_split(
    text: str, request_: dict[str, Any], content: str, reasoning: str, calls: list[Any]
) -> None:
    got = check_split_invariant(text, request_)
    assert got == (content, reasoning, calls, "tool_calls" if calls else "stop")


@given(st.sampled_from(CASES), st.lists(st.integers(1, 9), min_size=1, max_size=12))
def test_family_reasoning_any_chunking(
    case: tuple[str, str, dict[str, Any], str, str, list[Any]], sizes: list[int]
) -> None:
    _, text, request, content, reasoning, calls = case
    pieces, i, k = [], 0, 0
    while i < len(text):
        pieces.append(text[i : i + sizes[k % len(sizes)]])
        i += sizes[k % len(sizes)]
        k += 1
    assert result(run_pieces(pieces, request)[0])[:3] == (content, reasoning, calls)


def test_a_call_longer_than_the_draft_bound_stays_reasoning() -> None:
    """Unclosed reasoning is held from a call marker on only up to
    ``DRAFT_MAX``: a longer region is reasoning (never held unbounded)."""
    long = " ".join(str(i) for i in range(DRAFT_MAX // 4))  # no loop to cut
    assert len(long) > DRAFT_MAX
    head = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "'
    body = head + long + '"}}</tool_call>'
    text = "<think>plan" + body
    request = req("Qwen/Qwen3-8B")
    whole = result(run_pieces([text], request)[0])
    assert whole[:3] == ("", "plan" + body, [])
    for size in (7, 4096):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        assert result(run_pieces(pieces, request)[0]) == whole
