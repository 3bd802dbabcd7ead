"""Recordings of the replies that needed streamfix (``streamfix serve --record DIR``).

A counter of unrecognised markup says that a new shape has arrived; it
does not show it. With ``--record DIR`` the proxy writes one file per
client request whose reply needed it (``--record-on``: a repair fired,
call-like markup went unrecognised, a loop was cut, the reply came out
empty, the upstream failed): the client's request, each upstream reply
as the raw bytes of every network read with its time, what the chain
reported, and the bytes the client received. ``streamfix replay`` feeds
the same reads to today's chain (``replay.py``).

*Off the streaming path.* While a request runs, its reads are appended to
a list (bounded: ``MAX_TAKE_BYTES``). When the handler returns, the
recording is put on a bounded queue without waiting; one writer thread
encodes and writes it. A full queue drops the recording (counted); a slow
or full disk slows only that thread, and a failed write is counted and
logged, never an error for the client.

*Bounds.* At most ``record_max_files`` files and ``record_max_bytes``
bytes in the directory, the oldest removed first; ``record_sample`` of the
qualifying requests are kept. With ``--workers N`` each process keeps its
own count (up to N times the bounds in all).

*Credentials are never written.* Request headers are an allowlist
(``HEADERS_KEPT``); the upstream is named by its URL without user,
password or query; every byte written is scrubbed of the configured keys
(inbound and upstream, URL passwords), of the request's own credential
headers (an upstream error body may echo the key it was sent), and of
anything shaped like a key (``sk-…``, ``Bearer …``, ``api_key=…``). A
reply's reads are scrubbed joined (``scrub_reads``): a key echoed across
two reads is found whole, and each read keeps its place.
``record_redact = "messages"`` also replaces what was said by its length,
on every route (``redact_messages``: chat messages with their parts,
reasoning and call arguments, a completion's ``prompt``, an embedding's
``input``, a door's ``system``/``instructions``/``input``).

The file (``FORMAT``, one JSON object, indented)::

    {"format": "streamfix-recording/1", "reasons": ["repair"], "tenant": "-",
     "request": {"method", "path", "headers", "body"},
     "attempts": [{"upstream", "status", "content_type", "options",
                   "sent": {keys the proxy added or changed upstream},
                   "reads": [{"t": seconds, "text" | "base64": …}, …],
                   "report": {"counts", "cut", "empty_after_repair", …},
                   "narrowed": {"kept": [names], "of": N}  (--narrow-tools only)}],
     "upstream_errors": [[upstream, kind], …],
     "response": {"status", "stream", "text" | "base64"}, "incomplete": false}

``tenant`` is whose key the request came with (``-``: the proxy's own,
or no keys), for the operator page's filter (``server/ui``). ``formats``
(only with ``--format``): the format plugins named then, which
``streamfix replay`` registers again as it loads the steps named in
``options``.
Several attempts: the proxy asked again (the earlier replies were
discarded). A read is stored as text when it is valid UTF-8, else base64.

*Every route that can need a repair is recorded* (``app.create_app``):
chat, the front doors, text completions, and embeddings (which are
relayed, so only their upstream failures qualify). A front door's
recording keeps the chat side: besides the client's own request (in the
door's API), ``"door": {"endpoint": "messages" | "responses",
"chat_body": the chat request it was translated to}``, and its
``response`` is what the chain produced before the door's encoder (chat
chunks, or the repaired chat completion), so that ``streamfix replay``
compares like with like; the bytes in the door's shape are not kept.
A text completion (``/v1/completions``) is recorded as the chat route is;
replay knows it by its path. Recordings of the chat route are unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import queue
import random
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from .. import __version__
from ..context import Report
from ..middleware import Handler
from .config import RECORD_REASONS, ServerConfig, record_reasons
from .metrics import Metrics
from .upstream.table import NO_TENANT, TABLE, TENANT

log = logging.getLogger("streamfix.record")

FORMAT = "streamfix-recording/1"

#: Bytes of one request's reads and client output held while it runs. A
#: reply longer than this (a loop nobody cut, a huge answer) stops growing
#: its recording, which is marked incomplete: memory per stream stays
#: bounded, and what went wrong is nearly always near the start.
MAX_TAKE_BYTES = 8 * 1024 * 1024

#: Recordings waiting for the writer, by number and by bytes. Past either,
#: a new one is dropped (``queue_full``) rather than waited for: the disk
#: is not keeping up, and the event loop must never wait for it.
MAX_QUEUED = 256
MAX_QUEUED_BYTES = 64 * 1024 * 1024

#: Seconds the app's shutdown waits for queued recordings to be written.
FLUSH_TIMEOUT = 5.0

#: Seconds between two warnings about failed writes (each is counted in
#: ``streamfix_recordings_dropped_total``; the log needs only a reminder).
WARN_INTERVAL = 60.0

#: Request headers written (an allowlist: any other header, a credential
#: under a name nobody foresaw included, is left out).
HEADERS_KEPT = frozenset({"user-agent", "content-type", "accept"})
#: The OpenAI SDKs' own headers: language, version, retry count.
HEADER_PREFIXES_KEPT = ("x-stainless-",)
#: Request headers whose values are credentials: any whose name holds one
#: of these words. Their values are scrubbed wherever they appear in what
#: is written (the upstream is sent them, and an error may quote them).
_CREDENTIAL_HEADER = re.compile(r"(?i)auth|key|token|secret|cookie|session|password")

#: Anything shaped like a credential, removed from every byte written:
#: OpenAI/Anthropic-style keys, bearer tokens, keys in a query string.
#: (Not ``Basic …``: its base64 looks like any word; the configured URL
#: passwords are scrubbed in that form by name, see ``config_secrets``.)
_CREDENTIAL = re.compile(
    rb"(?i)(\b(?:sk|pk|rk)-)[A-Za-z0-9_\-]{8,}"
    rb"|(\bbearer\s+)[A-Za-z0-9._~+/=\-]{8,}"
    rb"|([?&;\s\"'](?:api_key|api-key|apikey|access_token|token|key)=)[^&\s\"'\\]+"
)
#: What every match of ``_CREDENTIAL`` contains (lowercased): the regex
#: runs only where one is (it costs about 1 ms per 20 KB, the test 20 µs).
_CREDENTIAL_TRIGGERS = (b"sk-", b"pk-", b"rk-", b"bearer", b"key=", b"token=")
REDACTED = b"[redacted]"


def _keep_prefix(m: re.Match[bytes]) -> bytes:
    return (m.group(1) or m.group(2) or m.group(3)) + REDACTED


def scrub_key_shapes(data: bytes) -> bytes:
    """``data`` without anything shaped like a key (``_CREDENTIAL``); also
    used on an upstream's error text the proxy quotes to a client."""
    if any(t in data.lower() for t in _CREDENTIAL_TRIGGERS):
        data = _CREDENTIAL.sub(_keep_prefix, data)
    return data


#: The name of a recording this recorder wrote (``Recorder._write``):
#: ``<UTC stamp>-<pid>-<seq>-<reasons>.json``. Only files so named are
#: counted and pruned: an operator's own ``*.json`` in the directory is
#: never touched (the operator page lists by the same shape).
RECORDING_NAME = re.compile(r"^[0-9]{8}T[0-9]{6}\.[0-9]+Z-[0-9]+-[0-9]+-[a-z_+]+\.json$")


#: The shortest configured secret scrubbed as a string (a 1-3 character
#: "key" would garble every recording; the proxy's own rule too).
MIN_SECRET = 4

#: Report counts that are not repairs: a structured call passed on, and
#: the counts that have reasons of their own.
_NOT_REPAIRS = frozenset(
    {"calls.structured", "unrecognised_markup", "possible_missed_call", "loop_cut"}
)


class RecordedAttempt:
    """One upstream reply of a request: its reads and what the chain reported."""

    __slots__ = (
        "content_type",
        "narrowed",
        "options",
        "reads",
        "report",
        "sent",
        "status",
        "t0",
        "upstream",
    )

    def __init__(
        self,
        upstream: str,
        sent: dict[str, Any] | None,
        status: int,
        content_type: str,
        options: dict[str, Any],
    ) -> None:
        self.upstream = upstream
        self.sent = sent
        self.status = status
        self.content_type = content_type
        self.options = options
        self.reads: list[tuple[float, bytes]] = []
        self.report: Report | None = None
        #: The tools this attempt was narrowed to (``narrow.Decision.note``).
        self.narrowed: dict[str, Any] | None = None
        self.t0 = time.perf_counter()


class Take:
    """What one client request's recording holds while the request runs."""

    __slots__ = (
        "attempts",
        "body",
        "chat_body",
        "chat_reply",
        "client",
        "door",
        "errors",
        "headers",
        "incomplete",
        "method",
        "path",
        "secrets",
        "size",
        "status",
        "tenant",
        "wall",
    )

    def __init__(self, request: web.Request) -> None:
        self.method = request.method
        self.path = request.path  # never the query: it may hold a key
        self.headers = {
            k.lower(): v
            for k, v in request.headers.items()
            if k.lower() in HEADERS_KEPT or k.lower().startswith(HEADER_PREFIXES_KEPT)
        }
        #: This request's own credentials (scrubbed from what is written).
        self.secrets: list[bytes] = []
        for name, value in request.headers.items():
            if _CREDENTIAL_HEADER.search(name):
                self.secrets += _header_secrets(value)
        # The upstream keys of the table the request runs on: after a
        # reload, keys the recorder was not started with.
        table = request.get(TABLE)
        if table is not None:
            self.secrets += table.secrets
        self.wall = time.time()
        #: Whose key the request came with (the operator page filters by it).
        owner = request.get(TENANT)
        self.tenant = owner.name if owner is not None else NO_TENANT
        self.attempts: list[RecordedAttempt] = []
        self.errors: list[tuple[str, str]] = []  # (upstream, kind)
        self.client: list[bytes] = []
        self.body = b""  # the client's request, as sent
        self.size = 0
        self.incomplete = False
        self.status = 0
        #: A front door's name and the chat body it made (None: the chat
        #: route, or an API that is not translated).
        self.door: str | None = None
        self.chat_body: Any = None
        #: A door's whole reply as the chain left it (before the door's own
        #: shape): what is written as the response.
        self.chat_reply: bytes | None = None

    def begin(self, attempt: RecordedAttempt) -> None:
        self.attempts.append(attempt)

    def read(self, attempt: RecordedAttempt, data: bytes) -> None:
        if self._room(len(data)):
            attempt.reads.append((time.perf_counter() - attempt.t0, data))

    def to_client(self, data: bytes) -> None:
        """Bytes written to the client (streamed replies)."""
        if self._room(len(data)):
            self.client.append(data)

    def _room(self, n: int) -> bool:
        self.size += n
        if self.size > MAX_TAKE_BYTES:
            self.incomplete = True
        return not self.incomplete

    def reasons(self) -> list[str]:
        """Why this request is worth a recording (``RECORD_REASONS`` order)."""
        found: set[str] = set()
        for att in self.attempts:
            rep = att.report
            if rep is None:
                continue
            if any(n and kind not in _NOT_REPAIRS for kind, n in rep.counts.items()):
                found.add("repair")
            if rep.counts.get("unrecognised_markup"):
                found.add("unrecognised")
            if rep.counts.get("possible_missed_call"):
                found.add("missed")
            if rep.cut is not None:
                found.add("loop")
            if rep.empty_after_repair:
                found.add("empty")
        if len(self.attempts) > 1:
            found.add("repair")  # asked again: the earlier replies were not usable
        if self.errors:
            found.add("upstream_error")
            if any(kind == "empty_stream" for _, kind in self.errors):
                found.add("empty")
        return [r for r in RECORD_REASONS if r in found]


def _header_secrets(value: str) -> list[bytes]:
    """The secrets in a credential header's value: the value, the token of
    ``Bearer``/``Basic``, each cookie's value."""
    parts = [value, value.partition(" ")[2]]
    parts += [c.partition("=")[2] for c in value.split(";")]
    return [p.strip().encode() for p in parts if len(p.strip()) >= MIN_SECRET]


_CURRENT: ContextVar[Take | None] = ContextVar("streamfix_recording", default=None)


# -- the proxy's hooks: each a no-op unless the request is being recorded ----


def current() -> Take | None:
    """The recording of the request this task serves, if any."""
    return _CURRENT.get()


def attempt(
    upstream: str,
    sent: dict[str, Any] | None,
    status: int,
    content_type: str,
    options: dict[str, Any],
) -> None:
    """An upstream answered (its headers): a new attempt begins."""
    take = _CURRENT.get()
    if take is not None:
        take.begin(RecordedAttempt(upstream, sent, status, content_type, options))


def reads(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``source`` (an upstream reply's reads), kept by the current attempt
    as they pass; ``source`` itself when nothing is recorded."""
    take = _CURRENT.get()
    if take is None or not take.attempts:
        return source
    return _Reads(take, take.attempts[-1], source)


def report(rep: Report) -> None:
    """What the chain reported for the current attempt."""
    take = _CURRENT.get()
    if take is not None and take.attempts:
        take.attempts[-1].report = rep


def narrowed(note: dict[str, Any]) -> None:
    """The current attempt was sent with only these tools (``--narrow-tools``)."""
    take = _CURRENT.get()
    if take is not None and take.attempts:
        take.attempts[-1].narrowed = note


def door(endpoint: str, chat_body: Any) -> None:
    """The request came through a front door, translated to ``chat_body``."""
    take = _CURRENT.get()
    if take is not None:
        take.door = endpoint
        take.chat_body = chat_body


def chat_reply(data: bytes) -> None:
    """A front door's whole reply, as the chain left it (chat completion)."""
    take = _CURRENT.get()
    if take is not None and take.door is not None:
        take.chat_reply = data


def upstream_error(upstream: str, kind: str) -> None:
    take = _CURRENT.get()
    if take is not None:
        take.errors.append((upstream, kind))


class _Reads:
    """An async iterator that keeps each read of ``source`` (a class, not an
    async generator: the proxy stops reading after a cut, and an abandoned
    generator would be finalised later, on another loop turn)."""

    __slots__ = ("attempt", "source", "take")

    def __init__(self, take: Take, attempt: RecordedAttempt, source: AsyncIterator[bytes]) -> None:
        self.take = take
        self.attempt = attempt
        self.source = source

    def __aiter__(self) -> _Reads:
        return self

    async def __anext__(self) -> bytes:
        data = await self.source.__anext__()
        self.take.read(self.attempt, data)
        return data


# -- what is written ----------------------------------------------------------


def scrub_reads(reads: list[bytes], secrets: Iterable[bytes]) -> list[bytes]:
    """``reads`` with every secret and everything shaped like a key
    (``_CREDENTIAL``) replaced, found in the joined bytes so that a key
    split between two reads is found whole. The marker goes into the read
    where the secret began; the reads keep their number and, outside the
    secrets, their bytes (replay feeds them as they came)."""
    joined = b"".join(reads)
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        at = joined.find(secret)
        while at != -1:
            spans.append((at, at + len(secret)))
            at = joined.find(secret, at + len(secret))
    if any(t in joined.lower() for t in _CREDENTIAL_TRIGGERS):
        for m in _CREDENTIAL.finditer(joined):
            prefix = m.group(1) or m.group(2) or m.group(3)
            spans.append((m.start() + len(prefix), m.end()))
    if not spans:
        return reads
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    out: list[bytes] = []
    a = 0
    for data in reads:
        b = a + len(data)
        piece = bytearray()
        cur = a
        for start, end in merged:
            if end <= a or start >= b:
                continue
            if start >= a:  # the secret begins in this read: the marker goes here
                piece += joined[cur:start] + REDACTED
            cur = max(cur, min(end, b))
        piece += joined[cur:b]
        out.append(bytes(piece))
        a = b
    return out


def encode_bytes(data: bytes) -> dict[str, str]:
    """``{"text": …}`` when ``data`` is UTF-8, else ``{"base64": …}``."""
    try:
        return {"text": data.decode()}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def decode_bytes(obj: dict[str, Any]) -> bytes:
    """The bytes ``encode_bytes`` wrote."""
    if "base64" in obj:
        return base64.b64decode(obj["base64"])
    return str(obj.get("text", "")).encode()


#: The fields of a request, on any route, that hold what was said: chat
#: ``messages`` (content, parts, ``reasoning_content``, call arguments),
#: a text completion's ``prompt`` and ``suffix``, an embedding's or a
#: Responses ``input``, a door's ``system`` and ``instructions``. Every
#: string under them is hidden, but for the keys that only name or type
#: things (``_KEPT_KEYS``); token arrays (numbers) are kept.
_TEXT_FIELDS = frozenset({"messages", "prompt", "suffix", "input", "system", "instructions"})
_KEPT_KEYS = frozenset(
    {"type", "role", "name", "id", "call_id", "tool_call_id", "tool_use_id", "status"}
)


def redact_messages(body: Any) -> Any:
    """``body`` (a request of any route: chat, text completions,
    embeddings, a front door) with what was said replaced by its length
    (``_TEXT_FIELDS``); roles, names, ids, tools and options kept."""
    if not isinstance(body, dict):
        return body
    return {k: _hide_strings(v) if k in _TEXT_FIELDS else v for k, v in body.items()}


def _hidden(text: str) -> str:
    return f"[redacted: {len(text)} characters]"


def _hide_strings(value: Any) -> Any:
    if isinstance(value, str):
        return _hidden(value)
    if isinstance(value, list):
        return [_hide_strings(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k in _KEPT_KEYS else _hide_strings(v) for k, v in value.items()}
    return value


def report_dict(rep: Report | None) -> dict[str, Any] | None:
    """``rep`` as written in a recording."""
    if rep is None:
        return None
    return {
        "counts": dict(sorted(rep.counts.items())),
        "cut": rep.cut,
        "truncated_call": rep.truncated_call,
        "empty_after_repair": rep.empty_after_repair,
        "reasoning": rep.reasoning,
        "unrecognised": list(rep.unrecognised),
        "missed": list(rep.missed),
        "json_invalid": rep.json_invalid,
    }


def config_secrets(cfg: ServerConfig) -> list[bytes]:
    """The configured credentials: inbound keys, upstream keys and URL
    passwords, these also as the ``Basic`` credential sent for them (those
    of at least ``MIN_SECRET`` characters)."""
    found = [*cfg.api_keys, *(k for t in cfg.tenants for k in t.api_keys)]
    for up in cfg.upstreams:
        parts = urlsplit(up.url)
        found += [up.api_key or "", parts.password or ""]
        if parts.password:
            pair = f"{parts.username or ''}:{parts.password}".encode()
            found.append(base64.b64encode(pair).decode())
    return [s.encode() for s in found if len(s) >= MIN_SECRET]


class Recorder:
    """Decides which requests are recorded and writes them from one thread.

    ``wrap(handler)`` records the requests a route serves; ``lifecycle``
    (an aiohttp cleanup context) starts the writer and, at shutdown, lets
    it finish what is queued (``FLUSH_TIMEOUT``).
    """

    def __init__(
        self,
        directory: str | Path,
        metrics: Metrics,
        *,
        reasons: Iterable[str] = RECORD_REASONS,
        max_files: int = 1000,
        max_bytes: int = 256 * 1024 * 1024,
        sample: float = 1.0,
        redact: bool = False,
        secrets: Iterable[bytes] = (),
        rng: random.Random | None = None,
        max_queued: int = MAX_QUEUED,
        formats: Iterable[str] = (),
    ) -> None:
        self.directory = Path(directory)
        #: ``--format`` specs, written in each recording (replay loads them).
        self.formats = list(formats)
        self.metrics = metrics
        self.reasons = frozenset(reasons)
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.sample = sample
        self.redact = redact
        #: Longest first: a key that contains another is removed whole.
        self.secrets = sorted(set(secrets), key=len, reverse=True)
        #: Draws the samples (``record_sample``).
        self.rng = rng or random.Random()
        self._queue: queue.Queue[tuple[Take, list[str], int] | None] = queue.Queue(max_queued)
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._index: deque[tuple[str, int]] | None = None  # (file name, size), oldest first
        self._total = 0
        self._seq = 0
        self._last_warning = 0.0
        self._failed_since_warning = 0

    @classmethod
    def of(cls, cfg: ServerConfig, metrics: Metrics) -> Recorder | None:
        """The recorder ``cfg`` asks for, or None (``record`` unset)."""
        if not cfg.record:
            return None
        return cls(
            cfg.record,
            metrics,
            reasons=record_reasons(cfg),
            max_files=cfg.record_max_files,
            max_bytes=cfg.record_max_bytes,
            sample=cfg.record_sample,
            redact=cfg.record_redact == "messages",
            secrets=config_secrets(cfg),
            formats=cfg.formats,
        )

    # -- in the event loop ---------------------------------------------------

    def wrap(self, handler: Handler) -> Handler:
        """``handler`` with its requests recorded (see the module doc)."""

        async def recorded(request: web.Request) -> web.StreamResponse:
            take = Take(request)
            token = _CURRENT.set(take)
            resp: web.StreamResponse | None = None
            try:
                resp = await handler(request)
                return resp
            finally:
                _CURRENT.reset(token)
                if take.attempts or take.errors:
                    # The handler read the body: ``read`` returns it at once.
                    self.submit(take, await request.read(), resp)

        return recorded

    def submit(self, take: Take, body: bytes, resp: web.StreamResponse | None) -> None:
        """Queue ``take`` for writing if it qualifies (never waits)."""
        reasons = [r for r in take.reasons() if r in self.reasons]
        if not reasons or (self.sample < 1.0 and self.rng.random() >= self.sample):
            return
        take.status = resp.status if resp is not None else 499  # cancelled: the client left
        if take.chat_reply is not None and take.status == 200:
            take.client = [take.chat_reply]
        elif isinstance(resp, web.Response) and isinstance(resp.body, bytes):
            take.client = [resp.body]
        take.body = body
        size = take.size + len(body)
        with self._lock:
            full = self._queued_bytes + size > MAX_QUEUED_BYTES
            if not full:
                self._queued_bytes += size
        if not full:
            try:
                self._queue.put_nowait((take, reasons, size))
                return
            except queue.Full:
                with self._lock:
                    self._queued_bytes -= size
        self.metrics.recordings_dropped.labels("queue_full").inc()

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        self.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.close, FLUSH_TIMEOUT)

    # -- the writer thread -------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="streamfix-recorder", daemon=True
            )
            self._thread.start()

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Wait (blocking) until every queued recording is written or
        dropped; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def close(self, timeout: float = FLUSH_TIMEOUT) -> None:
        """Write what is queued (at most ``timeout`` seconds), stop the thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self.flush(timeout)
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=max(0.0, timeout))
        thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                take, reasons, size = item
                try:
                    self._write(take, reasons)
                finally:
                    with self._lock:
                        self._queued_bytes -= size
            except Exception:  # a bug of ours must not end the thread
                log.exception("recorder: could not write a recording")
                self.metrics.recordings_dropped.labels("write_error").inc()
            finally:
                self._queue.task_done()

    def _write(self, take: Take, reasons: list[str]) -> None:
        data = self.encode(take, reasons)
        if len(data) > self.max_bytes:
            self.metrics.recordings_dropped.labels("too_large").inc()
            return
        self._seq += 1
        stamp = datetime.fromtimestamp(take.wall, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{stamp}-{os.getpid()}-{self._seq:06d}-{'+'.join(reasons)}.json"
        try:
            index = self._load_index()
            self._write_file(self.directory / name, data)
        except OSError as exc:
            self.metrics.recordings_dropped.labels("write_error").inc()
            self._warn(exc)
            return
        index.append((name, len(data)))
        self._total += len(data)
        for reason in reasons:
            self.metrics.recordings.labels(reason).inc()
        self._prune(index)

    def _write_file(self, path: Path, data: bytes) -> None:
        """The one disk write: a hidden temporary file renamed into place,
        so a reader never sees half a recording."""
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _load_index(self) -> deque[tuple[str, int]]:
        """The recordings already in the directory (``RECORDING_NAME``, no
        other file), oldest (by name) first; read once (the directory is
        created if need be)."""
        if self._index is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            found = []
            for entry in os.scandir(self.directory):
                if RECORDING_NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        found.append((entry.name, entry.stat().st_size))
            found.sort()
            self._index = deque(found)
            self._total = sum(size for _, size in found)
        return self._index

    def _prune(self, index: deque[tuple[str, int]]) -> None:
        while index and (len(index) > self.max_files or self._total > self.max_bytes):
            name, size = index.popleft()
            self._total -= size
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()

    def _warn(self, exc: OSError) -> None:
        self._failed_since_warning += 1
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL:
            log.warning(
                "recorder: %d recording(s) not written to %s: %s",
                self._failed_since_warning,
                self.directory,
                exc,
            )
            self._last_warning = now
            self._failed_since_warning = 0

    # -- encoding ------------------------------------------------------------------

    def encode(self, take: Take, reasons: list[str]) -> bytes:
        """The file's bytes for ``take``: the document, scrubbed."""
        secrets = sorted({*self.secrets, *take.secrets}, key=len, reverse=True)

        def scrub(data: bytes) -> bytes:
            for secret in secrets:
                data = data.replace(secret, REDACTED)
            return scrub_key_shapes(data)

        def enc(data: bytes) -> dict[str, str]:
            # Text is scrubbed with the whole document below; base64 hides
            # its bytes from that pass, so they are scrubbed here first.
            out = encode_bytes(data)
            return out if "text" in out else encode_bytes(scrub(data))

        try:
            body: Any = orjson.loads(take.body)
        except orjson.JSONDecodeError:
            body = take.body.decode("utf-8", "replace")
        if self.redact:
            body = redact_messages(body)
        # What was sent upstream is written as its difference from the chat
        # request: the client's, or the one a front door made of it.
        chat_body = body
        if take.door is not None:
            chat_body = redact_messages(take.chat_body) if self.redact else take.chat_body
        attempts = []
        for att in take.attempts:
            sent = att.sent or {}
            if self.redact:
                sent = redact_messages(sent)
            changed = {
                k: v
                for k, v in sent.items()
                if not isinstance(chat_body, dict) or chat_body.get(k) != v
            }
            attempts.append(
                {
                    "upstream": att.upstream,
                    "status": att.status,
                    "content_type": att.content_type,
                    "options": att.options,
                    "sent": changed,
                    "reads": [
                        {"t": round(t, 6), **enc(data)}
                        for (t, _), data in zip(
                            att.reads, scrub_reads([d for _, d in att.reads], secrets), strict=True
                        )
                    ],
                    "report": report_dict(att.report),
                    **({"narrowed": att.narrowed} if att.narrowed is not None else {}),
                }
            )
        stream = isinstance(chat_body, dict) and chat_body.get("stream") is True
        doc: dict[str, Any] = {
            "format": FORMAT,
            "recorded_at": datetime.fromtimestamp(take.wall, UTC).isoformat(),
            "streamfix": __version__,
            "reasons": reasons,
            "tenant": take.tenant,
            "request": {
                "method": take.method,
                "path": take.path,
                "headers": take.headers,
                "body": body,
            },
            "attempts": attempts,
            "upstream_errors": [list(e) for e in take.errors],
            "response": {"status": take.status, "stream": stream, **enc(b"".join(take.client))},
            "incomplete": take.incomplete,
        }
        if take.door is not None:
            doc["door"] = {"endpoint": take.door, "chat_body": chat_body}
        if self.formats:
            doc["formats"] = self.formats
        return scrub(orjson.dumps(doc, option=orjson.OPT_INDENT_2)) + b"\n"


#: The app's recorder (``create_app`` sets it when ``--record`` is given).
RECORDER = web.AppKey("streamfix_recorder", Recorder)
