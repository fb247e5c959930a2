"""DCR Share Protection (spec: "The synthetic side") against the brute force of tests/reference.py,
bit for bit: ties between an avatar's two distances, nulls, exact copies of originals and of holdout
records, a holdout of another size than the originals (e is not 1/2), under several layouts, unaligned,
sampled; and two generators, one that draws every column from its marginal (the share comes out near
e) and one that copies a tenth of the originals (the share and ims_originals rise)."""

import logging

import numpy as np
import pandas as pd
import pytest

import reference as ref
from avatar_metrics import evaluate
from conftest import to_spark
from data import KINDS, perturbed, tricky

DCR = "dcr_share_protection"


@pytest.fixture(scope="module")
def frames():
    O = tricky(50, 81)
    A = perturbed(O, 82, keep=0.6)
    H = tricky(34, 83).astype(O.dtypes.to_dict())
    A.iloc[:4] = O.iloc[:4].to_numpy()  # copies of originals
    A.iloc[4:7] = H.iloc[:3].to_numpy()  # copies of holdout records
    H.iloc[3:6] = O.iloc[10:13].to_numpy()  # holdout records equal to originals
    A.iloc[7:9] = O.iloc[10:12].to_numpy()  # avatars at distance 0 from both: ties at 0
    return O, A.astype(O.dtypes.to_dict()), H


def run(spark, O, A, H, partitions=None, only=(DCR,), **config):
    rid = lambda df: df.assign(rid=np.arange(len(df)))
    h = to_spark(spark, rid(H), partitions) if H is not None else None
    return evaluate(spark, to_spark(spark, rid(O), partitions), to_spark(spark, rid(A), partitions), h,
                    {"row_key": "rid", **config}, only=list(only))


def check(m, want):
    d = m["details"]
    assert m["value"] == want["value"]
    for k in ("share", "expected", "closer_to_originals", "ties", "avatars", "ims_originals", "ims_holdout"):
        assert d[k] == want[k], k


def test_against_the_reference(spark, frames):
    """Every figure equals the brute force, in three partitions and blocks of 17 (the test below: one
    partition, one block); the data tie the two distances (at 0 too), and e is 50/84."""
    O, A, H = frames
    rep = run(spark, O, A, H, 3, seed=3, search={"block_size": 17}, records=False)
    m = rep.to_dict()["metrics"][DCR]
    want = ref.dcr_share(O, A, H, KINDS)
    check(m, want)
    d = m["details"]
    assert d["ties"] >= 2 and d["ims_originals"] > 0 and d["ims_holdout"] > 0 and d["expected"] != 0.5
    assert (d["ci95"], d["sampled"], d["sampled_avatars"]) == (None, None, None)
    hist = d["histograms"]
    assert sum(hist["to originals"]) == sum(hist["to holdout"]) == len(A)
    page = rep.html()
    assert 'id="plot-dcr-share"' in page and "DCR Share Protection" in page
    assert f"{100 * want['share']:.2f}% of the avatars lie closer to an original" in page
    assert "DCR Share Protection" in rep.summary()


def test_unaligned_and_without_a_holdout(spark, frames):
    """No link needed: more avatars than originals give the reference's figures (one partition, one
    block); without a real holdout the metric says why it is not computed."""
    O, A, H = frames
    A2 = pd.concat([A, A.iloc[:9], O.iloc[20:23]], ignore_index=True).astype(O.dtypes.to_dict())
    m = run(spark, O, A2, H, 1, avatars_aligned=False, records=False).to_dict()["metrics"][DCR]
    check(m, ref.dcr_share(O, A2, H, KINDS))
    m = run(spark, O, A, None, records=False).to_dict()["metrics"][DCR]
    assert m["computed"] is False and "needs a real holdout" in m["reason"]


def test_sampled_avatars(spark, frames, caplog):
    """query_sample: the avatars of smallest keyed hash of (seed, "sample_avatars", id) are the queries,
    against every original and holdout record; the interval is the reference's, and every place that
    tells says which avatars were asked about."""
    O, A, H = frames
    with caplog.at_level(logging.INFO, logger="avatar_metrics"):
        rep = run(spark, O, A, H, 2, seed=9, query_sample=21, records=False)
    sample = ref.query_sample(len(A), 21, 9, "sample_avatars")
    want = ref.dcr_share(O, A, H, KINDS, sample=sample)
    d = rep.to_dict()
    m = d["metrics"][DCR]
    check(m, want)
    assert m["details"]["ci95"] == want["ci95"] and m["details"]["ci95"][0] <= m["value"] <= m["details"]["ci95"][1]
    assert (m["details"]["sampled_avatars"], d["inputs"]["query_sample_avatars"]) == (21, 21)
    assert any("21 of 50 avatars" in r.getMessage() for r in caplog.records)
    for text in (rep.summary(), rep.html()):
        assert "sampled, 21 of 50 avatars" in text
    for key, metric in d["metrics"].items():  # every metric carries the keys; only DCR has sampled_avatars
        assert {"ci95", "sampled"} <= set(metric["details"]), key
    assert d["metrics"][DCR]["details"]["sampled"] is None


def population(n, seed):
    """Records of one population: numbers with ties only by chance, and categories."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return pd.DataFrame({"x": x, "y": x + rng.normal(scale=0.5, size=n), "z": rng.exponential(size=n),
                         "c": rng.choice(list("abcdef"), n), "d": rng.choice(["p", "q"], n)})


def from_marginals(O, m, seed):
    """A generator that learned nothing but the marginals: every column drawn from its own."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: O[c].to_numpy()[rng.integers(0, len(O), m)] for c in O.columns})


def test_generators_move_the_share_as_they_should(spark):
    """Drawn from the marginals, the share is near e and no avatar is identical to an original; with a
    tenth of the originals copied, the share rises by about a tenth of (1 - e), ims_originals is
    exactly the copies' share, and the protection falls."""
    O, H = population(600, 1), population(400, 2)
    fair = from_marginals(O, 600, 3)
    copied = fair.copy()
    copied.iloc[::10] = O.iloc[::10].to_numpy()
    copied = copied.astype(O.dtypes.to_dict())
    got = {}
    for name, A in (("fair", fair), ("copied", copied)):
        m = run(spark, O, A, H, 2, avatars_aligned=False, records=False).to_dict()["metrics"][DCR]
        got[name] = m
    e = 0.6
    f, c = got["fair"]["details"], got["copied"]["details"]
    assert f["expected"] == c["expected"] == e
    assert abs(f["share"] - e) < 0.06, f["share"]
    assert f["ims_originals"] == 0 and c["ims_originals"] == 0.1
    assert c["share"] - f["share"] > 0.6 * 0.1 * (1 - e), (f["share"], c["share"])
    assert got["copied"]["value"] < got["fair"]["value"]
