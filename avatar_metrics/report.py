"""The report: one result per metric, the inputs, seed, versions and timings.

``Report.to_dict()`` is the ``report.json`` schema of ``shared/spec/INTERFACE.md``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import metrics as declared
from .metrics.base import MetricResult, jsonable
from .metrics.sampled import sampled_sides
from .errors import InputError
from .outputs import check_destination, destination, locked, publish, write_atomic

__all__ = ["MetricResult", "Report"]


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
            "metrics": {m.key: self.metrics[m.key].to_dict() for m in declared.REGISTRY},
            "inputs": jsonable(self.inputs),
            "seed": self.seed,
            "versions": dict(self.versions),
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def missed_targets(self) -> list[str]:
        return [m.key for m in declared.REGISTRY if self.metrics[m.key].passed is False]

    def summary(self) -> str:
        """A short table for the console."""
        lines = [f"{'metric':<32} {'value':>8} {'target':>7}  result"]
        for metric in declared.REGISTRY:
            m = self.metrics[metric.key]
            if m.computed:
                verdict = "met" if m.passed else "MISSED"
                ci = m.details.get("ci95")
                if ci is not None:  # spec: the interval, and that it comes from a sample
                    verdict += (f"  (95% CI {metric.show(ci[0])} to {metric.show(ci[1])}; "
                                f"{sampled_sides(m.details, self.inputs)})")
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
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            raise InputError(f"Report.write needs a folder path (a str or a pathlib.Path), not {type(path).__name__}")
        dest = destination(os.fspath(path), "output")
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
