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
force on every request, so it works with ``--workers N`` (no shared
store: each worker checks it alike), ends at ``SESSION_SECONDS``, and
ends at once when its key leaves the configuration (a reload). Logging
out clears the cookie and revokes the nonce in the worker that served it
(others honour it until it expires: a stolen cookie is bounded by
``SESSION_SECONDS``). Scripts may send the key as ``Authorization:
Bearer`` instead (no cookie, no CSRF token: a browser never adds that
header by itself).

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

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from ..upstream.table import TABLE, Table

COOKIE: Final = "streamfix_ui"

#: How long a login lasts.
SESSION_SECONDS: Final = 12 * 3600

#: Nonces logged out in this process, kept until they would expire anyway.
MAX_REVOKED: Final = 4096

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


class Sessions:
    """Issues and checks the page's session tokens (see the module doc)."""

    def __init__(self) -> None:
        self.revoked: OrderedDict[str, float] = OrderedDict()

    def issue(self, key: bytes, now: float | None = None) -> str:
        expiry = int((now if now is not None else time.time()) + SESSION_SECONDS)
        nonce = secrets.token_urlsafe(18)
        body = f"{nonce}.{expiry}"
        return f"{body}.{_sign(_secret(key), body)}"

    def check(self, token: str, table: Table, now: float | None = None) -> Session | None:
        """The session ``token`` opens under ``table``'s own keys, or None."""
        nonce, _, rest = token.partition(".")
        expiry, _, signature = rest.partition(".")
        if not (nonce and expiry.isdigit() and signature) or nonce in self.revoked:
            return None
        if int(expiry) < (now if now is not None else time.time()):
            return None
        body = f"{nonce}.{expiry}"
        found: bytes | None = None
        for key in own_keys(table):  # every key compared: no early exit
            secret = _secret(key)
            if hmac.compare_digest(_sign(secret, body), signature):
                found = secret
        if found is None:
            return None
        return Session(nonce, _sign(found, "csrf." + nonce)[:32])

    def revoke(self, session: Session, now: float | None = None) -> None:
        if session.nonce is None:
            return
        now = now if now is not None else time.time()
        self.revoked[session.nonce] = now + SESSION_SECONDS
        while self.revoked and (
            len(self.revoked) > MAX_REVOKED or next(iter(self.revoked.values())) < now
        ):
            self.revoked.popitem(last=False)


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
