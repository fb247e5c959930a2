"""Exact sums in Spark SQL (``engine.aggregate.exact_sums``) against rational arithmetic."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from pyspark.sql import functions as F

from avatar_metrics.engine.aggregate import exact_sums


def _awkward_values() -> list[float]:
    """Every power of two with its neighbours (subnormals and the largest doubles too), zeros, randoms."""
    vals = []
    for k in range(-1074, 1024):
        p = math.ldexp(1.0, k)
        vals += [p, -p, math.nextafter(p, math.inf), math.nextafter(p, 0.0)]
    vals += [0.0, -0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 0.1, 1 / 3]
    rng = random.Random(1)
    vals += [rng.uniform(-1e6, 1e6) for _ in range(2000)] + [rng.choice([1.5, 2.0, 3.25]) for _ in range(500)]
    return vals


@pytest.mark.parametrize("partitions", [1, 7])
def test_exact_sums_are_the_rational_sums(spark, partitions):
    vals = _awkward_values()
    rows = [(v, None if i % 7 == 0 else v / 3) for i, v in enumerate(vals)]
    df = spark.createDataFrame(rows, "a double, b double").repartition(partitions)
    got = exact_sums(df, {"a": F.col("a"), "b": F.col("b"), "twice": F.col("a") * 0.5})
    b = [r[1] for r in rows if r[1] is not None]
    assert got["a"] == (sum(map(Fraction, vals), Fraction(0)), len(vals))
    assert got["b"] == (sum(map(Fraction, b), Fraction(0)), len(b))
    assert got["twice"] == (sum((Fraction(v * 0.5) for v in vals), Fraction(0)), len(vals))


def test_exact_sums_refuse_infinite_values(spark):
    df = spark.createDataFrame([(1.0,), (float("inf"),)], "a double")
    with pytest.raises(ValueError, match="finite"):
        exact_sums(df, {"a": F.col("a")})


def test_exact_sums_of_nothing(spark):
    df = spark.createDataFrame([(None,), (None,)], "a double")
    assert exact_sums(df, {"a": F.col("a")}) == {"a": (Fraction(0), 0)}
