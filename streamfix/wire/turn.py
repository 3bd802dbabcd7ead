"""What both doors share: repaired chat completions read as one turn.

``TurnEncoder`` reads the repaired chat SSE bytes (or a whole repaired
``chat.completion``) and calls one hook per thing that happened in the
turn: reasoning text, answer text, a tool call's start and its argument
text, the finish reason, usage, an error, the end. A door's encoder is a
subclass that turns those hooks into its own events. Only choice 0 is
read: neither the Responses nor the Messages API has ``n``.

What the hooks are told is made consistent here, for both doors: a call
id already used in the turn is renamed (``dup``, then ``dup_2``,
``dup_3``…: the next turn's results must match their calls, and Anthropic
refuses duplicate ``tool_use`` ids); ``has_calls`` says whether any call
was sent, so a ``tool_calls`` finish with no call is not reported as one;
``matched_stop`` is the stop string the upstream says it matched (vLLM's
and SGLang's ``stop_reason`` on the choice); ``usage_details`` reads the
cached and reasoning token counts when the upstream sends them (``None``
when it does not: a door reports them absent, never as zero).

The bytes fed are the proxy's own output (the chain's, or its error
events), so they are well-formed; anything else is skipped, not raised.
The request-side helpers at the bottom (system messages, ids, the
checks both doors make of a request, efforts, what becomes of images
and files) are the translators' common ground: one place per rule.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
from typing import Any

import msgspec
import orjson

from .. import jsoncodec
from ..chunks import ChoiceView, DeltaView, view_of
from ..errors import RequestError
from ..sse import DONE, SSEDecoder, SSEEvent


class _TurnChoice(ChoiceView, gc=False):
    """A choice as the encoders read it: the chain's view, and vLLM's and
    SGLang's ``stop_reason`` (the stop string or token id that matched)."""

    stop_reason: str | int | None = None
    #: The chain's note on the choice (``{"json": "invalid", "error": …}``).
    streamfix: dict[str, Any] | None = None


class _TurnView(msgspec.Struct, gc=False):
    """What the encoders read of a chunk: the choices (``_TurnChoice``),
    and usage and error, which the chain does not own. Other fields are
    skipped by the decoder, never materialised."""

    choices: list[_TurnChoice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


_decode = msgspec.json.Decoder(_TurnView).decode


def _view(payload: bytes) -> _TurnView | None:
    try:
        return _decode(payload)
    except msgspec.MsgspecError:
        # Odd field types, or JSON only the SDKs' lenient reading accepts
        # (a ``-Infinity`` logprob, a lone surrogate): the chain's loose read.
        try:
            obj = jsoncodec.loads_lenient(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        usage = obj.get("usage")
        view = view_of(obj)
        choices = [
            _TurnChoice(c.index, c.delta, c.message, c.finish_reason) for c in view.choices or ()
        ]
        return _TurnView(choices, usage if isinstance(usage, dict) else None, view.error)


def sse_event(name: str, payload: dict[str, Any]) -> bytes:
    """One named SSE event (``event:`` then ``data:``), as both doors send."""
    return b"event: " + name.encode() + b"\ndata: " + jsoncodec.dumps(payload) + b"\n\n"


#: Characters per token of a reply, for the output estimate when the
#: upstream reports no usage (English prose with BPE tokenizers: about 4).
OUTPUT_CHARS_PER_TOKEN = 4


def new_id(prefix: str) -> str:
    """A fresh id in the door's style (``msg_…``, ``resp_…``, ``fc_…``)."""
    return prefix + os.urandom(12).hex()


class TurnEncoder:
    """Base of the doors' encoders: chat SSE in, hooks called, bytes out.

    Subclasses append their encoded events to ``self.out`` from the hooks;
    ``feed`` returns and clears them. After the end (``[DONE]``) or an
    error, later input is ignored.
    """

    def __init__(self, input_estimate: int = 0) -> None:
        self._sse = SSEDecoder()
        #: The prompt's estimated tokens (the proxy's), for ``tokens``.
        self.input_estimate = input_estimate
        #: Characters of reasoning, text and arguments the turn produced.
        self.out_chars = 0
        #: ``tokens`` estimated the usage: the upstream sent none.
        self.estimated = False
        self.out: list[bytes] = []
        self.over = False
        self.started = False
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        #: Tool-call indexes seen, so a repeated index continues its call.
        self._calls: set[int] = set()
        #: Call ids sent in this turn, so a repeated one is renamed.
        self._ids: set[str] = set()
        #: The stop string the upstream matched (``stop_reason`` on the
        #: choice, vLLM and SGLang), when it ended with ``stop``.
        self.matched_stop: str | None = None
        #: Why the reply is not the JSON the request asked for (the chain's
        #: ``"streamfix": {"json": "invalid", "error": …}`` note), or None:
        #: each door marks it the way its API can carry it.
        self.json_invalid: str | None = None

    # -- input -------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        """Repaired chat SSE bytes in, the door's SSE bytes out."""
        for ev in self._sse.feed(data):
            self._event(ev)
        if not self.out:
            return b""
        out = b"".join(self.out)
        self.out.clear()
        return out

    def feed_completion(self, completion: dict[str, Any]) -> None:
        """A whole repaired ``chat.completion`` through the same hooks."""
        self._start()
        for ch in view_of(completion).choices or ():
            if ch.index == 0:
                if ch.message is not None:
                    self._delta(ch.message)
                self.finish_reason = ch.finish_reason or self.finish_reason
        for raw in completion.get("choices") or ():
            if isinstance(raw, dict) and raw.get("index", 0) == 0:
                self._stopped_by(raw.get("stop_reason"))
                self._noted(raw.get("streamfix"))
        usage = completion.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        self.over = True
        self.on_done()
        self.out.clear()

    def _event(self, ev: SSEEvent) -> None:
        if self.over:
            return
        self._start()
        if ev.data is None:
            self.on_keepalive()
            return
        if ev.data == DONE:
            self.over = True
            self.on_done()
            return
        view = _view(ev.data)
        if view is None:
            return
        err = view.error
        if err:
            self.over = True
            if not isinstance(err, dict):
                err = {"message": str(err)}
            self.on_error(
                str(err.get("message") or "upstream error"),
                str(err.get("type") or "upstream_error"),
                err.get("code"),
            )
            return
        if view.usage is not None:
            self.usage = view.usage
        for ch in view.choices or ():
            if ch.index != 0:
                continue
            if ch.delta is not None:
                self._delta(ch.delta)
            if ch.finish_reason:
                self.finish_reason = ch.finish_reason
                self._stopped_by(ch.stop_reason)
            if ch.streamfix is not None:
                self._noted(ch.streamfix)

    def _noted(self, note: Any) -> None:
        if isinstance(note, dict) and note.get("json") == "invalid":
            self.json_invalid = str(note.get("error") or "the reply is not the JSON asked for")

    def _stopped_by(self, stop: Any) -> None:
        # a token id (an int) is no stop sequence the client can be told of
        self.matched_stop = stop if isinstance(stop, str) and stop else None

    def _delta(self, delta: DeltaView) -> None:
        reasoning = delta.reasoning_content or delta.reasoning
        if reasoning:
            self.out_chars += len(reasoning)
            self.on_reasoning(reasoning)
        if delta.content:
            self.out_chars += len(delta.content)
            self.on_text(delta.content)
        for pos, tc in enumerate(delta.tool_calls or ()):
            index = pos if tc.index is None else tc.index
            fn = tc.function
            if index not in self._calls:
                self._calls.add(index)
                name = fn.name if fn is not None and fn.name else ""
                self.on_call(index, self._unique(tc.id or new_id("call_")), name)
            if fn is not None and fn.arguments:
                self.out_chars += len(fn.arguments)
                self.on_arguments(index, fn.arguments)

    def _unique(self, call_id: str) -> str:
        """``call_id``, or when the turn already sent it, the first of
        ``call_id_2``, ``call_id_3``… not yet sent (deterministic, so a
        replayed turn gets the same ids)."""
        if call_id in self._ids:
            n = 2
            while f"{call_id}_{n}" in self._ids:
                n += 1
            call_id = f"{call_id}_{n}"
        self._ids.add(call_id)
        return call_id

    @property
    def has_calls(self) -> bool:
        """Whether the turn sent a tool call (a ``tool_calls`` finish
        without one is an ordinary end)."""
        return bool(self._calls)

    def _start(self) -> None:
        if not self.started:
            self.started = True
            self.on_start()

    # -- hooks ---------------------------------------------------------------

    def on_start(self) -> None:
        """Before anything else (the door's opening events)."""

    def on_keepalive(self) -> None:
        """A keep-alive comment from the proxy while output is held."""

    def on_reasoning(self, text: str) -> None: ...

    def on_text(self, text: str) -> None: ...

    def on_call(self, index: int, call_id: str, name: str) -> None: ...

    def on_arguments(self, index: int, text: str) -> None: ...

    def on_done(self) -> None:
        """The end of the turn (``finish_reason`` and ``usage`` are set)."""

    def on_error(self, message: str, type_: str, code: Any) -> None:
        """The upstream failed (or the proxy did); the stream ends here."""

    # -- shared reading of the result --------------------------------------------

    def tokens(self) -> tuple[int, int]:
        """(input, output) tokens from the upstream's usage; when it sent
        none (llama-cpp-python ignores ``include_usage``), estimated: the
        proxy's prompt estimate and the reply's characters / 4, and
        ``estimated`` set so the door can mark them (``usage_mark``)."""
        u = self.usage
        if "prompt_tokens" in u or "completion_tokens" in u:
            # reset: an in-progress object asked before the usage came
            self.estimated = False
            return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
        self.estimated = True
        out = -(-self.out_chars // OUTPUT_CHARS_PER_TOKEN)
        return self.input_estimate, out

    def usage_details(self) -> tuple[int | None, int | None]:
        """(cached prompt tokens, reasoning tokens) as the upstream reported
        them (``prompt_tokens_details.cached_tokens``,
        ``completion_tokens_details.reasoning_tokens``); ``None`` for a
        count it did not send: unknown is not zero."""
        return (
            _detail(self.usage, "prompt_tokens_details", "cached_tokens"),
            _detail(self.usage, "completion_tokens_details", "reasoning_tokens"),
        )

    def usage_mark(self) -> dict[str, Any]:
        """Added to a usage object whose numbers ``tokens`` estimated."""
        return {"streamfix": {"estimated": True}} if self.estimated else {}


def _detail(usage: dict[str, Any], group: str, key: str) -> int | None:
    details = usage.get(group)
    value = details.get(key) if isinstance(details, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


# -- request side ---------------------------------------------------------------


def merge_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every system (and ``developer``) message merged, in order, into one
    leading system message. Claude Code puts a system message after the
    first user message for models it does not know, and Codex sends its
    instructions as developer messages; many chat templates
    refuse a system message anywhere but first."""
    system: list[str] = []
    rest: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") in ("system", "developer"):
            text = m.get("content")
            if isinstance(text, str) and text:
                system.append(text)
        else:
            rest.append(m)
    if system:
        rest.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return rest


def model_of(body: Any) -> str:
    """The request's model; RequestError unless ``body`` is an object with one."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' is required", param="model")
    return model


def pass_on(body: dict[str, Any], chat: dict[str, Any], sampling: tuple[str, ...]) -> bool:
    """Copy what a door passes on as is into ``chat``: the ``sampling``
    numbers, and ``stream`` (asking for usage in the stream: the doors
    report it at the end). Returns whether the reply is streamed."""
    for key in sampling:
        value = body.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            chat[key] = value
    stream = body.get("stream") is True
    chat["stream"] = stream
    if stream:
        chat["stream_options"] = {"include_usage": True}
    return stream


def json_text(value: Any) -> str:
    """A tool call's arguments as the JSON text chat completions carry."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value if value is not None else {}).decode()


# -- request checks (one place per rule; each a RequestError, a 400) ------------


def check_stream(body: dict[str, Any]) -> None:
    """``stream`` is a boolean or absent: ``"true"`` or ``1`` is a 400, not
    a silently non-streamed reply."""
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise RequestError("'stream' must be a boolean", param="stream")


def check_number(
    body: dict[str, Any], key: str, low: float, high: float, *, integer: bool = False
) -> None:
    """``body[key]``, when present, is a number (an integer when
    ``integer``) within ``[low, high]``."""
    value = body.get(key)
    if value is None:
        return
    kind = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        what = "an integer" if integer else "a number"
        raise RequestError(f"'{key}' must be {what} between {low:g} and {high:g}", param=key)
    if not low <= value <= high:
        raise RequestError(f"'{key}' must be between {low:g} and {high:g}", param=key)


def check_bool(body: dict[str, Any], key: str) -> None:
    """``body[key]``, when present and not null, is a boolean."""
    if body.get(key) is not None and not isinstance(body[key], bool):
        raise RequestError(f"'{key}' must be a boolean", param=key)


def check_strings(body: dict[str, Any], key: str) -> None:
    """``body[key]``, when present, is an array of strings."""
    value = body.get(key)
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise RequestError(f"'{key}' must be an array of strings", param=key)


def need_id(value: Any, param: str) -> str:
    """A required id or name: a non-empty string (never forwarded as ``""``)."""
    if not isinstance(value, str) or not value:
        raise RequestError(f"'{param}' must be a non-empty string", param=param)
    return value


def check_unique(names: list[str], param: str) -> None:
    """Tool names offered once each: two tools of one name cannot be told
    apart in a call (both APIs refuse them)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RequestError(f"tool names must be unique: {name!r} is offered twice", param=param)
        seen.add(name)


def check_offered(name: str, offered: Any, param: str) -> None:
    """A forced tool must be one of the tools offered upstream."""
    if name not in offered:
        raise RequestError(f"tool_choice names {name!r}, which is not among 'tools'", param=param)


# -- thinking effort ----------------------------------------------------------------

#: A door's effort -> the chat ``reasoning_effort`` the servers know (vLLM,
#: SGLang, Ollama, LM Studio take low, medium, high; gpt-oss's template
#: the same three): the efforts above high are its highest.
EFFORTS = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}

#: Thinking switched off, as the servers understand it: the chat template's
#: switch (vLLM, SGLang and llama.cpp pass ``chat_template_kwargs`` to the
#: template; Qwen3's and the other hybrid templates read
#: ``enable_thinking``). ``reasoning_effort: "none"`` is not sent: older
#: vLLM builds refuse any value but low, medium, high. The proxy reads the
#: same switch (``context.thinking_switch``): no reasoning hold then.
THINKING_OFF: dict[str, Any] = {"enable_thinking": False}


def set_effort(chat: dict[str, Any], effort: str | None) -> None:
    """``effort`` (a door's word, or ``"none"``) on the chat request."""
    if effort == "none":
        chat["chat_template_kwargs"] = dict(THINKING_OFF)
    elif effort in EFFORTS:
        chat["reasoning_effort"] = EFFORTS[effort]


# -- images and files ------------------------------------------------------------------

#: Text a model reads where an image was left out (the row does not take
#: images): it knows something was there, and can say so.
IMAGE_OMITTED = "[an image was omitted here: this model does not take images]"

#: Media types of a file or document passed on as its text.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml")


def count(counts: dict[str, int], kind: str, n: int = 1) -> None:
    counts[kind] = counts.get(kind, 0) + n


def is_text_type(media_type: Any) -> bool:
    return isinstance(media_type, str) and media_type.lower().startswith(_TEXT_TYPES)


def file_omitted(what: str, media_type: Any) -> str:
    """What the model reads in place of a file it cannot be given (a PDF,
    a spreadsheet): the client is told in the counts, the model in the
    text."""
    kind = f" ({media_type})" if isinstance(media_type, str) and media_type else ""
    return f"[{what}{kind} was omitted here: streamfix passes only text files and images]"


def decode_text(data: Any) -> str | None:
    """Base64 ``data`` as UTF-8 text, whole (``None`` when it is not).
    Never cut: the request's body limit already bounds it, and a file
    missing its end would be answered as if it were whole."""
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=False).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def data_url_text(url: Any) -> tuple[str | None, str | None]:
    """(the text, the media type) of a ``data:`` URL; text ``None`` when it
    is not a text type or not decodable."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None, None
    head, _, data = url[5:].partition(",")
    media_type = head.split(";")[0] or None
    if not is_text_type(media_type):
        return None, media_type
    if ";base64" in head:
        return decode_text(data), media_type
    return data, media_type


def no_file_ids(where: str) -> RequestError:
    """A file referenced by id: the proxy has no Files API to resolve it."""
    return RequestError(
        f"{where}: files referenced by id cannot be read: streamfix stores no files; "
        "send the data itself (base64, or a data: URL)",
        param=where,
    )


def user_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message's content: text when every part is text (what every
    chat template reads), else the parts."""
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(str(p.get("text", "")) for p in parts)
    return parts


def omit_images(chat: dict[str, Any], counts: dict[str, int]) -> None:
    """Every image part of ``chat``'s messages replaced by
    ``IMAGE_OMITTED`` (the row does not take images), each counted as
    ``image``: a text-only server answers an image with an error, or worse,
    reads its base64 as text."""
    for m in chat.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        if not any(isinstance(p, dict) and p.get("type") == "image_url" for p in content):
            continue
        parts: list[dict[str, Any]] = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "image_url":
                count(counts, "image")
                parts.append({"type": "text", "text": IMAGE_OMITTED})
            else:
                parts.append(p)
        m["content"] = user_content(parts)
