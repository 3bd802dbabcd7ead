"""PLaMo 3 (Preferred Networks) reasoning markup.

``<|plamo:begin_think:plamo|>…<|plamo:end_think:plamo|>`` is reasoning; the
template opens it in the prompt when thinking is on, so a reply may show
only the close (vLLM ``reasoning/plamo3_reasoning_parser.py``). The tags are
not single special tokens (several pieces each), but as text they are
``<|…|>`` tokens, which the residue stripper removes wherever one is left.
"""

from __future__ import annotations

from .base import Reasoning, Residue

BEGIN_THINK = "<|plamo:begin_think:plamo|>"
END_THINK = "<|plamo:end_think:plamo|>"
#: PLaMo 3's end of turn, one token (vLLM's PLaMo 3 parser ends the reply
#: there): a server that does not stop at it sends what follows.
EOT = "<|plamo:tag|>"

REASONING: list[Reasoning] = [
    Reasoning("plamo3", opens=(BEGIN_THINK,), closes=(END_THINK,), prefilled=True),
]

#: PLaMo 3 thinks unless the request switches it off.
REASONING_MODELS = (r"plamo-?3",)

RESIDUE: list[Residue] = [Residue(turn_ends=(EOT,))]
