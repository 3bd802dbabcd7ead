"""The OpenAI Responses API (``POST /v1/responses``), as Codex CLI speaks it.

Request side (``ResponsesDoor``, pure): ``instructions``, input items
(messages of every role, ``developer`` and ``system`` merged into the
leading system message; ``function_call`` / ``function_call_output``;
``custom_tool_call`` and its output; ``tool_search_call`` /
``tool_search_output``; ``additional_tools``; reasoning items are not
sent back), ``tool_choice`` (``allowed_tools``: only the subset offered,
the mode kept), ``parallel_tool_calls``, ``max_output_tokens`` (as
``max_tokens``, clamped by the proxy), ``reasoning.effort`` (as
``reasoning_effort``; ``none`` as thinking off, ``turn.set_effort``),
``text.format`` (as ``response_format``). Images in a function-call
output go in a user message after the outputs; a text ``input_file`` is
its text, another a note to the model, counted; a ``file_id`` is a 400;
an assistant ``refusal`` is its text. What the Responses API refuses is a
400 in OpenAI's shape (``_check``; ``turn``'s checks). docs/doors.md
tables every field and part.

Tools, each offered to the model as a chat function whose name maps back:

- ``function``: as is;
- ``namespace``: its nested tools as ``NAMESPACE__NAME``, returned as
  items with ``name`` and ``namespace``;
- ``custom`` (freeform, e.g. Codex's ``apply_patch``): a function with one
  string argument ``input`` (its grammar in the description), returned as a
  ``custom_tool_call`` item;
- ``tool_search`` (client execution): a function with its ``parameters``,
  returned as a ``tool_search_call`` item;
- server-side tools nothing upstream can run (``web_search``,
  ``file_search``, ``code_interpreter``, …): dropped and counted
  (``repairs_total{kind="dropped_tool"}``).

``store`` is accepted and nothing is stored: ``previous_response_id`` and
``conversation`` are a 400 saying to send the whole conversation (Codex
does, with ``store: false``).

Reply side (``ResponsesEncoder``, sans-I/O): ``response.created``,
``response.in_progress``, per item ``output_item.added`` / ``.done``, for
text ``content_part.added`` / ``.done`` and ``output_text.delta`` /
``.done``, for calls ``function_call_arguments.delta`` / ``.done`` (or
``custom_tool_call_input.*``), for reasoning ``reasoning_text.delta`` /
``.done``; a keep-alive while the proxy holds output is another
``response.in_progress``; then ``response.completed`` with usage, ``response.incomplete``
when the token limit or a cut loop ended the turn (``incomplete_details``
``{"reason": "max_output_tokens"}``) or a content filter did (reason
``content_filter``), ``response.failed`` and an ``error`` event (the
OpenAI SDK raises it) when the upstream failed. The non-streamed reply is
the object the last event carries. Usage details (``cached_tokens``,
``reasoning_tokens``) are the upstream's; a details object is ``null``
when it sent no count (unknown, not zero). ``reshape_error`` gives every
error answered on the door's path OpenAI's shape (Ollama and llama.cpp
answer ``{"error": "text"}``, which the SDK cannot read).
Every event has a ``sequence_number``. The contract is what
openai-python's ``ResponseStreamState`` accumulator reads.
"""

from __future__ import annotations

import time
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
    check_unique,
    count,
    data_url_text,
    file_omitted,
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

#: Joins a namespace and a nested tool's name into the chat function name.
NAMESPACE_SEP = "__"

#: Longest grammar of a custom tool copied into its description: the model
#: needs the shape of the input, not a whole parser's worth of rules.
MAX_GRAMMAR_CHARS = 4000

#: ``reasoning.effort`` values (``none``: thinking off, ``turn.set_effort``).
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")

#: Most ``metadata`` pairs, and longest key and value (OpenAI's limits).
MAX_METADATA = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

#: Function-call outputs (their chat ``tool`` messages are kept together).
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "tool_search_output")

#: An ``output_text.delta`` event up to its text (the item's id and index).
_TEXT_HEAD = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"item_id":"%s","output_index":%d,"content_index":0,"logprobs":[],"delta":'
)


#: Chat finish reason -> ``incomplete_details.reason`` (a cut loop ends
#: with ``length`` too). Any other finish completes the response.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}

#: HTTP status -> OpenAI error type.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def reshape_error(status: int, body: bytes) -> bytes:
    """An error body in OpenAI's shape (``{"error": {"message", "type",
    "param", "code"}}``): an OpenAI-shaped one keeps its fields, a bare
    ``{"error": "text"}`` (Ollama, llama.cpp) or a non-JSON body becomes
    the message."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return body
    if isinstance(err, str):
        message = err
    elif isinstance(obj, dict) and isinstance(obj.get("message"), str):
        message = obj["message"]
    else:
        message = body.decode("utf-8", "replace")[:500] or f"HTTP {status}"
    type_ = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    shaped = {"message": message, "type": type_, "param": None, "code": None}
    return orjson.dumps({"error": shaped})


def _add(counts: dict[str, int], kind: str) -> None:
    counts[kind] = counts.get(kind, 0) + 1


# -- request ---------------------------------------------------------------


class _Tool:
    """How an offered chat function maps back to a Responses tool."""

    __slots__ = ("kind", "name", "namespace")

    def __init__(self, kind: str, name: str, namespace: str | None = None) -> None:
        self.kind = kind  # function, custom, tool_search
        self.name = name
        self.namespace = namespace


def _text_of(content: Any) -> str:
    """A system or assistant message's text: its text parts, and an
    assistant's ``refusal`` parts (what it said, kept in the history)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for p in content:
        if isinstance(p, dict):
            text = p.get("refusal") if p.get("type") == "refusal" else p.get("text")
            if isinstance(text, str):
                out.append(text)
    return "\n".join(out)


def _part(p: Any, where: str, omitted: dict[str, int]) -> dict[str, Any] | None:
    """One input content part as a chat part: text; an image by URL (a
    ``file_id`` alone is a 400: ``turn.no_file_ids``); a file given as
    text data is its text, any other (a PDF) a note that it was left out,
    counted as ``file``; an unknown part is counted under its type."""
    if not isinstance(p, dict):
        raise RequestError(f"{where} must be an object", param=where)
    kind = p.get("type")
    if isinstance(p.get("text"), str) and kind in (None, "input_text", "output_text", "text"):
        return {"type": "text", "text": p["text"]}
    if kind == "input_image":
        if isinstance(p.get("image_url"), str) and p["image_url"]:
            return {"type": "image_url", "image_url": {"url": p["image_url"]}}
        if p.get("file_id"):
            raise no_file_ids(where)
        raise RequestError(f"{where}.image_url must be a URL", param=f"{where}.image_url")
    if kind == "input_file":
        if p.get("file_id") and not (p.get("file_data") or p.get("file_url")):
            raise no_file_ids(where)
        text, media_type = data_url_text(p.get("file_data"))
        if text is None:
            count(omitted, "file")
            name = p.get("filename")
            what = f"the file {name}" if isinstance(name, str) and name else "a file"
            return {"type": "text", "text": file_omitted(what, media_type)}
        name = p.get("filename")
        if isinstance(name, str) and name:
            text = f"{name}\n\n{text}"
        return {"type": "text", "text": text}
    count(omitted, str(kind)[:40])
    return None


def _parts(content: Any, where: str, omitted: dict[str, int]) -> list[dict[str, Any]]:
    """Input content (a string or parts) as chat parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or an array", param=where)
    parts = (_part(p, f"{where}[{i}]", omitted) for i, p in enumerate(content))
    return [p for p in parts if p is not None]


def _check(body: dict[str, Any]) -> None:
    """What the Responses API refuses with a 400, checked before anything
    is translated (``turn``'s checks, one place per rule)."""
    check_stream(body)
    check_number(body, "temperature", 0, 2)
    check_number(body, "top_p", 0, 1)
    check_bool(body, "parallel_tool_calls")
    metadata = body.get("metadata")
    if metadata is not None:
        ok = isinstance(metadata, dict) and len(metadata) <= MAX_METADATA
        ok = ok and all(
            isinstance(v, str) and len(k) <= MAX_METADATA_KEY and len(v) <= MAX_METADATA_VALUE
            for k, v in metadata.items()
        )
        if not ok:
            raise RequestError(
                f"'metadata' must be an object of at most {MAX_METADATA} string values "
                f"(keys up to {MAX_METADATA_KEY} characters, values up to {MAX_METADATA_VALUE})",
                param="metadata",
            )
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise RequestError("'reasoning' must be an object", param="reasoning")
    effort = reasoning.get("effort") if reasoning else None
    if effort is not None and effort not in _EFFORTS:
        raise RequestError(
            f"'reasoning.effort' must be one of {', '.join(_EFFORTS)}", param="reasoning.effort"
        )


class ResponsesDoor:
    """One Responses request translated to chat completions (see module
    docstring). Raises RequestError (a 400) when it cannot be served."""

    endpoint = "responses"

    def __init__(self, body: Any) -> None:
        model = model_of(body)
        for key in ("previous_response_id", "conversation"):
            if body.get(key):
                raise RequestError(
                    f"'{key}' is not supported: streamfix stores no responses; "
                    "send the whole conversation in 'input' (store: false)",
                    param=key,
                )
        _check(body)
        self.model = model
        self.dropped: dict[str, int] = {}
        #: Input parts left out, by part (``dropped_parts_total``).
        self.omitted: dict[str, int] = {}
        self.tools: dict[str, _Tool] = {}
        self._chat_tools: list[dict[str, Any]] = []
        #: Images from function-call outputs, sent in a user message after
        #: the run of outputs (``_flush``).
        self._images: list[dict[str, Any]] = []
        self._offer(body.get("tools"), "tools", strict=True)
        messages: list[dict[str, Any]] = []
        if isinstance(body.get("instructions"), str) and body["instructions"]:
            messages.append({"role": "system", "content": body["instructions"]})
        raw = body.get("input")
        if isinstance(raw, str):
            messages.append({"role": "user", "content": raw})
        elif isinstance(raw, list):
            for i, item in enumerate(raw):
                if not isinstance(item, dict):
                    raise RequestError(f"input[{i}] must be an object", param=f"input[{i}]")
                self._item(item, messages, f"input[{i}]")
            self._flush(messages)
        else:
            raise RequestError("'input' must be a string or an array of items", param="input")
        chat: dict[str, Any] = {"model": model, "messages": merge_system(messages)}
        if not chat["messages"]:
            raise RequestError("'input' holds no message", param="input")
        choice = self._tool_choice(body.get("tool_choice"))
        if self._chat_tools:
            chat["tools"] = self._chat_tools
            if isinstance(choice, tuple):  # allowed_tools: the subset, the mode
                mode, subset = choice
                chat["tools"] = [t for t in self._chat_tools if t["function"]["name"] in subset]
                choice = mode if chat["tools"] else None
                if not chat["tools"]:
                    del chat["tools"]
            if choice is not None:
                chat["tool_choice"] = choice
            if isinstance(body.get("parallel_tool_calls"), bool) and "tools" in chat:
                chat["parallel_tool_calls"] = body["parallel_tool_calls"]
        limit = body.get("max_output_tokens")
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise RequestError(
                    "'max_output_tokens' must be a positive integer", param="max_output_tokens"
                )
            chat["max_tokens"] = limit
        reasoning = body.get("reasoning")
        set_effort(chat, reasoning.get("effort") if reasoning else None)
        fmt = self._format(body.get("text"))
        #: ``text.format`` as the request gave it, echoed in the response
        #: (what ``responses.parse`` and the Responses API expect back).
        self.text_format: dict[str, Any] = {"type": "text"}
        if fmt is not None:
            chat["response_format"] = fmt
            self.text_format = dict(body["text"]["format"])
        self.stream = pass_on(body, chat, ("temperature", "top_p"))
        self.chat_body = chat
        self.input_estimate = 0
        parallel = body.get("parallel_tool_calls")
        self.echo = {
            "instructions": body.get("instructions"),
            "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
            "tool_choice": body.get("tool_choice") or "auto",
            "max_output_tokens": limit,
            "metadata": body.get("metadata") or {},
        }

    # -- tools -----------------------------------------------------------------

    def _offer(
        self, tools: Any, where: str, namespace: str | None = None, strict: bool = False
    ) -> None:
        """Offer ``tools``; ``strict`` (the request's ``tools``): a name
        offered twice is a 400 (tools loaded later by a search may repeat
        one: offered once)."""
        if tools is None:
            return
        if not isinstance(tools, list):
            raise RequestError(f"'{where}' must be an array", param=where)
        for i, t in enumerate(tools):
            if not isinstance(t, dict):
                raise RequestError(f"{where}[{i}] must be an object", param=f"{where}[{i}]")
            kind = t.get("type")
            name = t.get("name")
            if kind == "namespace" and isinstance(name, str):
                self._offer(t.get("tools"), f"{where}[{i}].tools", name, strict)
            elif kind in ("function", "custom", "tool_search"):
                self._offer_one(t, kind, namespace, strict)
            else:  # a server-side tool: nothing upstream can run it
                _add(self.dropped, "dropped_tool")

    def _offer_one(
        self, t: dict[str, Any], kind: str, namespace: str | None, strict: bool = False
    ) -> None:
        name = t.get("name")
        if kind == "tool_search":
            name = name if isinstance(name, str) and name else "tool_search"
        if not isinstance(name, str) or not name:
            raise RequestError(f"a {kind} tool needs a 'name'", param="tools")
        chat_name = f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name
        if chat_name in self.tools:
            if strict:
                check_unique([chat_name, chat_name], "tools")
            return
        self.tools[chat_name] = _Tool(kind, name, namespace)
        raw_description = t.get("description")
        description = raw_description if isinstance(raw_description, str) else ""
        if kind == "custom":
            params: Any = {
                "type": "object",
                "properties": {"input": {"type": "string", "description": "the tool's input"}},
                "required": ["input"],
            }
            fmt = t.get("format")
            if isinstance(fmt, dict) and isinstance(fmt.get("definition"), str):
                grammar = fmt["definition"][:MAX_GRAMMAR_CHARS]
                description += f"\n\nThe input follows this {fmt.get('syntax', '')} grammar:\n"
                description += grammar
        else:
            params = t.get("parameters")
            if not isinstance(params, dict) or not params:
                params = {"type": "object", "properties": {}}
        fn: dict[str, Any] = {"name": chat_name, "parameters": params}
        if description:
            fn["description"] = description
        self._chat_tools.append({"type": "function", "function": fn})

    def chat_name(self, name: str, namespace: Any = None) -> str:
        """The chat function name of a Responses tool (``name`` in
        ``namespace``)."""
        if isinstance(namespace, str) and namespace:
            return f"{namespace}{NAMESPACE_SEP}{name}"
        return name

    def _tool_choice(self, choice: Any) -> Any:
        """``tool_choice`` as chat's (None: not sent; for ``allowed_tools``
        the mode and the chat names of the subset). A malformed one, or a
        forced tool that is not offered, is a 400."""
        if choice is None or choice in ("auto", "none", "required"):
            return choice
        kind = choice.get("type") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(kind, str):
            raise RequestError(
                "'tool_choice' must be auto, none, required or an object", param="tool_choice"
            )
        if kind in ("function", "custom"):
            name = need_id(choice.get("name"), "tool_choice.name")
            chat_name = self.chat_name(name, choice.get("namespace"))
            check_offered(chat_name, self.tools, "tool_choice.name")
            return {"type": "function", "function": {"name": chat_name}}
        if kind == "allowed_tools":
            mode = choice.get("mode")
            listed = choice.get("tools")
            if mode not in ("auto", "required") or not isinstance(listed, list):
                raise RequestError(
                    "'tool_choice.mode' must be auto or required, 'tool_choice.tools' an array",
                    param="tool_choice",
                )
            subset: set[str] = set()
            for i, t in enumerate(listed):
                where = f"tool_choice.tools[{i}]"
                if not isinstance(t, dict):
                    raise RequestError(f"{where} must be an object", param=where)
                if t.get("type") in ("function", "custom"):
                    name = need_id(t.get("name"), f"{where}.name")
                    name = self.chat_name(name, t.get("namespace"))
                    check_offered(name, self.tools, f"{where}.name")
                    subset.add(name)
            return mode, subset
        return None  # a hosted tool's choice (dropped with its tool): the model decides

    @staticmethod
    def _format(text: Any) -> dict[str, Any] | None:
        fmt = text.get("format") if isinstance(text, dict) else None
        if not isinstance(fmt, dict):
            return None
        if fmt.get("type") == "json_object":
            return {"type": "json_object"}
        if fmt.get("type") != "json_schema":
            return None
        schema = {"name": fmt.get("name") or "response", "schema": fmt.get("schema") or {}}
        if isinstance(fmt.get("strict"), bool):
            schema["strict"] = fmt["strict"]
        if isinstance(fmt.get("description"), str):
            schema["description"] = fmt["description"]
        return {"type": "json_schema", "json_schema": schema}

    # -- input items ---------------------------------------------------------------

    def _call(self, messages: list[dict[str, Any]], call_id: Any, name: str, args: str) -> None:
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        last = messages[-1] if messages else None
        if last is not None and last.get("role") == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})

    def _flush(self, messages: list[dict[str, Any]]) -> None:
        """The images of the function-call outputs just before, as a user
        message after them (chat ``tool`` messages carry text on most
        servers)."""
        if self._images:
            messages.append({"role": "user", "content": user_content(self._images)})
            self._images = []

    def _output(self, item: dict[str, Any], where: str) -> dict[str, Any]:
        """A function-call output as a chat ``tool`` message: its text; its
        images go in the user message after the outputs (``_flush``)."""
        call_id = need_id(item.get("call_id"), f"{where}.call_id")
        output = item.get("output")
        if isinstance(output, str) or output is None:
            return {"role": "tool", "tool_call_id": call_id, "content": output or ""}
        parts = _parts(output, f"{where}.output", self.omitted)
        texts = [p["text"] for p in parts if p["type"] == "text"]
        images = [p for p in parts if p["type"] != "text"]
        if images:
            n = len(images)
            texts.append(f"[{n} image{'s' if n > 1 else ''} in the next user message]")
            label = f"The image{'s' if n > 1 else ''} returned by tool call {call_id}:"
            self._images += [{"type": "text", "text": label}, *images]
        return {"role": "tool", "tool_call_id": call_id, "content": "\n".join(texts)}

    def _item(self, item: dict[str, Any], messages: list[dict[str, Any]], where: str) -> None:
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind not in _OUTPUTS:
            self._flush(messages)
        if kind == "message":
            role = item.get("role")
            content = item.get("content")
            if role in ("system", "developer"):
                messages.append({"role": "system", "content": _text_of(content)})
            elif role == "assistant":
                messages.append({"role": "assistant", "content": _text_of(content)})
            elif role == "user":
                parts = _parts(content, f"{where}.content", self.omitted)
                messages.append({"role": "user", "content": user_content(parts)})
            else:
                raise RequestError(f"{where}.role must be a message role", param=f"{where}.role")
        elif kind in ("function_call", "custom_tool_call"):
            call_id = need_id(item.get("call_id"), f"{where}.call_id")
            name = self.chat_name(need_id(item.get("name"), f"{where}.name"), item.get("namespace"))
            if kind == "function_call":
                args = json_text(item.get("arguments"))
            else:
                args = orjson.dumps({"input": item.get("input") or ""}).decode()
            self._call(messages, call_id, name, args)
        elif kind == "tool_search_call":
            call_id = need_id(item.get("call_id"), f"{where}.call_id")
            self._call(messages, call_id, "tool_search", json_text(item.get("arguments")))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(self._output(item, where))
        elif kind == "tool_search_output":
            before = set(self.tools)
            self._offer(item.get("tools"), f"{where}.tools")
            found = ", ".join(n for n in self.tools if n not in before) or "none"
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": need_id(item.get("call_id"), f"{where}.call_id"),
                    "content": f"Tools loaded: {found}",
                }
            )
        elif kind == "additional_tools":
            self._offer(item.get("tools"), f"{where}.tools")
        elif kind == "reasoning":
            pass  # earlier reasoning is not sent back (chat templates drop it)
        else:
            _add(self.dropped, "dropped_input_item")

    # -- reply ---------------------------------------------------------------------

    def encoder(self) -> ResponsesEncoder:
        return ResponsesEncoder(self)

    def reply(self, completion: dict[str, Any]) -> dict[str, Any]:
        enc = self.encoder()
        enc.feed_completion(completion)
        return enc.response(enc.final_status())


class _Item:
    """An output item being streamed: its place, its dict, its text."""

    __slots__ = ("data", "head", "index", "kind", "parts", "tool")

    def __init__(self, index: int, kind: str, data: dict[str, Any], tool: _Tool | None) -> None:
        self.index = index
        self.kind = kind  # message, reasoning, function_call, custom, tool_search
        self.data = data
        self.parts: list[str] = []
        self.tool = tool
        #: A message's text delta event up to its text (``on_text``).
        self.head = b""


class ResponsesEncoder(TurnEncoder):
    """Repaired chat SSE -> Responses events (see module docstring).

    One output item is open at a time; a change of kind closes it. Closed
    items are kept whole for ``response.completed`` (and the non-streamed
    reply); the open one's text is joined once, when it closes.
    """

    def __init__(self, door: ResponsesDoor) -> None:
        super().__init__(door.input_estimate)
        self.door = door
        self.id = new_id("resp_")
        self.created = int(time.time())
        self.seq = 0
        self.output: list[dict[str, Any]] = []
        self._open: _Item | None = None
        self._by_call: dict[int, _Item] = {}

    def _emit(self, type_: str, payload: dict[str, Any]) -> None:
        payload["type"] = type_
        payload["sequence_number"] = self.seq
        self.seq += 1
        self.out.append(sse_event(type_, payload))

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        """The response object (``output`` as closed so far)."""
        prompt, completion = self.tokens()
        cached, reasoning = self.usage_details()
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": None if cached is None else {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": None if reasoning is None else {"reasoning_tokens": reasoning},
            "total_tokens": prompt + completion,
            **self.usage_mark(),
        }
        reason = INCOMPLETE_REASONS.get(self.finish_reason or "")
        if self.json_invalid is not None and status != "failed":
            extra = {"streamfix": {"json": "invalid", "error": self.json_invalid}, **extra}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.door.model,
            "output": list(self.output),
            "usage": usage if status in ("completed", "incomplete") else None,
            "error": None,
            "incomplete_details": {"reason": reason} if status == "incomplete" else None,
            "tools": [],
            "store": False,
            "text": {"format": self.door.text_format},
            **self.door.echo,
            **extra,
        }

    # -- items -------------------------------------------------------------------

    def _begin(self, kind: str, data: dict[str, Any], tool: _Tool | None = None) -> _Item:
        self._close_item()
        item = _Item(len(self.output), kind, data, tool)
        self._open = item
        self._emit("response.output_item.added", {"output_index": item.index, "item": dict(data)})
        return item

    def _close_item(self, status: str = "completed") -> None:
        item = self._open
        if item is None:
            return
        self._open = None
        data, at, item_id = item.data, item.index, item.data["id"]
        text = "".join(item.parts)
        if item.kind == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            ref = {"item_id": item_id, "output_index": at, "content_index": 0}
            self._emit("response.output_text.done", {**ref, "text": text, "logprobs": []})
            self._emit("response.content_part.done", {**ref, "part": part})
            data["content"] = [part]
        elif item.kind == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            ref = {"item_id": item_id, "output_index": at, "content_index": 0}
            self._emit("response.reasoning_text.done", {**ref, "text": text})
            self._emit("response.content_part.done", {**ref, "part": part})
            data["content"] = [part]
        elif item.kind == "function_call":
            ref = {"item_id": item_id, "output_index": at}
            self._emit(
                "response.function_call_arguments.done",
                {**ref, "name": data["name"], "arguments": text},
            )
            data["arguments"] = text
        elif item.kind == "custom":
            data["input"] = _custom_input(text)
            ref = {"item_id": item_id, "output_index": at}
            self._emit("response.custom_tool_call_input.delta", {**ref, "delta": data["input"]})
            self._emit("response.custom_tool_call_input.done", {**ref, "input": data["input"]})
        elif item.kind == "tool_search":
            try:
                args = jsoncodec.loads(text) if text else {}
            except orjson.JSONDecodeError:
                args = {}
            data["arguments"] = args
        data["status"] = status
        self.output.append(data)
        self._emit("response.output_item.done", {"output_index": at, "item": data})

    # -- hooks ---------------------------------------------------------------------

    def on_start(self) -> None:
        self._emit("response.created", {"response": self.response("in_progress")})
        self._emit("response.in_progress", {"response": self.response("in_progress")})

    def on_keepalive(self) -> None:
        # An event, not a comment: clients time out on silence between
        # events (Codex's stream_idle_timeout_ms) while the proxy holds a
        # call. The API has no ping; in_progress is one it already sent.
        self._emit("response.in_progress", {"response": self.response("in_progress", output=[])})

    def on_reasoning(self, text: str) -> None:
        item = self._open
        if item is None or item.kind != "reasoning":
            data = {"id": new_id("rs_"), "type": "reasoning", "summary": [], "content": []}
            item = self._begin("reasoning", data)
            part = {"type": "reasoning_text", "text": ""}
            ref = {"item_id": data["id"], "output_index": item.index, "content_index": 0}
            self._emit("response.content_part.added", {**ref, "part": part})
        item.parts.append(text)
        self._emit(
            "response.reasoning_text.delta",
            {
                "item_id": item.data["id"],
                "output_index": item.index,
                "content_index": 0,
                "delta": text,
            },
        )

    def on_text(self, text: str) -> None:
        item = self._open
        if item is None or item.kind != "message":
            data: dict[str, Any] = {
                "id": new_id("msg_"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            item = self._begin("message", data)
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            ref = {"item_id": data["id"], "output_index": item.index, "content_index": 0}
            self._emit("response.content_part.added", {**ref, "part": part})
            # the hot path: one delta per chunk, the bytes around the text
            # and the sequence number made once per item
            item.head = _TEXT_HEAD % (data["id"].encode(), item.index)
        item.parts.append(text)
        seq = self.seq
        self.seq = seq + 1
        try:
            encoded = orjson.dumps(text)
        except TypeError:  # a lone surrogate: written as its escape
            encoded = jsoncodec.dumps(text)
        self.out.append(item.head + encoded + b',"sequence_number":' + str(seq).encode() + b"}\n\n")

    def on_call(self, index: int, call_id: str, name: str) -> None:
        tool = self.door.tools.get(name)
        kind = tool.kind if tool is not None else "function"
        data: dict[str, Any]
        if kind == "custom":
            data = {"id": new_id("ctc_"), "type": "custom_tool_call", "call_id": call_id}
            data.update(name=tool.name if tool else name, input="")
        elif kind == "tool_search":
            data = {"id": new_id("tsc_"), "type": "tool_search_call", "call_id": call_id}
            data.update(execution="client", arguments={})
        else:
            data = {"id": new_id("fc_"), "type": "function_call", "call_id": call_id}
            data.update(name=tool.name if tool else name, arguments="")
        if tool is not None and tool.namespace:
            data["namespace"] = tool.namespace
        data["status"] = "in_progress"
        self._by_call[index] = self._begin(
            "function_call" if kind == "function" else kind, data, tool
        )

    def on_arguments(self, index: int, text: str) -> None:
        item = self._by_call[index]
        item.parts.append(text)
        if item.kind == "function_call":
            self._emit(
                "response.function_call_arguments.delta",
                {"item_id": item.data["id"], "output_index": item.index, "delta": text},
            )

    def final_status(self) -> str:
        """``incomplete`` when the limit or a filter ended the turn, and
        when the reply is not the JSON ``text.format`` asked for (then
        ``incomplete_details.reason`` is null unless the limit cut it, and
        the response's ``streamfix`` note says why)."""
        if self.finish_reason in INCOMPLETE_REASONS or self.json_invalid is not None:
            return "incomplete"
        return "completed"

    def on_done(self) -> None:
        status = self.final_status()
        self._close_item(status)
        self._emit(f"response.{status}", {"response": self.response(status)})

    def on_error(self, message: str, type_: str, code: Any) -> None:
        self._close_item("incomplete")
        code = code or type_
        error = {"code": code, "message": message}
        self._emit("response.failed", {"response": self.response("failed", error=error)})
        self._emit(
            "error",
            {
                "code": code,
                "message": message,
                "param": None,
                # the key the OpenAI SDK raises on (``APIError``)
                "error": {"type": type_, "code": code, "message": message, "param": None},
            },
        )


def _custom_input(args: str) -> str:
    """A custom tool's input from the call's arguments: the ``input``
    string, else the only string argument, else the text as the model wrote
    it (a freeform tool takes any text)."""
    try:
        obj = jsoncodec.loads(args)
    except orjson.JSONDecodeError:
        return args
    if isinstance(obj, dict):
        if isinstance(obj.get("input"), str):
            return str(obj["input"])
        strings = [v for v in obj.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return obj if isinstance(obj, str) else args
