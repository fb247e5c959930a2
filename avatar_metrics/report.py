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
    # the run's Config: the parameters logged to MLflow, and the keys records_table and mlflow
    config: Any = field(default=None, repr=False, compare=False)
    # the id of the MLflow run this report was last logged to (log_mlflow), or None
    mlflow_run: str | None = field(default=None, compare=False)

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
        """Write report.json, report.html and records/ into the folder ``path``; then,
        when the configuration sets them, save records/ as the table ``records_table``
        and log the report to MLflow (``mlflow``), as the command line does.

        The same outputs and safety rules as the command line: the folder must
        be new, empty or an earlier output of this tool, and must not overlap
        an input; the outputs are built beside it and moved into place whole.
        The table and MLflow are checked before any file is written.
        Returns the folder.
        """
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            raise InputError(f"Report.write needs a folder path (a str or a pathlib.Path), not {type(path).__name__}")
        dest = destination(os.fspath(path), "output")
        check_destination(dest, self.sources, "output")
        table = self.config.records_table if self.config is not None and self.records is not None else None
        tracked = self.config.mlflow if self.config is not None else None
        if tracked is not None:
            from .tracking import require

            require()
        with locked(dest, "output"):
            check_destination(dest, self.sources, "output")
            if table is not None:
                from .records_table import check

                check(self.records.sparkSession, table)

            def build(stage: Path) -> list[str]:
                names = []
                if self.records is not None:
                    self.records.write.parquet(str(stage / "records"))
                    names.append("records")
                write_atomic(stage / "report.html", self.html())
                write_atomic(stage / "report.json", self.to_json() + "\n")
                return names + ["report.html", "report.json"]

            publish(dest, build, "output")
        if table is not None:
            self.save_records_table(table)
        if tracked is not None:
            self.log_mlflow()
        return dest

    def save_records_table(self, name: str | None = None) -> str:
        """Save records/ as the catalog table ``name`` (default: the configuration's
        ``records_table``), with Delta where the session has it. Replaces only a table
        this tool wrote; any other table or view of that name is refused (InputError).
        Returns the table's name."""
        from .config import _table_name
        from .records_table import save

        name = _table_name(name if name is not None else getattr(self.config, "records_table", None),
                           "records_table")
        if name is None:
            raise InputError("Report.save_records_table: give a table name (or set the configuration key records_table)")
        if self.records is None:
            raise InputError("Report.save_records_table: this report has no records (configuration key records "
                             "is false)")
        save(self.records.sparkSession, self.records, name)
        return name

    def log_mlflow(self, experiment: str | None = None, run_name: str | None = None,
                   tracking_uri: str | None = None) -> str:
        """Log this report as an MLflow run: values and intervals as metrics, ``passed`` as
        tags, the configuration (no paths, no ``spark.conf``) and versions as params,
        report.json and report.html as artifacts; never records/. Into the active run if
        there is one, else a new run in ``experiment``. The arguments default to the
        configuration key ``mlflow``. Needs the extra ``avatar-metrics[mlflow]``.
        Returns the run's id."""
        from .config import MlflowSettings
        from .tracking import log_report

        given = MlflowSettings(experiment, run_name, tracking_uri)
        configured = getattr(self.config, "mlflow", None)
        settings = given if given != MlflowSettings() or configured is None else configured
        self.mlflow_run = log_report(self, settings)
        return self.mlflow_run
