"""Exceptions, split by whose fault they are (as h11 does).

``UpstreamProtocolError``: the backend sent something that is not a valid
OpenAI-style stream. ``RequestError``: the client's request is malformed.
``TransformError``: a user's step (``transforms=``) raised; ``PluginError``:
a plugin (a step's factory, a format) could not be loaded or was refused.
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


class TransformError(StreamfixError):
    """A user step (``Options.transforms``) raised while the stream flowed.

    The SSE mounts end the stream with what was repaired so far and an
    OpenAI-shaped error event of type ``transform_error`` (the SDK raises
    it); ``fix_chunks`` and ``fix_completion`` raise this. The step's own
    exception is ``__cause__``; ``step`` names the step."""

    def __init__(self, step: str, exc: BaseException) -> None:
        super().__init__(f"streamfix step {step} failed: {type(exc).__name__}: {exc}")
        self.step = step


class PluginError(StreamfixError, ValueError):
    """A plugin could not be loaded (``module:attr`` that does not import)
    or was refused at registration (a format that breaks an invariant)."""
