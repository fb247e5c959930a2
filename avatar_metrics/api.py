"""The library entry point: ``evaluate(spark, originals, avatars, holdout, config)``.

Takes DataFrames, never creates or stops a session, returns a ``Report``.
"""

from __future__ import annotations

import logging
import platform
import time
from contextlib import contextmanager
from typing import Any, Mapping

from pyspark.sql import DataFrame, SparkSession

from . import __version__
from .config import Config, as_config
from .metrics import closest, column_direct_match, knowledge, linkability
from .report import Report
from .schema import prepare_inputs, release

log = logging.getLogger("avatar_metrics")


class _Timer:
    def __init__(self):
        self.timings: dict[str, float] = {}

    @contextmanager
    def step(self, name: str):
        log.info("step %s: started", name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.timings[name] = dt
            log.info("step %s: done in %.1f s", name, dt)


def versions(spark: SparkSession) -> dict[str, str]:
    import numpy
    import pandas
    import pyarrow

    return {
        "avatar_metrics": __version__,
        "spark": spark.version,
        "python": platform.python_version(),
        "pandas": pandas.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def evaluate(
    spark: SparkSession,
    originals: DataFrame,
    avatars: DataFrame,
    holdout: DataFrame | None = None,
    config: Config | Mapping[str, Any] | None = None,
) -> Report:
    """Compute the four metrics; see ``shared/spec/METRICS.md``.

    ``config`` is a ``Config`` or a mapping of the configuration keys (the
    input paths and ``output`` are not needed here).
    """
    cfg = as_config(config)
    timer = _Timer()
    t0 = time.perf_counter()
    with timer.step("inputs"):
        inputs = prepare_inputs(originals, avatars, holdout, cfg)
    try:
        log.info(
            "inputs: %d originals, %d avatars, %s holdout records, %d variables, %d known",
            inputs.n_originals,
            inputs.n_avatars,
            inputs.n_holdout if inputs.n_holdout is not None else "no",
            len(inputs.variables),
            len(inputs.known),
        )
        metrics = {}
        with timer.step("column_direct_match_protection"):
            metrics["column_direct_match_protection"] = column_direct_match.compute(
                inputs, cfg.targets["column_direct_match_protection"]
            )
        with timer.step("knowledge_protection_rate"):
            metrics["knowledge_protection_rate"] = knowledge.compute(inputs, cfg.targets["knowledge_protection_rate"])
        with timer.step("linkability_protection_rate"):
            metrics["linkability_protection_rate"] = linkability.compute(spark, inputs, cfg)
        with timer.step("closest_rate"):
            metrics["closest_rate"] = closest.compute(spark, inputs, cfg)
    finally:
        release(inputs)
    timer.timings["total"] = time.perf_counter() - t0

    cr = metrics["closest_rate"].details
    return Report(
        metrics=metrics,
        inputs={
            "originals_rows": inputs.n_originals,
            "avatars_rows": inputs.n_avatars,
            "holdout_rows": inputs.n_holdout,
            "variables": dict(inputs.variables),
            "known_variables": list(inputs.known),
            "row_key": inputs.row_key,
            "reference": cr.get("reference"),
        },
        seed=cfg.seed,
        versions=versions(spark),
        timings=timer.timings,
    )
