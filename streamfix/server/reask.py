"""Asking again: the policy that decides whether a repaired reply is
discarded and the request sent once more (at most ``max_reasks`` times,
each reason once), and why. What the request's attempts share, and the
body each reason asks with, are the request's plan (``plan.py``:
``Plan``, ``ask_again_step``).

The reasons: the repaired reply is empty; a tool call was cut off by the
output limit (asked with twice the allowance, clamped to the window);
``--required soft`` with ``tool_choice: "required"`` or a named tool and
no call (asked with an instruction naming the tools); the upstream said
``context_length_exceeded`` (the window is learned from the message, the
prompt fitted); a reply to a ``response_format`` request that is not the
JSON asked for even repaired, or was cut off inside it
(``Report.json_invalid``: asked with that error in an instruction, and,
when cut, twice the allowance). Only the upstream teaches a window: its HTTP error, or an
error event in its stream (``stream_error``), never what a model wrote,
and the window learned is the asked model's on that row alone.

*A named tool* (``tool_choice: {"type": "function", "function": {"name":
X}}``) under ``--required soft`` gives the model less to decide: only X is
sent, with ``tool_choice: "auto"`` and a short instruction made from X's
own description (``plan.narrow_to_tool``); a reply without a call is asked
once more. A decoding constraint that forces the call makes small models
loop, as ``required`` does; a gateway in front of self-hosted models
reported this narrowing raising the turns that call the tool from 16% to
70%. ``bench/named_tool.py`` measures it on a scripted model.

*Narrowed tools* (``--narrow-tools auto``; ``server/narrowing.py`` decides,
``streamfix/narrow.py`` ranks): the model is shown the few tools the turn
needs, with an instruction made from their descriptions
(``plan.narrow_to_tools``), and the reply is held until a call. The chain still
knows every tool the client offered, so a call to one not shown is
accepted. A reply without a call is asked once more with every tool
(reason ``narrowed``): never worse than not narrowing, at the cost of a
second request. Not after a tool's result (``Decision.after_result``),
unless ``required``: there an answer in prose is how an agent's loop
ends, and asking again would double the cost of every final answer.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ..context import Report
from ..errors import UpstreamProtocolError
from ..sse import SSEDecoder
from . import tracing
from .metrics import Metrics
from .plan import Plan
from .upstream.budget import BudgetPolicy, estimate_prompt_tokens
from .upstream.engines import (
    asks_json_schema,
    prompt_tokens_from_error,
    refuses_json_schema,
    window_from_error,
)
from .upstream.pool import Upstream

log = logging.getLogger("streamfix.server")


class AskAgain:
    """The policy: whether and why to ask again (the body to ask with is
    the plan's, ``Plan.again``)."""

    __slots__ = ("max_reasks", "metrics", "policy")

    def __init__(self, max_reasks: int, policy: BudgetPolicy, metrics: Metrics) -> None:
        self.max_reasks = max_reasks
        self.policy = policy
        self.metrics = metrics

    def reason(self, att: Plan, report: Report, calls: int) -> str | None:
        """Why the repaired reply is to be asked again, or None."""
        if att.reasks >= self.max_reasks:
            return None
        # a cut-off call also leaves the reply empty: the specific reason first
        if report.truncated_call and "truncated_call" not in att.done:
            return "truncated_call"
        if report.empty_after_repair and "empty" not in att.done:
            return "empty"
        if att.narrowing_wants_call and calls == 0:
            return "narrowed"
        if att.soft and calls == 0 and "required" not in att.done:
            return "required"
        if report.json_invalid and "json" not in att.done:
            att.json_error = report.json_invalid
            return "json"
        return None

    def again(
        self,
        att: Plan,
        report: Report | None,
        calls: int,
        sent: dict[str, Any],
        overflow: tuple[Upstream, bytes] | None = None,
    ) -> str | None:
        """Why the attempt that ended with ``report`` (None: its stream
        broke, nothing to judge) and ``calls`` is to be asked again, with
        ``att`` replanned for it; None: it is the reply, and its outcome is
        counted (``settle``). ``overflow``: an upstream and the overflow
        error it gave the attempt (an error event of its stream, or its
        answer to ``Exchange.window_probe``), which, when it teaches a
        window, decides first (``context_exceeded``)."""
        if overflow is not None and self.context_exceeded(overflow[0], att, overflow[1]):
            return "context"
        reason = self.reason(att, report, calls) if report is not None else None
        if reason is None:
            self.settle(att, calls)
        else:
            self.next_body(att, reason, sent)
        return reason

    def error_reasked(self, up: Upstream, att: Plan, status: int, error: bytes) -> bool:
        """An upstream's error answer the request is asked again for: a 400
        ``context_length_exceeded`` (``context_exceeded``) or a refused
        ``json_schema`` (``format_refused``)."""
        if status == 400 and self.context_exceeded(up, att, error):
            return True
        return self.format_refused(up, att, status, error)

    def settle(self, att: Plan, calls: int) -> None:
        """The reply the client gets is final: a named tool's outcome, and
        a narrowed request's, is counted."""
        if att.named:
            outcome = "no_call" if not calls else "called"
            if calls and "required" in att.done:
                outcome = "called_after_reask"
            self.metrics.named_tool.labels(outcome).inc()
        if att.narrowed is not None:
            kept = set(att.narrowed.kept or ())
            if "narrowed" in att.done:
                outcome = "asked_again"
            elif att.called & kept:
                outcome = "kept"
            elif att.called:
                outcome = "hidden"
            else:
                outcome = "no_call"
            self.metrics.narrowed.labels(outcome).inc()

    def next_body(self, att: Plan, reason: str, sent: dict[str, Any]) -> None:
        """``att`` replanned for asking again for ``reason``
        (``Plan.again``), counted."""
        att.reasks += 1
        att.done.add(reason)
        self.metrics.reasks.labels(reason).inc()
        tracing.reasked(reason)
        att.again(reason, sent.get("body"), self.policy.output_reservation)

    def format_refused(self, up: Upstream, att: Plan, status: int, error: bytes) -> bool:
        """An upstream's refusal of ``response_format: json_schema``
        (``engines.refuses_json_schema``): learned for the model on that
        row, so this and later requests go as ``json_object``
        (``plan.json_fallback_step``), and asked again once. The model never ran,
        so it is no re-ask of the model: ``max_reasks`` is not spent."""
        if "format" in att.done or not asks_json_schema(att.body):
            return False
        if not refuses_json_schema(status, error):
            return False
        up.learn(up.served(att.body.get("model"))).json_schema_refused = True
        att.done.add("format")
        self.metrics.reasks.labels("format").inc()
        tracing.reasked("format")
        return True

    def context_exceeded(self, up: Upstream, att: Plan, error: bytes) -> bool:
        """An upstream's ``context_length_exceeded`` error (``error``: the
        body of its HTTP 400, or an error event of its stream, never a
        reply's text: ``stream_error``): learn the window for the model
        asked (``Upstream.learn_window``) and say whether to ask again
        (once)."""
        if b"context_length_exceeded" not in error or "context" in att.done:
            return False
        window = window_from_error(error)
        if window is None or att.reasks >= self.max_reasks:
            return False
        prompt = prompt_tokens_from_error(error)
        estimate = estimate_prompt_tokens(att.body)
        model = up.served(att.body.get("model"))
        up.learn_window(model, window)
        if prompt and estimate:
            up.learn(model).token_scale = prompt / estimate
        # The prompt itself may be what does not fit: clamping the reply
        # alone cannot help then (llama.cpp lowers max_tokens by itself).
        scale = up.token_scale(model)
        trim = att.refit(window, self.policy, scale)
        if trim is not None:
            self.metrics.count_trim(up.name, trim)
        att.reasks += 1
        att.done.add("context")
        self.metrics.reasks.labels("context").inc()
        tracing.reasked("context")
        return True


def stream_error(held: bytes) -> bytes | None:
    """The first error event in a stream's held bytes (an SSE event whose
    data is a JSON object with ``error`` and no ``choices``: what
    llama.cpp sends on an overflow in a 200 stream), or None. The text a
    model wrote is in ``choices`` and is never read as an error: what a
    model says must not set anyone's budget."""
    decoder = SSEDecoder()
    try:
        events = [*decoder.feed(held), *decoder.close()]
    except UpstreamProtocolError:
        return None
    for event in events:
        data = event.data
        if not data or not data.lstrip().startswith(b"{") or b'"error"' not in data:
            continue
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "error" in obj and "choices" not in obj:
            return data
    return None
