"""Harmony message headers from openai/harmony's own parser tests
(``tests/test_harmony.py``): an analysis message closed by ``<|return|>``,
a final answer with a constrained content type, and a message with no
channel are read as the reference parser reads them."""

from __future__ import annotations

from .support.detectutil import check_split_invariant
from .support.streamutil import SHAPES_REQUEST

REQUEST = {**SHAPES_REQUEST, "model": "openai/gpt-oss-20b"}


def test_return_closes_the_analysis_message() -> None:
    text = (
        "<|channel|>analysis<|message|>Simple arithmetic.<|return|>"
        "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4."
    )
    assert check_split_invariant(text, REQUEST) == ("2 + 2 = 4.", "Simple arithmetic.", [], "stop")


def test_a_constrained_final_message_is_the_answer() -> None:
    for header in (
        "<|start|>assistant<|channel|>final <|constrain|>json<|message|>",
        "<|channel|>final<|constrain|>json<|message|>",
    ):
        text = header + '{"result":true}<|return|>'
        assert check_split_invariant(text, REQUEST) == ('{"result":true}', "", [], "stop")


def test_a_message_without_a_channel_is_the_answer() -> None:
    text = (
        "<|channel|>analysis<|message|>Greet.<|end|>"
        "<|start|>assistant<|message|>Hello there.<|end|>"
    )
    assert check_split_invariant(text, REQUEST) == ("Hello there.", "Greet.", [], "stop")
