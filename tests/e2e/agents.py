"""The real coding agents, run non-interactively: Claude Code (Messages
API) and Codex CLI (Responses API), both pointed at a streamfix proxy.

They are npm packages, pinned (their wire changes between versions):
``.ci/run`` installs them under ``.ci-npm/`` (gitignored);
``STREAMFIX_AGENTS_DIR`` points elsewhere. Missing, the tests that need
them skip with the install command, unless ``STREAMFIX_E2E=require``.

How each is run (flags, environment, Codex's provider block) is what
works with these versions; every address is on 127.0.0.1 and every
home/config directory is a fresh temporary one.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.328"
CODEX = "@openai/codex@0.169.0"
ROOT = Path(__file__).resolve().parents[2]
INSTALL = f"npm install --prefix .ci-npm {CLAUDE_CODE} {CODEX}"

#: Seconds an agent run may take: a scripted turn takes a few seconds; the
#: real model reads a prompt of about 15,000 tokens first.
RUN_TIMEOUT = 420.0


def agent_bin(name: str) -> Path:
    """The agent's executable (``claude``, ``codex``), or a skip (a failure
    under ``STREAMFIX_E2E=require``) when it is not installed."""
    base = Path(os.environ.get("STREAMFIX_AGENTS_DIR") or ROOT / ".ci-npm")
    path = base / "node_modules" / ".bin" / name
    if not path.exists():
        message = f"{name} is not installed in {base}; run: {INSTALL}"
        if os.environ.get("STREAMFIX_E2E") == "require":
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


async def _run(argv: list[str], env: dict[str, str], cwd: Path) -> Run:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return Run(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


def _base_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


async def run_claude(
    root_url: str,
    prompt: str,
    home: Path,
    cwd: Path,
    tools: str = "Write",
    max_output: int | None = None,
) -> Run:
    """``claude -p`` with ``tools`` allowed (default the Write tool), against
    ``root_url`` (the proxy's root, without ``/v1``: Claude Code adds
    ``/v1/messages``); ``max_output`` is Claude Code's own cap on a reply's
    tokens (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, sent as ``max_tokens``)."""
    env = _base_env(home) | {
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": root_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    if max_output is not None:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_output)
    argv = [
        str(agent_bin("claude")),
        "-p",
        prompt,
        "--model",
        "qwen3-coder",
        "--allowedTools",
        tools,
        "--permission-mode",
        "acceptEdits",
        "--output-format",
        "text",
        "--no-session-persistence",
    ]
    return await _run(argv, env, cwd)


#: Codex's provider block for a local model (docs/doors.md: "Codex CLI").
CODEX_CONFIG = """\
model = "qwen3-coder"
model_provider = "local"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.local]
name = "local"
base_url = "{base_url}"
env_key = "LOCAL_API_KEY"
wire_api = "responses"
request_max_retries = 1
stream_max_retries = 1
stream_idle_timeout_ms = {idle_ms}
"""


async def run_codex(base_url: str, prompt: str, home: Path, cwd: Path, idle_ms: int = 60000) -> Run:
    """``codex exec`` with approvals and sandbox off (the test's directory
    is its own), against ``base_url`` (the proxy's ``…/v1``)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = CODEX_CONFIG.format(base_url=base_url, idle_ms=idle_ms)
    (codex_home / "config.toml").write_text(config)
    env = _base_env(home) | {"CODEX_HOME": str(codex_home), "LOCAL_API_KEY": "dummy"}
    argv = [
        str(agent_bin("codex")),
        "exec",
        "--strict-config",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--ephemeral",
        "--color",
        "never",
        "-C",
        str(cwd),
        "-m",
        "qwen3-coder",
        "-o",
        str(home / "last.txt"),
        prompt,
    ]
    return await _run(argv, env, cwd)
