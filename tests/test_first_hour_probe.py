"""``streamfix probe`` tells the truth about a backend that is not an
OpenAI API (issue 26): a wrong path answered with an HTML 404, a closed
port, a JSON server of another kind. Each row says why it got no reply,
the summary counts what answered, the exit status is 2 when nothing did,
and no HTML reaches the table."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from streamfix.server.upstream.diagnose import in_words, missing_v1, short_body
from streamfix.tools.cli import main

from .support.upstream_fake import AppServer, refusing_url

HTML_404 = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n"
    b"<body><h1>Not Found</h1><p>The requested URL | was not found.</p></body></html>"
)


def _app(handler: web.Handler) -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


async def _html_404(request: web.Request) -> web.Response:
    return web.Response(status=404, body=HTML_404, content_type="text/html")


async def _not_openai(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "service": "inventory", "items": [1, 2, 3]})


async def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, argv)
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_probe_of_an_html_404_without_v1_says_so_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with AppServer(_app(_html_404)) as srv:
        code, out, _ = await _run(["probe", "--upstream", srv.root], capsys)
    assert code == 2
    assert "<" not in out and "DOCTYPE" not in out  # no HTML in the table
    assert "HTTP 404 on /chat/completions: an HTML page (404 Not Found)" in out
    assert f"no /v1? try {srv.root}/v1" in out
    assert "does not need streamfix" not in out
    assert "nothing answered" in out.splitlines()[-1]
    # the first request got no usable reply in either mode: the rest were not sent
    assert out.count("| plain answer |") == 2 and "| long answer |" not in out


async def test_probe_of_a_closed_port_says_connection_refused_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = await _run(["probe", "--upstream", refusing_url()], capsys)
    assert code == 2
    assert "connection refused" in out and "ClientConnectorError" not in out + err
    assert "does not need streamfix" not in out
    assert out.splitlines()[-1].startswith("nothing answered (connection refused")


async def test_probe_of_a_json_server_of_another_kind_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with AppServer(_app(_not_openai)) as srv:
        code, out, _ = await _run(["probe", "--upstream", srv.url], capsys)
    assert code == 2
    assert "not OpenAI-shaped (HTTP 200 with JSON that is not a completion" in out
    assert "no /v1?" not in out  # the URL has it: that is not the problem
    assert "does not need streamfix" not in out and "nothing answered" in out


def test_short_body_reduces_html_and_errors_to_one_line() -> None:
    assert short_body(HTML_404) == "an HTML page (404 Not Found)"
    assert short_body(b'{"error": {"message": "no such model", "code": null}}') == "no such model"
    assert short_body(b'{"error": null, "detail": "x"}') == "x"
    assert short_body(b'{"detail": "Not Found"}') == "Not Found"
    assert short_body(b"plain\\n text | here") == "plain\\n text / here"
    assert len(short_body(b"x" * 500)) == 80


def test_missing_v1() -> None:
    assert missing_v1("http://h:8000") and missing_v1("http://h:8000/")
    assert missing_v1("http://h:8000/api")
    assert not missing_v1("http://h:8000/v1") and not missing_v1("http://h/openai/v1/")


async def test_in_words_says_connection_refused() -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        try:
            await http.get(refusing_url() + "/models")
        except aiohttp.ClientError as exc:
            said = in_words(exc)
    assert said.startswith("connection refused (nothing listens on 127.0.0.1:")
