"""The report: one result per metric, the inputs, seed, versions and timings.

``Report.to_dict()`` is the ``report.json`` schema of ``shared/spec/INTERFACE.md``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .outputs import check_destination, destination, locked, publish, write_atomic

def _registry():
    from . import metrics  # late: the metric modules import this one

    return metrics.REGISTRY


@dataclass
class MetricResult:
    value: float | None
    target: float
    computed: bool
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # per-original results (a cached Spark DataFrame keyed by the record id), not in the JSON
    records: Any = field(default=None, repr=False, compare=False)

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
            "details": _jsonable(self.details),
        }


@dataclass
class Report:
    metrics: dict[str, MetricResult]
    inputs: dict[str, Any]
    seed: int
    versions: dict[str, str]
    timings: dict[str, float]
    # per-original results: a cached Spark DataFrame, or None (config key records)
    records: Any = field(default=None, repr=False, compare=False)
    # (role, location) of the inputs: outputs may never overlap them
    sources: list = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": {m.key: self.metrics[m.key].to_dict() for m in _registry()},
            "inputs": _jsonable(self.inputs),
            "seed": self.seed,
            "versions": dict(self.versions),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def missed_targets(self) -> list[str]:
        return [m.key for m in _registry() if self.metrics[m.key].passed is False]

    def summary(self) -> str:
        """A short table for the console."""
        lines = [f"{'metric':<32} {'value':>8} {'target':>7}  result"]
        for metric in _registry():
            m = self.metrics[metric.key]
            if m.computed:
                verdict = "met" if m.passed else "MISSED"
                ci = m.details.get("ci95")
                if ci is not None:  # spec: the interval, and that it comes from a sample
                    verdict += (f"  (95% CI {metric.show(ci[0])} to {metric.show(ci[1])}; sampled, "
                                f"{m.details['sampled']:,} of {self.inputs['originals_rows']:,} originals)")
                lines.append(f"{metric.title:<32} {metric.show(m.value):>8} {m.target:>7g}  {verdict}")
            else:
                lines.append(f"{metric.title:<32} {'-':>8} {m.target:>7g}  not computed: {m.reason}")
        return "\n".join(lines)


    def html(self) -> str:
        """report.html's page, as a string (``displayHTML`` it in a notebook)."""
        from .html import render

        return render(self.to_dict())

    def write(self, path: str | Path) -> Path:
        """Write report.json, report.html and records/ into the folder ``path``.

        The same outputs and safety rules as the command line: the folder must
        be new, empty or an earlier output of this tool, and must not overlap
        an input; the outputs are built beside it and moved into place whole.
        Returns the folder.
        """
        dest = destination(str(path), "output")
        check_destination(dest, self.sources, "output")
        with locked(dest, "output"):
            check_destination(dest, self.sources, "output")

            def build(stage: Path) -> list[str]:
                names = []
                if self.records is not None:
                    self.records.write.parquet(str(stage / "records"))
                    names.append("records")
                write_atomic(stage / "report.html", self.html())
                write_atomic(stage / "report.json", self.to_json() + "\n")
                return names + ["report.html", "report.json"]

            publish(dest, build, "output")
        return dest


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if hasattr(obj, "item"):  # numpy scalar
        return _jsonable(obj.item())
    return obj
