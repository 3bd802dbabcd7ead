"""Who may see the operator page, and how a browser proves it.

*Who.* Only the proxy's own keys (``--api-key``, ``api_key`` in TOML):
the page shows every tenant's models, prompts and replies, and can reload
the configuration and send probes. A tenant's key is refused (403), no
key or a wrong one is asked to log in (401). ``--ui`` without any own key
is a configuration error (``config.validate``); a reload that removes
every own key leaves a page no one can enter (fail closed).

*How.* A browser cannot send ``Authorization: Bearer`` on a navigation,
so the page has a login form: the key is POSTed once to ``/ui/login``
and answered with a cookie ``streamfix_ui`` (``HttpOnly``,
``SameSite=Strict``, ``Path=/ui``, ``Secure`` over HTTPS) that holds a
session token, never the key: ``nonce.expiry.signature``, the signature an
HMAC-SHA256 of nonce and expiry under a secret derived from the key
(``_secret``). The token is checked against the keys of the table in
force on every request (each worker checks it alike), ends at
``SESSION_SECONDS``, and ends at once when its key leaves the
configuration (a reload). Scripts may send the key as ``Authorization:
Bearer`` instead (no cookie, no CSRF token: a browser never adds that
header by itself).

*Logout is final.* Logging out clears the cookie and revokes the
session's nonce in a ``SessionStore``: by default a small file in the
state directory (``--state-dir``, ``FileSessionStore``), shared by the
workers of ``--workers N`` and kept across restarts, so a logged-out
cookie opens nothing anywhere, ever. The store is bounded
(``MAX_REVOKED``); when it would overflow it fails closed: every session
issued until then is revoked (everyone logs in again) rather than any
logged-out one reopened. The interface is small (``revoke``,
``is_revoked``) so that a shared store for a fleet can replace it.

*Guessing is slowed.* Failed logins (the form, or a wrong bearer key on
the page) are counted per source address (``LoginThrottle``): the n-th
failed answer waits ``base_delay * 2**(n-2)`` seconds (the first none),
at most ``max_delay`` (an ``asyncio`` sleep: no one else waits), and past
``limit`` attempts within ``window`` seconds the source is answered 429
with ``Retry-After`` until the window ends, the right key included. An
attempt counts on arrival (parallel guesses count too); a login with one
of the proxy's own keys clears the source (a tenant's key, refused
403, does not, nor does it wait). At most ``max_sources``
sources are tracked (the least recent forgotten first). Each worker
counts alone: with ``--workers N`` a source gets up to N times the
limit.

*State-changing actions* (reload, probe, log out) are POSTs carrying a
CSRF token in the form (``csrf``): an HMAC of the session's nonce, so a
page on another origin, which cannot read ours, cannot forge one;
``SameSite=Strict`` already keeps the cookie off cross-site requests. A
POST whose ``Origin`` is another origin is refused too (the login
included).

*Every answer* carries ``HEADERS``: a Content-Security-Policy that allows
script and style only from the page's own ``/ui/static/`` files (no
inline script or style, no other origin, no frames, forms only to us),
``nosniff``, no referrer to other origins, no caching, no frames.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import logging
import math
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from aiohttp import web

from ..upstream.table import TABLE, Table

COOKIE: Final = "streamfix_ui"

#: How long a login lasts.
SESSION_SECONDS: Final = 12 * 3600

#: Logged-out sessions a store keeps (each until it would expire anyway);
#: past it, every session issued so far is revoked (fail closed).
MAX_REVOKED: Final = 4096

#: The file of logged-out sessions in the state directory.
SESSIONS_FILE: Final = "ui-sessions"

log = logging.getLogger("streamfix.ui")

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # not "no-referrer": with it Chromium sends ``Origin: null`` on our own
    # forms, and the origin check below could not tell them from a stranger's
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _secret(key: bytes) -> bytes:
    """The signing secret of one key (the key itself never signs: a token
    and its signature say nothing usable about it)."""
    return hmac.new(key, b"streamfix-ui-session/1", hashlib.sha256).digest()


def _sign(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def own_keys(table: Table) -> list[bytes]:
    """The proxy's own keys in ``table`` (not the tenants')."""
    return [key for key, tenant in table.keys if tenant is None]


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in browser (or a script with a bearer key: ``nonce`` None)."""

    nonce: str | None
    csrf: str | None


class SessionStore(Protocol):
    """Where logged-out sessions are kept, for every process that checks
    them (see the module doc)."""

    def revoke(self, nonce: str, until: float, now: float) -> None:
        """``nonce`` opens nothing from now on (kept until ``until``)."""

    def is_revoked(self, nonce: str, issued: float, now: float) -> bool:
        """Whether the session ``nonce``, issued at ``issued``, was revoked."""


class MemorySessionStore:
    """A ``SessionStore`` in this process only (a single process that
    need not survive restarts; the tests)."""

    def __init__(self, limit: int = MAX_REVOKED) -> None:
        self.limit = limit
        self.revoked: OrderedDict[str, float] = OrderedDict()
        #: Sessions issued before this are revoked (the store overflowed).
        self.not_before = 0.0

    def revoke(self, nonce: str, until: float, now: float) -> None:
        self.revoked[nonce] = until
        self._prune(now)

    def is_revoked(self, nonce: str, issued: float, now: float) -> bool:
        return issued < self.not_before or nonce in self.revoked

    def _prune(self, now: float) -> None:
        for nonce, until in list(self.revoked.items()):
            if until < now:
                del self.revoked[nonce]
        if len(self.revoked) > self.limit:
            self.revoked.clear()
            self.not_before = now


class FileSessionStore(MemorySessionStore):
    """A ``SessionStore`` in one file, shared by every process that names
    it and kept across restarts. One line per logged-out session
    (``nonce until``), ``* not_before`` after an overflow; appended under
    an exclusive ``flock``, rewritten when it holds expired lines; read
    again by the others when its size or time changed (one ``stat`` per
    check)."""

    def __init__(self, path: str | Path, limit: int = MAX_REVOKED) -> None:
        super().__init__(limit)
        self.path = Path(path)
        self._seen: tuple[int, int] | None = None

    def revoke(self, nonce: str, until: float, now: float) -> None:
        super().revoke(nonce, until, now)  # this process, whatever the disk says
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                self._parse(f.read())
                self.revoked[nonce] = until
                self._prune(now)
                f.seek(0)
                f.truncate()
                f.write(self._text())
                f.flush()
                os.fsync(f.fileno())
            self._seen = None
        except OSError as exc:
            log.error("ui: the logout of a session could not be saved to %s: %s", self.path, exc)

    def is_revoked(self, nonce: str, issued: float, now: float) -> bool:
        self._refresh()
        return super().is_revoked(nonce, issued, now)

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("ui: logged-out sessions unreadable in %s: %s", self.path, exc)
            return
        seen = (st.st_size, st.st_mtime_ns)
        if seen == self._seen:
            return
        with contextlib.suppress(OSError), open(self.path) as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            self._parse(f.read())
            self._seen = seen

    def _parse(self, text: str) -> None:
        for line in text.splitlines():
            word, _, number = line.partition(" ")
            try:
                value = float(number)
            except ValueError:
                continue
            if word == "*":
                self.not_before = max(self.not_before, value)
            elif word:
                self.revoked[word] = max(value, self.revoked.get(word, 0.0))

    def _text(self) -> str:
        lines = [f"* {self.not_before}"] if self.not_before else []
        lines += [f"{nonce} {until}" for nonce, until in self.revoked.items()]
        return "".join(line + "\n" for line in lines)


def state_dir(configured: str | None) -> Path:
    """The state directory: ``configured`` (``--state-dir``), else
    ``$XDG_STATE_HOME/streamfix``, else ``~/.local/state/streamfix``."""
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "streamfix"


class Sessions:
    """Issues and checks the page's session tokens (see the module doc)."""

    def __init__(self, store: SessionStore | None = None) -> None:
        self.store: SessionStore = store if store is not None else MemorySessionStore()

    def issue(self, key: bytes, now: float | None = None) -> str:
        expiry = int((now if now is not None else time.time()) + SESSION_SECONDS)
        nonce = secrets.token_urlsafe(18)
        body = f"{nonce}.{expiry}"
        return f"{body}.{_sign(_secret(key), body)}"

    def check(self, token: str, table: Table, now: float | None = None) -> Session | None:
        """The session ``token`` opens under ``table``'s own keys, or None."""
        now = now if now is not None else time.time()
        nonce, _, rest = token.partition(".")
        expiry, _, signature = rest.partition(".")
        if not (nonce and expiry.isdigit() and signature) or int(expiry) < now:
            return None
        body = f"{nonce}.{expiry}"
        found: bytes | None = None
        for key in own_keys(table):  # every key compared: no early exit
            secret = _secret(key)
            if hmac.compare_digest(_sign(secret, body), signature):
                found = secret
        if found is None or self.store.is_revoked(nonce, int(expiry) - SESSION_SECONDS, now):
            return None
        return Session(nonce, _sign(found, "csrf." + nonce)[:32])

    def revoke(self, session: Session, now: float | None = None) -> None:
        if session.nonce is None:
            return
        now = now if now is not None else time.time()
        self.store.revoke(session.nonce, now + SESSION_SECONDS, now)


#: Login attempts from one source within ``FAILURE_WINDOW`` seconds
#: before it is answered 429 (``LoginThrottle``).
MAX_FAILURES: Final = 10
FAILURE_WINDOW: Final = 300.0
#: The wait before a failed login's answer doubles from this, up to the max.
BASE_DELAY: Final = 0.25
MAX_DELAY: Final = 2.0
#: Sources tracked at once (memory bound).
MAX_SOURCES: Final = 4096


class LoginThrottle:
    """Failed logins per source address (see the module doc)."""

    def __init__(
        self,
        limit: int = MAX_FAILURES,
        window: float = FAILURE_WINDOW,
        base_delay: float = BASE_DELAY,
        max_delay: float = MAX_DELAY,
        max_sources: int = MAX_SOURCES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_sources = max_sources
        self.clock = clock
        #: source -> (attempts not proven good, when the window began)
        self.sources: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def begin(self, source: str) -> int | None:
        """An attempt from ``source``: the seconds to send as
        ``Retry-After`` when it is refused, else None (and it is counted)."""
        now = self.clock()
        count, start = self.sources.pop(source, (0, now))
        if now - start >= self.window:
            count, start = 0, now
        if count >= self.limit:
            self.sources[source] = (count, start)
            return max(1, math.ceil(start + self.window - now))
        self.sources[source] = (count + 1, start)
        while len(self.sources) > self.max_sources:
            self.sources.popitem(last=False)
        return None

    def delay(self, source: str) -> float:
        """Seconds to wait before answering ``source``'s failed attempt."""
        count = self.sources.get(source, (1, 0.0))[0]
        if count <= 1:
            return 0.0  # a first mistake (a typo) is answered at once
        return min(self.max_delay, self.base_delay * 2.0 ** (count - 2))

    def succeeded(self, source: str) -> None:
        self.sources.pop(source, None)


def source_of(request: web.Request) -> str:
    """The address a login came from (the peer's: a header naming another
    could be sent by anyone)."""
    return request.remote or "-"


def bearer(request: web.Request) -> bytes:
    header = request.headers.get("Authorization", "")
    return header[7:].strip().encode() if header[:7].lower() == "bearer " else b""


def who(request: web.Request, sessions: Sessions) -> tuple[int, Session | None]:
    """(200, the session) for one of the proxy's own keys; (403, None) for
    a tenant's key; (401, None) for none or a wrong one."""
    table = request[TABLE]
    token = bearer(request)
    if token:
        ok, tenant = table.authenticate(token)
        if not ok:
            return 401, None
        return (403, None) if tenant is not None else (200, Session(None, None))
    cookie = request.cookies.get(COOKIE)
    if cookie:
        session = sessions.check(cookie, table)
        if session is not None:
            return 200, session
    return 401, None


def same_origin(request: web.Request) -> bool:
    """A POST's ``Origin``, when the browser named one, is this host's
    (``null``, an origin a browser withholds, is left to the CSRF token)."""
    origin = request.headers.get("Origin")
    if origin is None or origin == "null":
        return True
    return origin == f"{request.scheme}://{request.host}"


def csrf_ok(session: Session, sent: object) -> bool:
    """The form's token is the session's (a bearer-key script needs none)."""
    if session.nonce is None:
        return True
    return (
        isinstance(sent, str)
        and session.csrf is not None
        and hmac.compare_digest(sent.encode(), session.csrf.encode())
    )


def set_cookie(response: web.StreamResponse, request: web.Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=SESSION_SECONDS,
        path="/ui",
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )


def clear_cookie(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/ui")
