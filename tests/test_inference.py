"""Membership and Attribute Inference Protection (spec: "Beyond the suite") against the
brute-force references of tests/reference.py, bit for bit: under several layouts, with ties in
the scores, secrets with nulls, a numeric secret at exactly the 5 % tolerance, a holdout equal to
the originals, sampled queries, and without what they need."""

import itertools
import logging
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

import reference as ref
from avatar_metrics import evaluate
from avatar_metrics.engine.aggregate import mann_whitney
from avatar_metrics.errors import ConfigError
from conftest import to_spark
from data import KINDS, perturbed, tricky

BOTH = ["membership_inference_protection", "attribute_inference_protection"]
MIP, AIP = BOTH
KNOWN = ["i_small", "cat2", "cont", "flag"]
SECRETS = [v for v in KINDS if v not in KNOWN]


@pytest.fixture(scope="module")
def frames():
    O = tricky(60, 71)
    A = perturbed(O, 72, keep=0.7)
    H = tricky(45, 73)
    H.iloc[:5] = O.iloc[:5].to_numpy()  # holdout records equal to originals: tied scores across the groups
    return O, A, H.astype(O.dtypes.to_dict())


def run(spark, O, A, H, partitions=None, only=BOTH, **config):
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    h = to_spark(spark, rid(H), partitions) if H is not None else None
    return evaluate(spark, to_spark(spark, rid(O), partitions), to_spark(spark, rid(A), partitions), h,
                    {"row_key": "rid", "known_variables": KNOWN, **config}, only=only)


def check_attribute(m, want, target=90):
    d = m["details"]
    assert m["value"] == want["value"] and (d["n"], d["n_control"]) == (want["n"], want["n_control"])
    for s, w in want["secrets"].items():
        got = d["secrets"][s]
        assert (got["p_o"], got["p_h"], got["protection"], got["right_o"], got["right_h"]) == (
            w["p_o"], w["p_h"], w["protection"], w["right_o"], w["right_h"]), s
    order = sorted(want["secrets"], key=lambda s: (want["secrets"][s]["protection"], s))
    assert d["most_exposed"] == [s for s in order if want["secrets"][s]["protection"] < target]


@pytest.mark.parametrize("partitions,block", [(1, 1000), (3, 35)])
def test_both_against_the_references(spark, frames, partitions, block):
    """Every figure and record equals the brute force, whatever the partitioning and blocks."""
    O, A, H = frames
    rep = run(spark, O, A, H, partitions, seed=4, search={"block_size": block})
    d = rep.to_dict()["metrics"]
    want = ref.membership(O, A, H, KINDS)
    m = d[MIP]["details"]
    assert (d[MIP]["value"], m["auc"], m["advantage"], m["tpr_at_1pct_fpr"]) == (
        want["value"], want["auc"], want["advantage"], want["tpr_at_1pct_fpr"])
    assert (m["members"], m["non_members"], m["ci95"], m["sampled"]) == (len(O), len(H), None, None)
    s_o, s_h = want["scores"]
    assert len(set(s_o) & set(s_h)) >= 5, "the data must tie members with non-members"
    assert sum(m["roc"]["members"]) == len(O) and sum(m["roc"]["non_members"]) == len(H)
    want_a = ref.attribute_inference(O, A, H, KNOWN, SECRETS, KINDS, seed=4)
    check_attribute(d[AIP], want_a)
    assert d[AIP]["details"]["ci95"] is None
    assert set(d[AIP]["details"]["secrets"]) == set(SECRETS) == {"f_small", "const", "const_null", "cat3"}
    recs = rep.records.toPandas().set_index("rid").sort_index()
    rep.records.unpersist()
    # which avatar guessed, and how right, would give each secret back with the avatars: not written
    assert not [c for c in recs.columns if c.startswith("aip_")]
    page = rep.html()
    assert f'data-auc="{m["auc"]!r}"' in page and 'id="plot-attribute-inference"' in page
    for s, w in want_a["secrets"].items():
        assert f'data-name="{s}" data-series="originals" data-value="{100 * w["p_o"]!r}"' in page


def test_a_numeric_secret_at_exactly_the_tolerance_and_nulls(spark):
    """The secret x spans 0..100, so a guess within 5 is right: 5 exactly is right, 5.5 is not;
    null against null is right, null against a value is not; a categorical null equals null."""
    known = [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]  # each target's nearest avatar on k is the one of the same k
    O = pd.DataFrame({"k": known, "x": [10.0, 20.0, None, None, 0.0, 100.0], "c": ["a", None, None, "b", "a", "b"]})
    A = pd.DataFrame({"k": known, "x": [15.0, 25.5, None, 3.0, 95.0, 100.0], "c": ["a", None, "a", "b", "b", "b"]})
    H = pd.DataFrame({"k": known, "x": [50.0, 15.0, 20.0, 60.0, 40.0, 0.0], "c": ["b", "b", "a", "a", "a", "a"]})
    kinds = {"k": "numeric", "x": "numeric", "c": "categorical"}
    d = run(spark, O, A, H, 2, only=[AIP], known_variables=["k"], min_group=5).to_dict()["metrics"][AIP]
    want = ref.attribute_inference(O, A, H, ["k"], ["x", "c"], kinds, seed=0)
    assert want["secrets"]["x"]["right_o"] == 3 and want["secrets"]["c"]["right_o"] == 4  # by hand
    check_attribute(d, want)
    assert d["details"]["secrets"]["x"]["p_o"] == 0.5


def test_a_holdout_equal_to_the_originals_gives_an_auc_of_one_half(spark, frames):
    O, A, _ = frames
    d = run(spark, O, A, O.copy(), 2, only=[MIP]).to_dict()["metrics"][MIP]
    assert d["details"]["auc"] == 0.5 and d["value"] == 100.0 and d["details"]["advantage"] == 0.0


def test_mann_whitney_counts_every_pair_on_any_partitioning(spark):
    rng = np.random.default_rng(5)
    s = rng.choice([0.0, 0.125, 0.25, 0.5, 1 / 3, 0.75, 1.0], 300)  # ties within and across the groups
    member = rng.random(300) < 0.4
    pdf = pd.DataFrame({"s": s, "m": member})
    want = sum(2 * (a < b) + (a == b) for a, b in itertools.product(s[member], s[~member]))
    for parts in (1, 5):
        r = mann_whitney(spark.createDataFrame(pdf).repartition(parts), "s", "m")
        assert (r.positives, r.negatives, r.wins2) == (member.sum(), (~member).sum(), want)
    assert r.auc == want / (2 * member.sum() * (~member).sum())


def test_sampled_targets_and_their_intervals(spark, frames):
    """Originals ("sample") and holdout records ("sample_holdout") sampled by their keyed hash,
    every avatar a candidate: the counts of the sampled targets, and the intervals' formulas. The
    suite's sampled searches of several blocks (30 queries against 60 avatars in 2 blocks)."""
    O, A, H = frames
    size = 30
    d = run(spark, O, A, H, 3, seed=9, query_sample=size, records=False,
            search={"block_size": 35}).to_dict()["metrics"]
    so, sh = ref.query_sample(len(O), size, 9), ref.query_sample(len(H), size, 9, "sample_holdout")
    want = ref.membership(O, A, H, KINDS, sample=so, sample_h=sh)
    m = d[MIP]["details"]
    assert (d[MIP]["value"], m["auc"], m["tpr_at_1pct_fpr"], m["members"], m["non_members"]) == (
        want["value"], want["auc"], want["tpr_at_1pct_fpr"], size, size)
    lo, hi = ref.hanley_mcneil_interval(want["auc"], size, size)
    assert m["auc_ci95"] == pytest.approx([lo, hi], abs=1e-12)
    protect = lambda a: 100 * (1 - max(0.0, 2 * a - 1))
    assert m["ci95"] == pytest.approx([protect(hi), protect(lo)], abs=1e-9) and m["sampled"] == size
    want_a = ref.attribute_inference(O, A, H, KNOWN, SECRETS, KINDS, seed=9, sample=so, sample_h=sh)
    check_attribute(d[AIP], want_a)
    for s, w in want_a["secrets"].items():
        assert d[AIP]["details"]["secrets"][s]["ci95"] == pytest.approx(
            ref.risk_protection_interval(w["right_o"], size, w["right_h"], size), abs=1e-9), s
    # the headline, a minimum over the secrets: each secret's interval at Bonferroni's z (spec)
    z = NormalDist().inv_cdf(1 - 0.025 / len(SECRETS))
    ends = [ref.risk_protection_interval(w["right_o"], size, w["right_h"], size, z) for w in want_a["secrets"].values()]
    assert d[AIP]["details"]["ci95"] == pytest.approx([min(lo for lo, _ in ends), min(hi for _, hi in ends)], abs=1e-9)


def test_what_they_need(spark, frames):
    """No holdout: neither is computed; unaligned synthetic data: both are; no known variable or no
    secret: Attribute Inference is not computed; a bad secret name is refused, naming it."""
    O, A, H = frames
    d = run(spark, O, A, None, records=False).to_dict()["metrics"]
    for key in BOTH:
        assert d[key]["computed"] is False and "holdout" in d[key]["reason"], key
    A2 = pd.concat([A, A.iloc[:9]], ignore_index=True)  # more avatars, no link
    d = run(spark, O, A2, H, 2, avatars_aligned=False, records=False).to_dict()["metrics"]
    assert d[MIP]["value"] == ref.membership(O, A2, H, KINDS)["value"]
    check_attribute(d[AIP], ref.attribute_inference(O, A2, H, KNOWN, SECRETS, KINDS, seed=0))
    d = run(spark, O, A, H, only=[AIP], known_variables=[], records=False).to_dict()["metrics"][AIP]
    assert d["computed"] is False and "known variable" in d["reason"]
    d = run(spark, O, A, H, only=[AIP], secret_variables=[], records=False).to_dict()["metrics"][AIP]
    assert d["computed"] is False and "no secret" in d["reason"]
    with pytest.raises(ConfigError, match="secret_variables names column nope, which is not a variable"):
        run(spark, O, A, H, secret_variables=["cat3", "nope"])
    with pytest.raises(ConfigError, match="secret_variables names column cont, which is also a known variable"):
        run(spark, O, A, H, secret_variables=["cont"])


def test_a_run_sampling_the_holdout_alone_says_so(spark, frames, caplog):
    """query_sample at least n but under |H|: the holdout side alone is sampled, and every place that
    tells says that side, never "exact" nor "of n originals"; metrics not asked for carry the keys too."""
    O, A, H = frames
    H2 = pd.concat([H, tricky(40, 74).astype(H.dtypes.to_dict())], ignore_index=True)
    with caplog.at_level(logging.INFO, logger="avatar_metrics"):
        rep = run(spark, O, A, H2, query_sample=70, records=False, only=[MIP])
    said = " ".join(r.getMessage() for r in caplog.records if "query_sample" in r.getMessage())
    assert "70 of 85 holdout records" in said and "exact" not in said
    d = rep.to_dict()
    assert (d["inputs"]["query_sample"], d["inputs"]["query_sample_holdout"]) == (None, 70)
    m = d["metrics"][MIP]["details"]
    assert (m["sampled"], m["sampled_holdout"]) == (None, 70) and m["ci95"] is not None
    for line in (rep.summary(), rep.html()):
        assert "sampled, 70 of 85 holdout records" in line and f"of {len(O)} originals" not in line
    for key, metric in d["metrics"].items():  # not asked for: the keys, null
        assert {"ci95", "sampled"} <= set(metric["details"]), key
    assert d["metrics"][AIP]["details"]["sampled_holdout"] is None
