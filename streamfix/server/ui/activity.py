"""What the operator page shows of the last hour, kept in memory as it
happens: repairs by kind per model per minute, and the unrecognised
markup samples (``streamfix serve --ui``).

Fed once per reply (``Proxy.count_report``), never per chunk, and only
when the page is on: each event costs one dict lookup per model and one
addition per repair kind the reply counted, whatever the history holds
(a ring of ``MINUTES`` buckets per model, a bucket reset when its slot
comes round again). Bounded: the model labels are the table's public
names (plus ``*`` and ``-``, see ``upstream/table.py``), the kinds are
the chain's own counter names, the samples a ``deque`` of ``MAX_SAMPLES``.
Sans-I/O: time is passed in (``now``, seconds), so the tests need no clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

#: Minutes of history per model (the chart's width).
MINUTES = 60

#: Unrecognised-markup samples kept (newest first on the page).
MAX_SAMPLES = 200

#: Model labels kept; past this, new labels share ``OTHER`` (the labels are
#: bounded by the table, this is a backstop against a bug there).
MAX_MODELS = 512
OTHER = "(other)"

#: Report counts left out of the chart: ``calls.<format>`` counts every call
#: a stream emitted, by shape (``structured``: the upstream did it right);
#: a call lifted from text is also ``lifted.<format>``, on both paths, which
#: the chart shows (``server/probe.describe_report`` reads them alike).
NOT_REPAIRS_PREFIX = "calls."


@dataclass(frozen=True, slots=True)
class Sample:
    """One unrecognised region: when, for which model, its text (the
    chain's own bounded sample, ``Report.unrecognised``)."""

    at: float
    model: str
    text: str


class Series:
    """One model's repairs per minute over the last ``MINUTES`` minutes."""

    __slots__ = ("buckets", "minutes")

    def __init__(self) -> None:
        #: Slot ``m % MINUTES`` holds minute ``m``'s counts when
        #: ``minutes[slot] == m``; a stale slot is reset on its next use.
        self.minutes = [-1] * MINUTES
        self.buckets: list[dict[str, int]] = [{} for _ in range(MINUTES)]

    def add(self, minute: int, counts: Mapping[str, int]) -> None:
        slot = minute % MINUTES
        bucket = self.buckets[slot]
        if self.minutes[slot] != minute:
            bucket.clear()
            self.minutes[slot] = minute
        for kind, n in counts.items():
            if n and not kind.startswith(NOT_REPAIRS_PREFIX):
                bucket[kind] = bucket.get(kind, 0) + n

    def window(self, minute: int) -> list[dict[str, int]]:
        """The counts of the ``MINUTES`` minutes up to ``minute``, oldest
        first (an empty dict for a minute with none)."""
        out = []
        for m in range(minute - MINUTES + 1, minute + 1):
            slot = m % MINUTES
            out.append(dict(self.buckets[slot]) if self.minutes[slot] == m else {})
        return out


class Activity:
    """The last hour of repairs per model, and the unrecognised samples."""

    def __init__(self) -> None:
        self.series: dict[str, Series] = {}
        self.samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        #: Unrecognised regions per model since the start (not only the
        #: samples kept): the page's count per model.
        self.unrecognised: dict[str, int] = {}
        #: Requests refused by a tenant's limit, per tenant per minute, by
        #: limit (``streamfix_limited_total``'s counts, for the page).
        self.limited: dict[str, Series] = {}

    def refused(self, tenant: str, limit: str, now: float | None = None) -> None:
        """One request of ``tenant`` refused by its ``limit``."""
        if now is None:
            now = time.time()
        series = self.limited.get(tenant)
        if series is None:
            if len(self.limited) >= MAX_MODELS:
                tenant = OTHER
            series = self.limited.setdefault(tenant, Series())
        series.add(int(now // 60), {limit: 1})

    def limited_last_hour(self, now: float | None = None) -> dict[str, dict[str, int]]:
        """Each tenant's refusals by limit over the last hour (none: left out)."""
        minute = int((time.time() if now is None else now) // 60)
        out: dict[str, dict[str, int]] = {}
        for tenant, series in self.limited.items():
            total: dict[str, int] = {}
            for counts in series.window(minute):
                for limit, n in counts.items():
                    total[limit] = total.get(limit, 0) + n
            if total:
                out[tenant] = total
        return out

    def report(
        self,
        model: str,
        counts: Mapping[str, int],
        unrecognised: list[str] | tuple[str, ...] = (),
        now: float | None = None,
    ) -> None:
        """One reply's report (``Report.counts``, ``Report.unrecognised``)
        for the route labelled ``model``."""
        if not counts:
            return
        if now is None:
            now = time.time()
        series = self.series.get(model)
        if series is None:
            if len(self.series) >= MAX_MODELS:
                model = OTHER
            series = self.series.setdefault(model, Series())
        series.add(int(now // 60), counts)
        n = counts.get("unrecognised_markup", 0)
        if n:
            self.unrecognised[model] = self.unrecognised.get(model, 0) + n
            for text in unrecognised:
                self.samples.appendleft(Sample(now, model, text))

    def last_hour(self, model: str, now: float | None = None) -> list[dict[str, int]]:
        """``model``'s repairs per minute, oldest first (``MINUTES`` of them)."""
        if now is None:
            now = time.time()
        series = self.series.get(model)
        if series is None:
            return [{} for _ in range(MINUTES)]
        return series.window(int(now // 60))
