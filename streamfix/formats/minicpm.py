"""OpenBMB MiniCPM 5 calls: XML elements with quoted attributes,

``<function name="NAME"><param name="k">v</param></function>``

one element per call (several in a row for parallel calls), no wrapper
token. A value is raw text for a string parameter and JSON otherwise (as
the schema says); a value holding markup is wrapped in
``<![CDATA[…]]>``, whose text is taken as it stands, a ``</param>`` in it
included (llama.cpp's MiniCPM 5 handler and its tests in ``test-chat.cpp``).
The params may stand in an ``<arguments>`` element (a token of the
MiniCPM 5 vocabulary; Ollama's parser reads it so).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from ..spec import ToolSpec
from ._family import Header, Steps, Until, contiguous, typed_value
from .base import EndFinder, Format, RawCall

OPEN = '<function name="'
CLOSE = "</function>"

_NAME = r"[\w.\-]+"
_CALL = re.compile(rf'<function name="({_NAME})">(.*)</function>\s*\Z', re.DOTALL)
#: The optional ``<arguments>…</arguments>`` around the params.
_ARGUMENTS = re.compile(r"\s*<arguments>(.*)</arguments>\s*\Z", re.DOTALL)
_PARAM = re.compile(
    r'<param name="([^"<>]+)">(?:<!\[CDATA\[(.*?)\]\]>|((?:(?!<param ).)*?))</param>', re.DOTALL
)


class MiniCpm(Format):
    name: ClassVar[str] = "minicpm"
    markers: ClassVar[tuple[str, ...]] = (OPEN,)
    wrapped: ClassVar[bool] = True

    def end_finder(self, marker: str) -> EndFinder:
        # The name, then the element up to its close; prose that only
        # mentions the tag is released at the first character a name lacks.
        return Steps(len(marker), Header('"', r"\w.\-", _NAME, r"[\w.\-]*"), Until(CLOSE))

    def parse(self, region: str, tools: Mapping[str, ToolSpec]) -> list[RawCall] | None:
        m = _CALL.match(region)
        if m is None:
            return None
        name, body = m.group(1), m.group(2)
        wrapped = _ARGUMENTS.match(body)
        params = contiguous(_PARAM, wrapped.group(1) if wrapped else body)
        if params is None:
            return None
        args: dict[str, Any] = {}
        for p in params:
            key = p.group(1).strip()
            if key in args:
                # A parameter written twice leaves its value in doubt: the
                # element is given back, never run with a guess (SGLang's
                # MiniCPM 5 detector rejects it too).
                return None
            if p.group(2) is not None:  # CDATA: the text as it stands
                args[key] = p.group(2)
            else:
                args[key] = typed_value(p.group(3), tools, name, key)
        return [RawCall(name, args)]


FORMATS: list[Format] = [MiniCpm()]
