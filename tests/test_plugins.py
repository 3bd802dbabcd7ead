"""Issue 27: the chain opened to users' steps (``transforms=``) and users'
call shapes (``formats.register``, ``streamfix.formats`` entry points),
with the property kit ``streamfix.testing`` and the two examples
(``examples/redact.py``, ``examples/my_shape``) through ``fix_sse``, the
aiohttp middleware and ``streamfix serve`` as a process, streamed and not,
with the OpenAI SDK as the client."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

import streamfix
from streamfix import Delta, PluginError, TransformError, testing
from streamfix.formats import Format, RawCall, Residue, UntilMarker, all_formats, registry
from streamfix.middleware import streamfix_middleware

from .support.upstream_fake import AppServer, FakeUpstream, Reply, free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
MY_SHAPE = EXAMPLES / "my_shape"
sys.path[:0] = [str(EXAMPLES), str(MY_SHAPE)]

import streamfix_myshape  # noqa: E402
from redact import RedactEmails  # noqa: E402

REQ = testing.CHECK_REQUEST
CALL_TEXT = 'Let me look. <<CALL get_weather {"city": "Pa>>ris"}>>'
MAILS = "Write to bob.smith@example.com or ann@x.org. Thanks!"


@pytest.fixture
def my_shape() -> Iterator[None]:
    with testing.registered(streamfix_myshape):
        yield


# -- the property kit ---------------------------------------------------------


class NaiveRedact:
    """The planted bug: redacts each chunk on its own, so an address split
    between chunks goes out."""

    def __init__(self, ctx: Any) -> None:
        pass

    def feed(self, d: Delta) -> None:
        if d.content:
            d.content = re.sub(r"\S+@\S+\.\w+", "[email]", d.content)

    def close(self, d: Delta) -> None:
        self.feed(d)


def test_the_kit_finds_a_step_that_is_not_split_invariant() -> None:
    with pytest.raises(AssertionError, match="chunked so"):
        testing.check_split_invariant(MAILS, None, transforms=[NaiveRedact])


def test_the_kit_reads_utf8_split_between_reads() -> None:
    """Single-byte reads cut every multi-byte character; the redactor's
    reply (and the engine's) is the same."""
    text = "東京 mail: 田中@example.jp 🙂 done"
    got = testing.check_split_invariant(text, None, transforms=[RedactEmails])
    assert got.content == "東京 mail: 田中@example.jp 🙂 done"  # not ASCII: no address
    got = testing.check_split_invariant("🙂 bob@example.jp 🙂", None, transforms=[RedactEmails])
    assert got.content == "🙂 [email] 🙂"


def test_redact_example_passes_the_kit() -> None:
    got = testing.check_split_invariant(MAILS, None, transforms=[RedactEmails])
    assert got.content == "Write to [email] or [email]. Thanks!"
    testing.check_split_invariant(MAILS, REQ, max_cuts=60, transforms=[RedactEmails])
    testing.check_passthrough(frames=False, transforms=[RedactEmails])
    with pytest.raises(AssertionError):  # it holds a word a moment: frames differ
        testing.check_passthrough(frames=True, transforms=[RedactEmails])
    testing.check_stream_equals_whole(MAILS, REQ, transforms=[RedactEmails])
    long = "x" * 300 + "@example.com and y@z.io"
    assert testing.check_split_invariant(
        long, None, max_cuts=50, transforms=[RedactEmails]
    ).content == (long.replace("y@z.io", "[email]"))


def test_kit_checks_hold_for_the_built_in_chain() -> None:
    testing.check_passthrough()
    testing.check_passthrough(request=REQ)
    testing.check_split_invariant('<tool_call>{"name": "search", "arguments": {}}</tool_call>', REQ)


def test_the_kit_takes_hypothesis_lazily() -> None:
    code = (
        "import sys; sys.modules['hypothesis'] = None; sys.modules['pytest'] = None\n"
        "import streamfix.testing as t; t.check_passthrough(); print('ok')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_cuts_strategy_with_hypothesis() -> None:
    from hypothesis import given, settings

    data = testing.sse_stream(["Write to bob@ex", "ample.com ", "now"])

    @settings(max_examples=30, deadline=None)
    @given(testing.cuts_strategy(data))
    def prop(cuts: list[int]) -> None:
        testing.check_cuts(data, cuts, None, transforms=[RedactEmails])

    prop()


# -- user steps ---------------------------------------------------------------


class Refuse:
    """A policy step: calls to ``search`` are refused (after the lift)."""

    def __init__(self, ctx: Any) -> None:
        pass

    def feed(self, d: Delta) -> None:
        if d.calls:
            d.calls = [c for c in d.calls if c.name != "search"] or None

    close = feed


def test_a_user_step_runs_after_the_repairs_and_sees_lifted_calls() -> None:
    text = 'ok <tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>'
    assert testing.reply(testing.run(testing.sse_stream([text]), REQ)).calls
    got = testing.reply(testing.run(testing.sse_stream([text]), REQ, transforms=[Refuse]))
    assert got.calls == () and got.content.strip() == "ok"


class Shout:
    """Upper-cases content in ``feed`` only (``close`` does nothing)."""

    def __init__(self, ctx: Any) -> None:
        pass

    def feed(self, d: Delta) -> None:
        if d.content:
            d.content = d.content.upper()

    def close(self, d: Delta) -> None:
        pass


class ShoutAlways(Shout):
    close = Shout.feed


def test_a_whole_reply_reaches_a_step_only_through_close() -> None:
    """docs/extending.md: a step editing only in ``feed`` leaves a whole
    reply unchanged; the same edit in ``close`` reaches it."""
    whole = {
        "id": "c",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
    }
    streamed = testing.reply(
        testing.run(testing.sse_stream(["hi ", "there"]), {}, transforms=[Shout])
    )
    assert streamed.content == "HI THERE"  # streamed: every chunk is fed
    fed_only = streamfix.fix_completion(whole, {}, transforms=[Shout])
    assert fed_only["choices"][0]["message"]["content"] == "hi"  # never fed
    closed = streamfix.fix_completion(whole, {}, transforms=[ShoutAlways])
    assert closed["choices"][0]["message"]["content"] == "HI"


class Boom:
    def __init__(self, ctx: Any) -> None:
        self.n = 0

    def feed_text(self, text: str) -> bool:
        self.n += 1
        if self.n == 3:
            raise ValueError("bad step")
        return True

    def feed(self, d: Delta) -> None:
        pass

    def close(self, d: Delta) -> None:
        pass


def test_a_step_that_raises_ends_the_stream_with_an_error_event() -> None:
    data = testing.sse_stream(["one ", "two ", "three ", "four"])
    got = testing.reply(testing.run(data, None, transforms=[Boom]))
    assert got.content == "one two "  # what went out before it
    assert got.errors and "bad step" in got.errors[0] and "Boom" in got.errors[0]
    assert b'"type":"transform_error"' in testing.run(data, None, transforms=[Boom])
    # one read holding the whole stream (the batch and run paths)
    s = streamfix.SSESession(None, transforms=[Boom])
    out = s.feed(data)
    assert b"transform_error" in out and s.finished and s.report.counts["transform_error"] == 1


async def test_fix_chunks_and_fix_completion_raise_transform_error() -> None:
    async def chunks() -> AsyncIterator[dict[str, Any]]:
        for p in ["a", "b", "c", "d"]:
            yield {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}

    with pytest.raises(TransformError) as exc:
        _ = [c async for c in streamfix.fix_chunks(chunks(), None, transforms=[Boom])]
    assert isinstance(exc.value.__cause__, ValueError)

    class Fails:
        def __init__(self, ctx: Any) -> None:
            pass

        def feed(self, d: Delta) -> None:
            pass

        def close(self, d: Delta) -> None:
            raise RuntimeError("no")

    completion = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}
    with pytest.raises(TransformError):
        streamfix.fix_completion(completion, None, transforms=[Fails])


def test_options_reject_a_single_factory() -> None:
    with pytest.raises(TypeError):
        streamfix.Options.of({"transforms": RedactEmails})


# -- formats ------------------------------------------------------------------


def test_a_registered_format_is_lifted_split_and_stripped(my_shape: None) -> None:
    text = "<<THINK>>hmm<</THINK>>" + CALL_TEXT + "[END_CALLS]"
    got = testing.check_split_invariant(text, REQ, max_cuts=150)
    assert got.calls == (("get_weather", {"city": "Pa>>ris"}),)
    assert got.reasoning == "hmm" and got.content == "Let me look."
    testing.check_stream_equals_whole(text, REQ)
    testing.check_passthrough(request=REQ)


def test_unregistered_the_shape_is_text() -> None:
    assert "my_shape" not in {f.name for f in all_formats()}
    got = testing.reply(testing.run(testing.sse_stream([CALL_TEXT]), REQ))
    assert got.calls == () and got.content == CALL_TEXT


class Brace(Format):
    name = "brace"
    markers = ("{",)

    def end_finder(self, marker: str) -> UntilMarker:
        return UntilMarker("}")

    def parse(self, region: str, tools: Any) -> list[RawCall] | None:
        return None


class Greedy(Format):
    """Lifts a call from any sentence that says "weather"."""

    name = "greedy"
    markers = ("weather",)

    def end_finder(self, marker: str) -> Any:
        class End:
            def feed(self, text: str) -> int | None:
                return len(text) if text else None

        return End()

    def parse(self, region: str, tools: Any) -> list[RawCall] | None:
        return [RawCall("get_weather", {"city": "x"})]


@pytest.mark.parametrize(
    ("fmt", "why"),
    [
        (Brace(), "looks for '{' anywhere"),
        (
            type("Hermes2", (Brace,), {"name": "hermes", "markers": ("<tc>",)})(),
            "already registered",
        ),
        (Greedy(), "no longer passes unchanged"),
    ],
)
def test_a_format_that_breaks_an_invariant_is_refused(fmt: Format, why: str) -> None:
    before = all_formats()
    with pytest.raises(PluginError, match=why):
        streamfix.formats.register(fmt)
    assert all_formats() == before and not registry.registered()


def test_a_residue_bar_is_one_character() -> None:
    with pytest.raises(PluginError, match="residue bar"):
        streamfix.formats.register(Residue(bars=("¦¦",)), name="two_bars")
    assert not registry.registered()


@pytest.mark.parametrize("pieces", [["Hi<¦eos¦>"], ["Hi<¦e", "os¦>"], ["Hi<", "¦eos¦", ">"]])
def test_a_declared_bar_makes_its_tokens_special(pieces: list[str]) -> None:
    """A family's bar (``Residue.bars``, as DeepSeek's fullwidth one) is
    read from the registry: its tokens are stripped, however they are cut."""

    def content() -> str:
        return testing.reply(testing.run(testing.sse_stream(pieces), REQ)).content

    assert content() == "Hi<¦eos¦>"
    with testing.registered(Residue(bars=("¦",))):
        assert content() == "Hi"
    assert content() == "Hi<¦eos¦>"


def test_the_engine_hands_register_its_measured_check() -> None:
    """``formats`` imports nothing above it: the prose check reaches
    ``register`` from ``plugins``, which the library's entry points import."""
    code = (
        "import streamfix, streamfix.api, streamfix.formats as f\n"
        "class End:\n    def feed(self, text): return len(text) if text else None\n"
        "class Greedy(f.Format):\n    name = 'greedy'\n    markers = ('weather',)\n"
        "    def end_finder(self, marker): return End()\n"
        "    def parse(self, region, tools): return [f.RawCall('get_weather', {'city': 'x'})]\n"
        "try:\n    f.register(Greedy())\n"
        "except streamfix.PluginError as e:\n    print('refused', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "refused" in out.stdout and "no longer passes unchanged" in out.stdout, out.stderr


def test_leading_only_brace_is_allowed() -> None:
    class Lead(Brace):
        name = "lead_brace"
        markers = ()
        leading = ("{",)

    with testing.registered(Lead()):
        assert "lead_brace" in {f.name for f in all_formats()}


# -- packaging: the entry point ---------------------------------------------


def install_my_shape(site: Path) -> None:
    """What ``pip install examples/my_shape`` leaves on ``sys.path``: the
    package's dist-info (its entry points read from its pyproject.toml),
    and the package (here: a .pth-less copy by path on PYTHONPATH)."""
    meta = tomllib.loads((MY_SHAPE / "pyproject.toml").read_text())["project"]
    info = site / "streamfix_myshape-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    eps = meta["entry-points"]["streamfix.formats"]
    (info / "entry_points.txt").write_text(
        "[streamfix.formats]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
    )
    (site / "streamfix_myshape").symlink_to(MY_SHAPE / "streamfix_myshape")


def test_an_installed_entry_point_is_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_my_shape(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    added = registry.load_entry_points()
    try:
        assert [p.name for p in added] == ["my_shape"]
        assert registry.load_entry_points() == []  # once
        got = testing.reply(testing.run(testing.sse_stream([CALL_TEXT]), REQ))
        assert got.calls == (("get_weather", {"city": "Pa>>ris"}),)
    finally:
        for p in added:
            registry.unregister(p)
        registry._loaded_entry_points.clear()


# -- the examples through fix_sse, the middleware, and serve -----------------


async def _aiter(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 7):
        yield data[i : i + 7]


async def test_examples_through_fix_sse(my_shape: None) -> None:
    data = testing.sse_stream(["Mail bob@exa", "mple.com. ", CALL_TEXT])
    out = b"".join(
        [b async for b in streamfix.fix_sse(_aiter(data), REQ, transforms=[RedactEmails])]
    )
    got = testing.reply(out)
    assert got.content == "Mail [email]. Let me look."
    assert got.calls == (("get_weather", {"city": "Pa>>ris"}),)


UPSTREAM_TEXT = [
    "Mail bob@exa",
    "mple.com. ",
    'Let me look. <<CALL get_weather {"city": "Par',
    'is"}>>',
]


def _completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(UPSTREAM_TEXT)},
                "finish_reason": "stop",
            }
        ],
    }


async def _ask(client: openai.AsyncOpenAI) -> list[tuple[str, list[tuple[str, Any]]]]:
    """The same request streamed and not: (content, calls) of each."""
    tools: Any = REQ["tools"]
    msgs: Any = [{"role": "user", "content": "weather?"}]
    out = []
    stream = await client.chat.completions.create(
        model="m", messages=msgs, tools=tools, stream=True
    )
    content, calls = "", {}
    async for ch in stream:
        d = ch.choices[0].delta if ch.choices else None
        if d is None:
            continue
        content += d.content or ""
        for tc in d.tool_calls or ():
            slot = calls.setdefault(tc.index, ["", ""])
            slot[0] += (tc.function and tc.function.name) or ""
            slot[1] += (tc.function and tc.function.arguments) or ""
    out.append((content, [(n, orjson.loads(a)) for n, a in calls.values()]))
    whole = await client.chat.completions.create(model="m", messages=msgs, tools=tools)
    msg = whole.choices[0].message
    out.append(
        (
            msg.content or "",
            [(c.function.name, orjson.loads(c.function.arguments)) for c in msg.tool_calls or ()],
        )
    )
    return out


WANT = ("Mail [email]. Let me look.", [("get_weather", {"city": "Paris"})])


async def test_examples_through_the_server_middleware(my_shape: None) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response(_completion())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in testing.sse_stream(UPSTREAM_TEXT).split(b"\n\n")[:-1]:
            await resp.write(part + b"\n\n")
        await resp.write_eof()
        return resp

    app = web.Application(middlewares=[streamfix_middleware(transforms=[RedactEmails])])
    app.router.add_post("/v1/chat/completions", handler)
    async with AppServer(app) as server:
        client = openai.AsyncOpenAI(api_key="x", base_url=server.url, max_retries=0)
        assert await _ask(client) == [WANT, WANT]
        await client.close()


def _serve(
    upstream: str, port: int, site: Path, *flags: str, record: Path | None = None
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(site), str(EXAMPLES)]),
    }
    argv = [sys.executable, "-m", "streamfix", "serve", "--upstream", upstream, "--port", str(port)]
    argv += ["--log-level", "warning", *flags]
    if record is not None:
        argv += ["--record", str(record), "--record-on", "repair"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)


async def _wait_healthy(root: str, proc: subprocess.Popen[bytes]) -> None:
    import aiohttp

    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as s:
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                async with s.get(root + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, "streamfix serve did not start"
            await asyncio.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def _replay(
    record: Path, site: Path, *extra: str, plugins: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(site), str(EXAMPLES)]),
        "STREAMFIX_PLUGINS": "1" if plugins else "0",
    }
    return subprocess.run(
        [sys.executable, "-m", "streamfix", "replay", "--check", str(record), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


async def test_serve_uses_an_installed_format_with_no_flag_and_replay_checks_it(
    tmp_path: Path,
) -> None:
    """The package installed (its dist-info and entry point on the path),
    no --format: the proxy lifts its calls; with --transform the example
    step redacts. The recording replays the same with the plugin, and
    fails --check without it."""
    site = tmp_path / "site"
    install_my_shape(site)
    record = tmp_path / "rec"
    stream_reply = Reply.stream(testing.sse_stream(UPSTREAM_TEXT))
    async with FakeUpstream(stream_reply) as up:
        up.handler = lambda rec: (
            stream_reply if rec.body.get("stream") else Reply.json(_completion())
        )
        port = free_port()
        proc = _serve(up.url, port, site, "--transform", "redact:RedactEmails", record=record)
        try:
            await _wait_healthy(f"http://127.0.0.1:{port}", proc)
            client = openai.AsyncOpenAI(
                api_key="x", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0
            )
            assert await _ask(client) == [WANT, WANT]
            await client.close()
        finally:
            _stop(proc)
    for _ in range(100):  # the recorder writes off the request path
        if len(list(record.rglob("*.json"))) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(list(record.rglob("*.json"))) == 2
    with_it = _replay(record, site)
    assert with_it.returncode == 0, with_it.stdout + with_it.stderr
    without = _replay(record, site, plugins=False)
    assert without.returncode == 1, without.stdout
    assert "CHANGED" in without.stdout
    # a one-off file: --format names the module, no entry point needed
    again = _replay(record, site, "--format", "streamfix_myshape", plugins=False)
    assert again.returncode == 0, again.stdout + again.stderr


async def test_proxy_step_that_raises_gives_the_client_an_error(my_shape: None) -> None:
    """Through the proxy: streamed, the repaired text so far and an error
    event (the SDK raises APIError); whole, a 500 transform_error."""
    from dataclasses import replace

    from streamfix.server.app import create_app
    from streamfix.server.config import ServerConfig, parse_upstream

    data = testing.sse_stream(["one ", "two ", "three ", "four"])
    async with FakeUpstream(Reply.stream(data)) as up:
        up.handler = lambda rec: (
            Reply.stream(data) if rec.body.get("stream") else Reply.json(_completion())
        )
        row = replace(parse_upstream(up.url), transforms=("tests.test_plugins:Boom",))
        app = create_app(ServerConfig(upstreams=[row], backoff=0.01, probe_interval=0))
        async with AppServer(app) as px:
            client = openai.AsyncOpenAI(api_key="x", base_url=px.url, max_retries=0)
            msgs: Any = [{"role": "user", "content": "x"}]
            stream = await client.chat.completions.create(model="m", messages=msgs, stream=True)
            seen = ""
            with pytest.raises(openai.APIError, match="bad step"):
                async for ch in stream:
                    seen += (ch.choices[0].delta.content or "") if ch.choices else ""
            assert seen == "one two "
            up.handler = lambda rec: Reply.json(
                {
                    **_completion(),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "a"},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
            row2 = replace(row, transforms=("tests.test_plugins:Fails",))
            app2 = create_app(ServerConfig(upstreams=[row2], backoff=0.01, probe_interval=0))
            async with AppServer(app2) as px2:
                c2 = openai.AsyncOpenAI(api_key="x", base_url=px2.url, max_retries=0)
                with pytest.raises(openai.InternalServerError, match="no"):
                    await c2.chat.completions.create(model="m", messages=msgs)
                await c2.close()
            await client.close()


class Fails:
    def __init__(self, ctx: Any) -> None:
        pass

    def feed(self, d: Delta) -> None:
        pass

    def close(self, d: Delta) -> None:
        raise RuntimeError("no")


def test_config_reads_transforms_and_formats(tmp_path: Path) -> None:
    from streamfix.server.config import ConfigError, build_config

    toml = tmp_path / "c.toml"
    toml.write_text(
        'transform = ["redact:RedactEmails"]\nformat = "streamfix_myshape"\n'
        '[[upstream]]\nurl = "http://127.0.0.1:9/v1"\ntransform = ["tests.test_plugins:Refuse"]\n'
    )
    cfg = build_config({}, {}, str(toml))
    assert cfg.formats == ["streamfix_myshape"]
    assert cfg.upstreams[0].transforms == ("redact:RedactEmails", "tests.test_plugins:Refuse")
    with pytest.raises(ConfigError, match="cannot import"):
        build_config({"upstreams": ["http://127.0.0.1:9/v1"], "transforms": ["no_such_mod:X"]}, {})


async def test_replay_registers_the_format_plugins_a_recording_was_made_with(
    tmp_path: Path,
) -> None:
    """``serve --format M`` writes ``formats: [M]`` in each recording;
    replay registers it again (as it loads the recorded steps by name),
    so ``replay --check`` needs no ``--format`` to replay it the same."""
    from streamfix.formats.registry import registered, unregister
    from streamfix.plugins import register_spec
    from streamfix.server.app import create_app
    from streamfix.server.config import ServerConfig, parse_upstream
    from streamfix.server.record import RECORDER
    from streamfix.server.replay import replay_file

    spec = "streamfix_myshape"
    plugin = register_spec(spec)  # what serve's load_plugins does with --format
    try:
        stream_reply = Reply.stream(testing.sse_stream(UPSTREAM_TEXT))
        async with FakeUpstream(stream_reply) as up:
            cfg = ServerConfig(
                upstreams=[parse_upstream(up.url)],
                formats=[spec],
                record=str(tmp_path),
                record_on="repair",
                probe_interval=0,
            )
            app = create_app(cfg)
            async with AppServer(app) as px:
                client = openai.AsyncOpenAI(api_key="x", base_url=px.url, max_retries=0)
                tools: Any = REQ["tools"]
                msgs: Any = [{"role": "user", "content": "weather?"}]
                stream = await client.chat.completions.create(
                    model="m", messages=msgs, tools=tools, stream=True
                )
                assert [ch async for ch in stream]
                await client.close()
                assert await asyncio.to_thread(app[RECORDER].flush, 5.0)
    finally:
        unregister(plugin)  # replay starts without it, as a new process would
    [path] = list(tmp_path.glob("*.json"))
    assert orjson.loads(path.read_bytes())["formats"] == [spec]
    try:
        outcome = replay_file(path)
        assert outcome.verdict == "same", outcome.notes
        assert outcome.now is not None and outcome.now.calls  # lifted again, by the plugin
        assert any(p.name == spec for p in registered())
    finally:
        for p in registered():
            if p.name == spec:
                unregister(p)
