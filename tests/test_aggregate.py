"""Exact sums in Spark SQL (``engine.aggregate``) against rational arithmetic."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from pyspark.sql import functions as F

from avatar_metrics.engine.aggregate import Summary, exact_summaries, weighted_summaries


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
    got = {k: (s.total, s.n) for k, s in
           exact_summaries(df, {"a": F.col("a"), "b": F.col("b"), "twice": F.col("a") * 0.5}).items()}
    b = [r[1] for r in rows if r[1] is not None]
    assert got["a"] == (sum(map(Fraction, vals), Fraction(0)), len(vals))
    assert got["b"] == (sum(map(Fraction, b), Fraction(0)), len(b))
    assert got["twice"] == (sum((Fraction(v * 0.5) for v in vals), Fraction(0)), len(vals))


@pytest.mark.parametrize("partitions", [1, 7])
def test_exact_summaries_give_the_range_with_the_sums(spark, partitions):
    vals = _awkward_values()[::3] + [-2.5e-300, 4.0]
    rows = [(v, None if i % 5 else v + 1.0) for i, v in enumerate(vals)]
    df = spark.createDataFrame(rows, "a double, b double").repartition(partitions)
    got = exact_summaries(df, {"a": F.col("a"), "b": F.col("b"), "none": F.lit(None).cast("double")})
    b = [r[1] for r in rows if r[1] is not None]
    assert (got["a"].total, got["a"].n, got["a"].lo, got["a"].hi) == (sum(map(Fraction, vals), Fraction(0)), len(vals),
                                                                       min(vals), max(vals))
    assert (got["b"].n, got["b"].lo, got["b"].hi) == (len(b), min(b), max(b))
    assert (got["none"].n, got["none"].lo, got["none"].hi) == (0, None, None)


def test_weighted_summaries_are_those_of_the_records_they_stand_for(spark):
    """Distinct values with counts (up to 2**33, beyond a 32-bit count) give the records' exact sums and range."""
    rng = random.Random(2)
    vals = _awkward_values()[::5]
    rows = [(i % 2, v, rng.choice([1, 2, 3, 1000, 2**33])) for i, v in enumerate(vals)] + [(1, None, 5)]
    df = spark.createDataFrame(rows, "var int, x double, w long").repartition(3)
    got = weighted_summaries(df, ["even", "odd"])
    for var, name in enumerate(["even", "odd"]):
        mine = [(x, w) for v, x, w in rows if v == var and x is not None]
        xs = [x for x, _ in mine]
        assert got[name] == Summary(sum((Fraction(x) * w for x, w in mine), Fraction(0)), sum(w for _, w in mine),
                                    min(xs), max(xs))


def test_exact_sums_refuse_infinite_values(spark):
    df = spark.createDataFrame([(1.0,), (float("inf"),)], "a double")
    with pytest.raises(ValueError, match="finite"):
        exact_summaries(df, {"a": F.col("a")})


def test_exact_sums_of_nothing(spark):
    df = spark.createDataFrame([(None,), (None,)], "a double")
    assert exact_summaries(df, {"a": F.col("a")}) == {"a": Summary(Fraction(0), 0, None, None)}


def test_percentiles_of_several_columns_with_nulls(spark):
    import numpy as np
    import pandas as pd

    from avatar_metrics.engine.aggregate import percentiles_of
    import reference as ref

    rng = np.random.default_rng(5)
    n = 37
    cols = {
        "a": rng.integers(0, 6, n) / 7,  # ties
        "b": np.where(rng.random(n) < 0.4, np.nan, rng.random(n)),  # nulls
        "c": np.full(n, np.nan),  # nothing
        "d": np.where(np.arange(n) == 3, 0.25, np.nan),  # one value
    }
    df = spark.createDataFrame(pd.DataFrame(cols)).repartition(3)
    qs = [0, 5, 37.5, 50, 95, 100]
    got = percentiles_of(df, {c: qs for c in cols})
    for c, x in cols.items():
        x = x[~np.isnan(x)]
        if len(x):
            assert got[c] == ([ref.midpoint(x, q) for q in qs], len(x)), c
        else:
            assert got[c] == ([None] * len(qs), 0)


def test_histograms_of_count_like_numpy(spark):
    import numpy as np
    import pandas as pd

    from avatar_metrics.engine.aggregate import histograms_of

    rng = np.random.default_rng(6)
    n = 500
    x = np.where(rng.random(n) < 0.2, np.nan, rng.random(n) * 2 - 0.5)  # beyond [0, 1] both sides
    y = np.where(rng.random(n) < 0.1, np.nan, rng.random(n))
    df = spark.createDataFrame(pd.DataFrame({"x": x, "y": y})).repartition(4)
    from pyspark.sql import functions as F

    got = histograms_of(df, {"x": [("x", 0.0, 1.0, 10)], "xy": [("x", 0.0, 1.0, 4), ("y", 0.0, 1.0, 5)]},
                        counts={"rows": F.lit(True), "x<y": F.col("x") < F.col("y"), "none": F.lit(False)})

    def bins(v, k):
        return np.clip(np.floor(v * k), 0, k - 1).astype(int)

    ok = ~np.isnan(x)
    assert got["x"] == np.bincount(bins(x[ok], 10), minlength=10).tolist()
    both = ok & ~np.isnan(y)
    want = np.zeros((4, 5), int)
    np.add.at(want, (bins(x[both], 4), bins(y[both], 5)), 1)
    assert got["xy"] == want.tolist()
    # counted in the same action; a null condition (a NaN here is null) counts nothing
    assert (got["rows"], got["x<y"], got["none"]) == (n, int(np.sum(x[both] < y[both])), 0)


@pytest.mark.parametrize("buckets,collect,rounds", [(4096, 100_000, 8), (2, 3, 8), (3, 1, 8), (2, 1, 2)])
def test_percentiles_by_counting_every_path(spark, monkeypatch, buckets, collect, rounds):
    """Ties, one far outlier (every value but it in one bucket), negatives, a constant column and
    integers; with few buckets and small collections each element takes several rounds of cuts,
    and with two rounds only some are left to percentile_disc.
    A column with NaN takes percentile_disc (NaN sorts last): the same as before."""
    import numpy as np
    import pandas as pd

    import avatar_metrics.engine.aggregate as A
    import reference as ref

    counting = A.Counting(buckets=buckets, collect=collect, rounds=rounds)  # 2 rounds: some elements left
    late = []  # to percentile_disc (a spy records its calls)
    real = A._disc
    monkeypatch.setattr(A, "_disc", lambda df, plan: late.append(sorted(plan)) or real(df, plan))
    rng = np.random.default_rng(buckets)
    n = 61
    cols = {
        "ties": rng.integers(0, 4, n) / 3,
        "outlier": np.where(np.arange(n) == 7, 1e300, rng.random(n) * 1e-6 - 5e-7),
        "const": np.full(n, -0.125),
        "counts": rng.integers(0, 20, n).astype(float),
        "nulls": np.where(rng.random(n) < 0.5, None, rng.random(n)),
    }
    df = spark.createDataFrame(pd.DataFrame(cols).astype({"nulls": "float64"})).repartition(3)
    qs = [0, 5, 37.5, 50, 95, 100]
    got = A.percentiles_of(df, {c: qs for c in cols}, counting)
    ranks = {c: [0, 1, 7, len(x[~np.isnan(np.asarray(x, dtype=float))]) - 1] for c, x in cols.items()}
    elements = A.elements_of(df, ranks, counting)  # elements by rank (Membership's 1 % point), the same machinery
    for c, x in cols.items():
        x = np.asarray(x, dtype=float)
        x = x[~np.isnan(x)]
        assert got[c] == ([ref.midpoint(x, q) for q in qs], len(x)), c
        assert [elements[(c, k)] for k in ranks[c]] == [float(np.sort(x)[k]) for k in ranks[c]], c
    with pytest.raises(ValueError, match="ranks"):
        A.elements_of(df, {"const": [n]})
    assert bool(late) == (rounds == 2)
    nan = spark.createDataFrame([(0.5,), (float("nan"),), (0.25,), (1.0,)], "x double")
    (lo, mid, hi), m = A.percentiles_of(nan, {"x": [0, 50, 100]})["x"]
    assert (lo, mid, m) == (0.25, 0.75, 4) and math.isnan(hi)
    # the caller's bound on the records (rows <= collect): every value in one action, no first count
    # (a spy records it), the same elements, NaN last
    firsts = []
    real_first = A._first
    monkeypatch.setattr(A, "_first", lambda df, names: firsts.append(names) or real_first(df, names))
    if collect >= n:  # (with a bound past collect, the same counting as above: not run again)
        assert A.percentiles_of(df, {c: qs for c in cols}, counting, rows=n) == got
        assert A.elements_of(df, ranks, counting, rows=n) == elements
        with pytest.raises(ValueError, match="ranks"):
            A.elements_of(df, {"const": [n]}, counting, rows=n)
    (lo, mid, hi), m = A.percentiles_of(nan, {"x": [0, 50, 100]}, counting, rows=4)["x"]
    assert (lo, mid, m) == (0.25, 0.75, 4) and math.isnan(hi)
    assert len(firsts) == (collect < 4)
