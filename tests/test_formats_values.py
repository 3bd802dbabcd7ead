"""The layout around an XML parameter value (``formats/_family.py``,
``strip_value``): one newline after the opening tag and one before the
closing tag are the template's; a value written right after its opening
tag keeps its last newline (llama.cpp ``test-chat.cpp``, Seed-OSS)."""

from __future__ import annotations

from streamfix.formats._family import strip_value
from streamfix.formats.seed_oss import SeedOss


def test_template_layout_is_dropped() -> None:
    assert strip_value("\nDallas\n") == "Dallas"
    assert strip_value("\r\nDallas\r\n") == "Dallas"
    assert strip_value("\nline\n\n") == "line\n"


def test_a_value_without_the_leading_newline_keeps_its_last() -> None:
    assert strip_value("pass\n") == "pass\n"
    assert strip_value("foo.cpp") == "foo.cpp"
    assert strip_value("\n") == ""


def test_seed_oss_code_value_keeps_its_final_newline() -> None:
    region = (
        "<seed:tool_call>\n<function=edit>\n<parameter=filename>foo.cpp</parameter>\n"
        '<parameter=newString>def foo(arg = "15"):\n    pass\n</parameter>\n</function>\n'
        "</seed:tool_call>"
    )
    calls = SeedOss().parse(region, {})
    assert calls is not None
    assert calls[0].arguments == {
        "filename": "foo.cpp",
        "newString": 'def foo(arg = "15"):\n    pass\n',
    }


def test_indented_qwen3_coder_markup_indents_no_value() -> None:
    """SGLang's Qwen3-Coder tests indent the whole call: that indentation is
    layout on each line of a value; the value's own indentation stays."""
    from streamfix.formats.qwen_xml import xml_calls

    body = (
        "\n        <function=edit>\n        <parameter=city>\n        Dallas\n"
        "        </parameter>\n        <parameter=code>\n        if x:\n"
        "            y()\n        </parameter>\n        </function>\n        "
    )
    calls = xml_calls(body)
    assert calls is not None
    assert calls[0].arguments == {"city": "Dallas", "code": "if x:\n    y()"}
    # markup not indented: the value's indentation is its own
    calls = xml_calls("<function=edit>\n<parameter=code>\n    y()\n</parameter>\n</function>")
    assert calls is not None and calls[0].arguments == {"code": "    y()"}


def test_indented_close_tag_after_a_value_at_the_margin() -> None:
    """A code value written at the margin between indented tags (LocalAI's
    Qwen3-Coder streaming test): the lines stay as written, the blanks
    before the indented ``</parameter>`` are the tag's indentation."""
    from streamfix.formats.qwen_xml import xml_calls

    body = (
        "\n  <function=code_function>\n    <parameter=code>\ndef hello():\n"
        '    print("Hello, World!")\n    return True\n    </parameter>\n  </function>\n'
    )
    calls = xml_calls(body)
    assert calls is not None
    code = 'def hello():\n    print("Hello, World!")\n    return True'
    assert calls[0].arguments == {"code": code}
