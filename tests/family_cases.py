# ruff: noqa: E501  (a table of real-looking model output: long lines on purpose)
"""Table of model-family call regions (see test_formats_families.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamfix.formats import llama, mistral
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

CASES: list[Case] = [
    # --- Mistral: old list form
    Case(
        "mistral-old",
        M,
        '[TOOL_CALLS][{"name": "lookup_order", "arguments": {"order_id": "F-6"}}]',
        [("lookup_order", LO)],
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
        after='[TOOL_CALLS]refresh_cache[ARGS]{}',
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
        "llama-python-tag-list",
        PT,
        '<|python_tag|>\n[{"name": "lookup_order", "parameters": {"order_id": "F-6"}},'
        ' {"name": "refresh_cache", "parameters": {}}]',
        [("lookup_order", LO), ("refresh_cache", {})],
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
]

#: Regions with a family marker that hold no call.
MARKUP: list[tuple[Format, str]] = [
    (M, "[TOOL_CALLS][1, 2, 3]"),
    (M, '[TOOL_CALLS][{"nom": "x"}]'),
    (M, "[TOOL_CALLS]lookup_order"),
    (PT, '<|python_tag|>{"query": "x"}'),
    (PT, "<|python_tag|>print(1 + 2)"),
    (PS, "<|python_start|>[1, 2]<|python_end|>"),
]

#: Shared-marker regions that belong to another format.
NOT_THIS: list[tuple[Format, str]] = [
    (FT, "<function=create_ticket>\n<parameter=title>\nX\n</parameter>\n</function>"),
]
