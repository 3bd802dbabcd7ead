"""Token budgets: what an upstream's context window is, and how many output
tokens a request may ask for so that prompt + output fit in it.

A client that asks a 32K model for ``max_tokens: 65536`` gets an opaque 400
(vLLM, SGLang, llama.cpp) or a silently cut reply (Ollama). This module owns
the three pieces the proxy needs to avoid that:

- ``probe_upstream``: ask the server, in its own dialect, for its window and
  recognise which engine it is. Sources, per engine:

  * vLLM: ``GET /v1/models`` cards carry ``max_model_len`` and
    ``owned_by: "vllm"`` (``vllm/entrypoints/openai/protocol.py``,
    ``ModelCard``).
  * SGLang: the same card shape with ``owned_by: "sglang"`` and
    ``max_model_len`` (``sglang/srt/entrypoints/openai/protocol.py``);
    ``GET /get_model_info`` (``model_path``, ``is_generation``) recognises an
    older SGLang whose cards lack the window (SGLang native API docs).
  * llama.cpp ``llama-server``: cards with ``owned_by: "llamacpp"`` and a
    ``meta`` object (``n_ctx`` on newer builds, ``n_ctx_train`` = the
    trained length); ``GET /props`` gives
    ``default_generation_settings.n_ctx``, the context of one slot, which is
    what one request gets (``tools/server/README.md``).
  * Ollama: ``GET /api/version`` recognises it; ``GET /api/ps`` gives the
    ``context_length`` a loaded model runs with, ``POST /api/show`` the
    ``num_ctx`` of its Modelfile ``parameters`` and the trained
    ``<arch>.context_length`` in ``model_info`` (docs.ollama.com/api). Its
    OpenAI API lives under ``/v1`` on the same host.
  * LM Studio: ``GET /api/v0/models`` entries carry ``max_context_length``
    and, once loaded, ``loaded_context_length`` (lmstudio-ai/docs,
    ``1_developer/2_rest/endpoints.mdx``).
  * llama-cpp-python: its cards report nothing (see
    ``tests/captures/llama-cpp-python-smollm2/models.json``); the window is
    learned from the first overflow error (``window_from_error``).

- ``window_from_error``: read the window out of a context-overflow error body
  (each engine words it differently; the table is in ``_WINDOW_PATTERNS``).

- ``clamp_request``: lower ``max_tokens`` / ``max_completion_tokens`` so the
  request fits, from a cheap over-estimate of the prompt's tokens.

``engine_fields`` adds the engine-specific request fields the proxy may send:
only to an engine known to accept them.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

__all__ = [
    "BudgetPolicy",
    "UpstreamInfo",
    "clamp_request",
    "engine_fields",
    "estimate_prompt_tokens",
    "probe_upstream",
    "window_from_error",
]

#: Time allowed for one probe request. Probing runs at start-up and
#: periodically, never on a client's request path, but a hung upstream must
#: not hold it forever.
PROBE_REQUEST_TIMEOUT = 3.0
#: Time allowed for the whole probe of one upstream (a few requests).
PROBE_TOTAL_TIMEOUT = 8.0
#: Largest probe response read. Model lists are a few KB; Ollama's
#: ``/api/show`` carries the template and license (tens of KB).
MAX_PROBE_BYTES = 1024 * 1024
#: A window below this is not a context window but a parse accident.
MIN_WINDOW = 16
#: A window above this is not believable either (a parse accident or a
#: byte count).
MAX_WINDOW = 1 << 24

ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "lmstudio")


@dataclass
class UpstreamInfo:
    """What the probe learned about one upstream."""

    window: int | None  # context window in tokens, None if unknown
    engine: str | None  # one of ENGINES, None if not recognised
    reasoning: bool = False  # model known/configured to reason before answering


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
# Probing


def _valid_window(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        else:
            return None
    n = int(value)
    return n if MIN_WINDOW <= n <= MAX_WINDOW else None


def _roots(base_url: str) -> tuple[str, str]:
    """(OpenAI base, server root): ``http://h:8000/v1`` -> both; the engines'
    native endpoints (``/props``, ``/api/...``) live at the root."""
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    return base, root


class _Prober:
    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, headers: Mapping[str, str]
    ) -> None:
        self.session = session
        self.base, self.root = _roots(base_url)
        self.headers = dict(headers)
        self.timeout = aiohttp.ClientTimeout(total=PROBE_REQUEST_TIMEOUT)

    async def get(self, url: str, json_body: Any = None) -> Any:
        """The decoded JSON of a 200 answer, else None. Never raises on
        network or decoding errors."""
        try:
            method = "POST" if json_body is not None else "GET"
            async with self.session.request(
                method, url, headers=self.headers, json=json_body, timeout=self.timeout
            ) as resp:
                if resp.status != 200:
                    return None
                data = await resp.content.read(MAX_PROBE_BYTES + 1)
                if len(data) > MAX_PROBE_BYTES:
                    return None
                return orjson.loads(data)
        except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError, ValueError):
            return None

    # One method per engine: each returns (window, engine, reasoning) or None
    # when the server is not that engine.

    async def llamacpp(self, card: dict[str, Any] | None) -> UpstreamInfo:
        window = None
        meta = card.get("meta") if card else None
        props = await self.get(self.root + "/props")
        if isinstance(props, dict):
            dgs = props.get("default_generation_settings")
            if isinstance(dgs, dict):
                window = _valid_window(dgs.get("n_ctx"))
            window = window or _valid_window(props.get("n_ctx"))
        if window is None and isinstance(meta, dict):
            # n_ctx (newer builds) is the server's context; n_ctx_train is
            # the model's trained length, an upper bound at best.
            window = _valid_window(meta.get("n_ctx")) or _valid_window(meta.get("n_ctx_train"))
        return UpstreamInfo(window, "llamacpp")

    async def ollama(self, model: str | None) -> UpstreamInfo:
        window: int | None = None
        reasoning = False
        ps = await self.get(self.root + "/api/ps")
        if isinstance(ps, dict) and isinstance(ps.get("models"), list):
            for m in ps["models"]:
                if isinstance(m, dict) and (
                    model is None or model in (m.get("name"), m.get("model"))
                ):
                    window = _valid_window(m.get("context_length"))
                    if window:
                        break
        if model:
            show = await self.get(self.root + "/api/show", {"model": model})
            if isinstance(show, dict):
                caps = show.get("capabilities")
                reasoning = isinstance(caps, list) and "thinking" in caps
                if window is None:
                    window = _num_ctx(show.get("parameters"))
                if window is None and isinstance(show.get("model_info"), dict):
                    # The trained length: Ollama runs a model that is not
                    # loaded with its default context (OLLAMA_CONTEXT_LENGTH),
                    # which may be smaller; Ollama truncates the prompt rather
                    # than failing, so an over-large window only means no clamp.
                    for key, value in show["model_info"].items():
                        if isinstance(key, str) and key.endswith(".context_length"):
                            window = _valid_window(value)
                            break
        return UpstreamInfo(window, "ollama", reasoning)

    async def lmstudio(self, listing: Any, model: str | None) -> UpstreamInfo | None:
        if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
            return None
        entries = [e for e in listing["data"] if isinstance(e, dict) and "max_context_length" in e]
        if not entries:
            return None
        # The requested model, else the loaded one (what LM Studio answers
        # with), else, with no model named, the first listed.
        loaded = [e for e in entries if e.get("state") == "loaded"]
        matching = [e for e in entries if model is not None and e.get("id") == model]
        candidates = matching or loaded or ([] if model is not None else entries)
        chosen = candidates[0] if candidates else None
        window = None
        if chosen is not None:
            window = _valid_window(chosen.get("loaded_context_length")) or _valid_window(
                chosen.get("max_context_length")
            )
        return UpstreamInfo(window, "lmstudio")

    async def run(self, model: str | None) -> UpstreamInfo:
        listing = await self.get(self.base + "/models")
        card = _pick_card(listing, model)
        owned_by = card.get("owned_by") if card else None
        model_id = model or (card.get("id") if card else None)
        card_window = _valid_window(card.get("max_model_len")) if card else None

        if owned_by in ("vllm", "sglang"):
            return UpstreamInfo(card_window, owned_by)
        if owned_by == "llamacpp" or (card is not None and isinstance(card.get("meta"), dict)):
            return await self.llamacpp(card)

        # Not named by its card: ask each dialect at once (404s elsewhere).
        props, lms, version, sgl = await asyncio.gather(
            self.get(self.root + "/props"),
            self.get(self.root + "/api/v0/models"),
            self.get(self.root + "/api/version"),
            self.get(self.root + "/get_model_info"),
        )
        if isinstance(version, dict) and "version" in version:
            info = await self.ollama(model_id)
            return UpstreamInfo(info.window or card_window, "ollama", info.reasoning)
        lm = await self.lmstudio(lms, model_id)
        if lm is not None:
            return UpstreamInfo(lm.window or card_window, "lmstudio")
        if isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict):
            return await self.llamacpp(card)
        if isinstance(sgl, dict) and "model_path" in sgl:
            return UpstreamInfo(card_window, "sglang")
        # A server with vLLM's card shape but its own name (a fork) still
        # tells its window; unknown engine means no engine-specific fields.
        return UpstreamInfo(card_window, None)


def _pick_card(listing: Any, model: str | None) -> dict[str, Any] | None:
    if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
        return None
    cards = [c for c in listing["data"] if isinstance(c, dict)]
    for c in cards:
        if model is not None and c.get("id") == model:
            return c
    return cards[0] if cards else None


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _num_ctx(parameters: Any) -> int | None:
    """``num_ctx`` from Ollama's ``parameters`` (Modelfile lines, one
    ``name value`` a line)."""
    if not isinstance(parameters, str):
        return None
    m = _NUM_CTX.search(parameters)
    return _valid_window(int(m.group(1))) if m else None


async def probe_upstream(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: Mapping[str, str],
    model: str | None = None,
) -> UpstreamInfo:
    """Probe one upstream for its context window and engine.

    ``base_url`` is the OpenAI base (ending in ``/v1``); ``headers`` are sent
    with every probe (the upstream's ``Authorization``); ``model`` picks the
    card when the server lists several. Each request is bounded by
    ``PROBE_REQUEST_TIMEOUT``, the whole probe by ``PROBE_TOTAL_TIMEOUT``.
    Never raises: a server that answers nothing useful gives
    ``UpstreamInfo(None, None)``.
    """
    try:
        return await asyncio.wait_for(
            _Prober(session, base_url, headers).run(model), PROBE_TOTAL_TIMEOUT
        )
    except asyncio.CancelledError:
        raise
    except Exception:  # a probe must never take the proxy down
        return UpstreamInfo(None, None)


# --------------------------------------------------------------------------
# Learning the window from an overflow error

#: How each engine states its window in a context-overflow error. The
#: first group that matches is the window.
_WINDOW_PATTERNS = re.compile(
    "|".join(
        [
            # OpenAI wording, copied by llama-cpp-python (capture
            # h_ctx_overflow_nostream.json), FastChat and vLLM:
            # "This model's maximum context length is 2048 tokens. However, ..."
            # vLLM ≥ 0.6: "'max_tokens' or 'max_completion_tokens' is too large:
            # 8000. This model's maximum context length is 4096 tokens and ..."
            r"maximum context length is (\d+)",
            # SGLang: "Requested token count exceeds the model's maximum
            # context length of 32768 tokens. You requested a total of ..."
            r"maximum context length of (\d+)",
            # llama.cpp server: "request (9412 tokens) exceeds the available
            # context size (8192 tokens), try increasing it"
            r"available context size \((\d+)",
            # vLLM input processor: "The decoder prompt (length 9000) is
            # longer than the maximum model length of 8192."
            r"maximum model length of (\d+)",
            # SGLang / OpenAI-compatible gateways: "The input (41000 tokens)
            # is longer than the model's context length (32768 tokens)."
            r"model's context length \((\d+)",
            # "Input length (265330) exceeds model's maximum context length
            # (262144)."
            r"maximum context length \((\d+)",
            # LM Studio: "... the model is loaded with context length of only
            # 4096 tokens"
            r"context length of only (\d+)",
        ]
    ),
    re.IGNORECASE,
)


def _error_texts(body: bytes | str | dict[str, Any]) -> tuple[Any, list[str]]:
    """An error body decoded, and the message texts it carries."""
    obj: Any = body
    if isinstance(body, bytes | str):
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    texts: list[str] = []
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(err.get(key), str):
                    texts.append(err[key])
        elif isinstance(err, str):
            texts.append(err)
        for key in ("message", "detail"):  # FastAPI/SGLang put it at the top
            if isinstance(obj.get(key), str):
                texts.append(obj[key])
    elif isinstance(obj, str):
        texts.append(obj)
    return obj, texts


#: How engines state the prompt's own size in an overflow error:
#: llama-cpp-python / OpenAI "(2731 in the messages, 20 in the completion)",
#: vLLM "your request has 2731 input tokens", others "2731 tokens in the prompt".
_PROMPT_PATTERNS = re.compile(
    r"\((\d+) in the messages"
    r"|request has (\d+) (?:input|prompt) tokens"
    r"|(\d+) (?:input |prompt )?tokens (?:in|of) the (?:prompt|messages|input)",
    re.IGNORECASE,
)


def prompt_tokens_from_error(body: bytes | str | dict[str, Any]) -> int | None:
    """The prompt's size in tokens as an overflow error states it, or None."""
    _, texts = _error_texts(body)
    for text in texts:
        m = _PROMPT_PATTERNS.search(text)
        if m:
            return int(next(g for g in m.groups() if g is not None))
    return None


def window_from_error(body: bytes | str | dict[str, Any]) -> int | None:
    """The context window stated by an upstream's overflow error, or None.

    ``body`` is the error response (raw bytes, text, or decoded JSON). A
    structured field wins (llama.cpp sends ``error.n_ctx``); otherwise the
    message is matched against each engine's wording. Bodies that are not a
    context-overflow error give None.
    """
    obj, texts = _error_texts(body)
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            structured = err.get("n_ctx")
            if structured is not None and (n := _valid_window(structured)):
                return n
    for text in texts:
        m = _WINDOW_PATTERNS.search(text)
        if m:
            value = next(g for g in m.groups() if g is not None)
            n = _valid_window(int(value))
            if n:
                return n
    return None


# --------------------------------------------------------------------------
# Estimating and clamping

#: Characters per token for the estimate. Real English averages about 4
#: characters per token on the Llama/Qwen/Mistral tokenizers; 3.5 makes the
#: estimate an over-estimate, which is the safe side: it can only clamp
#: too much, never too little.
CHARS_PER_TOKEN = 3.5
#: Each byte of a character beyond the first (UTF-8) adds this many tokens:
#: a CJK character (3 bytes) counts 1/3.5 + 1 ≈ 1.3 tokens, above the
#: ~0.7–1 token such characters take, so non-Latin text stays over-estimated.
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


def _text_tokens(text: str) -> float:
    n_chars = len(text)
    if text.isascii():
        return n_chars / CHARS_PER_TOKEN
    extra = len(text.encode("utf-8", "surrogatepass")) - n_chars
    return n_chars / CHARS_PER_TOKEN + extra * TOKENS_PER_EXTRA_BYTE


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
    tool-call names and arguments), plus a per-message template overhead,
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
# Engine-specific request fields

#: Engines that drop special tokens from ``content`` unless asked not to
#: (``skip_special_tokens`` defaults to true in vLLM's and SGLang's sampling
#: params). Without a tool parser configured, a DeepSeek, Kimi, Mistral,
#: Harmony or Granite call then arrives with its markers deleted, and no
#: detector can find it.
_KEEPS_MARKERS_ON_REQUEST = frozenset({"vllm", "sglang"})


def engine_fields(body: dict[str, Any], info: UpstreamInfo) -> dict[str, Any]:
    """The engine-specific fields to add to ``body`` before it goes upstream.

    Returns a (possibly empty) dict of fields to merge —
    ``{**body, **engine_fields(body, info)}`` — and never modifies ``body``.
    Today: ``skip_special_tokens: false`` for vLLM and SGLang when the
    request offers tools and the client did not set the field itself. No
    field is ever added for another or an unknown engine (llama.cpp, Ollama,
    LM Studio and hosted APIs may reject unknown parameters).
    """
    fields: dict[str, Any] = {}
    if info.engine in _KEEPS_MARKERS_ON_REQUEST:
        tools = body.get("tools")
        if isinstance(tools, list) and tools and "skip_special_tokens" not in body:
            fields["skip_special_tokens"] = False
    return fields
