"""Token budgets: how many output tokens a request may ask for so that
prompt + output fit in the upstream's context window, and which turns of a
prompt that cannot fit are dropped. Pure arithmetic on a body and a window
(what the window is, ``engines.py`` finds out).

A client that asks a 32K model for ``max_tokens: 65536`` gets an opaque 400
(vLLM, SGLang, llama.cpp) or a silently cut reply (Ollama). So:

- ``estimate_prompt_tokens``: a cheap over-estimate of a prompt's tokens;
- ``clamp_request``: lower ``max_tokens`` / ``max_completion_tokens`` so the
  request fits;
- ``fit_prompt``: drop the oldest turns of a prompt that cannot fit at all;
- ``fit_request``: both, for one row (``plan.budget_step``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from ...context import thinking_switch

__all__ = [
    "BudgetPolicy",
    "clamp_request",
    "estimate_prompt_tokens",
    "fit_prompt",
    "fit_request",
    "may_not_fit",
]


@dataclass
class BudgetPolicy:
    """How the window is shared between prompt and output.

    ``input_budget = window − output_reservation − safety_margin`` is what a
    prompt may use while still leaving ``output_reservation`` tokens for the
    reply; a clamped ``max_tokens`` never goes below ``floor`` (a request
    whose prompt fills the window is the upstream's to refuse, not ours to
    turn into a 1-token reply); ``reasoning_reserve`` is added to the output
    allowance of a model that reasons before answering.
    """

    output_reservation: int = 1024
    safety_margin: int = 64
    floor: int = 256
    reasoning_reserve: int = 2048


# --------------------------------------------------------------------------
# Estimating and clamping

#: Characters per token for the estimate. Real English averages about 4
#: characters per token on the common open models' tokenizers; 3.5 makes the
#: estimate an over-estimate, which is the safe side: it can only clamp
#: too much, never too little.
CHARS_PER_TOKEN = 3.5
#: An ASCII punctuation character or symbol counts this many tokens: code
#: and JSON are dense in them, and most take a token of their own. At
#: 1/3.5 a JSON capture was under-estimated by a third on SmolLM2's
#: tokenizer (0.71 of the real count at worst over 26 of this repository's
#: sources, docs and captures); at 0.6 the worst is 0.91, the mean 1.13.
TOKENS_PER_SYMBOL = 0.6
#: A character of three UTF-8 bytes (CJK, kana, Hangul, their punctuation)
#: counts one token: about what the common open models' tokenizers take
#: (0.6–1.0 a character). The old 1.29 (1/3.5 plus half a token a byte)
#: trimmed Chinese conversations that fitted.
TOKENS_PER_WIDE_CHAR = 1.0
#: Each byte of a character beyond the first (UTF-8) adds this many tokens,
#: for the other non-ASCII characters: an accented Latin or a Cyrillic
#: letter (2 bytes) counts 1/3.5 + 0.5 ≈ 0.8, an emoji (4 bytes) ≈ 1.8.
TOKENS_PER_EXTRA_BYTE = 0.5
#: Chat-template tokens around each message (role markers, separators).
MESSAGE_OVERHEAD = 8
#: Tokens a chat template adds when tools are offered (the instructions
#: around the tool list), beyond the tools' own JSON.
TOOLS_OVERHEAD = 200
#: An image or audio part: counted as this many tokens instead of its
#: base64 text (which would count a 100 KB image as ~30K tokens).
MEDIA_PART_TOKENS = 1024
MEDIA_PART_TYPES = frozenset(
    {"image_url", "input_image", "input_audio", "image", "audio", "file", "video_url"}
)


#: ASCII punctuation and symbols, as bytes.
_SYMBOLS = bytes(c for c in range(33, 127) if not chr(c).isalnum())
#: The lead bytes of the characters UTF-8 writes in three bytes
#: (U+0800–U+FFFF).
_WIDE_LEADS = bytes(range(0xE0, 0xF0))


def _count(data: bytes, members: bytes) -> int:
    """How many bytes of ``data`` are among ``members`` (a deletion by
    ``bytes.translate``: about a millisecond a megabyte, where a regex
    takes seventy; the estimate runs on the event loop)."""
    return len(data) - len(data.translate(None, members))


def _text_tokens(text: str) -> float:
    n_chars = len(text)
    data = text.encode("utf-8", "surrogatepass")
    symbols = _count(data, _SYMBOLS)
    tokens = (n_chars - symbols) / CHARS_PER_TOKEN + symbols * TOKENS_PER_SYMBOL
    if len(data) == n_chars:  # ASCII
        return tokens
    wide = _count(data, _WIDE_LEADS)
    extra = len(data) - n_chars - 2 * wide
    return (
        tokens + wide * (TOKENS_PER_WIDE_CHAR - 1 / CHARS_PER_TOKEN) + extra * TOKENS_PER_EXTRA_BYTE
    )


def _json_tokens(value: Any) -> float:
    try:
        return _text_tokens(orjson.dumps(value).decode())
    except TypeError:
        return _text_tokens(str(value))


def _content_tokens(content: Any) -> float:
    if isinstance(content, str):
        return _text_tokens(content)
    if isinstance(content, list):
        total = 0.0
        for part in content:
            if isinstance(part, dict):
                kind = part.get("type")
                if kind == "text" and isinstance(part.get("text"), str):
                    total += _text_tokens(part["text"])
                elif kind in MEDIA_PART_TYPES:
                    total += MEDIA_PART_TOKENS
                else:
                    total += _json_tokens(part)
            elif isinstance(part, str):
                total += _text_tokens(part)
        return total
    if content is None:
        return 0.0
    return _json_tokens(content)


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """A cheap over-estimate of the prompt's tokens.

    Characters / 3.5 over every message's text fields (content, reasoning,
    tool-call names and arguments; an ASCII symbol 0.6, a CJK character
    1), plus a per-message template overhead,
    plus the offered tools' JSON and a tool-instruction overhead; media parts
    count a fixed ``MEDIA_PART_TOKENS``. It errs high on purpose (see
    ``CHARS_PER_TOKEN``): clamping a little too much costs a few tokens of
    allowance, clamping too little costs the request.
    """
    total = 0.0
    messages = body.get("messages")
    if isinstance(messages, list):
        for msg in messages:
            total += MESSAGE_OVERHEAD
            if not isinstance(msg, dict):
                total += _json_tokens(msg)
                continue
            for key, value in msg.items():
                if key == "content":
                    total += _content_tokens(value)
                elif key == "role":
                    continue
                elif isinstance(value, str):
                    total += _text_tokens(value)
                elif value is not None:
                    total += _json_tokens(value)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        total += TOOLS_OVERHEAD + _json_tokens(tools)
    if isinstance(body.get("functions"), list):  # legacy function calling
        total += TOOLS_OVERHEAD + _json_tokens(body["functions"])
    return math.ceil(total)


#: The request fields that bound the output, in the order they are reported.
OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens")


def clamp_request(
    body: dict[str, Any], window: int | None, policy: BudgetPolicy, *, reasoning: bool
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Fit the request's output allowance into ``window``.

    For each of ``max_tokens`` and ``max_completion_tokens`` the client set
    (a positive integer), the allowance becomes
    ``min(requested [+ reasoning_reserve], max(floor, window − prompt − safety_margin))``
    where ``prompt`` is ``estimate_prompt_tokens``. With ``reasoning`` the
    requested value is first raised by ``policy.reasoning_reserve`` (within
    the window), so the reasoning does not eat the answer.

    A field the client did not send stays unset: every engine we probe
    already defaults to "what fits" (vLLM: ``max_model_len − prompt``;
    llama.cpp, Ollama, LM Studio: generate until the context is full), so
    adding one could only shorten a reply.

    Returns ``(body, info)``: ``body`` is a new dict when something changed
    (the argument is never modified) and the argument itself otherwise;
    ``info`` is None when nothing changed, else what happened, for metrics::

        {"field": "max_tokens", "requested": 65536, "clamped": 32204,
         "window": 32768, "prompt_estimate": 500, "input_budget": 31680,
         "action": "clamped"}

    (``fields`` lists every field changed when both were set; ``action`` is
    ``"raised"`` when the reasoning reserve increased the value.)
    """
    if window is None or window <= 0:
        return body, None
    prompt = estimate_prompt_tokens(body)
    available = max(policy.floor, window - prompt - policy.safety_margin)
    changes: dict[str, Any] = {}
    info: dict[str, Any] | None = None
    for name in OUTPUT_FIELDS:
        requested = body.get(name)
        if isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0:
            continue
        target = requested + policy.reasoning_reserve if reasoning else requested
        new = min(target, available)
        if new == requested:
            continue
        changes[name] = new
        if info is None:
            info = {
                "field": name,
                "requested": requested,
                "clamped": new,
                "window": window,
                "prompt_estimate": prompt,
                "input_budget": window - policy.output_reservation - policy.safety_margin,
                "action": "raised" if new > requested else "clamped",
                "fields": [name],
            }
        else:
            info["fields"].append(name)
    if not changes:
        return body, None
    assert info is not None
    if reasoning:
        info["reasoning_reserve"] = policy.reasoning_reserve
    if prompt > info["input_budget"]:
        # The prompt alone leaves less than output_reservation: the reply
        # may be short (or the upstream may refuse); say so in the metrics.
        info["prompt_over_budget"] = True
    return {**body, **changes}, info


def _turns(messages: list[Any]) -> list[list[int]]:
    """Indexes of the non-system messages, grouped into turns: a turn starts
    at a user message and holds the assistant and tool messages after it,
    so dropping a turn never leaves a tool result without its call."""
    turns: list[list[int]] = []
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role in ("system", "developer"):
            continue
        if role == "user" or not turns:
            turns.append([i])
        else:
            turns[-1].append(i)
    return turns


#: What replaces the middle of a message too long to fit on its own.
TRIM_MARK = "\n[… trimmed by streamfix to fit the model's context window …]\n"


def may_not_fit(
    body: dict[str, Any], window: int | None, policy: BudgetPolicy, scale: float = 1.0
) -> bool:
    """Whether ``fit_prompt(..., known_over=False)`` would trim ``body``:
    its estimate leaves less than ``floor`` tokens of the window for the
    reply (then a count by the server itself is worth asking for)."""
    if not window or not isinstance(body.get("messages"), list):
        return False
    return estimate_prompt_tokens(body) * scale > window - policy.floor - policy.safety_margin


def fit_prompt(
    body: dict[str, Any],
    window: int | None,
    policy: BudgetPolicy,
    *,
    scale: float = 1.0,
    known_over: bool = True,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Make a prompt that cannot fit the window fit it, losing as little as
    possible.

    Used only when the prompt is known not to fit: the upstream refused it
    (``context_length_exceeded``: ``known_over``), or (``known_over=False``)
    the prompt's estimate times ``scale`` (the upstream's own count over our
    estimate, learned from such an error) exceeds ``window − floor −
    safety_margin``, so that not even the smallest reply would fit.
    The target is ``input_budget = window − output_reservation −
    safety_margin`` (at least ``floor``). The oldest turns go first (system
    messages and the last turn are kept); if the last turn alone is still too
    long, the middle of its longest text is cut, head and tail kept, marked
    with ``TRIM_MARK``. Returns ``(body, info)``; ``info`` is None when
    nothing changed (the argument is never modified).
    """
    messages = body.get("messages")
    if not window or not isinstance(messages, list) or not messages:
        return body, None
    budget = max(policy.floor, window - policy.output_reservation - policy.safety_margin)

    def cost(msgs: list[Any]) -> float:
        return estimate_prompt_tokens({**body, "messages": msgs}) * scale

    before = cost(messages)
    if before <= budget or (
        not known_over and before <= window - policy.floor - policy.safety_margin
    ):
        return body, None
    keep = set(range(len(messages)))
    turns = _turns(messages)
    dropped = 0
    for turn in turns[:-1]:
        if cost([messages[i] for i in sorted(keep)]) <= budget:
            break
        keep.difference_update(turn)
        dropped += len(turn)
    out = [messages[i] for i in sorted(keep)]
    truncated = 0
    over = cost(out) - budget
    if over > 0:
        # The longest string content among the kept non-system messages.
        best = -1
        for j, msg in enumerate(out):
            if (
                isinstance(msg, dict)
                and msg.get("role") not in ("system", "developer")
                and isinstance(msg.get("content"), str)
                and (best < 0 or len(msg["content"]) > len(out[best]["content"]))
            ):
                best = j
        if best >= 0:
            text: str = out[best]["content"]
            # Characters to remove: tokens over budget, at the estimate's
            # own rate, plus the mark and a little slack.
            remove = min(len(text), int(over / scale * CHARS_PER_TOKEN) + len(TRIM_MARK) + 16)
            head = (len(text) - remove) // 2
            tail = len(text) - remove - head
            new_text = text[:head] + TRIM_MARK + (text[len(text) - tail :] if tail else "")
            out[best] = {**out[best], "content": new_text}
            truncated = len(text) - head - tail
    if not dropped and not truncated:
        return body, None
    info = {
        "action": "trimmed",
        "window": window,
        "input_budget": budget,
        "prompt_estimate": round(before),
        "dropped_messages": dropped,
        "truncated_chars": truncated,
    }
    return {**body, "messages": out}, info


# --------------------------------------------------------------------------
# Both, for one row


def fit_request(
    body: dict[str, Any],
    window: int | None,
    policy: BudgetPolicy,
    *,
    scale: float = 1.0,
    counted: int | None = None,
    reasons: bool = False,
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """A request fitted to a row's ``window``: the prompt trimmed when not
    even the smallest reply would fit (``fit_prompt(known_over=False)``;
    ``counted``, the server's own count of the prompt, decides instead of
    the estimate times ``scale``), then the output allowance clamped
    (``clamp_request``, with the reasoning reserve when the model
    ``reasons`` there and the request did not switch thinking off).
    Returns ``(body, trim, clamp)``: what each changed, or None."""
    if counted is not None:
        estimate = estimate_prompt_tokens(body)
        scale = counted / estimate if estimate else scale
    body, trim = fit_prompt(body, window, policy, scale=scale, known_over=False)
    reasoning = reasons and thinking_switch(body) is not False
    body, clamp = clamp_request(body, window, policy, reasoning=reasoning)
    return body, trim, clamp
