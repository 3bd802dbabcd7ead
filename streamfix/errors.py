"""Exceptions, split by whose fault they are (as h11 does).

``UpstreamProtocolError``: the backend sent something that is not a valid
OpenAI-style stream. ``RequestError``: the client's request is malformed.
Anything else escaping streamfix is a bug of ours.
"""

from __future__ import annotations


class StreamfixError(Exception):
    """Base class of every error streamfix raises on purpose."""


class UpstreamProtocolError(StreamfixError):
    """The upstream broke the SSE or chat-completion format (their fault)."""


class RequestError(StreamfixError):
    """The client's request cannot be served as sent (their fault)."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type_: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code
        self.type = type_  # the OpenAI error type; None: the status's
