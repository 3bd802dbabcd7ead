"""Budgets: probing each engine's window against a real aiohttp upstream on
loopback, learning the window from overflow errors, clamping the output
allowance, and the engine-specific fields."""

# ruff: noqa: E501  (engine error messages are quoted verbatim)

from __future__ import annotations

import asyncio
import copy
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from streamfix.server.upstream import budget, engines
from streamfix.server.upstream.budget import BudgetPolicy, clamp_request, estimate_prompt_tokens
from streamfix.server.upstream.engines import (
    UpstreamInfo,
    engine_fields,
    probe_upstream,
    window_from_error,
)
from tests.support.streamutil import CAPTURES

# --------------------------------------------------------------------------
# A scripted upstream: each engine's probe endpoints with realistic bodies

Route = dict[tuple[str, str], Any]
SEEN = web.AppKey("seen", list)


def vllm_routes(window: int = 32768) -> Route:
    # vllm/entrypoints/openai/protocol.py ModelCard
    return {
        ("GET", "/v1/models"): {
            "object": "list",
            "data": [
                {
                    "id": "Qwen/Qwen2.5-7B-Instruct",
                    "object": "model",
                    "created": 1735000000,
                    "owned_by": "vllm",
                    "root": "Qwen/Qwen2.5-7B-Instruct",
                    "parent": None,
                    "max_model_len": window,
                    "permission": [{"id": "modelperm-1", "object": "model_permission"}],
                }
            ],
        }
    }


def sglang_routes(window: int | None = 65536) -> Route:
    card: dict[str, Any] = {
        "id": "qwen/qwen2.5-0.5b-instruct",
        "object": "model",
        "created": 1735000000,
        "owned_by": "sglang",
        "root": "qwen/qwen2.5-0.5b-instruct",
    }
    if window is not None:
        card["max_model_len"] = window
    return {("GET", "/v1/models"): {"object": "list", "data": [card]}}


def old_sglang_routes() -> Route:
    """An SGLang whose cards say neither owner nor window: /get_model_info
    recognises it (SGLang native API docs)."""
    return {
        ("GET", "/v1/models"): {"object": "list", "data": [{"id": "default", "object": "model"}]},
        ("GET", "/get_model_info"): {
            "model_path": "qwen/qwen2.5-0.5b-instruct",
            "tokenizer_path": "qwen/qwen2.5-0.5b-instruct",
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
        },
    }


def llamacpp_routes(props: bool = True, meta: dict[str, Any] | None = None) -> Route:
    routes: Route = {
        ("GET", "/v1/models"): {
            "object": "list",
            "data": [
                {
                    "id": "Qwen3-0.6B-Q4_K_M.gguf",
                    "object": "model",
                    "created": 1735142223,
                    "owned_by": "llamacpp",
                    "meta": meta
                    or {
                        "vocab_type": 2,
                        "n_vocab": 151936,
                        "n_ctx_train": 40960,
                        "n_embd": 1024,
                        "n_params": 596049920,
                        "size": 484219968,
                    },
                }
            ],
        }
    }
    if props:
        routes[("GET", "/props")] = {
            "default_generation_settings": {"n_ctx": 8192, "n_predict": -1, "temperature": 0.8},
            "total_slots": 1,
            "model_path": "models/Qwen3-0.6B-Q4_K_M.gguf",
            "chat_template": "...",
            "build_info": "b5000-abcdef",
        }
    return routes


def ollama_routes(loaded: bool = True, num_ctx: bool = True) -> Route:
    parameters = 'stop "<|im_start|>"\nstop "<|im_end|>"\ntemperature 0.6'
    if num_ctx:
        parameters = "num_ctx 4096\n" + parameters
    routes: Route = {
        ("GET", "/v1/models"): {
            "object": "list",
            "data": [
                {"id": "qwen3:4b", "object": "model", "created": 1745000000, "owned_by": "library"}
            ],
        },
        ("GET", "/api/version"): {"version": "0.6.8"},
        ("GET", "/api/ps"): {"models": []},
        ("POST", "/api/show"): {
            "modelfile": "FROM qwen3:4b",
            "parameters": parameters,
            "template": "{{ .System }}",
            "details": {
                "family": "qwen3",
                "parameter_size": "4.0B",
                "quantization_level": "Q4_K_M",
            },
            "model_info": {
                "general.architecture": "qwen3",
                "general.parameter_count": 4022468096,
                "qwen3.context_length": 40960,
                "qwen3.embedding_length": 2560,
            },
            "capabilities": ["completion", "tools", "thinking"],
        },
    }
    if loaded:
        routes[("GET", "/api/ps")] = {
            "models": [
                {
                    "name": "qwen3:4b",
                    "model": "qwen3:4b",
                    "size": 3510000000,
                    "details": {"family": "qwen3"},
                    "expires_at": "2026-11-30T06:00:00Z",
                    "size_vram": 3510000000,
                    "context_length": 8192,
                }
            ]
        }
    return routes


def lmstudio_routes() -> Route:
    # lmstudio-ai/docs 1_developer/2_rest/endpoints.mdx
    return {
        ("GET", "/v1/models"): {
            "object": "list",
            "data": [
                {"id": "qwen2.5-7b-instruct", "object": "model", "owned_by": "organization_owner"},
                {
                    "id": "text-embedding-nomic-embed-text-v1.5",
                    "object": "model",
                    "owned_by": "organization_owner",
                },
            ],
        },
        ("GET", "/api/v0/models"): {
            "object": "list",
            "data": [
                {
                    "id": "qwen2.5-7b-instruct",
                    "object": "model",
                    "type": "llm",
                    "arch": "qwen2",
                    "compatibility_type": "gguf",
                    "quantization": "Q4_K_M",
                    "state": "loaded",
                    "max_context_length": 32768,
                    "loaded_context_length": 16384,
                },
                {
                    "id": "text-embedding-nomic-embed-text-v1.5",
                    "object": "model",
                    "type": "embeddings",
                    "state": "not-loaded",
                    "max_context_length": 2048,
                },
            ],
        },
    }


def llama_cpp_python_routes() -> Route:
    return {("GET", "/v1/models"): orjson.loads((CAPTURES / "models.json").read_bytes())}


def make_app(routes: Route, token: str | None = None, delay: float = 0.0) -> web.Application:
    seen: list[tuple[str, str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append((request.method, request.path, orjson.loads(body) if body else None))
        if token is not None and request.headers.get("Authorization") != f"Bearer {token}":
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        if delay:
            await asyncio.sleep(delay)
        answer = routes.get((request.method, request.path))
        if answer is None:
            return web.json_response({"error": "not found"}, status=404)
        if isinstance(answer, bytes):
            return web.Response(body=answer, content_type="application/json")
        return web.json_response(answer)

    app = web.Application()
    app[SEEN] = seen
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[TestServer] = []

    async def start(routes: Route, **kw: Any) -> TestServer:
        server = TestServer(make_app(routes, **kw), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return server

    yield start
    for s in servers:
        await s.close()


async def probe(
    server: TestServer, model: str | None = None, headers: dict[str, str] | None = None
) -> UpstreamInfo:
    async with aiohttp.ClientSession() as session:
        return await probe_upstream(session, str(server.make_url("/v1")), headers or {}, model)


# --------------------------------------------------------------------------
# Probing


@pytest.mark.parametrize(
    ("routes", "model", "expected"),
    [
        pytest.param(vllm_routes(), None, UpstreamInfo(32768, "vllm"), id="vllm-max_model_len"),
        pytest.param(
            sglang_routes(), None, UpstreamInfo(65536, "sglang"), id="sglang-max_model_len"
        ),
        pytest.param(
            sglang_routes(None), None, UpstreamInfo(None, "sglang"), id="sglang-card-without-window"
        ),
        pytest.param(
            old_sglang_routes(), None, UpstreamInfo(None, "sglang"), id="sglang-get_model_info"
        ),
        pytest.param(
            llamacpp_routes(), None, UpstreamInfo(8192, "llamacpp"), id="llamacpp-props-slot-n_ctx"
        ),
        pytest.param(
            llamacpp_routes(props=False, meta={"n_ctx": 16384, "n_ctx_train": 131072}),
            None,
            UpstreamInfo(16384, "llamacpp"),
            id="llamacpp-meta-n_ctx",
        ),
        pytest.param(
            llamacpp_routes(props=False),
            None,
            UpstreamInfo(40960, "llamacpp"),
            id="llamacpp-meta-n_ctx_train",
        ),
        pytest.param(
            ollama_routes(),
            "qwen3:4b",
            UpstreamInfo(8192, "ollama", True),
            id="ollama-loaded-api-ps",
        ),
        pytest.param(
            ollama_routes(loaded=False),
            "qwen3:4b",
            UpstreamInfo(4096, "ollama", True),
            id="ollama-num_ctx",
        ),
        pytest.param(
            ollama_routes(loaded=False, num_ctx=False),
            "qwen3:4b",
            UpstreamInfo(40960, "ollama", True),
            id="ollama-model_info-context_length",
        ),
        pytest.param(
            ollama_routes(), None, UpstreamInfo(8192, "ollama", True), id="ollama-first-card"
        ),
        pytest.param(
            lmstudio_routes(), None, UpstreamInfo(16384, "lmstudio"), id="lmstudio-loaded"
        ),
        pytest.param(
            lmstudio_routes(),
            "text-embedding-nomic-embed-text-v1.5",
            UpstreamInfo(2048, "lmstudio"),
            id="lmstudio-named-model",
        ),
        pytest.param(
            llama_cpp_python_routes(), None, UpstreamInfo(None, None), id="llama-cpp-python-nothing"
        ),
        pytest.param({}, None, UpstreamInfo(None, None), id="everything-404"),
        pytest.param(
            {("GET", "/v1/models"): b"<html>not json</html>"},
            None,
            UpstreamInfo(None, None),
            id="not-json",
        ),
    ],
)
async def test_probe_reads_each_engines_window(
    serve: Callable[..., Any], routes: Route, model: str | None, expected: UpstreamInfo
) -> None:
    server = await serve(routes)
    assert await probe(server, model) == expected


async def test_probe_picks_the_named_card(serve: Callable[..., Any]) -> None:
    routes = vllm_routes(32768)
    routes[("GET", "/v1/models")]["data"].append(
        {"id": "small", "object": "model", "owned_by": "vllm", "max_model_len": 4096}
    )
    server = await serve(routes)
    assert (await probe(server, "small")).window == 4096
    assert (await probe(server, "Qwen/Qwen2.5-7B-Instruct")).window == 32768


async def test_probe_sends_the_upstream_headers(serve: Callable[..., Any]) -> None:
    server = await serve(vllm_routes(), token="sk-up")
    assert await probe(server) == UpstreamInfo(None, None)
    assert await probe(server, headers={"Authorization": "Bearer sk-up"}) == UpstreamInfo(
        32768, "vllm"
    )


async def test_probe_of_ollama_asks_show_for_the_model(serve: Callable[..., Any]) -> None:
    server = await serve(ollama_routes(loaded=False))
    await probe(server, "qwen3:4b")
    shows = [body for method, path, body in server.app[SEEN] if path == "/api/show"]
    assert shows == [{"model": "qwen3:4b"}]


async def test_probe_of_a_refused_port_returns_unknown_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        info = await probe_upstream(session, f"http://127.0.0.1:{port}/v1", {})
    assert info == UpstreamInfo(None, None)
    assert time.monotonic() - started < 2


async def test_probe_of_a_hung_upstream_is_bounded(
    serve: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "PROBE_REQUEST_TIMEOUT", 0.2)
    monkeypatch.setattr(engines, "PROBE_TOTAL_TIMEOUT", 0.5)
    server = await serve(vllm_routes(), delay=5.0)
    started = time.monotonic()
    assert await probe(server) == UpstreamInfo(None, None)
    assert time.monotonic() - started < 1.5


async def test_probe_accepts_a_base_url_with_a_trailing_slash(serve: Callable[..., Any]) -> None:
    server = await serve(llamacpp_routes())
    async with aiohttp.ClientSession() as session:
        info = await probe_upstream(session, str(server.make_url("/v1/")), {})
    assert info == UpstreamInfo(8192, "llamacpp")


# --------------------------------------------------------------------------
# The window from an overflow error

OVERFLOW_ERRORS = [
    pytest.param(
        (CAPTURES / "h_ctx_overflow_nostream.json").read_bytes(),
        2048,
        id="llama-cpp-python-capture",
    ),
    pytest.param(
        {
            "error": {
                "message": "'max_tokens' or 'max_completion_tokens' is too large: 65536. This model's "
                "maximum context length is 32768 tokens and your request has 500 input tokens "
                "(65536 > 32768 - 500). None",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
        32768,
        id="vllm-max_tokens-too-large",
    ),
    pytest.param(
        '{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you '
        "requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length "
        'of the messages or completion.","type":"BadRequestError","param":null,"code":400}',
        4096,
        id="vllm-old-wording",
    ),
    pytest.param(
        {
            "error": {
                "message": "The decoder prompt (length 9000) is longer than the maximum model length of 8192."
            }
        },
        8192,
        id="vllm-decoder-prompt",
    ),
    pytest.param(
        {
            "object": "error",
            "message": "Requested token count exceeds the model's maximum context length of 65536 tokens. "
            "You requested a total of 67298 tokens: 50914 tokens from the input messages and 16384 "
            "tokens for the completion.",
            "code": 400,
        },
        65536,
        id="sglang-requested-token-count",
    ),
    pytest.param(
        {
            "error": {
                "message": "The input (41000 tokens) is longer than the model's context length (32768 tokens)."
            }
        },
        32768,
        id="sglang-input-longer",
    ),
    pytest.param(
        b'{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size '
        b'(8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,'
        b'"n_ctx":8192}}',
        8192,
        id="llamacpp-structured-n_ctx",
    ),
    pytest.param(
        "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it",
        8192,
        id="llamacpp-message-only",
    ),
    pytest.param(
        {"detail": "Input length (265330) exceeds model's maximum context length (262144)."},
        262144,
        id="fastapi-detail-parenthesised",
    ),
    pytest.param(
        {
            "error": "Trying to keep the first 5000 tokens when context the overflows. However, the model "
            "is loaded with context length of only 4096 tokens, which is not enough."
        },
        4096,
        id="lmstudio",
    ),
]

NOT_OVERFLOW = [
    pytest.param({"error": {"message": "invalid tool schema", "code": 400}}, id="other-400"),
    pytest.param(
        {"error": {"message": "Rate limit exceeded, retry after 30 seconds"}}, id="rate-limit"
    ),
    pytest.param(b'{"error":{"message":"bad key"}}', id="auth"),
    pytest.param(b"", id="empty"),
    pytest.param(b"<html>502 Bad Gateway</html>", id="html"),
    pytest.param(
        {"error": {"message": "This model's maximum context length is 3 tokens"}}, id="implausible"
    ),
    pytest.param([1, 2], id="json-list"),
]


@pytest.mark.parametrize(("body", "window"), OVERFLOW_ERRORS)
def test_window_from_error(body: Any, window: int) -> None:
    assert window_from_error(body) == window


@pytest.mark.parametrize("body", NOT_OVERFLOW)
def test_window_from_error_ignores_other_errors(body: Any) -> None:
    assert window_from_error(body) is None


# --------------------------------------------------------------------------
# Estimating the prompt

POLICY = BudgetPolicy()


def req(text: str = "What is the weather in Paris?", **fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **fields}


def test_estimate_over_estimates_english() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 200  # ~2000 real tokens
    assert estimate_prompt_tokens(req(text)) >= len(text) / 4


def test_estimate_counts_non_latin_text_at_least_a_token_per_character() -> None:
    text = "北京今天的天气怎么样" * 100
    assert estimate_prompt_tokens(req(text)) >= len(text)


def test_estimate_counts_a_media_part_fixed_not_its_base64() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 400_000}}
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this"}, image]}]
    }
    assert budget.MEDIA_PART_TOKENS <= estimate_prompt_tokens(body) < budget.MEDIA_PART_TOKENS + 50


def test_estimate_counts_tools_and_tool_calls() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    plain = estimate_prompt_tokens(req())
    assert estimate_prompt_tokens(req(tools=tools)) > plain + budget.TOOLS_OVERHEAD
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    body = req()
    body["messages"].append(call)
    assert estimate_prompt_tokens(body) > plain + budget.MESSAGE_OVERHEAD


def test_estimate_survives_odd_messages() -> None:
    body = {
        "messages": ["not a dict", {"role": "user", "content": 42}, {"role": "user"}],
        "tools": "x",
    }
    assert estimate_prompt_tokens(body) > 0
    assert estimate_prompt_tokens({}) == 0


# --------------------------------------------------------------------------
# Clamping


def test_65536_to_a_32k_window_is_clamped_to_fit() -> None:
    body = req(max_tokens=65536)
    new, info = clamp_request(body, 32768, POLICY, reasoning=False)
    prompt = estimate_prompt_tokens(body)
    assert new["max_tokens"] == 32768 - prompt - POLICY.safety_margin
    assert info == {
        "field": "max_tokens",
        "requested": 65536,
        "clamped": new["max_tokens"],
        "window": 32768,
        "prompt_estimate": prompt,
        "input_budget": 32768 - 1024 - 64,
        "action": "clamped",
        "fields": ["max_tokens"],
    }


@pytest.mark.parametrize(
    ("fields", "window", "reasoning", "expected"),
    [
        # (request fields, window, reasoning, expected output fields or None = unchanged)
        ({"max_tokens": 65536}, 32768, False, {"max_tokens": "fit"}),
        ({"max_completion_tokens": 65536}, 32768, False, {"max_completion_tokens": "fit"}),
        (
            {"max_tokens": 65536, "max_completion_tokens": 65536},
            32768,
            False,
            {"max_tokens": "fit", "max_completion_tokens": "fit"},
        ),
        (
            {"max_tokens": 1000, "max_completion_tokens": 65536},
            32768,
            False,
            {"max_tokens": 1000, "max_completion_tokens": "fit"},
        ),
        ({"max_tokens": 1000}, 32768, False, None),  # fits: untouched
        ({}, 32768, False, None),  # not sent: stays unset
        ({}, 32768, True, None),  # not sent, reasoning: stays unset (engines default to what fits)
        ({"max_tokens": 65536}, None, False, None),  # unknown window: untouched
        ({"max_tokens": 1000}, 32768, True, {"max_tokens": 1000 + 2048}),  # reasoning reserve
        ({"max_tokens": 31000}, 32768, True, {"max_tokens": "fit"}),  # reserve capped by the window
        ({"max_tokens": 65536}, 32768, True, {"max_tokens": "fit"}),
        ({"max_tokens": 0}, 32768, False, None),  # invalid values are the upstream's to reject
        ({"max_tokens": True}, 32768, False, None),
        ({"max_tokens": "65536"}, 32768, False, None),
        ({"max_tokens": None}, 32768, False, None),
    ],
)
def test_clamp_table(
    fields: dict[str, Any], window: int | None, reasoning: bool, expected: dict[str, Any] | None
) -> None:
    body = req(**fields)
    before = copy.deepcopy(body)
    new, info = clamp_request(body, window, POLICY, reasoning=reasoning)
    assert body == before  # never mutated
    if expected is None:
        assert new is body and info is None
        return
    fit = window - estimate_prompt_tokens(body) - POLICY.safety_margin  # type: ignore[operator]
    for name, value in expected.items():
        assert new[name] == (fit if value == "fit" else value)
    changed = [name for name in expected if new[name] != body.get(name)]
    assert info is not None and info["fields"] == changed and info["field"] == changed[0]


def test_floor_when_the_prompt_fills_the_window() -> None:
    body = req("word " * 20000, max_tokens=4096)  # ~28K estimated tokens
    new, info = clamp_request(body, 8192, POLICY, reasoning=False)
    assert new["max_tokens"] == POLICY.floor
    assert info is not None and info["prompt_over_budget"] is True


def test_floor_never_raises_a_small_request() -> None:
    body = req("word " * 20000, max_tokens=100)
    assert clamp_request(body, 8192, POLICY, reasoning=False) == (body, None)


def test_reasoning_raise_is_reported() -> None:
    _, info = clamp_request(req(max_tokens=1000), 32768, POLICY, reasoning=True)
    assert info is not None
    assert info["action"] == "raised" and info["reasoning_reserve"] == 2048


def test_custom_policy() -> None:
    policy = BudgetPolicy(
        output_reservation=512, safety_margin=100, floor=64, reasoning_reserve=500
    )
    body = req(max_tokens=100)
    new, _ = clamp_request(body, 32768, policy, reasoning=True)
    assert new["max_tokens"] == 600
    new, _ = clamp_request(req("word " * 20000, max_tokens=4096), 8192, policy, reasoning=False)
    assert new["max_tokens"] == 64


@given(
    window=st.integers(512, 200_000),
    words=st.integers(0, 5000),
    requested=st.integers(1, 300_000),
    reasoning=st.booleans(),
)
def test_clamped_request_fits_or_is_the_floor(
    window: int, words: int, requested: int, reasoning: bool
) -> None:
    body = req("word " * words, max_tokens=requested)
    new, info = clamp_request(body, window, POLICY, reasoning=reasoning)
    prompt = estimate_prompt_tokens(body)
    out = new["max_tokens"]
    assert out == POLICY.floor or prompt + out + POLICY.safety_margin <= window or out == requested
    assert out <= max(requested + (POLICY.reasoning_reserve if reasoning else 0), POLICY.floor)
    assert (info is None) == (out == requested)


# --------------------------------------------------------------------------
# Engine-specific fields

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


@pytest.mark.parametrize(
    ("engine", "body", "expected"),
    [
        ("vllm", {"tools": TOOLS}, {"skip_special_tokens": False}),
        ("sglang", {"tools": TOOLS}, {"skip_special_tokens": False}),
        ("vllm", {"tools": TOOLS, "skip_special_tokens": True}, {}),  # the client decided
        ("vllm", {}, {}),  # no tools: nothing to keep
        ("vllm", {"tools": []}, {}),
        ("llamacpp", {"tools": TOOLS}, {}),
        ("ollama", {"tools": TOOLS}, {}),
        ("lmstudio", {"tools": TOOLS}, {}),
        (None, {"tools": TOOLS}, {}),  # unknown engine: never
    ],
)
def test_engine_fields(engine: str | None, body: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(body)
    assert engine_fields(body, UpstreamInfo(32768, engine)) == expected
    assert body == before


# -- fitting a prompt that cannot fit ---------------------------------------------


def test_prompt_size_read_from_overflow_errors() -> None:
    from streamfix.server.upstream.engines import prompt_tokens_from_error

    capture = (CAPTURES / "h_ctx_overflow_nostream.json").read_bytes()
    assert prompt_tokens_from_error(capture) == 2731
    vllm = {
        "error": {
            "message": "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens."
        }
    }
    assert prompt_tokens_from_error(vllm) == 5000
    assert prompt_tokens_from_error({"error": {"message": "rate limited"}}) is None


def _conversation(n_turns: int, words: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(n_turns):
        msgs.append({"role": "user", "content": f"question {i} " + "word " * words})
        msgs.append({"role": "assistant", "content": f"answer {i}"})
    msgs.append({"role": "user", "content": "And now?"})
    return msgs


def test_fit_prompt_drops_the_oldest_turns_first() -> None:
    from streamfix.server.upstream.budget import estimate_prompt_tokens, fit_prompt

    policy = BudgetPolicy(output_reservation=256, safety_margin=64, floor=64)
    body = {"messages": _conversation(10, 200)}
    out, info = fit_prompt(body, 1024, policy)
    assert info is not None and info["dropped_messages"] > 0 and info["truncated_chars"] == 0
    msgs = out["messages"]
    assert msgs[0] == {"role": "system", "content": "Be brief."}  # kept
    assert msgs[-1] == {"role": "user", "content": "And now?"}  # kept
    assert msgs[1]["role"] == "user"  # whole turns dropped: no orphan answers
    assert estimate_prompt_tokens(out) <= 1024 - 256 - 64
    # the newest turns are the ones kept
    assert msgs[-3]["content"].startswith("question 9 ")
    assert body["messages"][1]["content"].startswith("question 0 ")  # input unchanged


def test_fit_prompt_cuts_the_middle_of_a_message_too_long_alone() -> None:
    from streamfix.server.upstream.budget import TRIM_MARK, estimate_prompt_tokens, fit_prompt

    policy = BudgetPolicy(output_reservation=256, safety_margin=64, floor=64)
    text = "HEAD " + "The quick brown fox jumps over the lazy dog. " * 300 + " TAIL"
    out, info = fit_prompt({"messages": [{"role": "user", "content": text}]}, 2048, policy)
    assert info is not None and info["truncated_chars"] > 0
    new = out["messages"][0]["content"]
    assert new.startswith("HEAD ") and new.endswith(" TAIL") and TRIM_MARK in new
    assert estimate_prompt_tokens(out) <= 2048 - 256 - 64


def test_fit_prompt_leaves_a_prompt_that_fits_alone() -> None:
    from streamfix.server.upstream.budget import fit_prompt

    body = {"messages": _conversation(2, 10)}
    assert fit_prompt(body, 32768, BudgetPolicy()) == (body, None)
    # Not known to overflow, and not even the floor would be short: untouched.
    policy = BudgetPolicy(output_reservation=1024, safety_margin=64, floor=64)
    near = {"messages": _conversation(4, 200)}
    assert fit_prompt(near, 1400, policy, known_over=False)[1] is None
    assert fit_prompt(near, 1400, policy, known_over=True)[1] is not None


def test_fit_prompt_scale_calibrates_the_estimate() -> None:
    from streamfix.server.upstream.budget import fit_prompt

    policy = BudgetPolicy(output_reservation=256, safety_margin=64, floor=64)
    body = {"messages": _conversation(6, 100)}
    _, plain = fit_prompt(body, 2048, policy)
    _, doubled = fit_prompt(body, 2048, policy, scale=2.0)
    assert plain is None and doubled is not None
