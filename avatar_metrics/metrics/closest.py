"""Closest Rate, Distance To Closest and Closest Distances Ratio (seed 001)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from ..config import Config
from ..report import MetricResult
from ..schema import Inputs


def compute(spark: SparkSession, inputs: Inputs, cfg: Config) -> MetricResult:
    reference = "holdout" if inputs.holdout is not None else "approximate_holdout"
    return MetricResult.not_computed(
        cfg.targets["closest_rate"],
        "not implemented in this version of avatar-metrics",
        {"reference": reference},
    )
