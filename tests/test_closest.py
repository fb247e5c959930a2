"""Closest Rate against the brute-force reference, for both references."""

import numpy as np
import pandas as pd
import pytest

import reference as ref
from avatar_metrics import evaluate
from avatar_metrics.engine.aggregate import midpoint_percentiles
from conftest import to_spark
from data import KINDS, perturbed, tricky

FIELDS = ["tau_d", "tau_r", "at_risk", "n", "distance_to_closest", "closest_distances_ratio",
          "holdout_distance_to_closest", "holdout_closest_distances_ratio"]


@pytest.fixture(scope="module")
def frames():
    O = tricky(50, 41)
    A = perturbed(O, 42, keep=0.7)
    H = tricky(40, 43)
    return O, A, H


def run(spark, O, A, H=None, partitions=None, **config):
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    o = to_spark(spark, rid(O), partitions)
    a = to_spark(spark, rid(A), partitions)
    h = to_spark(spark, rid(H), partitions) if H is not None else None
    return evaluate(spark, o, a, h, {"row_key": "rid", **config}).to_dict()


def check(m, want):
    assert m["computed"], m["reason"]
    assert m["value"] == want["value"]
    for f in FIELDS:
        assert m["details"][f] == want[f], f


@pytest.mark.parametrize("q", [5, 50, 37.5])
def test_with_holdout(spark, frames, q):
    O, A, H = frames
    m = run(spark, O, A, H, 3, quantile=q)["metrics"]["closest_rate"]
    check(m, ref.closest(O, A, H, KINDS, q=q))
    assert m["details"]["reference"] == "holdout"
    assert m["details"]["holdout_records"] == len(H)


@pytest.mark.parametrize("seed", [0, 7])
def test_approximate_holdout(spark, frames, seed):
    O, A, _ = frames
    rep = run(spark, O, A, None, 2, seed=seed)
    m = rep["metrics"]["closest_rate"]
    check(m, ref.closest(O, A, None, KINDS, seed=seed))
    assert m["details"]["reference"] == "approximate_holdout" and rep["inputs"]["reference"] == "approximate_holdout"
    assert m["details"]["working_originals"] == 25 and m["details"]["holdout_records"] == 25


def test_ties_and_zero_second_distance(spark):
    # duplicated avatars give d2 = 0, so some records have no ratio
    O = pd.DataFrame({"a": [1, 1, 2, 2, 3, 4, 5, 6, 7, 9, 12, 15] * 2, "c": list("xxyyzxyzxyzx") * 2})
    A = O.copy()
    A.loc[12:, "a"] += 1  # the second copy moves: some records keep d2 = 0, others not
    H = O.iloc[::2].reset_index(drop=True)
    kinds = {"a": "numeric", "c": "categorical"}
    m = run(spark, O, A, H)["metrics"]["closest_rate"]
    want = ref.closest(O, A, H, kinds)
    assert want["n"] < len(O) and want["at_risk"] > 0
    check(m, want)


def test_too_small_reference_is_not_computed(spark):
    O = pd.DataFrame({"a": [1.0, 2.0, 3.0], "c": ["x", "y", "x"]})
    m = run(spark, O, O, O.iloc[:1])["metrics"]["closest_rate"]
    assert m["computed"] is False and "holdout" in m["reason"] and m["value"] is None


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 10, 21, 22])
def test_midpoint_percentile_small_sizes(spark, m):
    rng = np.random.default_rng(m)
    xs = rng.integers(0, 5, m).astype(float) / 7
    df = spark.createDataFrame(pd.DataFrame({"x": xs}))
    qs = [0, 5, 25, 37.5, 50, 95, 100]
    got, count = midpoint_percentiles(df, "x", qs)
    assert count == m
    assert got == [ref.midpoint(xs, q) for q in qs]
    if m == 4:  # where midpoint and linear interpolation differ
        assert got[1] != float(np.percentile(xs, 5, method="linear")) or len(set(xs)) == 1
