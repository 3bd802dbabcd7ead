"""``<think>…</think>``: the reasoning markup of Qwen3, DeepSeek R1 and
V3.1+, GLM 4.5+, Kimi K2.x, MiniMax and the many models distilled from
them (vLLM ``reasoning/deepseek_r1_reasoning_parser.py``,
``qwen3_reasoning_parser.py``, ``glm4_moe_reasoning_parser.py``).

Their templates may open ``<think>`` in the prompt (DeepSeek R1 and V3.2+
in thinking mode, Qwen3 "Thinking" and 3.5+, GLM 4.7, Kimi K2.6): the reply
then starts inside the reasoning and shows only ``</think>``. Calls are
written by each family's own module; this one only declares the tags.
"""

from __future__ import annotations

from .base import Reasoning

REASONING: list[Reasoning] = [
    Reasoning("think", opens=("<think>",), closes=("</think>",), prefilled=True),
]

#: Models that reason by default and write ``<think>``, whatever their
#: family: DeepSeek R1 and its distills, QwQ, EXAONE Deep, and names that
#: say so ("Thinking", "reasoner", "-Think"; Phi-4 reasoning, Olmo 3 Think).
REASONING_MODELS = (
    r"thinking",
    r"reasoning",
    r"reasoner",
    r"qwq",
    r"exaone-deep",
    r"[-_]think\b",  # Olmo 3 Think, HyperCLOVA X SEED Think
)
