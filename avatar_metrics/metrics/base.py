"""What a metric declares about itself: the one place the rest of the job reads.

Adding a metric is one module that builds a ``Metric`` and is listed in
``metrics.REGISTRY``: the configuration's ``targets``, ``evaluate``, the report,
the console summary, records/ and report.html all read it from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..config import Config
    from ..schema import Inputs

PERCENT = "percent"  # a value in [0, 100], met when at least the target
COUNT = "count"  # a count (a median, say), met when at least the target


@dataclass(frozen=True)
class Metric:
    key: str  # the report.json / targets key (a contract: never renamed)
    title: str
    target: float  # the default target
    compute: Callable[["Inputs", "Config"], "MetricResult"]
    reading: Callable[[dict], str]  # one sentence in plain words, from the metric's report entry
    advice: str  # what to change when the target is missed
    unit: str = PERCENT
    needs: frozenset = frozenset()  # of "known", "alignment", "holdout" (documentation and the page)
    records: tuple[str, ...] = ()  # the columns it adds to records/ (one row per original)
    holdout_queries: bool = False  # some of its searches ask about holdout records (details: sampled_holdout)
    avatar_queries: bool = False  # its searches ask about avatars (details: sampled_avatars)
    # per-original columns finished once every metric's are joined (keys for ids, defaults)
    finish_records: Callable[["DataFrame", "Inputs"], "DataFrame"] | None = None
    figures: Callable[[dict], list[str]] = field(default=lambda m: [])  # HTML <figure>s for the page
    # a small run computes the metrics of lane 0 and of lane 1 at once, each lane's in turn
    # (``api``, "Two lanes"): metrics that share what they compute (``Inputs.shared``) share a lane
    lane: int = 0

    def target_range(self) -> tuple[float, float]:
        return (0.0, 100.0) if self.unit == PERCENT else (0.0, 1e12)

    def show(self, value: Any) -> str:
        """The value as the summary shows it."""
        return f"{value:.2f}" if self.unit == PERCENT else f"{value:g}"


@dataclass
class MetricResult:
    value: float | None
    target: float
    computed: bool
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # per-original results (a Spark DataFrame keyed by the record id), not in the JSON
    records: Any = field(default=None, repr=False, compare=False)
    # cached frames the records read, kept until the run's records are built, then unpersisted (the
    # records are computed once, in that step, rather than filled by an action of their own here)
    holds: list = field(default_factory=list, repr=False, compare=False)

    @property
    def passed(self) -> bool | None:
        if not self.computed or self.value is None:
            return None
        return bool(self.value >= self.target)

    @classmethod
    def ok(cls, value: float, target: float, details: dict[str, Any]) -> "MetricResult":
        return cls(value=float(value), target=target, computed=True, details=details)

    @classmethod
    def not_computed(cls, target: float, reason: str, details: dict[str, Any] | None = None) -> "MetricResult":
        return cls(value=None, target=target, computed=False, reason=reason, details=details or {})

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "target": self.target,
            "passed": self.passed,
            "computed": self.computed,
            "reason": self.reason,
            "details": jsonable(self.details),
        }


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if hasattr(obj, "item"):  # numpy scalar
        return jsonable(obj.item())
    return obj


# A run's tables of at most this many records are fetched into the driver once, for all its
# one-block searches over them (``engine.blocks.Whole``); a larger table is fetched by each search.
WHOLE_BELOW = 100_000


def whole(inputs: "Inputs", role: str):
    """The table of ``role`` (``"originals"``, ``"avatars"``, ``"holdout"``) as the run's searches
    take it whole (``nearest``'s ``whole``), or None for a larger one: made once a run (the
    lanes' metrics share it), fetched by the first search that scans it."""
    from ..engine.blocks import Whole

    table = dict(inputs.tables()).get(role)
    if table is None or inputs.stats[role].rows > WHOLE_BELOW:
        return None
    return inputs.shared.setdefault(f"whole {role}", Whole(table, inputs.typed()))
