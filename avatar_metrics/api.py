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
from pyspark.sql import functions as F

from . import __version__
from .config import Config, as_config
from .metrics import closest, column_direct_match, knowledge, linkability
from .errors import ConfigError
from .io import ID, KEY, input_files
from .report import MetricResult, Report
from .schema import Inputs, prepare_inputs, release

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
    input paths and ``output`` are not needed here). With ``records`` on (the
    default), ``report.records`` is a cached DataFrame of per-original
    results; unpersist it when done.
    """
    cfg = as_config(config)
    if cfg.records and cfg.row_key in RECORD_COLUMNS:
        raise ConfigError(f"configuration key row_key: {cfg.row_key} is also the name of a column of records/: "
                          "rename the key column, or set records: false")
    sources = [(role, f) for role, df in (("originals", originals), ("avatars", avatars), ("holdout", holdout))
               if df is not None for f in input_files(df)]
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
            metrics["knowledge_protection_rate"] = knowledge.compute(
                inputs, cfg.targets["knowledge_protection_rate"], keep_records=cfg.records
            )
        with timer.step("linkability_protection_rate"):
            metrics["linkability_protection_rate"] = linkability.compute(spark, inputs, cfg)
        with timer.step("closest_rate"):
            metrics["closest_rate"] = closest.compute(spark, inputs, cfg)
        records = None
        if cfg.records:
            with timer.step("records"):
                records = per_original_records(inputs, metrics)
    finally:
        for m in metrics.values():
            if m.records is not None:
                m.records.unpersist()
                m.records = None
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
        records=records,
        sources=sources,
    )


# the columns of records/ besides the row key (the key may not take one of these names)
RECORD_COLUMNS = (
    "position", "lpr_linked", "lpr_avatar_a", "lpr_avatar_b", "closest_d_wa", "closest_r_wa", "closest_d_ho",
    "closest_r_ho", "closest_at_risk", "closest_working", "kpr_unique", "kpr_matched",
)


def per_original_records(inputs: Inputs, metrics: dict[str, MetricResult]) -> DataFrame:
    """One row per original: its key (or position) and what each metric found.

    No variable values. Avatars are named by their key (or position) too.
    Returns a cached DataFrame.
    """
    key = inputs.row_key
    if key is None:
        base = inputs.originals.select(ID, F.col(ID).alias("position"))
    else:
        base = inputs.originals.select(ID, F.col(KEY).alias(key))
    for m in metrics.values():
        if m.records is not None:
            base = base.join(m.records, ID, "left")
    cols = set(base.columns)
    if "lpr_avatar_a" in cols and key is not None:
        names = inputs.avatars.select(F.col(ID).alias("__cid"), F.col(KEY).alias("__ckey"))
        for side in ("lpr_avatar_a", "lpr_avatar_b"):
            base = (
                base.join(names, base[side] == names["__cid"], "left")
                .withColumn(side, F.col("__ckey"))
                .drop("__cid", "__ckey")
            )
    if "kpr_unique" in cols:
        base = base.fillna(False, subset=["kpr_unique", "kpr_matched"])
    if "closest_d_wa" in cols:
        # with the approximate holdout, the holdout half has no closest figures
        base = base.withColumn("closest_working", F.col("closest_d_wa").isNotNull())
    out = base.orderBy(ID).drop(ID).cache()
    out.count()
    return out
