"""The library entry point: ``evaluate(spark, originals, avatars, holdout, config)``.

Takes DataFrames, never creates or stops a session, returns a ``Report``.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .version import __version__
from .config import Config
from .configure import as_config
from . import metrics as declared
from .errors import ConfigError
from .engine.blocks import is_connect
from .io import ID, KEY, input_files, persist
from .engine.split import draw_sample
from .report import MetricResult, Report
from .schema import Inputs, prepare_inputs, release

log = logging.getLogger("avatar_metrics")


class _Timer:
    """Times the steps, and tags the Spark jobs of each one ``avatar-metrics-<step>``
    (seen in the Spark UI and event log; ``spark.interruptTag`` cancels a step)."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.timings: dict[str, float] = {}
        self.running: set[str] = set()  # the tags of the steps under way (two at once: "Two lanes")

    @contextmanager
    def step(self, name: str):
        log.info("step %s: started", name)
        tag = f"avatar-metrics-{name}"
        self.spark.addTag(tag)  # (the thread's own: a lane's jobs carry its step's tag alone)
        self.running.add(tag)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.running.discard(tag)
            self.spark.removeTag(tag)
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
    only: Iterable[str] | None = None,
) -> Report:
    """Compute every metric of the registry, as defined in the project's ``docs/metrics.md``
    (in the installed package: ``avatar_metrics/definitions.md``).

    ``config`` is a ``Config`` or a mapping of the configuration keys (the
    input paths and ``output`` are not needed here). With ``records`` on (the
    default), ``report.records`` is a cached DataFrame of per-original
    results; unpersist it when done.

    The configuration keys ``records_table`` and ``mlflow`` are checked here (a table
    of that name this tool did not write, mlflow not installed: refused before any
    work) and acted on by ``Report.write``; ``Report.save_records_table()`` and
    ``Report.log_mlflow()`` do the same without writing files.

    ``only``, a list of metric keys, computes those alone (the configuration key
    ``metrics`` does the same; ``only`` wins); every other metric is in the report
    as not computed, with the reason "not asked for".
    """
    cfg = as_config(config)
    asked = _asked(only if only is not None else cfg.metrics)
    metrics: dict[str, MetricResult] = {}  # every metric, in the registry's order
    computed: dict[str, MetricResult] = {}  # those computed (released at the end)
    # Spark compares column names without case: Sampled is sampled
    if cfg.records and cfg.row_key is not None and cfg.row_key.lower() in {c.lower() for c in record_columns()}:
        raise ConfigError(f"configuration key row_key: {cfg.row_key} is also the name of a column of records/: "
                          "rename the key column, or set records: false")
    if cfg.mlflow is not None:
        from .tracking import require

        require()
    if cfg.records_table is not None:
        from .records_table import check

        check(spark, cfg.records_table)
    sources = [(role, f) for role, df in (("originals", originals), ("avatars", avatars), ("holdout", holdout))
               if df is not None for f in input_files(df)]
    timer = _Timer(spark)
    t0 = time.perf_counter()
    with timer.step("inputs"):
        inputs = prepare_inputs(originals, avatars, holdout, cfg)
    try:
        if cfg.query_sample is not None:
            with timer.step("sample"):
                draw_sample(inputs, cfg.query_sample, cfg.seed)
        log.info(
            "inputs: %d originals, %d avatars, %s holdout records, %d variables, %d known",
            inputs.n_originals,
            inputs.n_avatars,
            inputs.n_holdout if inputs.n_holdout is not None else "no",
            len(inputs.variables),
            len(inputs.known),
        )
        _compute(spark, inputs, cfg, [m for m in declared.REGISTRY if m.key in asked], timer, computed)
        for metric in declared.REGISTRY:
            result = (computed[metric.key] if metric.key in computed
                      else MetricResult.not_computed(cfg.targets[metric.key], NOT_ASKED))
            # spec: every metric, asked for or not, carries ci95 (from a sample) and sampled (its number of
            # queries), or null; those that ask about holdout records or avatars sampled_holdout or
            # sampled_avatars too
            for key in ("ci95", "sampled") + (("sampled_holdout",) if metric.holdout_queries else ()) + (
                    ("sampled_avatars",) if metric.avatar_queries else ()):
                result.details.setdefault(key, None)
            metrics[metric.key] = result
        records = None
        if cfg.records:
            with timer.step("records"):
                records = per_original_records(inputs, metrics)
    finally:
        for m in computed.values():
            if m.records is not None:
                m.records.unpersist()
                m.records = None
            for df in m.holds:
                df.unpersist()
            m.holds = []
        release(inputs)
    # the steps in the order of the run, whatever order two lanes finished them in
    order = ["inputs", "sample", *(m.key for m in declared.REGISTRY), "records"]
    timer.timings = {k: timer.timings[k] for k in order if k in timer.timings}
    timer.timings["total"] = time.perf_counter() - t0

    cr = metrics["closest_rate"].details  # not asked for: {}
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
            "avatars_aligned": inputs.aligned,
            "query_sample": inputs.n_sampled,
            "query_sample_holdout": inputs.n_holdout_sampled,
            "query_sample_avatars": inputs.n_avatars_sampled,
        },
        seed=cfg.seed,
        versions=versions(spark),
        timings=timer.timings,
        records=records,
        sources=sources,
        config=cfg,
    )


# Two lanes. A run whose tables all have at most LANES_BELOW records computes the metrics of lane 1
# (``Metric.lane``: the Closest Rate, the metrics that share its search, and as many others as make
# the lanes end together) in a second thread of the driver while the main thread computes lane 0's,
# each lane's metrics in the registry's order. At these sizes most of a metric's time is the driver
# planning each query while the executors wait; the other lane's jobs fill that wait (20,000
# records: the whole run 0.80 of the time in turn, side by side; docs/performance.md). Each metric's
# result is what it is alone: the lanes share only the validated inputs, read-only. A larger run
# (sampled or not) computes one metric at a time: two searches at once would hold two blocks and
# their indexes in the workers. Classic Spark only (Spark Connect runs every metric in turn).
LANES_BELOW = 100_000


def _compute(spark: SparkSession, inputs: Inputs, cfg: Config, todo: list, timer: _Timer,
             computed: dict[str, MetricResult]) -> None:
    """Compute the metrics ``todo`` into ``computed``: in two lanes for a small run, else in turn.
    A metric that fails stops its lane; the error raised is that of the first metric, in the
    registry's order, that failed (the one a run in turn would have met first)."""
    lanes = [[m for m in todo if m.lane == k] for k in (0, 1)]
    failed: dict[str, BaseException] = {}
    stop = threading.Event()  # the main thread was interrupted: the other lane starts no metric more

    def run(lane: list) -> None:
        for metric in lane:
            if stop.is_set():
                return
            try:
                with timer.step(metric.key):
                    computed[metric.key] = metric.compute(inputs, cfg)
            except BaseException as exc:  # raised below, in the registry's order
                failed[metric.key] = exc
                if not isinstance(exc, Exception):  # an interruption goes up at once
                    raise
                return

    sizes = [inputs.n_originals, inputs.n_avatars, inputs.n_holdout or 0]
    if not (lanes[0] and lanes[1]) or max(sizes) > LANES_BELOW or is_connect(inputs.originals):
        run(todo)
    else:
        from pyspark import InheritableThread  # the main thread's job group and properties carried over

        second = InheritableThread(lambda: run(lanes[1]), session=spark, name="avatar-metrics-lane-1")
        second.start()
        try:
            run(lanes[0])
        except BaseException:  # interrupted (Ctrl-C): the second lane stops too
            stop.set()
            for tag in list(timer.running):
                try:
                    spark.interruptTag(tag)
                except Exception:  # noqa: BLE001 - a session without it: the step ends on its own
                    pass
            raise
        finally:
            second.join()
    for metric in todo:
        if metric.key in failed:
            raise failed[metric.key]


NOT_ASKED = "not asked for: the configuration key metrics (or evaluate(..., only=[...])) leaves it out"


def _asked(only: Iterable[str] | None) -> frozenset[str]:
    keys = [m.key for m in declared.REGISTRY]
    if only is None:
        return frozenset(keys)
    asked = frozenset([only] if isinstance(only, str) else only)
    unknown = sorted(asked - set(keys))
    if unknown:
        raise ConfigError(f"evaluate(only=...): unknown metric key {unknown[0]}; the keys are: {', '.join(keys)}")
    return asked


# the columns of records/ besides the row key (the key may not take one of these names)
def record_columns() -> tuple[str, ...]:
    return ("position", "sampled") + tuple(c for m in declared.REGISTRY for c in m.records)


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
    # the search-based columns are null where the original was not sampled
    base = base.withColumn("sampled", F.lit(True) if inputs.sample_mark is None else inputs.sample_mark)
    for metric in declared.REGISTRY:
        result = metrics.get(metric.key)
        if result is not None and result.records is not None:
            base = base.join(result.records, ID, "left")
            if metric.finish_records is not None:
                base = metric.finish_records(base, inputs)
    out = persist(base.orderBy(ID).drop(ID))
    out.count()
    return out
