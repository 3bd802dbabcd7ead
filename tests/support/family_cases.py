# ruff: noqa: E501  (a table of real-looking model output: long lines on purpose)
"""Table of model-family call regions (see test_formats_families.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamfix.formats import (
    apertus,
    cohere,
    deepseek,
    gemma,
    gigachat,
    glm,
    granite,
    harmony,
    hunyuan,
    internlm,
    k2_horizon,
    kimi,
    lfm2,
    llama,
    longcat,
    minimax,
    mistral,
    nemotron,
    phi4,
    seed_oss,
)
from streamfix.formats.base import ABORT, Format

LO = {"order_id": "F-6"}
CT = {"title": "Printer on fire", "priority": 1}


@dataclass
class Case:
    id: str
    fmt: Format
    region: str
    calls: list[tuple[str, Any]] | None
    after: str = " Done."
    marker: str = ""
    end: int | None = field(default=None)

    def __post_init__(self) -> None:
        if not self.marker:
            self.marker = next(m for m in self.fmt.markers if self.region.startswith(m))
        if self.end is None:
            self.end = len(self.region)


def aborted(id: str, fmt: Format, region: str, after: str = "") -> Case:
    c = Case(id, fmt, region, None, after=after)
    c.end = ABORT
    return c


M = mistral.Mistral()
PT = llama.PythonTag()
PS = llama.PythonStart()
FT = llama.FunctionTag()
DS = deepseek.ToolCalls()
DSML = deepseek.Dsml()
DSI = deepseek.DsmlInvoke()
KI = kimi.Kimi()
K3 = kimi.KimiK3()
GL = glm.Glm()
HA = harmony.Harmony()
HB = harmony.HarmonyBuiltin()
GR = granite.Granite()
PH = phi4.Phi4()
MM = minimax.MiniMax()
M3 = minimax.MiniMaxM3()
MA = minimax.MiniMaxArrow()
G4 = gemma.Gemma4()
FG = gemma.FunctionGemma()
SO = seed_oss.SeedOss()
IL = internlm.InternLM()
LF = lfm2.Lfm2()
AP = apertus.Apertus()
CO = cohere.Cohere()
CRP = cohere.CommandRPlus()
LC = longcat.LongCat()
NE = nemotron.Nemotron()
GC = gigachat.GigaChat()
HY = hunyuan.Hunyuan()

CASES: list[Case] = [
    # --- Mistral: old list form
    Case(
        "mistral-old",
        M,
        '[TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]',
        [("lookup_order", LO)],
    ),
    Case(
        "mistral-old-junk-before-list",
        M,
        '[TOOL_CALLS]  junk [{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]',
        [("lookup_order", LO)],
        after=" trail",
    ),
    Case(
        "mistral-old-space-two-calls-id",
        M,
        '[TOOL_CALLS] [{"name": "lookup_order", "arguments": {"order_id": "F-6"}, "id": "abc123def"},'
        ' {"name": "refresh_cache", "arguments": {}, "id": "zzz999yyy"}]',
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    Case(
        "mistral-old-object-bracket-in-string",
        M,
        '[TOOL_CALLS]{"name": "create_ticket", "arguments": {"title": "a ] b }", "priority": 1}}',
        [("create_ticket", {"title": "a ] b }", "priority": 1})],
        after="[TOOL_CALLS]",
    ),
    Case(
        "mistral-old-python-quotes",
        M,
        "[TOOL_CALLS] [{'name': 'create_ticket', 'arguments': {'title': 'Printer on fire', 'priority': 1}}]",
        [("create_ticket", CT)],
    ),
    # --- Mistral: v11+ name[ARGS]{...}
    Case(
        "mistral-v11",
        M,
        '[TOOL_CALLS]lookup_order[ARGS]{"order_id": "F-6"}',
        [("lookup_order", LO)],
    ),
    Case(
        "mistral-v11-no-args-token",
        M,
        '[TOOL_CALLS]create_ticket{"title": "Printer on fire", "priority": 1}',
        [("create_ticket", CT)],
        after="[TOOL_CALLS]refresh_cache[ARGS]{}",
    ),
    Case(
        "mistral-v13-call-id",
        M,
        '[TOOL_CALLS]lookup_order[CALL_ID]a1b2c3d4e[ARGS]{"order_id": "F-6"}',
        [("lookup_order", LO)],
    ),
    Case(
        "mistral-v11-nested",
        M,
        '[TOOL_CALLS]create_ticket[ARGS]{"title": "x {y} [z]", "priority": 2, "tags": {"a": [1, {"b": 2}]}}',
        [("create_ticket", {"title": "x {y} [z]", "priority": 2, "tags": {"a": [1, {"b": 2}]}})],
        after="\n\nThe ticket is filed.",
    ),
    aborted("mistral-prose-after-marker", M, "[TOOL_CALLS] I cannot call a tool " + "x" * 300),
    aborted("mistral-prose-with-brace", M, "[TOOL_CALLS] token, then {", after='"a": 1}'),
    aborted("mistral-bad-char-in-name", M, "[TOOL_CALLS]lookup_order(", after='{"a": 1}'),
    # --- Llama 3.x <|python_tag|>
    Case(
        "llama-python-tag",
        PT,
        '<|python_tag|>{"name": "lookup_order", "parameters": {"order_id": "F-6"}}',
        [("lookup_order", LO)],
    ),
    Case(
        "llama-python-tag-eom",
        PT,
        '<|python_tag|>{"name": "create_ticket", "arguments": {"title": "Printer on fire", "priority": 1}}<|eom_id|>',
        [("create_ticket", CT)],
    ),
    Case(
        "llama-python-tag-broken-eom-swallowed",
        PT,
        '<|python_tag|>{"name": "refresh_cache", "parameters": {}}<|eo',
        [("refresh_cache", {})],
        after="x and more",
    ),
    Case(
        "llama32-type-function",
        PT,
        '<|python_tag|>{"type": "function", "name": "lookup_order", "parameters": {"order_id": "F-6"}}',
        [("lookup_order", LO)],
    ),
    Case(
        "llama-python-tag-list",
        PT,
        '<|python_tag|>\n[{"name": "lookup_order", "parameters": {"order_id": "F-6"}},'
        ' {"name": "refresh_cache", "parameters": {}}]',
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    Case(
        "llama32-semicolon-calls",
        PT,
        '<|python_tag|>{"name": "lookup_order", "parameters": {"order_id": "F-6"}}; {"name": "refresh_cache", "parameters": {}}',
        [("lookup_order", LO), ("refresh_cache", {})],
        after="\nDone.",
        end=None,
    ),
    Case(
        "llama32-dangling-semicolon",
        PT,
        '<|python_tag|>{"name": "lookup_order", "parameters": {"order_id": "F-6"}}; ',
        [("lookup_order", LO)],
        after="that is all",
    ),
    Case(
        "llama32-semicolon-then-eom",
        PT,
        '<|python_tag|>{"name": "lookup_order", "parameters": {"order_id": "F-6"}};{"name": "refresh_cache", "parameters": {}}<|eom_id|>',
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    Case(
        "llama4-python-start-json",
        PS,
        '<|python_start|>{"name": "lookup_order", "parameters": {"order_id": "F-6"}}<|python_end|>',
        [("lookup_order", LO)],
    ),
    Case(
        "llama-python-tag-builtin",
        PT,
        '<|python_tag|>lookup_order.call(order_id="F-6")',
        [("lookup_order", LO)],
    ),
    aborted("llama-python-tag-prose", PT, "<|python_tag|> sure, here", after=" it is"),
    # --- Llama 4 <|python_start|>
    Case(
        "llama4-python-start",
        PS,
        '<|python_start|>[lookup_order(order_id="F-6"), refresh_cache()]<|python_end|>',
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    Case(
        "llama4-python-start-no-end",
        PS,
        "<|python_start|>[create_ticket(title='Printer on fire', priority=1)]",
        [("create_ticket", CT)],
        after="\nOK",
    ),
    # --- Llama 3.1 <function=NAME>{...}</function>
    Case(
        "llama31-function-tag",
        FT,
        '<function=lookup_order>{"order_id": "F-6"}</function>',
        [("lookup_order", LO)],
    ),
    Case(
        "llama31-function-tag-empty",
        FT,
        "<function=refresh_cache></function>",
        [("refresh_cache", None)],
        after="<function=lookup_order>",
    ),
    # --- DeepSeek V3 / R1: function<｜tool▁sep｜>NAME + fenced JSON
    Case(
        "deepseek-v3",
        DS,
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup_order\n```json\n{"order_id": "F-6"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        [("lookup_order", LO)],
        after="<｜end▁of▁sentence｜>",
    ),
    Case(
        # ASCII bars, as a template written by hand spells the tokens
        # (Ollama's tools/tools_test.go).
        "deepseek-v3-ascii-bars",
        DS,
        '<|tool▁calls▁begin|><|tool▁call▁begin|>function<|tool▁sep|>lookup_order\n```json\n{"order_id": "F-6"}\n```<|tool▁call▁end|><|tool▁calls▁end|>',
        [("lookup_order", LO)],
        after="<|end▁of▁sentence|>",
    ),
    Case(
        "deepseek-v3-two-calls",
        DS,
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup_order\n```json\n{"order_id": "F-6"}\n```<｜tool▁call▁end｜>\n'
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>create_ticket\n```json\n{"title": "Printer on fire", "priority": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        [("lookup_order", LO), ("create_ticket", CT)],
    ),
    # --- DeepSeek V3.1: NAME<｜tool▁sep｜>{json}
    Case(
        "deepseek-v31",
        DS,
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>lookup_order<｜tool▁sep｜>{"order_id": "F-6"}<｜tool▁call▁end｜>'
        "<｜tool▁call▁begin｜>refresh_cache<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    Case(
        "deepseek-r1-underscore-opener",
        DS,
        '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>lookup_order\n```json\n{"order_id": "F-6"}\n```<｜tool_call_end｜><｜tool_calls_end｜>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-r1-space-and-short-opener",
        DS,
        '<｜tool▁calls｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>lookup_order\n```json\n{"order_id": "F-6"}\n```<｜tool▁call▁end｜><｜tool calls end｜>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-r1-escaped-underscore",
        DS,
        '<｜tool\\_calls\\_begin｜><｜tool▁call▁begin｜>lookup_order<｜tool▁sep｜>{"order_id": "F-6"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-bare-call",
        DS,
        '<｜tool▁call▁begin｜>create_ticket<｜tool▁sep｜>{"title": "Printer on fire", "priority": 1}<｜tool▁call▁end｜>',
        [("create_ticket", CT)],
        after="<｜tool▁call▁begin｜>",
    ),
    # --- DeepSeek V3.2 DSML / V4
    Case(
        "deepseek-v32-dsml",
        DSML,
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="create_ticket">\n'
        '<｜DSML｜parameter name="title" string="true">Printer on fire</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="priority" string="false">1</｜DSML｜parameter>\n'
        '</｜DSML｜invoke>\n<｜DSML｜invoke name="refresh_cache">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
        [("create_ticket", CT), ("refresh_cache", {})],
    ),
    Case(
        "deepseek-v4-dsml-json-body",
        DSML,
        '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="lookup_order">\n{"order_id": "F-6"}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-dsml-mixed-tags",
        DSML,
        '<function_calls><invoke name="lookup_order"><｜DSML｜parameter name="order_id" string="true">F-6</parameter></invoke></｜DSML｜function_calls>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-dsml-double-vertical-line",
        DSML,
        '<‖DSML‖tool_calls>\n<‖DSML‖invoke name="lookup_order">\n<‖DSML‖parameter name="order_id" string="true">F-6</‖DSML‖parameter>\n</‖DSML‖invoke>\n</‖DSML‖tool_calls>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-dsml-doubled-bars",
        DSML,
        '<｜｜DSML｜｜tool_calls><｜｜DSML｜｜invoke name="lookup_order"><｜｜DSML｜｜parameter name="order_id" string="true">F-6</｜｜DSML｜｜parameter></｜｜DSML｜｜invoke></｜｜DSML｜｜tool_calls>',
        [("lookup_order", LO)],
    ),
    Case(
        "deepseek-v4-invoke-without-wrapper",
        DSI,
        '<｜DSML｜invoke name="create_ticket">\n<｜DSML｜parameter name="title" string="true">Printer on fire</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="priority" string="false">1</｜DSML｜parameter>\n</｜DSML｜invoke>',
        [("create_ticket", CT)],
        after="\n</｜DSML｜tool_calls>",
    ),
    Case(
        "deepseek-v41-dsml-space-after-bars",
        DSML,
        '<｜DSML｜ calls>\n<｜DSML｜ invoke name="create_ticket">\n'
        '<｜DSML｜ parameter name="title" string="true">  Printer on fire\n</｜DSML｜ parameter>\n'
        '<｜DSML｜ parameter name="priority" string="false">1</｜DSML｜ parameter>\n'
        "</｜DSML｜ invoke>\n</｜DSML｜ calls>",
        [("create_ticket", {"title": "  Printer on fire\n", "priority": 1})],
    ),
    Case(
        "deepseek-v4-self-closing-invoke",
        DSML,
        '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="refresh_cache"/>\n'
        '<｜DSML｜invoke name="lookup_order">\n<｜DSML｜parameter name="order_id" string="true">F-6</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        [("refresh_cache", {}), ("lookup_order", LO)],
    ),
    Case(
        "deepseek-v41-marker-in-value",
        DSML,
        '<｜DSML｜ calls><｜DSML｜ invoke name="lookup_order"><｜DSML｜ parameter name="order_id" string="true">F-6: '
        'Write <｜DSML｜ invoke name="x"> inside <｜DSML｜ calls></｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>',
        [
            (
                "lookup_order",
                {"order_id": 'F-6: Write <｜DSML｜ invoke name="x"> inside <｜DSML｜ calls>'},
            )
        ],
    ),
    Case(
        "olmo3-function-calls-lines",
        DSML,
        '<function_calls>\nlookup_order(order_id="F-6")\nrefresh_cache()\n</function_calls>',
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    aborted(
        "function-calls-in-prose", DSML, "<function_calls> tags are what", after=" Claude wrote"
    ),
    aborted("function-calls-in-prose-2", DSML, "<function_calls>!"),
    # --- Kimi K2
    Case(
        "kimi-k2",
        KI,
        '<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup_order:0<|tool_call_argument_begin|>{"order_id": "F-6"}<|tool_call_end|><|tool_calls_section_end|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "kimi-k2-noise-between-markers-is-dropped",
        KI,
        "<|tool_calls_section_begin|> spurious noise <|tool_call_begin|>functions.lookup_order:0 "
        '<|tool_call_argument_begin|>{"order_id": "F-6"} <|tool_call_end|> more <|tool_calls_section_end|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "kimi-k26-markers-inside-a-json-string",
        KI,
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.create_ticket:0<|tool_call_argument_begin|>"
        '{"title": "Printer: stop at <|tool_call_end|><|tool_calls_section_end|> \\"ok\\"", "priority": 1}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        [
            (
                "functions.create_ticket",
                {
                    "title": 'Printer: stop at <|tool_call_end|><|tool_calls_section_end|> "ok"',
                    "priority": 1,
                },
            )
        ],
    ),
    Case(
        "kimi-k2-bare-call-end-token-inside-a-string",
        KI,
        '<|tool_call_begin|>functions.lookup_order:0<|tool_call_argument_begin|>{"order_id": "F-6 <|tool_call_end|>"}<|tool_call_end|>',
        [("functions.lookup_order", {"order_id": "F-6 <|tool_call_end|>"})],
    ),
    Case(
        "kimi-k2-two-calls-spaces",
        KI,
        '<|tool_calls_section_begin|>\n<|tool_call_begin|> functions.create_ticket:0 <|tool_call_argument_begin|> {"title": "Printer on fire", "priority": 1} <|tool_call_end|>\n'
        "<|tool_call_begin|>functions.refresh_cache:1<|tool_call_argument_begin|>{}<|tool_call_end|>\n<|tool_calls_section_end|>",
        [("functions.create_ticket", CT), ("functions.refresh_cache", {})],
    ),
    Case(
        "kimi-singular-section",
        KI,
        '<|tool_call_section_begin|><|tool_call_begin|>lookup_order:3<|tool_call_argument_begin|>{"order_id": "F-6"}<|tool_call_end|><|tool_call_section_end|>',
        [("lookup_order", LO)],
    ),
    Case(
        "kimi-bare-call",
        KI,
        '<|tool_call_begin|>functions.lookup_order:0<|tool_call_argument_begin|>{"order_id": "F-6"}<|tool_call_end|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "kimi-section-without-call-tokens",
        KI,
        '<|tool_calls_section_begin|>functions.lookup_order:0<|tool_call_argument_begin|>{"order_id": "F-6"}<|tool_calls_section_end|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "kimi-no-argument-token",
        KI,
        '<|tool_call_begin|> functions.lookup_order:0 {"order_id": "F-6"} <|tool_call_end|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "kimi-tagged-json",
        KI,
        '<|tool_calls_section_begin|><|tool_call_begin|>{"name": "lookup_order", "arguments": {"order_id": "F-6"}}<|tool_call_end|><|tool_calls_section_end|>',
        [("lookup_order", LO)],
    ),
    # --- Kimi K3 XTML
    Case(
        "kimi-k3",
        K3,
        '<|open|>tools<|sep|>\n<|open|>call tool="create_ticket" index="1"<|sep|>'
        '<|open|>argument key="title" type="string"<|sep|>Printer on fire<|close|>argument<|sep|>'
        '<|open|>argument key="priority" type="integer"<|sep|>1<|close|>argument<|sep|>'
        '<|close|>call<|sep|>\n<|open|>call tool="refresh_cache" index="2"<|sep|><|close|>call<|sep|>\n<|close|>tools<|sep|>',
        [("create_ticket", CT), ("refresh_cache", {})],
    ),
    Case(
        "kimi-k3-argument-close-text-inside-a-value",
        K3,
        '<|open|>call tool="lookup_order" index="1"<|sep|><|open|>argument key="order_id" type="string"<|sep|>'
        "<|close|>argument<|sep|> is how F-6 ends<|close|>argument<|sep|><|close|>call<|sep|>",
        [("lookup_order", {"order_id": "<|close|>argument<|sep|> is how F-6 ends"})],
    ),
    Case(
        "kimi-k3-bare-call",
        K3,
        '<|open|>call tool="lookup_order" index="1"<|sep|><|open|>argument key="order_id" type="string"<|sep|>F-6<|close|>argument<|sep|><|close|>call<|sep|>',
        [("lookup_order", LO)],
    ),
    # --- GLM 4.5 / 4.7
    Case(
        "glm45",
        GL,
        "<tool_call>create_ticket\n<arg_key>title</arg_key>\n<arg_value>Printer on fire</arg_value>\n<arg_key>priority</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
        [("create_ticket", CT)],
    ),
    Case(
        "glm47-no-newlines",
        GL,
        "<tool_call>lookup_order<arg_key>order_id</arg_key><arg_value>F-6</arg_value></tool_call>",
        [("lookup_order", LO)],
        after="<tool_call>refresh_cache</tool_call>",
    ),
    Case(
        "glm-markers-inside-a-value",
        GL,
        "<tool_call>create_ticket<arg_key>title</arg_key><arg_value>Printer: wrap it in <tool_call> and "
        "</tool_call>; keys go in <arg_key>.</arg_value></tool_call>",
        [
            (
                "create_ticket",
                {
                    "title": "Printer: wrap it in <tool_call> and </tool_call>; keys go in <arg_key>."
                },
            )
        ],
    ),
    Case(
        "glm47-blanks-in-a-value-are-data",
        GL,
        "<tool_call>create_ticket<arg_key>title</arg_key><arg_value>  Printer  on fire\n</arg_value></tool_call>",
        [("create_ticket", {"title": "  Printer  on fire\n"})],
    ),
    Case(
        "glm47-last-arg-value-close-lost",
        GL,
        "<tool_call>create_ticket<arg_key>title</arg_key><arg_value>Printer on fire</arg_value>"
        "<arg_key>priority</arg_key><arg_value>1</tool_call>",
        [("create_ticket", CT)],
        after="\n<tool_call>refresh_cache</tool_call>",
        end=len(
            "<tool_call>create_ticket<arg_key>title</arg_key><arg_value>Printer on fire</arg_value>"
            "<arg_key>priority</arg_key><arg_value>1</tool_call>\n"
        ),
    ),
    Case("glm-no-args", GL, "<tool_call>refresh_cache</tool_call>", [("refresh_cache", {})]),
    Case(
        "glm4-name-then-json",
        GL,
        '<tool_call>lookup_order\n{"order_id": "F-6"}\n</tool_call>',
        [("lookup_order", LO)],
    ),
    Case(
        "glm-string-param-stays-string",
        GL,
        "<tool_call>lookup_order\n<arg_key>order_id</arg_key>\n<arg_value>12345</arg_value>\n</tool_call>",
        [("lookup_order", {"order_id": "12345"})],
    ),
    Case(
        "glm-missing-arg-value-open",
        GL,
        "<tool_call>lookup_order<arg_key>order_id</arg_key>F-6</arg_value></tool_call>",
        [("lookup_order", LO)],
    ),
    Case(
        "glm-stray-arg-value-no-args",
        GL,
        "<tool_call>refresh_cache</arg_value></tool_call>",
        [("refresh_cache", {})],
    ),
    Case(
        "glm-lost-arg-key-open",
        GL,
        "<tool_call>create_tickettitle</arg_key><arg_value>Printer on fire</arg_value><arg_key>priority</arg_key><arg_value>1</arg_value></tool_call>",
        [("create_ticket", CT)],
    ),
    Case(
        "glm-lost-arg-key-open-spaced",
        GL,
        "<tool_call>lookup_order order_id</arg_key><arg_value>F-6</arg_value></tool_call>",
        [("lookup_order", LO)],
    ),
    Case(
        "glm-doubled-key-tag",
        GL,
        "<tool_call>lookup_order<arg_key>order_id</arg_key></arg_key><arg_value>F-6</arg_value></tool_call>",
        [("lookup_order", LO)],
    ),
    # --- gpt-oss Harmony
    Case(
        "harmony-constrain",
        HA,
        '<|channel|>commentary to=functions.lookup_order <|constrain|>json<|message|>{"order_id": "F-6"}<|call|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "harmony-no-call-token",
        HA,
        '<|start|>assistant<|channel|>commentary to=functions.create_ticket <|constrain|>json<|message|>{"title": "Printer on fire", "priority": 1}',
        [("functions.create_ticket", CT)],
        after="\nNext.",
    ),
    Case(
        "harmony-recipient-in-header",
        HA,
        '<|start|>assistant to=functions.lookup_order<|channel|>commentary json<|message|>{"order_id": "F-6"}<|call|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        "harmony-analysis-no-constrain",
        HA,
        "<|channel|>analysis to=functions.refresh_cache<|message|>{}<|call|>",
        [("functions.refresh_cache", {})],
    ),
    Case(
        "harmony-glued-json",
        HA,
        '<|start|>assistant<|channel|>commentary to=functions.lookup_orderjson<|message|>{"order_id": "F-6"}<|call|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        # vLLM's tests end the call message with <|end|>, not <|call|>.
        "harmony-end-token",
        HA,
        '<|start|>assistant to=functions.lookup_order<|channel|>commentary<|message|>{"order_id": "F-6"}<|end|>',
        [("functions.lookup_order", LO)],
    ),
    Case(
        # A message to the built-in python tool: code, up to the message's end.
        "harmony-builtin-python",
        HB,
        '<|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print("hello")\n<|call|>',
        [("python (built-in)", {})],
    ),
    Case(
        "harmony-builtin-browser",
        HB,
        '<|channel|>analysis to=browser.search<|message|>{"query": "weather"}<|end|>',
        [("browser.search (built-in)", {})],
    ),
    Case(
        # Only starts like a built-in's name: an ordinary call.
        "harmony-builtin-lookalike",
        HB,
        '<|channel|>commentary to=python_runner<|message|>{"order_id": "F-6"}<|call|>',
        [("python_runner", LO)],
    ),
    Case(
        # No body: a call without arguments (openai_harmony renders one so).
        "harmony-empty-body",
        HA,
        "<|start|>assistant to=functions.refresh_cache<|channel|>commentary json<|message|><|call|>",
        [("functions.refresh_cache", {})],
    ),
    aborted("harmony-header-too-long", HA, "<|channel|>commentary to=" + "x" * 300),
    # a body that is not JSON: held to its close, then not a call (given
    # back as the body: tests/test_formats_harmony_text.py); another header
    # first makes it text
    Case(
        "harmony-not-json",
        HA,
        "<|channel|>commentary to=functions.x<|message|>hello<|call|>",
        None,
        after="<|start|>assistant",
    ),
    aborted(
        "harmony-not-json-then-header",
        HA,
        "<|channel|>commentary to=functions.x<|message|>hello<|start|>assistant",
    ),
    # --- Granite
    Case(
        "granite",
        GR,
        '<|tool_call|>[{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]',
        [("lookup_order", LO)],
        after="<|end_of_text|>",
    ),
    Case(
        "granite-two-calls",
        GR,
        '<|tool_call|> [{"arguments": {"title": "Printer on fire", "priority": 1}, "name": "create_ticket"}, {"name": "refresh_cache", "arguments": {}}]',
        [("create_ticket", CT), ("refresh_cache", {})],
    ),
    # --- Phi-4-mini
    Case(
        "phi4",
        PH,
        'functools[{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]',
        [("lookup_order", LO)],
    ),
    Case(
        "phi4-two",
        PH,
        'functools[{"name": "lookup_order", "arguments": {"order_id": "F-6"}}, {"name": "refresh_cache", "arguments": {}}]',
        [("lookup_order", LO), ("refresh_cache", {})],
        after="]] trailing",
    ),
    # --- MiniMax M2
    Case(
        "minimax-m2",
        MM,
        '<minimax:tool_call>\n<invoke name="create_ticket">\n<parameter name="title">Printer on fire</parameter>\n<parameter name="priority">1</parameter>\n</invoke>\n'
        '<invoke name="lookup_order">\n<parameter name="order_id">F-6</parameter>\n</invoke>\n</minimax:tool_call>',
        [("create_ticket", CT), ("lookup_order", LO)],
    ),
    Case(
        "minimax-m2-no-params",
        MM,
        '<minimax:tool_call><invoke name="refresh_cache"></invoke></minimax:tool_call>',
        [("refresh_cache", {})],
    ),
    Case(
        "minimax-toolcall-json",
        MM,
        '<minimax:toolcall>\n{"name": "lookup_order", "arguments": {"order_id": "F-6"}}\n</minimax:toolcall>',
        [("lookup_order", LO)],
    ),
    Case(
        "minimax-arrow",
        MA,
        '[TOOL_CALL]\n{tool => "create_ticket", args => {\n  --title "Printer on fire"\n  --priority 1\n}}\n[/TOOL_CALL]',
        [("create_ticket", CT)],
    ),
    Case(
        "minimax-arrow-json-args",
        MA,
        '[TOOL_CALL]{tool => "lookup_order", args => {"order_id": "F-6"}}[/TOOL_CALL]',
        [("lookup_order", LO)],
    ),
    Case(
        "minimax-arrow-fat-arrow-args",
        MA,
        '[TOOL_CALL]\n{tool => "lookup_order", args => {order_id => "F-6"}}\n[/TOOL_CALL]',
        [("lookup_order", LO)],
    ),
    Case(
        "minimax-m3",
        M3,
        ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="create_ticket">]<]minimax[>[<title>Printer on fire]<]minimax[>[</title>'
        "]<]minimax[>[<priority>1]<]minimax[>[</priority>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
        [("create_ticket", CT)],
    ),
    Case(
        "minimax-m3-nested-and-list",
        M3,
        ']<]minimax[>[\n<tool_call>]<]minimax[>[<invoke name="create_ticket">]<]minimax[>[<title>T</title>'
        "]<]minimax[>[<meta>]<]minimax[>[<tags>]<]minimax[>[<item>a</item>]<]minimax[>[<item>b</item>]<]minimax[>[</tags></meta>"
        "]<]minimax[>[</invoke>]<]minimax[>[</tool_call>",
        [("create_ticket", {"title": "T", "meta": {"tags": ["a", "b"]}})],
    ),
    aborted("minimax-tag-in-prose", MM, "<minimax:tool_call> w", after="raps each call"),
    aborted("minimax-arrow-in-prose", MA, "[TOOL_CALL] b", after="locks"),
    # --- Gemma 4 / FunctionGemma
    Case(
        "gemma4",
        G4,
        '<|tool_call>call:create_ticket{priority:1,title:<|"|>Printer on fire<|"|>}<tool_call|>',
        [("create_ticket", {"priority": 1, "title": "Printer on fire"})],
    ),
    Case(
        "gemma4-markers-inside-a-string",
        G4,
        '<|tool_call>call:create_ticket{priority:1,title:<|"|>Printer: write <|tool_call>call:f{}<tool_call|> '
        'and <channel|>.<|"|>}<tool_call|>',
        [
            (
                "create_ticket",
                {
                    "priority": 1,
                    "title": "Printer: write <|tool_call>call:f{}<tool_call|> and <channel|>.",
                },
            )
        ],
    ),
    Case(
        "gemma4-nested-and-punctuation",
        G4,
        '<|tool_call>call:create_ticket{title:<|"|>a, b: {c} [d]<|"|>,priority:2,tags:[<|"|>x<|"|>,<|"|>y<|"|>],meta:{urgent:true,ratio:0.5}}<tool_call|>',
        [
            (
                "create_ticket",
                {
                    "title": "a, b: {c} [d]",
                    "priority": 2,
                    "tags": ["x", "y"],
                    "meta": {"urgent": True, "ratio": 0.5},
                },
            )
        ],
    ),
    Case(
        "gemma4-no-args",
        G4,
        "<|tool_call>call:refresh_cache{}<tool_call|>",
        [("refresh_cache", {})],
        after="<|tool_response>",
    ),
    Case(
        "gemma4-equals-drift",
        G4,
        "<|tool_call>call:create_ticket{title='Printer, on fire',priority=1}<tool_call|>",
        [("create_ticket", {"title": "Printer, on fire", "priority": 1})],
    ),
    Case(
        "gemma4-double-quoted",
        G4,
        '<|tool_call>call:lookup_order{order_id:"F-6"}<tool_call|>',
        [("lookup_order", LO)],
    ),
    Case(
        "functiongemma",
        FG,
        "<start_function_call>call:lookup_order{order_id:<escape>F-6<escape>}<end_function_call>",
        [("lookup_order", LO)],
    ),
    # --- StepFun Step-3 (DeepSeek tokens, steptml body)
    Case(
        "step3",
        DS,
        '<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="create_ticket">\n'
        '<steptml:parameter name="title">Printer on fire</steptml:parameter>\n<steptml:parameter name="priority">1</steptml:parameter>\n'
        "</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>",
        [("create_ticket", CT)],
    ),
    # vLLM's Step-3 tests: the invoke right after the call token, and after
    # function<｜tool_sep｜>NAME and a newline; a string value keeps its blanks
    Case(
        "step3-vllm-bare-invoke",
        DS,
        '<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name="create_ticket">'
        '<steptml:parameter name="title">Printer on fire</steptml:parameter><steptml:parameter name="priority">1</steptml:parameter>'
        "</steptml:invoke><｜tool_call_end｜><｜tool_sep｜><｜tool_call_begin｜>"
        '<steptml:invoke name="lookup_order"><steptml:parameter name="order_id">F-6</steptml:parameter></steptml:invoke>'
        "<｜tool_call_end｜><｜tool_calls_end｜>",
        [("create_ticket", CT), ("lookup_order", LO)],
    ),
    Case(
        "step3-vllm-named-header",
        DS,
        "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>create_ticket\n"
        '<steptml:invoke name="create_ticket"><steptml:parameter name="title">  Printer on fire </steptml:parameter>'
        '<steptml:parameter name="priority"> 1 </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>',
        [("create_ticket", {"title": "  Printer on fire ", "priority": 1})],
    ),
    # --- Seed-OSS
    Case(
        "seed-oss",
        SO,
        "<seed:tool_call>\n<function=create_ticket>\n<parameter=title>Printer on fire</parameter>\n<parameter=priority>1</parameter>\n</function>\n</seed:tool_call>",
        [("create_ticket", CT)],
    ),
    Case(
        "seed-oss-two",
        SO,
        "<seed:tool_call>\n<function=lookup_order>\n<parameter=order_id>\nF-6\n</parameter>\n</function>\n<function=refresh_cache>\n</function>\n</seed:tool_call>",
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    aborted("seed-oss-tag-in-prose", SO, "<seed:tool_call> i", after="s the tag"),
    # --- InternLM2
    Case(
        "internlm2",
        IL,
        '<|action_start|><|plugin|>\n{"name": "lookup_order", "parameters": {"order_id": "F-6"}}<|action_end|>',
        [("lookup_order", LO)],
        after="<|im_end|>",
    ),
    Case(
        "internlm2-no-end-token",
        IL,
        '<|action_start|><|plugin|>{"name": "refresh_cache", "parameters": {}}',
        [("refresh_cache", {})],
        after="\n",
    ),
    # --- LFM2
    Case(
        "lfm2-pythonic",
        LF,
        "<|tool_call_start|>[lookup_order(order_id=\"F-6\"), create_ticket(title='Printer on fire', priority=1)]<|tool_call_end|>",
        [("lookup_order", LO), ("create_ticket", CT)],
        after="Checking now.",
    ),
    Case(
        "lfm2-json",
        LF,
        '<|tool_call_start|>[{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]<|tool_call_end|>',
        [("lookup_order", LO)],
    ),
    # --- Apertus
    Case(
        "apertus",
        AP,
        '<|tools_prefix|>[{"lookup_order": {"order_id": "F-6"}}, {"refresh_cache": {}}]<|tools_suffix|>',
        [("lookup_order", LO), ("refresh_cache", {})],
    ),
    Case(
        "apertus-no-suffix",
        AP,
        '<|tools_prefix|>[{"create_ticket": {"title": "Printer on fire", "priority": 1}}]',
        [("create_ticket", CT)],
        after=" tail",
    ),
    # --- Cohere Command R7B / A
    Case(
        "cohere-action",
        CO,
        '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "lookup_order", "parameters": {"order_id": "F-6"}},\n'
        '    {"tool_call_id": "1", "tool_name": "refresh_cache", "parameters": {}}\n]<|END_ACTION|>',
        [("lookup_order", LO), ("refresh_cache", {})],
        after="<|END_OF_TURN_TOKEN|>",
    ),
    # --- Command R+: the label goes with its fenced call block
    Case(
        "command-r-plus-action",
        CRP,
        'Action:\n```json\n[{"tool_name": "lookup_order", "parameters": {"order_id": "F-6"}}]\n```',
        [("lookup_order", LO)],
        after="\nDone.",
    ),
    # --- LongCat
    Case(
        "longcat-json",
        LC,
        '<longcat_tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "F-6"}}\n</longcat_tool_call>',
        [("lookup_order", LO)],
    ),
    Case(
        "longcat-pairs",
        LC,
        "<longcat_tool_call>create_ticket\n<longcat_arg_key>title</longcat_arg_key>\n<longcat_arg_value>Printer on fire</longcat_arg_value>\n"
        "<longcat_arg_key>priority</longcat_arg_key>\n<longcat_arg_value>1</longcat_arg_value>\n</longcat_tool_call>",
        [("create_ticket", CT)],
    ),
    aborted("longcat-tag-in-prose", LC, "<longcat_tool_call> is their t", after="ag"),
    # --- GigaChat 3
    Case(
        "gigachat-inline",
        GC,
        '<|function_call|>{"name": "lookup_order", "arguments": {"order_id": "F-6"}}</s>',
        [("lookup_order", LO)],
    ),
    Case(
        "gigachat-role-sep",
        GC,
        'function call<|role_sep|>\n{"name": "create_ticket", "arguments": {"title": "Printer on fire", "priority": 1}}',
        [("create_ticket", CT)],
    ),
    Case(
        # The template's message separator and its blank line start the region
        # (vLLM's gigachat3 tests); a following message's separator ends it.
        "gigachat-message-sep",
        GC,
        '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "lookup_order", "arguments": {"order_id": "F-6"}}<|message_sep|>',
        [("lookup_order", LO)],
    ),
    aborted("gigachat-message-sep-then-text", GC, "<|message_sep|>\n\nH", after="ello"),
    Case(
        "gigachat35-gcml",
        gigachat.GigaChat35(),
        '<｜GCML｜tool_calls>\n<｜GCML｜invoke name="create_ticket">\n'
        '<｜GCML｜parameter name="title" string="true">Printer on fire</｜GCML｜parameter>\n'
        '<｜GCML｜parameter name="priority" string="false">1</｜GCML｜parameter>\n'
        "</｜GCML｜invoke>\n</｜GCML｜tool_calls>",
        [("create_ticket", CT)],
    ),
    # --- Hunyuan v3
    Case(
        "hunyuan-v3",
        HY,
        "<tool_calls><tool_call>create_ticket<tool_sep><arg_key>title</arg_key><arg_value>Printer on fire</arg_value>"
        "<arg_key>priority</arg_key><arg_value>1</arg_value></tool_call><tool_call>refresh_cache<tool_sep></tool_call></tool_calls>",
        [("create_ticket", CT), ("refresh_cache", {})],
    ),
    Case(
        "hunyuan-v3-lone-call-via-glm",
        GL,
        "<tool_call>lookup_order<tool_sep><arg_key>order_id</arg_key><arg_value>F-6</arg_value></tool_call>",
        [("lookup_order", LO)],
    ),
    # --- Hunyuan 4: no <tool_sep>, every token with the checkpoint's suffix
    Case(
        "hunyuan-v4-suffixed",
        HY,
        "<tool_calls:opensource><tool_call:opensource>lookup_order<arg_key:opensource>order_id"
        "</arg_key:opensource><arg_value:opensource>F-6</arg_value:opensource>"
        "</tool_call:opensource></tool_calls:opensource>",
        [("lookup_order", LO)],
    ),
    Case(
        "hunyuan-v4-bare",
        HY,
        "<tool_calls><tool_call>lookup_order<arg_key>order_id</arg_key><arg_value>F-6</arg_value>"
        "</tool_call></tool_calls>",
        [("lookup_order", LO)],
    ),
    Case(
        "hunyuan-v4-lone-suffixed",
        HY,
        "<tool_call:6124c78e>refresh_cache</tool_call:6124c78e>",
        [("refresh_cache", {})],
    ),
    aborted("hunyuan-v4-not-a-suffix", HY, "<tool_calls: a", after=" list>"),
    # --- K2 Horizon
    Case(
        "k2-horizon-xml",
        k2_horizon.K2Horizon(),
        "<ifm|tool_calls><ifm|tool_call>create_ticket<ifm|arg_key>title</ifm|arg_key>"
        "<ifm|arg_value>Printer on fire</ifm|arg_value><ifm|arg_key>priority</ifm|arg_key>"
        "<ifm|arg_type>integer</ifm|arg_type><ifm|arg_value>1</ifm|arg_value></ifm|tool_call>"
        "<ifm|tool_call>refresh_cache</ifm|tool_call></ifm|tool_calls>",
        [("create_ticket", CT), ("refresh_cache", {})],
    ),
    Case(
        "k2-horizon-lone-call",
        k2_horizon.K2HorizonCall(),
        "<ifm|tool_call>create_ticket<ifm|arg_key>title</ifm|arg_key>"
        "<ifm|arg_value>Printer on fire</ifm|arg_value><ifm|arg_key>priority</ifm|arg_key>"
        "<ifm|arg_type>integer</ifm|arg_type><ifm|arg_value>1</ifm|arg_value></ifm|tool_call>",
        [("create_ticket", CT)],
    ),
    # --- Nemotron
    Case(
        "nemotron",
        NE,
        '<TOOLCALL>[{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]</TOOLCALL>',
        [("lookup_order", LO)],
    ),
    aborted("nemotron-tag-in-prose", NE, "<TOOLCALL> m", after="arks a call"),
]

#: Regions with a family marker that hold no call.
MARKUP: list[tuple[Format, str]] = [
    (M, "[TOOL_CALLS][1, 2, 3]"),
    (M, '[TOOL_CALLS][{"nom": "x"}]'),
    (M, "[TOOL_CALLS]lookup_order"),
    (PT, '<|python_tag|>{"query": "x"}'),
    (PT, "<|python_tag|>print(1 + 2)"),
    (PS, "<|python_start|>[1, 2]<|python_end|>"),
    (DS, "<｜tool▁calls▁begin｜>I will look that up<｜tool▁calls▁end｜>"),
    (
        DS,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>look up order<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    ),
    (DSML, "<｜DSML｜function_calls>nothing here</｜DSML｜function_calls>"),
    (DSML, "<function_calls>Some prose, not calls.</function_calls>"),
    (DSI, '<｜DSML｜invoke name="lookup_order"> is how it starts'),
    (KI, "<|tool_calls_section_begin|><|tool_calls_section_end|>"),
    (KI, "<|tool_calls_section_begin|>I will call the tool now.<|tool_calls_section_end|>"),
    (GL, "<tool_call>I am not sure which tool to use.</tool_call>"),
    (GL, "<tool_call>unknown_toolkey</arg_key><arg_value>1</arg_value></tool_call>"),
    (K3, "<|open|>tools<|sep|>nothing<|close|>tools<|sep|>"),
    (K3, '<|open|>call tool="x"<|sep|><|open|>argument key="a" type="string"<|sep|>cut'),
    (
        GL,
        "<tool_call>lookup_order\n<arg_key>order_id</arg_key>\nstray<arg_value>1</arg_value></tool_call>",
    ),
    (HA, "<|channel|>commentary to=functions.x <|constrain|>json"),
    (GR, '<|tool_call|>[{"nom": 1}]'),
    (PH, "functools[]"),
    (MM, "<minimax:tool_call>hello</minimax:tool_call>"),
    (MA, "[TOOL_CALL] is the marker [/TOOL_CALL]"),
    (MA, '[TOOL_CALL]{tool => "x", args => {--a "unterminated}}[/TOOL_CALL]'),
    (
        M3,
        ']<]minimax[>[<tool_call>]<]minimax[>[<invoke name="x">]<]minimax[>[<a>1]<]minimax[>[</a>',
    ),
    (G4, "<|tool_call>lookup_order(order_id=1)<tool_call|>"),
    (SO, "<seed:tool_call>no function here</seed:tool_call>"),
    (IL, '<|action_start|><|plugin|>{"query": "x"}<|action_end|>'),
    (LF, "<|tool_call_start|>print('hi') if x else y<|tool_call_end|>"),
    (AP, '<|tools_prefix|>[{"a": 1, "b": 2}]<|tools_suffix|>'),
    (CO, "<|START_ACTION|>not json<|END_ACTION|>"),
    (LC, "<longcat_tool_call>some prose here</longcat_tool_call>"),
    (NE, "<TOOLCALL>[]</TOOLCALL>"),
    (HY, "<tool_calls>nothing<tool_sep></tool_calls>"),
    (G4, '<|tool_call>call:lookup_order{order_id:<|"|>F-6}<tool_call|>'),
]

#: Shared-marker regions that belong to another format.
NOT_THIS: list[tuple[Format, str]] = [
    (FT, "<function=create_ticket>\n<parameter=title>\nX\n</parameter>\n</function>"),
    (GL, '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "F-6"}}\n</tool_call>'),
    (GL, '<tool_call>[{"name": "lookup_order", "arguments": {}}]</tool_call>'),
    (HY, '<tool_calls>[{"name": "lookup_order", "arguments": {}}]</tool_calls>'),
    (
        GL,
        "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nF-6\n</parameter>\n</function>\n</tool_call>",
    ),
]
