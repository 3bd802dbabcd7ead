"""The Anthropic Messages API (``POST /v1/messages``), as Claude Code speaks it.

Request side (``MessagesDoor``, pure): ``system`` (a string or text
blocks), messages with text, image, document, ``tool_use``,
``tool_result`` and thinking blocks, ``system`` messages in the middle of
``messages`` (Claude Code sends one for models it does not know: merged
into the leading system message, see ``turn.merge_system``), tools with
``input_schema``, ``tool_choice``, ``max_tokens`` (the proxy clamps it
like any chat request), ``stop_sequences``, ``thinking`` and
``output_config`` (``effort`` as ``reasoning_effort``, thinking off as
``chat_template_kwargs``, ``format`` as ``response_format``). An image in
a ``tool_result`` (Claude Code's Read tool on a screenshot) goes in a user
message after the tool messages; a text document is its text, a PDF a
note to the model, counted (``omitted``). Server tools (``web_search_…``,
``bash_…``) cannot run upstream: dropped and counted. What the Messages
API refuses is a 400 in its shape (``_check``; ``turn``'s checks).
``cache_control``, ``context_management`` and the ``anthropic-beta``
header are ignored. Thinking blocks of earlier turns are not sent back
(chat templates drop earlier reasoning anyway). docs/doors.md tables
every field and part.

Reply side (``MessagesEncoder``, sans-I/O): ``message_start``, ``ping``,
``content_block_start/delta/stop`` (``text_delta``, ``input_json_delta``,
``thinking_delta``), ``message_delta`` (``stop_reason`` ``end_turn``,
``tool_use`` only when a ``tool_use`` block was sent, ``max_tokens`` for
the token limit and for a cut loop, ``stop_sequence`` with the matched
string when the upstream says which of the request's stop sequences
matched, ``refusal`` for a content filter; usage, where ``input_tokens``
excludes the upstream's cached prompt tokens, reported as
``cache_read_input_tokens`` when it sends them), ``message_stop``; an
upstream failure is an ``error`` event (the Anthropic SDK raises it).
The event contract is the one the anthropic-sdk-python ``MessageStream``
accumulator reads.
"""

from __future__ import annotations

from typing import Any

import orjson

from .. import jsoncodec
from ..errors import RequestError
from .turn import (
    TurnEncoder,
    check_bool,
    check_number,
    check_offered,
    check_stream,
    check_strings,
    check_unique,
    count,
    decode_text,
    file_omitted,
    is_text_type,
    json_text,
    merge_system,
    model_of,
    need_id,
    new_id,
    no_file_ids,
    pass_on,
    set_effort,
    sse_event,
    user_content,
)

#: HTTP status -> Anthropic error type (their error shape's ``type``).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

#: Chat finish reason -> Anthropic stop reason. A cut loop ends with
#: ``length`` too (see ``transforms/repetition.py``): the turn was stopped
#: short, as by the token limit. ``tool_calls`` is ``tool_use`` only when
#: a call was sent (``MessagesEncoder.stop_reason``).
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}

#: ``thinking.budget_tokens`` -> ``reasoning_effort`` (chat servers take an
#: effort, not a budget: vLLM, Ollama, LM Studio, llama.cpp).
_EFFORT_STEPS = ((2048, "low"), (8192, "medium"))


def error_body(status: int, message: str) -> bytes:
    """An error in Anthropic's shape (``{"type":"error","error":{…}}``)."""
    type_ = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


def reshape_error(status: int, body: bytes) -> bytes:
    """The proxy's OpenAI-shaped error body in Anthropic's shape."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    message = body.decode("utf-8", "replace")[:500]
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
        elif isinstance(err, str):
            message = err
    return error_body(status, message)


_PING = sse_event("ping", {"type": "ping"})
#: A text delta event up to its text (``%d``: the block's index).
_TEXT_HEAD = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
    b'"delta":{"type":"text_delta","text":'
)


# -- request ---------------------------------------------------------------

#: Anthropic's ``tool_choice`` types -> chat's (``tool``: a named function).
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}

#: Anthropic's ``output_config.effort`` values.
_OUTPUT_EFFORTS = ("low", "medium", "high", "xhigh", "max")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise RequestError(f"{where} must be a string or an array of blocks", param=where)
    return content


def _text(content: Any, where: str) -> str:
    """The text of a string or of text blocks (others skipped)."""
    if content is None:
        return ""
    return "\n".join(
        b["text"]
        for b in _blocks(content, where)
        if b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    """An image block as a chat image part (a ``data:`` URL or its URL);
    a file id is a 400 (``turn.no_file_ids``)."""
    src = block.get("source")
    kind = src.get("type") if isinstance(src, dict) else None
    if kind == "base64" and isinstance(src, dict) and isinstance(src.get("data"), str):
        url = f"data:{src.get('media_type') or 'image/png'};base64,{src['data']}"
    elif kind == "url" and isinstance(src, dict) and isinstance(src.get("url"), str):
        url = src["url"]
    elif kind == "file":
        raise no_file_ids(f"{where}.source")
    else:
        raise RequestError(f"{where}.source must be a base64 or url image source", param=where)
    return {"type": "image_url", "image_url": {"url": url}}


def _document(block: dict[str, Any], where: str, omitted: dict[str, int]) -> dict[str, Any]:
    """A document block as a text part: a text document (or one given as
    content blocks) is its text, titled; any other (a PDF, by data or URL)
    is a note that it was left out, counted as ``document``."""
    src = block.get("source")
    kind = src.get("type") if isinstance(src, dict) else None
    text: str | None = None
    media_type: Any = None
    if isinstance(src, dict):
        media_type = src.get("media_type")
        if kind == "text" and isinstance(src.get("data"), str):
            text = src["data"]
        elif kind == "content":
            text = _text(src.get("content"), f"{where}.source.content")
        elif kind == "base64" and is_text_type(media_type):
            text = decode_text(src.get("data"))
        elif kind == "file":
            raise no_file_ids(f"{where}.source")
    if kind not in ("text", "content", "base64", "url"):
        raise RequestError(f"{where}.source must be a document source", param=where)
    if text is None:
        count(omitted, "document")
        return {"type": "text", "text": file_omitted("a document", media_type or kind)}
    title = block.get("title")
    if isinstance(title, str) and title:
        text = f"{title}\n\n{text}"
    return {"type": "text", "text": text}


def _part(block: dict[str, Any], where: str, omitted: dict[str, int]) -> dict[str, Any] | None:
    """One content block of a user turn or a tool result as a chat part
    (text, image, document); another kind (a search result, a server
    tool's block) is counted under its type and left out."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        return _image(block, where)
    if kind == "document":
        return _document(block, where, omitted)
    count(omitted, str(kind)[:40])
    return None


def _user(content: Any, where: str, omitted: dict[str, int]) -> list[dict[str, Any]]:
    """A user message: its tool results first (each a chat ``tool``
    message, answering the assistant's calls just before; their text),
    then one user message with the images the tool results held (chat
    ``tool`` messages carry text on most servers), then the rest."""
    out: list[dict[str, Any]] = []
    from_tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for i, b in enumerate(_blocks(content, where)):
        at = f"{where}.{i}"
        if b.get("type") == "tool_result":
            call_id = need_id(b.get("tool_use_id"), f"{at}.tool_use_id")
            raw = b.get("content")
            texts: list[str] = []
            images: list[dict[str, Any]] = []
            for j, rb in enumerate(_blocks(raw, f"{at}.content") if raw is not None else ()):
                part = _part(rb, f"{at}.content.{j}", omitted)
                if part is None:
                    continue
                if part["type"] == "text":
                    texts.append(part["text"])
                else:
                    images.append(part)
            text = "\n".join(texts)
            if images:
                n = len(images)
                text += f"\n[{n} image{'s' if n > 1 else ''} in the next user message]"
                label = f"The image{'s' if n > 1 else ''} returned by tool call {call_id}:"
                from_tools += [{"type": "text", "text": label}, *images]
            if b.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": call_id, "content": text.lstrip("\n")})
        else:
            part = _part(b, at, omitted)
            if part is not None:
                parts.append(part)
    if from_tools or parts:
        out.append({"role": "user", "content": user_content(from_tools + parts)})
    return out


def _assistant(content: Any, where: str) -> dict[str, Any]:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, b in enumerate(_blocks(content, where)):
        kind = b.get("type")
        if kind == "text" and isinstance(b.get("text"), str):
            text.append(b["text"])
        elif kind == "tool_use":
            at = f"{where}.{i}"
            if not isinstance(b.get("input"), dict):
                raise RequestError(f"{at}.input must be an object", param=f"{at}.input")
            calls.append(
                {
                    "id": need_id(b.get("id"), f"{at}.id"),
                    "type": "function",
                    "function": {
                        "name": need_id(b.get("name"), f"{at}.name"),
                        "arguments": json_text(b["input"]),
                    },
                }
            )
        # thinking / redacted_thinking: earlier reasoning is not sent back
    # no text: null beside calls (as chat clients send it), else "" (some
    # servers refuse an assistant message with neither)
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) or (None if calls else "")}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _tools(tools: Any, dropped: dict[str, int]) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("'tools' must be an array", param="tools")
    out = []
    names: list[str] = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise RequestError(f"tools.{i} must be an object with a 'name'", param=f"tools.{i}")
        names.append(t["name"])
        if t.get("type") not in (None, "custom"):
            # a server tool (web_search_…, bash_…): nothing upstream runs it
            dropped["dropped_tool"] = dropped.get("dropped_tool", 0) + 1
            continue
        schema = t.get("input_schema")
        if not isinstance(schema, dict) or not schema:
            schema = {"type": "object", "properties": {}}
        fn: dict[str, Any] = {"name": t["name"], "parameters": schema}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    check_unique(names, "tools")
    return out


def _tool_choice(choice: Any, offered: list[dict[str, Any]]) -> Any:
    """Anthropic's ``tool_choice`` as chat's (None: not sent); a malformed
    one, or a forced tool not offered, is a 400."""
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    # ``type`` is checked a string first: a list or an object is not a key
    if not isinstance(kind, str) or (kind != "tool" and kind not in _CHOICES):
        raise RequestError(
            "'tool_choice' must be an object of type auto, any, tool or none", param="tool_choice"
        )
    check_bool(choice, "disable_parallel_tool_use")
    if kind == "tool":
        name = need_id(choice.get("name"), "tool_choice.name")
        check_offered(name, {t["function"]["name"] for t in offered}, "tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    return _CHOICES[str(kind)]


def _effort(body: dict[str, Any]) -> str | None:
    """The turn's effort (``turn.EFFORTS``, or ``"none"``): thinking
    disabled is ``none``; ``output_config.effort`` (read with or without
    thinking) wins over a thinking budget; adaptive thinking with no effort
    is ``medium``."""
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        raise RequestError("'thinking' must be an object", param="thinking")
    cfg = body.get("output_config")
    if cfg is not None and not isinstance(cfg, dict):
        raise RequestError("'output_config' must be an object", param="output_config")
    effort = cfg.get("effort") if cfg else None
    if effort is not None and effort not in _OUTPUT_EFFORTS:
        raise RequestError(
            f"'output_config.effort' must be one of {', '.join(_OUTPUT_EFFORTS)}",
            param="output_config.effort",
        )
    kind = thinking.get("type") if thinking else None
    if kind == "disabled":
        return "none"
    if effort is not None:
        return str(effort)
    if kind == "enabled":
        budget = thinking.get("budget_tokens") if thinking else None
        if isinstance(budget, int):
            return next((e for limit, e in _EFFORT_STEPS if budget <= limit), "high")
        return "medium"
    if kind == "adaptive":
        return "medium"
    return None


def _format(body: dict[str, Any]) -> dict[str, Any] | None:
    """``output_config.format`` (structured output) as chat's
    ``response_format``, as the Responses door maps ``text.format``."""
    cfg = body.get("output_config")
    fmt = cfg.get("format") if isinstance(cfg, dict) else None
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise RequestError(
            "'output_config.format' must be an object of type json_schema",
            param="output_config.format",
        )
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise RequestError(
            "'output_config.format.schema' must be an object", param="output_config.format.schema"
        )
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def _check(body: dict[str, Any]) -> None:
    """What the Messages API refuses with a 400, checked before anything
    is translated (``turn``'s checks, one place per rule)."""
    check_stream(body)
    check_number(body, "temperature", 0, 1)
    check_number(body, "top_p", 0, 1)
    check_number(body, "top_k", 0, 1 << 31, integer=True)
    check_strings(body, "stop_sequences")
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise RequestError("'metadata' must be an object", param="metadata")
        user = metadata.get("user_id")
        if user is not None and not isinstance(user, str):
            raise RequestError("'metadata.user_id' must be a string", param="metadata.user_id")


class MessagesDoor:
    """One Messages request translated to chat completions (see module
    docstring). Raises RequestError (a 400 in Anthropic's shape) when the
    body is not a usable Messages request."""

    endpoint = "messages"

    def __init__(self, body: Any) -> None:
        model = model_of(body)
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw or not all(isinstance(m, dict) for m in raw):
            raise RequestError("'messages' must be a non-empty array of objects", param="messages")
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise RequestError("'max_tokens' must be a positive integer", param="max_tokens")
        _check(body)
        self.model = model
        self.dropped: dict[str, int] = {}
        #: Input parts left out, by part (``dropped_parts_total``).
        self.omitted: dict[str, int] = {}
        messages: list[dict[str, Any]] = []
        if body.get("system"):
            messages.append({"role": "system", "content": _text(body["system"], "system")})
        for i, m in enumerate(raw):
            where = f"messages.{i}.content"
            role = m.get("role")
            if role == "user":
                messages.extend(_user(m.get("content"), where, self.omitted))
            elif role == "assistant":
                messages.append(_assistant(m.get("content"), where))
            elif role == "system":
                messages.append({"role": "system", "content": _text(m.get("content"), where)})
            else:
                raise RequestError(f"messages.{i}.role must be user or assistant", param=where)
        chat: dict[str, Any] = {
            "model": model,
            "messages": merge_system(messages),
            "max_tokens": max_tokens,
        }
        tools = _tools(body.get("tools"), self.dropped)
        choice = _tool_choice(body.get("tool_choice"), tools)
        if tools:
            chat["tools"] = tools
            if choice is not None:
                chat["tool_choice"] = choice
            tc = body.get("tool_choice")
            if isinstance(tc, dict) and tc.get("disable_parallel_tool_use") is True:
                chat["parallel_tool_calls"] = False
        stop = body.get("stop_sequences")
        if stop:
            chat["stop"] = stop
        set_effort(chat, _effort(body))
        fmt = _format(body)
        if fmt is not None:
            chat["response_format"] = fmt
        self.stream = pass_on(body, chat, ("temperature", "top_p", "top_k"))
        self.chat_body = chat
        self.input_estimate = 0
        self.stops: tuple[str, ...] = tuple(stop or ())

    def encoder(self) -> MessagesEncoder:
        return MessagesEncoder(self.model, self.input_estimate, self.stops)

    def reply(self, completion: dict[str, Any]) -> dict[str, Any]:
        enc = self.encoder()
        enc.feed_completion(completion)
        return enc.message()


# -- reply -----------------------------------------------------------------


class MessagesEncoder(TurnEncoder):
    """Repaired chat SSE -> Messages events (see module docstring).

    One content block is open at a time; a change of kind (thinking, text,
    a tool call) closes it. The blocks are also kept whole, for the
    non-streamed reply (``message``).
    """

    def __init__(self, model: str, input_estimate: int = 0, stops: tuple[str, ...] = ()) -> None:
        super().__init__(input_estimate)
        self.model = model
        #: The request's ``stop_sequences``: a matched one is reported.
        self.stops = stops
        self.id = new_id("msg_")
        self.blocks: list[dict[str, Any]] = []
        #: The open block's kind ("thinking", "text", "tool_use") and its
        #: text so far (joined once, at its stop).
        self._open: str | None = None
        self._parts: list[str] = []
        self._block_of_call: dict[int, int] = {}
        self._text_head = b""

    def _emit(self, name: str, payload: dict[str, Any]) -> None:
        self.out.append(sse_event(name, payload))

    def _begin(self, kind: str, block: dict[str, Any]) -> None:
        self._close_block()
        self._open = kind
        self.blocks.append(block)
        self._emit(
            "content_block_start",
            {"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": block},
        )

    def _block_delta(self, index: int, delta: dict[str, Any]) -> None:
        self._emit(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )

    def _close_block(self) -> None:
        if self._open is None:
            return
        block = self.blocks[-1]
        text = "".join(self._parts)
        self._parts.clear()
        if self._open == "tool_use":
            try:
                block["input"] = jsoncodec.loads(text) if text else {}
            except orjson.JSONDecodeError:
                block["input"] = {}
        else:
            block[self._open] = text
        self._open = None
        self._emit(
            "content_block_stop", {"type": "content_block_stop", "index": len(self.blocks) - 1}
        )

    def on_start(self) -> None:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        self._emit("message_start", {"type": "message_start", "message": message})
        self.out.append(_PING)

    def on_keepalive(self) -> None:
        self.out.append(_PING)

    def on_reasoning(self, text: str) -> None:
        if self._open != "thinking":
            self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self._parts.append(text)
        self._block_delta(len(self.blocks) - 1, {"type": "thinking_delta", "thinking": text})

    def on_text(self, text: str) -> None:
        if self._open != "text":
            self._begin("text", {"type": "text", "text": ""})
            # the hot path: one text delta per chunk, the event's bytes
            # around the text made once per block
            self._text_head = _TEXT_HEAD % (len(self.blocks) - 1)
        self._parts.append(text)
        try:
            encoded = orjson.dumps(text)
        except TypeError:  # a lone surrogate: written as its escape
            encoded = jsoncodec.dumps(text)
        self.out.append(self._text_head + encoded + b"}}\n\n")

    def on_call(self, index: int, call_id: str, name: str) -> None:
        self._begin("tool_use", {"type": "tool_use", "id": call_id, "name": name, "input": {}})
        self._block_of_call[index] = len(self.blocks) - 1

    def on_arguments(self, index: int, text: str) -> None:
        at = self._block_of_call[index]
        if at == len(self.blocks) - 1 and self._open == "tool_use":
            self._parts.append(text)
        self._block_delta(at, {"type": "input_json_delta", "partial_json": text})

    def stop_reason(self) -> str:
        reason = self.finish_reason or "stop"
        if reason not in ("length", "content_filter") and self.has_calls:
            return "tool_use"
        if reason == "tool_calls":  # no call was sent: an ordinary end
            return "end_turn"
        if reason == "stop" and self.stop_sequence() is not None:
            return "stop_sequence"
        return STOP_REASONS.get(reason, "end_turn")

    def stop_sequence(self) -> str | None:
        """The request's stop sequence the upstream says it matched."""
        stop = self.matched_stop
        if self.finish_reason == "stop" and stop is not None and stop in self.stops:
            return stop
        return None

    def usage_object(self) -> dict[str, Any]:
        """The reply's usage: Anthropic's ``input_tokens`` leaves out the
        cache reads, which are ``cache_read_input_tokens`` (absent when
        the upstream sends no count)."""
        prompt, completion = self.tokens()
        cached, _ = self.usage_details()
        usage: dict[str, Any] = {"input_tokens": prompt, "output_tokens": completion}
        if cached is not None:
            usage["input_tokens"] = max(0, prompt - cached)
            usage["cache_read_input_tokens"] = cached
        usage.update(self.usage_mark())
        return usage

    def json_note(self) -> dict[str, Any]:
        """A reply that is not the JSON ``output_config.format`` asked for:
        Anthropic has no stop reason for it, so the message (and, streamed,
        the ``message_delta`` event) carries the chat door's note,
        ``"streamfix": {"json": "invalid", "error": …}``."""
        if self.json_invalid is None:
            return {}
        return {"streamfix": {"json": "invalid", "error": self.json_invalid}}

    def on_done(self) -> None:
        self._close_block()
        reason = self.stop_reason()
        self._emit(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": self.stop_sequence()},
                "usage": self.usage_object(),
                **self.json_note(),
            },
        )
        self._emit("message_stop", {"type": "message_stop"})

    def on_error(self, message: str, type_: str, code: Any) -> None:
        status = 500 if type_ == "internal_error" else 502
        self.out.append(b"event: error\ndata: " + error_body(status, message) + b"\n\n")

    def message(self) -> dict[str, Any]:
        """The whole message (the non-streamed reply)."""
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.blocks,
            "stop_reason": self.stop_reason(),
            "stop_sequence": self.stop_sequence(),
            "usage": self.usage_object(),
            **self.json_note(),
        }
