"""What each engine is and says: its context window asked in its own
dialect, the window and the prompt's size read out of its overflow errors,
and the request fields only it accepts.

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
    what one request gets, and ``modalities.vision``, whether the model
    takes images (``tools/server/README.md``).
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

- ``window_from_error`` and ``prompt_tokens_from_error``: read the window
  and the prompt's size out of a context-overflow error body (each engine
  words it differently; the table is in ``_WINDOW_PATTERNS``).

- ``engine_fields``: the engine-specific request fields the proxy may send,
  only to an engine known to accept them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

__all__ = [
    "UpstreamInfo",
    "engine_fields",
    "probe_upstream",
    "prompt_tokens_from_error",
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
    #: The server says the model takes images (llama.cpp's ``/props``
    #: ``modalities.vision``, true when it runs with an ``--mmproj``).
    vision: bool = field(default=False, compare=False)
    #: The model the probe described (the row's, else the first listed):
    #: what ``reasoning`` is about.
    model: str | None = field(default=None, compare=False)


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


def roots(base_url: str) -> tuple[str, str]:
    """(OpenAI base, server root): ``http://h:8000/v1`` -> both; the engines'
    native endpoints (``/props``, ``/api/...``, ``/tokenize``) live at the root."""
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    return base, root


async def json_reply(resp: aiohttp.ClientResponse) -> Any:
    """The decoded JSON of a 200 answer, read within ``MAX_PROBE_BYTES``;
    None for another status or a larger body (a JSON error raises)."""
    if resp.status != 200:
        return None
    data = await resp.content.read(MAX_PROBE_BYTES + 1)
    if len(data) > MAX_PROBE_BYTES:
        return None
    return orjson.loads(data)


class _Prober:
    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, headers: Mapping[str, str]
    ) -> None:
        self.session = session
        self.base, self.root = roots(base_url)
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
                return await json_reply(resp)
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
        modalities = props.get("modalities") if isinstance(props, dict) else None
        vision = isinstance(modalities, dict) and modalities.get("vision") is True
        return UpstreamInfo(window, "llamacpp", vision=vision)

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
        listed = card.get("id") if card else None
        model_id = model or (listed if isinstance(listed, str) else None)
        info = await self._recognise(card, model_id)
        info.model = model_id
        return info

    async def _recognise(self, card: dict[str, Any] | None, model_id: str | None) -> UpstreamInfo:
        owned_by = card.get("owned_by") if card else None
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


#: Engines that drop special tokens from ``content`` unless asked not to
#: (``skip_special_tokens`` defaults to true in vLLM's and SGLang's sampling
#: params). Without a tool parser configured, a call of a family whose
#: markers are special tokens then arrives with them deleted, and no
#: detector can find it.
_KEEPS_MARKERS_ON_REQUEST = frozenset({"vllm", "sglang"})


def asks_json_schema(body: dict[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") == "json_schema"


def refuses_json_schema(status: int, error: bytes) -> bool:
    """An upstream's error for a ``json_schema`` request that names
    ``response_format``: the server does not take that format
    (llama-cpp-python's answers 500 with a validation error; others 400 or
    422). Not an overflow or a server fault."""
    return status in (400, 422, 500) and b"response_format" in error


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
