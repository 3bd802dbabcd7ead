"""Upstage Solar Open 2 reasoning markup.

``<|think:start|>…<|think:end|>``: the template prefills ``<|think:start|>``
at medium and high effort (``<|think:start|><|think:end|>`` at low), so the
reply shows only the close (vLLM ``reasoning/solar_open2_reasoning_parser.py``).
"""

from __future__ import annotations

from .base import Reasoning

REASONING: list[Reasoning] = [
    Reasoning("solar_open2", opens=("<|think:start|>",), closes=("<|think:end|>",), prefilled=True),
]

#: Solar Open 2 reasons by default (medium effort).
REASONING_MODELS = (r"solar-?open-?2",)
