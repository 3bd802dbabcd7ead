"""K2 Horizon reasoning markup: one pair of tags per reasoning effort,

``<ifm|think>…</ifm|think>`` (high, the default), ``<ifm|think_fast>…
</ifm|think_fast>`` (medium), ``<ifm|think_faster>…</ifm|think_faster>``
(low). The template opens the pair in the prompt, so a reply may show only
the close (vLLM ``reasoning/k2_horizon_reasoning_parser.py``).
"""

from __future__ import annotations

from .base import Reasoning

_EFFORTS = ("think", "think_fast", "think_faster")

REASONING: list[Reasoning] = [
    Reasoning(
        "k2_horizon",
        opens=tuple(f"<ifm|{e}>" for e in _EFFORTS),
        closes=tuple(f"</ifm|{e}>" for e in _EFFORTS),
        prefilled=True,
    ),
]

#: K2 Horizon reasons by default.
REASONING_MODELS = (r"k2-?horizon",)
