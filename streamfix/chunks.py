"""The chunk model: the few fields the chain reads, and nothing more.

A ``chat.completion.chunk`` carries many fields streamfix does not own
(``usage``, ``logprobs``, ``system_fingerprint``, vendor extras, fields not
invented yet). We decode only what the chain needs into small msgspec view
Structs (unknown fields are skipped by the decoder, not materialised), and
keep the original bytes. A chunk the chain leaves alone is forwarded as
those bytes; a changed chunk is rebuilt from the full original object, so
every field we do not own survives.

Owned fields, per choice: ``delta.content``, ``delta.reasoning_content`` (or
``delta.reasoning``), ``delta.tool_calls``, ``delta.function_call`` (the
legacy twin some servers send beside ``tool_calls``), ``finish_reason``, and
our own ``streamfix`` extension field.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from . import jsoncodec
from .errors import UpstreamProtocolError


class FunctionDelta(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, gc=False):
    """One structured tool-call fragment as a server sends it."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: FunctionDelta | None = None


class DeltaView(msgspec.Struct, gc=False):
    """A streamed ``delta`` or a non-streamed ``message``."""

    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] | None = None
    function_call: dict[str, Any] | None = None


class ChoiceView(msgspec.Struct, gc=False):
    index: int = 0
    delta: DeltaView | None = None
    message: DeltaView | None = None
    finish_reason: str | None = None


class ChunkView(msgspec.Struct, gc=False):
    choices: list[ChoiceView] | None = None
    error: Any = None


# gc=False: views hold only strings, numbers and other views, never a
# cycle, so the garbage collector need not track one per chunk.
_decoder = msgspec.json.Decoder(ChunkView)
_decode = _decoder.decode


def decode_view(payload: bytes) -> ChunkView:
    """Decode the owned fields of one JSON chunk.

    Raises UpstreamProtocolError when the payload is not JSON as the SDKs
    read it (Python's ``json``). A chunk whose owned fields have odd types
    (``"index": "0"``) falls back to a loose read of the same fields, since
    servers do send such things; so does JSON that only the SDKs' lenient
    reading accepts (a ``-Infinity`` logprob, a lone surrogate escape): the
    strict decoder is tried first, so the common chunk pays nothing.
    """
    try:
        return _decode(payload)
    except msgspec.ValidationError:
        pass
    except (msgspec.DecodeError, RecursionError) as exc:  # a frame nested ~1,000 deep
        try:
            obj = jsoncodec.loads_lenient(payload)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError(
                f"chunk is not JSON: {exc}; data: {payload[:200]!r}"
            ) from None
        return view_of(obj)
    try:
        obj = jsoncodec.loads_lenient(payload)
    except orjson.JSONDecodeError as exc:  # pragma: no cover - decode() saw JSON
        raise UpstreamProtocolError(f"chunk is not JSON: {exc}") from None
    return view_of(obj)


#: The fields of a delta's text, as ``plain_text`` names them: content,
#: and reasoning (vLLM, SGLang, llama.cpp; newer vLLM: ``reasoning``).
CONTENT = "content"
REASONING_CONTENT = "reasoning_content"
REASONING = "reasoning"


def plain_text(view: ChunkView) -> tuple[int, str, str] | None:
    """``(choice index, text, key)`` when the chunk's only owned field is
    one choice's ``content`` or its reasoning text (``reasoning_content``,
    or ``reasoning`` as newer vLLM names it; with no content but ``""``),
    with no finish and no tool calls: the chunk a lane takes
    (``Chain.feed_plain``, ``Chain.feed_reasoning``). ``key`` is the
    field's name."""
    choices = view.choices
    if choices is None or len(choices) != 1 or view.error is not None:
        return None
    ch = choices[0]
    dv = ch.delta
    if ch.finish_reason is not None or dv is None or dv.tool_calls is not None:
        return None
    content = dv.content
    rc = dv.reasoning_content
    r = dv.reasoning
    if rc is None and r is None:
        return None if content is None else (ch.index, content, CONTENT)
    if content or (rc is not None and r is not None):
        return None  # text and reasoning at once, or both reasoning keys: full path
    if rc is not None:
        return ch.index, rc, REASONING_CONTENT
    return None if r is None else (ch.index, r, REASONING)


def view_of(obj: Any) -> ChunkView:
    """The view of an already-decoded chunk or completion (a dict)."""
    if not isinstance(obj, dict):
        raise UpstreamProtocolError(f"chunk is not a JSON object: {str(obj)[:200]}")
    choices_in = obj.get("choices")
    choices: list[ChoiceView] | None = None
    if isinstance(choices_in, list):
        choices = []
        for pos, ch in enumerate(choices_in):
            if not isinstance(ch, dict):
                continue
            idx = ch.get("index", pos)
            choices.append(
                ChoiceView(
                    index=_as_int(idx, pos),
                    delta=_delta_of(ch.get("delta")),
                    message=_delta_of(ch.get("message")),
                    finish_reason=_as_str(ch.get("finish_reason")),
                )
            )
    return ChunkView(choices=choices, error=obj.get("error"))


def _as_int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return default


def _as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return str(value)


def _delta_of(d: Any) -> DeltaView | None:
    if not isinstance(d, dict):
        return None
    calls_in = d.get("tool_calls")
    calls: list[ToolCallDelta] | None = None
    if isinstance(calls_in, list):
        calls = []
        for tc in calls_in:
            if not isinstance(tc, dict):
                continue
            fn = tc.get("function")
            func = None
            if isinstance(fn, dict):
                args = fn.get("arguments")
                if args is not None and not isinstance(args, str):
                    # Some servers send the arguments as an object.
                    args = jsoncodec.dumps(args).decode()
                func = FunctionDelta(name=_as_str(fn.get("name")), arguments=args)
            idx = tc.get("index")
            calls.append(
                ToolCallDelta(
                    index=None if idx is None else _as_int(idx, 0),
                    id=_as_str(tc.get("id")),
                    type=_as_str(tc.get("type")),
                    function=func,
                )
            )
    fc = d.get("function_call")
    return DeltaView(
        content=_as_str(d.get("content")),
        reasoning_content=_as_str(d.get("reasoning_content")),
        reasoning=_as_str(d.get("reasoning")),
        tool_calls=calls,
        function_call=fc if isinstance(fc, dict) else None,
    )
