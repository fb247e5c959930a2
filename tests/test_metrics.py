"""Every metric of evaluate() against the brute-force reference, bit for bit."""

import math

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

import reference as ref
from avatar_metrics import evaluate
from avatar_metrics.metrics.linkability import split_known
from conftest import to_spark
from data import KINDS, perturbed, tricky

VARS = list(KINDS)


@pytest.fixture(scope="module")
def frames():
    O = tricky(80, 31)
    A = perturbed(O, 32, keep=0.6)
    return O, A


def run(spark, O, A, partitions=None, only=None, **config):
    o = to_spark(spark, O.assign(rid=np.arange(len(O))), partitions)
    a = to_spark(spark, A.assign(rid=np.arange(len(A))), partitions)
    rep = evaluate(spark, o, a, None, {"row_key": "rid", "records": False, **config}, only=only)
    if rep.records is not None:
        rep.records.unpersist()
    return rep.to_dict()


CDM, KPR, LPR = "column_direct_match_protection", "knowledge_protection_rate", "linkability_protection_rate"


def test_column_direct_match(spark, frames):
    O, A = frames
    rep = run(spark, O, A, 3, only=[CDM])
    m = rep["metrics"]["column_direct_match_protection"]
    value, cols = ref.column_direct_match(O, A, VARS)
    assert m["computed"] and m["value"] == value
    assert m["details"]["columns"] == cols
    under = sorted((c for c in VARS if cols[c] < 50), key=lambda c: (cols[c], VARS.index(c)))
    assert m["details"]["under_target"] == under
    assert m["passed"] == (value >= 50)


def test_column_direct_match_reveals_copied_identifier(spark):
    O = pd.DataFrame({"pid": np.arange(100), "x": np.arange(100) % 3})
    A = O.copy()
    A["x"] = (A["x"] + 1) % 3
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None,
                   {"categorical": ["pid"], "records": False}, only=[CDM]).to_dict()
    m = rep["metrics"]["column_direct_match_protection"]
    assert m["details"]["columns"]["pid"] == 0.0  # 100 matches x 100 values / 100^2
    assert m["details"]["under_target"] == ["pid"]
    assert m["value"] == 0.0 and m["passed"] is False


@pytest.mark.parametrize("known,in_driver", [
    (["i_small", "cat2", "cont"], True), (["f_small", "const", "flag", "const_null"], True), (["cont"], True),
    (["i_small", "cat2", "cont"], False),
])
def test_knowledge(spark, frames, known, in_driver, monkeypatch):
    """Against the reference, with the statistics of U taken by the driver (a small table) and by Spark."""
    from avatar_metrics.metrics import knowledge

    if not in_driver:
        monkeypatch.setattr(knowledge, "DRIVER_ROWS", 0)
    O, A = frames
    rep = run(spark, O, A, 2, known_variables=known, only=[KPR])
    m = rep["metrics"]["knowledge_protection_rate"]
    value, n_u, n_s = ref.knowledge(O, A, known, KINDS)
    assert (m["value"], m["details"]["unique_originals"], m["details"]["matched"]) == (value, n_u, n_s)
    assert m["details"]["n"] == len(O)


def test_knowledge_when_every_profile_hashes_alike(spark, frames, monkeypatch):
    """The profile's hash only places the rows: with all of them colliding the profiles still decide."""
    from avatar_metrics.metrics import knowledge

    monkeypatch.setattr(knowledge, "_profile_hash", lambda cols: F.lit(7).cast("long"))
    O, A = frames
    known = ["i_small", "cat2", "cont"]
    rep = run(spark, O, A, 3, known_variables=known, records=True, only=[KPR])
    m = rep["metrics"]["knowledge_protection_rate"]
    assert (m["value"], m["details"]["unique_originals"], m["details"]["matched"]) == ref.knowledge(O, A, known, KINDS)


def test_knowledge_bins_the_same_from_the_driver_and_from_spark(spark, monkeypatch):
    """The driver's statistics of U and Spark's give the same bins bit for bit: ties, negatives, nulls,
    a constant, a variable null everywhere, and values whose deviations overflow float64 when squared."""
    import numpy as np

    from avatar_metrics.metrics import knowledge

    rng = np.random.default_rng(11)
    n = 300
    big = rng.choice([-3e160, 1e160, 7.5e159, 2e155], n)  # squared deviations past float64: scaled
    ties = rng.integers(-5, 6, n).astype(float) / 3  # thirds: sums that round in float64
    wide = np.where(rng.random(n) < 0.2, None, rng.normal(1e6, 3.0, n))
    cols = {"k0": big, "k1": ties, "k2": wide, "k3": [2.5] * n, "k4": [None] * n}
    pdf = pd.DataFrame({"__am_id": np.arange(n), **cols})
    U = spark.createDataFrame(pdf, "__am_id long, " + ", ".join(f"{k} double" for k in cols)).repartition(3)
    kcols, kinds = list(cols), ["numeric"] * len(cols)
    from_driver = knowledge._numeric_bins(U, kcols, kinds, n)
    monkeypatch.setattr(knowledge, "DRIVER_ROWS", 0)
    from_spark = knowledge._numeric_bins(U, kcols, kinds, n)
    assert from_driver == from_spark
    assert from_driver[0].step is not None and from_driver[3].step is None and from_driver[4].count == 0


def test_knowledge_bins_minus_zero_as_zero(spark):
    """-0.0 and 0.0 are one bin and must hash alike: both sides of the join are placed by the hash."""
    from avatar_metrics.metrics.knowledge import PROFILE, Bins, _binned

    df = spark.createDataFrame([(1, -0.0), (2, 0.0)], "__am_id long, x double")
    rows = _binned(df, ["x"], ["numeric"], [Bins(lo=0.0, step=1.0)]).orderBy("__am_id").collect()
    assert [math.copysign(1.0, r["k0"]) for r in rows] == [1.0, 1.0]
    assert rows[0][PROFILE] == rows[1][PROFILE]


def test_knowledge_zero_mean_and_constant(spark):
    z = [-3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 5.0, 5.0, 0.25, -0.25]
    O = pd.DataFrame({"z": z, "c": [7] * 10})
    A = pd.DataFrame({"z": [-2.9, -2.1, 0.9, 1.1, 2.4, 3.3, 5.0, 4.0, 0.1, -0.3], "c": [7, 7, 7, 8, 7, 7, 7, 7, 9, 7]})
    kinds = {"z": "numeric", "c": "numeric"}
    rep = evaluate(spark, spark.createDataFrame(O), spark.createDataFrame(A), None,
                   {"known_variables": ["z", "c"], "records": False, "min_group": 5}, only=[KPR]).to_dict()
    m = rep["metrics"]["knowledge_protection_rate"]
    _, bins, spans = ref.knowledge_bins(O, ["z", "c"], kinds)
    assert bins["z"][1] == 0.05 * 6.0  # mean over U is 0: step from the range
    # the report gives the number of bins only: lo and step would give U's values back
    assert m["details"]["bins"] == spans == {"z": math.floor((3.0 - bins["z"][0]) / 0.3) + 1, "c": 1}
    value, n_u, n_s = ref.knowledge(O, A, ["z", "c"], kinds)
    assert (m["value"], m["details"]["unique_originals"], m["details"]["matched"]) == (value, n_u, n_s)


def test_knowledge_not_computed_without_known(spark, frames):
    O, A = frames
    m = run(spark, O.iloc[:10], A.iloc[:10], only=[KPR])["metrics"]["knowledge_protection_rate"]
    assert m["computed"] is False and m["value"] is None and m["passed"] is None and "known" in m["reason"]


def test_linkability_with_halves(spark, frames):
    O, A = frames
    halves = [["i_small", "cat2"], ["flag", "const_null", "cat3"]]
    rep = run(spark, O, A, 3, linkability_halves=halves, seed=9, only=[LPR])
    m = rep["metrics"]["linkability_protection_rate"]
    value, linked = ref.linkability(O, A, halves[0], halves[1], KINDS, seed=9)
    assert m["value"] == value and m["details"]["linked"] == linked
    assert m["details"]["halves"] == halves and m["details"]["n"] == len(O)


def test_linkability_shuffled_halves(spark, frames):
    O, A = frames
    known = ["i_small", "cat2", "cont", "flag", "cat3"]
    rep = run(spark, O, A, 2, known_variables=known, seed=4, only=[LPR])
    m = rep["metrics"]["linkability_protection_rate"]
    ha, hb = split_known(known, 4)
    assert sorted(ha + hb) == sorted(known) and len(ha) == 3 and len(hb) == 2
    assert m["details"]["halves"] == [ha, hb]
    value, linked = ref.linkability(O, A, ha, hb, KINDS, seed=4)
    assert m["value"] == value and m["details"]["linked"] == linked


def test_linkability_counts_tied_pairs_and_warns_when_coarse(spark, frames, monkeypatch, caplog):
    """tied_pairs: avatars at the nearest distance summed over the originals (every one is hashed for
    the tie-break); above COARSE_TIES per original on average the log says the half is coarse."""
    import avatar_metrics.metrics.linkability as L

    O, A = frames
    halves = [["flag"], ["cat3", "i_small"]]
    ranges = {"i_small": ref.column_range([O, A], "i_small")}
    want = [sum(r[2] for r in ref.nearest(O, A, h, KINDS, ranges, 5, f"linkability/{s}")) for h, s in zip(halves, "AB")]
    assert want[0] > 10 * len(O) > want[1]  # one binary variable ties every original with about n/2 avatars
    monkeypatch.setattr(L, "COARSE_TIES", 10)
    with caplog.at_level("WARNING", logger="avatar_metrics"):
        m = run(spark, O, A, 2, linkability_halves=halves, seed=5, only=[LPR])["metrics"]["linkability_protection_rate"]
    assert m["details"]["tied_pairs"] == want
    coarse = [r.getMessage() for r in caplog.records if "coarse" in r.getMessage()]
    assert len(coarse) == 1 and "['flag']" in coarse[0]


def test_split_known_depends_on_seed_only():
    known = [f"v{i}" for i in range(9)]
    assert split_known(known, 1) == split_known(list(reversed(known)), 1)
    assert len({tuple(split_known(known, s)[0]) for s in range(10)}) > 1


def test_linkability_needs_two_known(spark, frames):
    O, A = frames
    m = run(spark, O.iloc[:10], A.iloc[:10], known_variables=["cat2"], only=[LPR])["metrics"]["linkability_protection_rate"]
    assert m["computed"] is False and "two known variables" in m["reason"]


def test_nan_is_null(spark):
    O = pd.DataFrame({"x": [1.0, None, 3.0, None, 5.0], "y": ["a", "b", None, "a", "b"]})
    A = pd.DataFrame({"x": [1.0, 2.0, None, None, 4.0], "y": ["a", None, None, "b", "b"]})
    nanify = lambda df: df.withColumn("x", F.when(F.col("x").isNull(), F.lit(math.nan)).otherwise(F.col("x")))
    o, a = nanify(spark.createDataFrame(O)), nanify(spark.createDataFrame(A))
    assert o.filter(F.isnan("x")).count() == 2
    rep = evaluate(spark, o, a, None, {"known_variables": ["x", "y"], "linkability_halves": [["x"], ["y"]],
                                       "records": False, "min_group": 5}, only=[CDM, KPR, LPR]).to_dict()
    kinds = {"x": "numeric", "y": "categorical"}
    assert rep["metrics"]["column_direct_match_protection"]["value"] == ref.column_direct_match(O, A, ["x", "y"])[0]
    assert rep["metrics"]["knowledge_protection_rate"]["value"] == ref.knowledge(O, A, ["x", "y"], kinds)[0]
    assert rep["metrics"]["linkability_protection_rate"]["value"] == ref.linkability(O, A, ["x"], ["y"], kinds, 0)[0]


def test_same_report_whatever_the_partitioning(spark, frames):
    O, A = frames
    cfg = dict(known_variables=["i_small", "cat2", "cont", "flag"], seed=3)
    reports = [run(spark, O, A, p, **cfg, search={"block_size": b}) for p, b in ((1, 1000), (7, 30))]
    for r in reports:
        r.pop("timings")
    assert reports[0] == reports[1]


def test_only_computes_the_metrics_asked_for(spark, frames):
    from avatar_metrics.errors import ConfigError

    O, A = frames
    rep = run(spark, O.iloc[:20], A.iloc[:20], only=[CDM], records=True)
    for key, m in rep["metrics"].items():
        if key == CDM:
            assert m["computed"] and m["value"] == ref.column_direct_match(O.iloc[:20], A.iloc[:20], VARS)[0]
        else:
            assert m["computed"] is False and m["passed"] is None and m["reason"].startswith("not asked for"), key
    with pytest.raises(ConfigError, match="unknown metric key closest"):
        evaluate(spark, to_spark(spark, O), to_spark(spark, A), None, {}, only=["closest"])
