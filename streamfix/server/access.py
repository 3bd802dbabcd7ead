"""The access log: one line per request on the ``streamfix.access`` logger.

aiohttp's default line (``AccessLogger``) formats a second timestamp of
its own (``%t``: ``strftime`` per request, beside the one the log's
formatter already writes), parses a format spec into ten parts per line
and writes the query string. Here the line is made by the logger, only
when INFO is on for it (``enabled``), from the few values an operator
looks for: the client's address, the request line without its query (a
key sent as ``?key=`` stays out of the log), the status, the bytes sent,
the time taken, the request id (``requestid.py``: the same one the
response's ``X-Streamfix-Request-Id`` header, the traces and the page
show) and the client's ``User-Agent``. It costs the loop about a tenth of
aiohttp's, after each reply: with requests one after another (an agent's
loop) that time comes before the next request is read.
"""

from __future__ import annotations

import logging

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from .requestid import KEY

#: The line: address, "METHOD /path HTTP/x.y", status, bytes, ms, id, agent.
LINE = '%s "%s %s HTTP/%d.%d" %d %d %.1fms %s "%s"'


class AccessLog(AbstractAccessLogger):
    """``LINE`` for each request, if INFO is on for the logger."""

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        version = request.version
        self.logger.info(
            LINE,
            request.remote or "-",
            request.method,
            request.path,
            version.major,
            version.minor,
            response.status,
            response.body_length,
            time * 1000,
            request.get(KEY, "-"),
            request.headers.get("User-Agent", "-"),
        )
