"""The public surface: what each public module exports, pinned, so that it
changes only on purpose (a name added here is a promise to users; one
removed breaks them). Everything not listed here is internal (see
docs/architecture.md, "What is public"). And every module imports alone,
so no import cycle hides behind the order a test suite happens to use."""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import streamfix

PUBLIC = {
    "streamfix": [
        "Chain",
        "Context",
        "Delta",
        "Options",
        "PluginError",
        "Report",
        "RequestError",
        "SSESession",
        "StreamfixError",
        "ToolCall",
        "Transform",
        "TransformError",
        "UpstreamProtocolError",
        "__version__",
        "fix_chunks",
        "fix_completion",
        "fix_sse",
    ],
    "streamfix.middleware": [
        "REPORT_KEY",
        "StreamCut",
        "report_of",
        "streamfix_client_middleware",
        "streamfix_middleware",
    ],
    "streamfix.server": ["ServerConfig", "UpstreamConfig", "create_app"],
    "streamfix.formats": [
        "ABORT",
        "OPAQUE",
        "Balanced",
        "EndFinder",
        "Format",
        "Markers",
        "Plugin",
        "RawCall",
        "Reasoning",
        "Residue",
        "UNREADABLE",
        "UntilMarker",
        "all_formats",
        "by_name",
        "calls_from_value",
        "markers_for",
        "register",
        "registered",
        "unregister",
    ],
    "streamfix.testing": [
        "CHECK_REQUEST",
        "PROSE",
        "Reply",
        "check_cuts",
        "check_passthrough",
        "check_split_invariant",
        "check_stream_equals_whole",
        "cuts_strategy",
        "passthrough_failures",
        "registered",
        "reply",
        "run",
        "sse_stream",
    ],
}

#: Paths the documentation gave before the layout moved; kept for one
#: release as re-exports of the new places.
MOVED = {
    "streamfix.server.middleware": "streamfix.middleware",
    "streamfix.local": "streamfix.tools.local",
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_members(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(PUBLIC[module])
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name} is exported but missing"


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_moved_paths_still_import(old: str, new: str) -> None:
    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in after.__all__:
        assert getattr(before, name) is getattr(after, name)


def test_documented_entry_points() -> None:
    """``streamfix.server.app:app_from_env`` (gunicorn) and the command."""
    from streamfix.server.app import app_from_env
    from streamfix.tools.cli import main

    assert callable(app_from_env) and callable(main)


def _modules() -> list[str]:
    root = Path(streamfix.__file__).parent
    return ["streamfix"] + [
        info.name
        for info in pkgutil.walk_packages([str(root)], prefix="streamfix.")
        if not info.name.endswith("__main__")
    ]


#: Imported before the children fork: the third-party libraries, so each
#: child only pays for streamfix's own modules.
_PRELOAD = "import aiohttp, aiohttp.web, orjson, msgspec, prometheus_client, multidict\n"

_CHILD = """
import os, sys, traceback
bad = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        bad.append(name)
print("\\n".join(bad))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_every_module_imports_alone() -> None:
    """Each module imported first, in a fresh interpreter's fork that has
    loaded nothing of streamfix."""
    out = subprocess.run(
        [sys.executable, "-c", _PRELOAD + _CHILD, *_modules()],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stderr
