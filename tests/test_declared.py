"""Declared shapes (``formats/declared.py``, ``shapes.py``): a call shape
written in TOML lifts its calls as a built-in does, is held to the same
refusals, says what is wrong in one line, and five built-in families
written so agree with their modules on the conformance fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamfix.errors import PluginError
from streamfix.formats import registry
from streamfix.formats.declared import (
    ShapeError,
    compile_shapes,
    load_shapes,
    shape_toml,
    shapes_of,
)
from streamfix.passthrough import CHECK_REQUEST, reply, run, sse_stream
from streamfix.shapes import in_effect, use_shapes
from streamfix.testing import check_passthrough, check_split_invariant, registered

from .support.shape_equiv import CASES, compare

REQUEST = {
    **CHECK_REQUEST,
    "tools": [
        *CHECK_REQUEST["tools"],
        {
            "type": "function",
            "function": {
                "name": "add",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        },
    ],
}


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "shapes.toml"
    p.write_text(text)
    return p


def lifted(toml: str, text: str, tmp_path: Path) -> tuple[str, tuple[object, ...]]:
    with registered(*compile_shapes(load_shapes(write(tmp_path, toml)))):
        check_split_invariant(text, REQUEST, max_cuts=200)
        got = reply(run(sse_stream([text]), REQUEST))
    return got.content, got.calls


AT = '[shapes.atcall]\nstart = "@@call"\nbody = "json"\nend = "@@end"\n'


def test_five_lines_teach_a_shape(tmp_path: Path) -> None:
    text = 'Let me check. @@call get_weather {"city": "Paris"} @@end'
    # before: text, untouched
    assert reply(run(sse_stream([text]), REQUEST)).content == text
    content, calls = lifted(AT, text, tmp_path)
    assert content == "Let me check."
    assert calls == (("get_weather", {"city": "Paris"}),)


def test_end_marker_inside_a_json_string_is_data(tmp_path: Path) -> None:
    text = '@@call search {"query": "what is @@end?"} @@end'
    assert lifted(AT, text, tmp_path)[1] == (("search", {"query": "what is @@end?"}),)


@pytest.mark.parametrize(
    ("toml", "text", "calls"),
    [
        (  # a name attribute, <param name=…> values typed by the schema
            '[shapes.inv]\nstart = "<invoke "\nname = "attribute"\nbody = "param"\n'
            'end = "</invoke>"\n',
            '<invoke name="add"><param name="a">2</param><param name="b">3</param></invoke>',
            (("add", {"a": 2, "b": 3}),),
        ),
        (  # <parameter=K>V</parameter> after NAME>
            '[shapes.fn]\nstart = "<fn="\nseparator = ">"\nbody = "parameter"\nend = "</fn>"\n',
            "<fn=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</fn>",
            (("get_weather", {"city": "Oslo"}),),
        ),
        (  # key=value pairs
            '[shapes.kv]\nstart = "%%tool"\nseparator = ":"\nbody = "key_value"\nend = "%%"\n',
            '%%tool add: a=1, b=2 %%\n%%tool search: query="two words" %%',
            (("add", {"a": 1, "b": 2}), ("search", {"query": "two words"})),
        ),
        (  # a JSON object with name and arguments, no end marker
            '[shapes.obj]\nstart = "CALL>>"\nname = "json_field"\nbody = "object"\n',
            'CALL>> {"name": "search", "arguments": {"query": "x"}} and more',
            (("search", {"query": "x"}),),
        ),
        (  # a wrapper holding two calls, JSON after a separator, no end of their own
            '[shapes.sec]\nstart = "~fn:"\nseparator = "=>"\nbody = "json"\n'
            'around = ["~calls~", "~end~"]\n',
            '~calls~ ~fn: add => {"a": 1, "b": 2} ~fn: search=>{"query": "q"} ~end~',
            (("add", {"a": 1, "b": 2}), ("search", {"query": "q"})),
        ),
    ],
)
def test_each_name_and_body_kind(
    toml: str, text: str, calls: tuple[object, ...], tmp_path: Path
) -> None:
    assert lifted(toml, text, tmp_path)[1] == calls


def test_at_start_only(tmp_path: Path) -> None:
    toml = '[shapes.lead]\nstart = "=>"\nbody = "json"\nat_start_only = true\n'
    assert lifted(toml, '=> add {"a": 1, "b": 2}', tmp_path)[1] == (("add", {"a": 1, "b": 2}),)
    text = 'x => add {"a": 1, "b": 2}'
    assert lifted(toml, text, tmp_path) == (text, ())


def test_prose_that_mentions_the_marker_stays_text(tmp_path: Path) -> None:
    with registered(*compile_shapes(load_shapes(write(tmp_path, AT)))):
        check_passthrough(request=REQUEST)
        text = "Write @@call then a tool's name, as in the docs."
        assert reply(run(sse_stream([text]), REQUEST)).content == text


def test_a_short_marker_searched_anywhere_is_refused(tmp_path: Path) -> None:
    shapes = load_shapes(write(tmp_path, '[shapes.x]\nstart = "@@"\nbody = "json"\n'))
    with pytest.raises(PluginError, match="at least 3"):
        registry.register(*compile_shapes(shapes))


def test_a_shape_that_changes_prose_is_refused(tmp_path: Path) -> None:
    # "ideas:\n\n1." reads as a call to a tool named "1": the list loses its head
    toml = '[shapes.list]\nstart = "ideas:"\nbody = "key_value"\nend = "."\n'
    shapes = load_shapes(write(tmp_path, toml))
    before = registry.registered()
    with pytest.raises(PluginError, match="plain text no longer passes"):
        registry.register(*compile_shapes(shapes))
    assert registry.registered() == before


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[shapes.a]\nbody = 'json'\n", "shape a: start: missing"),
        ("[shapes.a]\nstart = 'XX:'\nbody = 'yaml'\n", "shape a: body: 'yaml' is not one of"),
        ("[shapes.a]\nstart = 'XX:'\nbody = 'parameter'\n", "shape a: end: missing"),
        ("[shapes.a]\nstart = 'XX:'\ncolour = 1\n", "shape a: colour: unknown field"),
        ("[shapes.a]\nstart = ''\n", "shape a: start: expected non-empty"),
        ("[shapes.a]\nstart = 'XX:'\nat_start_only = 'yes'\n", "shape a: at_start_only"),
        ("[shapes.a]\nstart = 'XX:'\nname = 'json_field'\nbody = 'json'\n", "shape a: body:"),
        ("[shapes.a]\nstart = 'XX:'\naround = ['x']\n", "shape a: around:"),
        ("start = 'x'\n", "no [shapes.NAME] table"),
        ("[shapes.a\n", "not valid TOML"),
    ],
)
def test_an_error_is_one_line_naming_file_shape_field(
    toml: str, message: str, tmp_path: Path
) -> None:
    p = write(tmp_path, toml)
    with pytest.raises(ShapeError) as err:
        load_shapes(p)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(str(p))
    assert message in text


def test_toml_written_back_reads_the_same(tmp_path: Path) -> None:
    for case in CASES:
        for shape in load_shapes(Path("examples/shapes") / case.toml):
            again = shapes_of({"shapes": {shape.id: _table(shape_toml(shape))}}, "x")
            assert again == [shape]


def _table(text: str) -> dict[str, object]:
    import tomllib

    data = tomllib.loads(text)
    (table,) = data["shapes"].values()
    return table  # type: ignore[no-any-return]


def test_use_shapes_swaps_and_keeps_the_old_on_a_bad_file(tmp_path: Path) -> None:
    good = write(tmp_path, AT)
    text = '@@call search {"query": "x"} @@end'
    try:
        use_shapes(good)
        first = in_effect()
        assert reply(run(sse_stream([text]), REQUEST)).calls
        bad = tmp_path / "bad.toml"
        bad.write_text('[shapes.x]\nstart = "@@"\nbody = "json"\n')
        with pytest.raises(PluginError):
            use_shapes(bad)
        assert in_effect() is not None and in_effect().FORMATS == first.FORMATS  # type: ignore[union-attr]
        assert reply(run(sse_stream([text]), REQUEST)).calls
    finally:
        use_shapes(None)
    assert in_effect() is None
    assert not reply(run(sse_stream([text]), REQUEST)).calls


#: The fixtures where a family's module repairs a slip in code that its
#: ordinary TOML shape does not: the shape leaves them as the family's
#: reference parsers without the repair would.
KNOWN_DIFFERENT = {
    "qwen_xml.toml": {
        "qwen3-xml/vllm-coder-missing-close-parameter",  # a lost </parameter>
        "qwen3-xml/bug-missing-close-parameter-before-function",
        "qwen3-xml/q38-marker-in-arguments",  # </parameter> inside a value
        "qwen3-xml/coder-marker-in-arguments",
        # the stray </tool_call> after a bare <function=…> (Format.closer_after)
        "qwen3-xml/llamacpp-coder-bare-function",
        "qwen3-xml/llamacpp-coder-bare-function-parallel",
        "qwen3-xml/bug-coder-missing-tool-call-opener",
    },
    "mistral.toml": {  # [CALL_ID]id between the name and [ARGS]
        "mistral/llamacpp-v11-call-id",
        "mistral/llamacpp-v11-call-id-parallel",
    },
    "kimi_k2.toml": {"kimi/k2i-vllm-noise-between-markers"},  # text between calls dropped
    "glm.toml": {  # a call cut before </tool_call>, a lost last </arg_value>
        "glm/glm47-truncated-before-close-call",
        "glm/glm47-missing-last-close-arg-value",
    },
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.toml)
def test_a_toml_shape_gives_what_its_builtin_gives(case: object) -> None:
    same, differ = compare(case)  # type: ignore[arg-type]
    known = KNOWN_DIFFERENT.get(case.toml, set())  # type: ignore[attr-defined]
    assert set(differ) <= known, sorted(set(differ) - known)
    assert len(same) >= 25


async def test_the_proxy_loads_shapes_from_its_config_and_reloads_them(tmp_path: Path) -> None:
    from streamfix.server.app import PROXY, create_app
    from streamfix.server.config import build_config

    from .support.streamutil import assemble, text_stream
    from .support.upstream_fake import AppServer, FakeUpstream, Reply
    from .test_record import post, tools_body

    shapes = write(tmp_path, AT)
    conf = tmp_path / "streamfix.toml"
    call = '@@call lookup_order {"order_id": "A1"} @@end'
    alt = '%%call lookup_order {"order_id": "A1"} %%end'
    try:
        async with FakeUpstream() as up:
            conf.write_text(f'shapes = "{shapes}"\n[[upstream]]\nurl = "{up.url}"\n')
            source = lambda: build_config({}, {}, str(conf))  # noqa: E731
            app = create_app(source(), source)
            async with AppServer(app) as px:
                up.push(Reply.stream(text_stream([call])))
                got = assemble((await post(px.url, tools_body()))[1])
                assert [c["function"]["name"] for c in got.tool_calls] == ["lookup_order"]
                # the file edited: SIGHUP (reload) takes the new shape
                shapes.write_text(AT.replace("@@", "%%"))
                assert app[PROXY].reload()
                up.push(Reply.stream(text_stream([call])), Reply.stream(text_stream([alt])))
                assert not assemble((await post(px.url, tools_body()))[1]).tool_calls
                assert assemble((await post(px.url, tools_body()))[1]).tool_calls
                # a broken file is refused, the shapes in effect stay
                shapes.write_text('[shapes.x]\nstart = "%%"\nbody = "json"\n')
                assert not app[PROXY].reload()
                up.push(Reply.stream(text_stream([alt])))
                assert assemble((await post(px.url, tools_body()))[1]).tool_calls
    finally:
        use_shapes(None)
