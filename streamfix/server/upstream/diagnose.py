"""What is wrong with an upstream, in words a user can act on.

Shared by ``streamfix probe`` and ``streamfix serve``'s start-up check
(``Proxy.probe_all``), and by the errors a client gets: a failed connection
is said as "connection refused", not as an aiohttp class name; a 404 from
a URL that does not end in ``/v1`` says that ``/v1`` is probably missing;
an HTML error page is reduced to its title, so it never reaches a table
or a log line whole.

``check_row`` asks one upstream ``GET <url>/models`` once and says what it
found: the model names it serves, or what is wrong (``RowCheck``). It
never raises: an upstream may come up after the proxy.
"""

from __future__ import annotations

import errno
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import orjson

__all__ = ["RowCheck", "check_row", "in_words", "missing_v1", "short_body"]

#: Seconds the one check request may take.
CHECK_TIMEOUT = 5.0
#: Bytes of a reply read by the check (a model list is a few KB).
CHECK_BYTES = 256 * 1024
#: Characters of a body quoted in one line.
QUOTE_CHARS = 80

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def in_words(exc: BaseException, address: bool = True) -> str:
    """What a failed request met, said in words (no exception class names
    unless nothing better is known). ``address``: name the host and port
    (the operator's logs, ``probe``); never in what a client is told, where
    an upstream's address is not shown (``Scope.shown``)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        where = f"{exc.host}:{exc.port}"
        if isinstance(os_error, socket.gaierror):
            return f"host name {exc.host!r} not found" if address else "host name not found"
        code = getattr(os_error, "errno", None)
        if code == errno.ECONNREFUSED:
            return (
                f"connection refused (nothing listens on {where})"
                if address
                else ("connection refused")
            )
        if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"host {exc.host} unreachable" if address else "host unreachable"
        if code == errno.ETIMEDOUT:
            return f"connecting to {where} timed out" if address else "connecting timed out"
        reason = getattr(os_error, "strerror", None) or str(os_error)
        return f"cannot connect to {where}: {reason}" if address else f"cannot connect: {reason}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without a reply"
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return "no answer in time (timed out)"
    if isinstance(exc, aiohttp.ClientPayloadError):
        if type(exc) is not aiohttp.ClientPayloadError and str(exc):
            return str(exc)  # a reason of our own (``replies.ReplyTooLarge``)
        return "the reply was cut off (connection lost mid-reply)"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"not a usable URL: {exc}"
    if isinstance(exc, aiohttp.ClientOSError):
        reason = exc.strerror or str(exc)
        return f"connection lost: {reason}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def missing_v1(url: str) -> bool:
    """Whether an OpenAI base URL lacks its version segment (``…:8000``
    where ``…:8000/v1`` was meant)."""
    path = urlsplit(url).path.rstrip("/")
    return re.search(r"/v\d+(beta)?$", path) is None


def v1_hint(url: str) -> str:
    """The URL with ``/v1``, as the fix to try."""
    return f"no /v1? try {url.rstrip('/')}/v1"


def short_body(raw: bytes, limit: int = QUOTE_CHARS) -> str:
    """An error body in one short line: an OpenAI error's message, an HTML
    page's title (never its markup), else the start of the text."""
    text = ""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = next((obj[k] for k in ("error", "detail", "message") if obj.get(k)), None)
        if isinstance(err, dict):
            err = err.get("message") or err
        text = (
            err if isinstance(err, str) else orjson.dumps(err if err is not None else obj).decode()
        )
    elif obj is not None:
        text = orjson.dumps(obj).decode()
    elif raw.lstrip()[:1] == b"<":
        m = _TITLE.search(raw[:4096])
        title = m.group(1).decode("utf-8", "replace") if m else ""
        title = _SPACE.sub(" ", _TAG.sub(" ", title)).strip()
        text = f"an HTML page ({title})" if title else "an HTML page"
    else:
        text = raw[:1024].decode("utf-8", "replace")
    text = _SPACE.sub(" ", text).strip().replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def status_problem(url: str, status: int, raw: bytes, what: str) -> str:
    """An HTTP error for ``what`` (``/models``, ``/chat/completions``) in
    one line, with the hint that fits."""
    line = f"HTTP {status} on {what}"
    body = short_body(raw)
    if body:
        line += f": {body}"
    if status == 404 and missing_v1(url):
        return f"{line} ({v1_hint(url)})"
    if status == 404:
        return f"{line} (not an OpenAI-compatible server?)"
    if status in (401, 403):
        return f"{line} (check the API key)"
    return line


@dataclass(frozen=True, slots=True)
class RowCheck:
    """One upstream as the start-up check found it.

    ``state``: ``ok`` (a model list came back), ``unreachable`` (no
    connection), ``not_openai`` (it answered, but not as an OpenAI API
    does: a 200 that is no model list, a 404 from a URL without ``/v1``),
    ``refused`` (401/403: the row's key, or the client's forwarded one,
    decides), ``error`` (another HTTP error, a 404 from a URL with
    ``/v1``), ``unknown`` (not checked yet). ``problem`` says what is
    wrong, with a hint. Only ``unreachable`` and ``not_openai`` rows are
    counted as unable to serve: for the others a request may still work."""

    state: str
    problem: str | None = None
    models: tuple[str, ...] = ()

    @property
    def can_serve(self) -> bool:
        """Whether requests may work there (see the class doc)."""
        return self.state not in ("unreachable", "not_openai")


UNKNOWN = RowCheck("unknown")


async def check_row(
    session: aiohttp.ClientSession,
    url: str,
    headers: Mapping[str, str],
    timeout: float = CHECK_TIMEOUT,
) -> RowCheck:
    """``GET url/models`` once: what the upstream serves, or what is wrong."""
    base = url.rstrip("/")
    try:
        async with session.get(
            base + "/models",
            headers=dict(headers),
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=False,
        ) as resp:
            status = resp.status
            raw = await resp.content.read(CHECK_BYTES)
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        return RowCheck("unreachable", in_words(exc))
    if status != 200:
        # a 404 where /v1 is missing cannot be an OpenAI API's; with /v1 it
        # may be one without a model list, so the row is not given up
        state = "refused" if status in (401, 403) else "error"
        if status == 404 and missing_v1(base):
            state = "not_openai"
        return RowCheck(state, status_problem(base, status, raw, "/models"))
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = None
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list):
        problem = f"GET /models answered, but not with an OpenAI model list: {short_body(raw)}"
        if missing_v1(base):
            problem += f" ({v1_hint(base)})"
        return RowCheck("not_openai", problem)
    names = tuple(str(c["id"]) for c in cards if isinstance(c, dict) and c.get("id"))
    return RowCheck("ok", None, names)
