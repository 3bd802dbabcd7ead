"""HyperCLOVA X SEED Think 14B reasoning markup.

The reasoning runs from ``/think\\n`` (written by the model, or by the
template in the prompt) to the end of that turn: the answer is a new
assistant turn, so ``<|im_end|>\\n<|im_start|>assistant`` closes the
reasoning (vLLM ``reasoning/hyperclovax_seed_think_14b_reasoning_parser.py``).
``/think`` is words any reply may begin with, so the markup counts only for
these models. With the reasoning skipped, the template's ``\n`` begins the
reply: layout, dropped (vLLM strips it). (The 32B SEED Think writes ``</think>``: ``think.py``.)
"""

from __future__ import annotations

from .base import Reasoning

REASONING: list[Reasoning] = [
    Reasoning(
        "hyperclovax_14b",
        opens=("/think\n",),
        closes=("<|im_end|>\n<|im_start|>assistant",),
        leading=("/think\n",),
        prefilled=True,
        blank_first=True,
        models=(r"hyperclovax-seed-think-14b",),
    ),
]
