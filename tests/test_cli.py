"""``streamfix serve`` settings (CLI > env > TOML > defaults) and the
command itself as a real process."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from streamfix.server.config import SETTINGS, ConfigError, ServerConfig, parse_upstream
from streamfix.tools.cli import build_parser, config_from_args, main

from .support.streamutil import assemble, chunk, sse, text_stream
from .support.upstream_fake import FakeUpstream, Reply, free_port


def config(argv: list[str], env: dict[str, str] | None = None) -> ServerConfig:
    args = build_parser().parse_args(["serve", *argv])
    return config_from_args(args, env or {})


def test_help_documents_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = capsys.readouterr().out
    for s in SETTINGS:
        assert s.flag in text and s.env in text
    for word in (
        "--upstream",
        "--api-key",
        "--config",
        "STREAMFIX_UPSTREAM",
        "STREAMFIX_API_KEY",
        "[[upstream]]",
    ):
        assert word in text


def test_help_states_the_defaults_the_config_has() -> None:
    """Each "(default X)" in --help is ServerConfig's own default (the two
    are written apart, so a changed default must show up here)."""
    units = {"KiB": 1024, "MiB": 1024 * 1024}
    defaults = {f.name: f.default for f in dataclasses.fields(ServerConfig)}
    for s in SETTINGS:
        stated = re.search(r"\(default ([^)]+)\)", s.help)
        assert stated is not None, s.name
        value, _, unit = stated.group(1).partition(" ")
        want = defaults[s.name]
        if value == "off" and s.type is str and not s.choices:
            assert want is None, s.name  # a feature off unless given
            continue
        if s.type is bool:  # a switch
            assert want is (value == "on"), s.name
            continue
        got = s.type(value) * units[unit] if unit else s.type(value)
        assert got == want, (s.name, stated.group(1), want)


def test_defaults() -> None:
    cfg = config(["--upstream", "http://h:1/v1"])
    assert (cfg.host, cfg.port, cfg.required, cfg.workers) == ("127.0.0.1", 8787, "soft", 1)
    assert cfg.upstreams[0].url == "http://h:1/v1"


def test_precedence_cli_env_toml(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(
        'port = 1111\nhost = "0.0.0.0"\nfloor = 7\nrequired = "off"\napi_key = ["t1"]\n'
        '[[upstream]]\nurl = "http://a:1/v1"\nweight = 3\napi_key = "sk-up"\nwindow = 32768\n'
        '[[upstream]]\nurl = "http://b:2/v1/"\nreasoning = true\n'
    )
    env = {"STREAMFIX_CONFIG": str(toml), "STREAMFIX_PORT": "2222", "STREAMFIX_FLOOR": "9"}
    cfg = config(["--port", "3333"], env)
    assert cfg.port == 3333  # CLI over env
    assert cfg.floor == 9  # env over TOML
    assert (
        cfg.host == "0.0.0.0" and cfg.required == "off" and cfg.api_keys == ["t1"]
    )  # TOML over defaults
    a, b = cfg.upstreams
    assert (a.url, a.weight, a.api_key, a.window) == ("http://a:1/v1", 3.0, "sk-up", 32768)
    assert (b.url, b.reasoning) == ("http://b:2/v1", True)
    env["STREAMFIX_UPSTREAM"] = "http://c:3/v1,http://d:4/v1#weight=2"
    assert [u.url for u in config([], env).upstreams] == ["http://c:3/v1", "http://d:4/v1"]
    assert [u.url for u in config(["--upstream", "http://e:5/v1"], env).upstreams] == [
        "http://e:5/v1"
    ]


def test_upstream_options_in_url() -> None:
    u = parse_upstream("https://user:pw@h:8080/v1#weight=2,window=4096,api_key=sk-x,reasoning=yes")
    assert (u.weight, u.window, u.api_key, u.reasoning) == (2.0, 4096, "sk-x", True)
    assert "sk-x" not in repr(u) and "pw" not in u.name  # keys never printed


def test_upstream_model_name_and_kind_in_url() -> None:
    u = parse_upstream("http://h:8000/v1#model=Qwen/Qwen3-8B,name=fast,kind=embedding,weight=3")
    assert (u.model, u.public, u.served, u.kind, u.weight) == (
        "Qwen/Qwen3-8B",
        "fast",
        "fast",
        "embedding",
        3.0,
    )
    plain = parse_upstream("http://h:8000/v1")
    assert (plain.model, plain.served, plain.kind) == (None, None, "chat")  # a catch-all row
    with pytest.raises(ConfigError, match="kind must be one of"):
        parse_upstream("http://h:8000/v1#model=m,kind=image")


def test_protect_status_is_a_switch() -> None:
    assert config(["--upstream", "http://h:1/v1", "--protect-status"], {}).protect_status
    assert not config(["--upstream", "http://h:1/v1"], {}).protect_status
    assert config(
        ["--upstream", "http://h:1/v1"], {"STREAMFIX_PROTECT_STATUS": "true"}
    ).protect_status


@pytest.mark.parametrize(
    "argv",
    [
        ["--upstream", "ftp://h/v1"],
        ["--upstream", "http://h/v1#weight=0"],
        ["--upstream", "http://h/v1#colour=red"],
        ["--upstream", "http://h/v1", "--workers", "0"],
    ],
)
def test_bad_settings(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        config(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--upstream", "http://127.0.0.1:1/v1", "--port", "abc"],
        ["serve", "--upstream", "http://127.0.0.1:1/v1", "--no-such-flag"],
        ["serve", "--upstream", "127.0.0.1:1/v1"],
        ["serve", "--upstream", "http://127.0.0.1:1/v1", "--required", "hard"],
        ["serve", "--upstream", "http://127.0.0.1:1/v1#weight=0"],
        ["replay"],
        ["probe", "http://127.0.0.1:1/v1", "--bogus"],
        ["bogus"],
    ],
)
def test_every_flag_or_config_error_is_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    [line] = err.splitlines()
    assert ": error: " in line and "usage:" not in line and "--help" in line


@pytest.mark.parametrize(
    "argv",
    [["probe", "127.0.0.1:9/v1"], ["probe", "--upstream", "127.0.0.1:9/v1"], ["probe"]],
)
def test_probe_checks_its_url_as_serve_does(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("streamfix probe: ")
    if "127.0.0.1:9/v1" in argv:  # the very words serve says of such a row
        with pytest.raises(ConfigError) as served:
            parse_upstream("127.0.0.1:9/v1")
        assert line == f"streamfix probe: {served.value}"
        assert "Error" not in line  # no aiohttp class name


def test_no_upstream_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        with pytest.raises(SystemExit) as exc:
            main(["serve"])
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert exc.value.code == 2 and "no upstream" in capsys.readouterr().err


async def _wait_healthy(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as s:
        while True:
            try:
                async with s.get(url + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("streamfix serve did not start")
            await asyncio.sleep(0.05)


#: This checkout: the process runs its code, whatever the test's cwd or
#: the copy of streamfix installed in the environment.
ROOT = Path(__file__).resolve().parent.parent


def _serve(upstream: str, port: int, workers: int = 1) -> subprocess.Popen[bytes]:
    """``streamfix serve`` as a process, from this checkout."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamfix",
            "serve",
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.parametrize("workers", [1, 2])
async def test_serve_runs_as_a_process(workers: int) -> None:
    async with FakeUpstream(Reply.stream(text_stream(["ok"]))) as up:
        port = free_port()
        proc = _serve(up.url, port, workers)
        try:
            root = f"http://127.0.0.1:{port}"
            await _wait_healthy(root, time.monotonic() + 20)
            async with aiohttp.ClientSession() as s:
                for _ in range(4):
                    req = {
                        "model": "m",
                        "stream": True,
                        "messages": [{"role": "user", "content": "x"}],
                    }
                    async with s.post(root + "/v1/chat/completions", json=req) as r:
                        assert assemble(await r.read()).content == "ok"
        finally:
            _stop(proc)


async def test_serve_cuts_a_counted_loop_and_closes_the_upstream() -> None:
    """Issue 18 through ``streamfix serve`` as a process: a model counting
    while it loops (``Step N: …``) from a scripted upstream. The client
    gets a ``length`` finish, ``"counted": true`` and ``[DONE]`` within
    1,000 characters; the upstream request is closed long before its
    395 copies are sent."""
    unit = "Step {}: Check the configuration file again.\n"
    parts = [sse([chunk(role="assistant")], done=False)]
    parts += [sse([chunk(unit.format(n))], done=False) for n in range(5, 400)]
    parts.append(sse([chunk(finish="length")]))
    async with FakeUpstream(Reply.stream(parts, delay=0.002)) as up:
        port = free_port()
        proc = _serve(up.url, port)
        try:
            root = f"http://127.0.0.1:{port}"
            await _wait_healthy(root, time.monotonic() + 20)
            req = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
            async with (
                aiohttp.ClientSession() as s,
                s.post(root + "/v1/chat/completions", json=req) as r,
            ):
                data = b""
                async for part in r.content.iter_any():
                    data += part
                    if b"[DONE]" in data:
                        break
            rec = up.chat_requests[0]
            await asyncio.wait_for(rec.ended.wait(), 5)
        finally:
            _stop(proc)
    a = assemble(data)
    assert a.done and a.finish_reason == "length"
    assert a.ext is not None and a.ext["cut"] == "repetition" and a.ext["counted"] is True
    assert a.content.startswith(unit.format(5)) and len(a.content) <= 1000
    assert rec.disconnected


def test_demo_piped_into_a_reader_that_leaves_is_not_an_error() -> None:
    """``streamfix demo | head``: the reader closes the pipe; exit 0, no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "streamfix", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the demo writes a byte
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipeError" not in err
