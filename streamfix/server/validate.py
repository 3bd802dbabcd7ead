"""What makes a chat request usable: checked before anything is sent, so
that a malformed request is a clear 400 (with ``param``), never an
upstream's puzzling answer or a crash in the chain."""

from __future__ import annotations

from typing import Any

from ..errors import RequestError

#: Most tools one request may offer, and longest tool name (characters).
#: The detector builds one matcher per distinct set of tool names (about
#: 5 ms of CPU per 64-character name, measured) and recurses once per
#: character of a name. OpenAI's own limits are 128 tools and 64 characters.
MAX_TOOLS = 512
MAX_TOOL_NAME_CHARS = 256


def validate_chat(body: Any) -> dict[str, Any]:
    """Raise RequestError unless ``body`` is a usable chat request."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    if not all(isinstance(m, dict) for m in messages):
        raise RequestError("each message must be an object", param="messages")
    if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
        raise RequestError("'stream' must be a boolean", param="stream")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("'tools' must be an array", param="tools")
    if tools is not None and len(tools) > MAX_TOOLS:
        raise RequestError(f"at most {MAX_TOOLS} tools per request", param="tools")
    for i, t in enumerate(tools or ()):
        # Function tools only: other tool types are the upstream's business.
        if not isinstance(t, dict):
            raise RequestError(f"tools[{i}] must be an object", param=f"tools[{i}]")
        if t.get("type", "function") != "function":
            continue
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(
                f"tools[{i}].function must be an object with a non-empty 'name'",
                param=f"tools[{i}].function",
            )
        if len(fn["name"]) > MAX_TOOL_NAME_CHARS:
            raise RequestError(
                f"tools[{i}].function.name is longer than {MAX_TOOL_NAME_CHARS} characters",
                param=f"tools[{i}].function.name",
            )
        if "parameters" in fn and not isinstance(fn["parameters"], dict | None):
            raise RequestError(
                f"tools[{i}].function.parameters must be a JSON Schema object",
                param=f"tools[{i}].function.parameters",
            )
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise RequestError(f"'{key}' must be a positive integer", param=key)
    return body
