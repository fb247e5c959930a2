"""DCR Share Protection (spec: "The synthetic side: DCR share and identical matches").

The synthetic side: about each avatar, not each original. Needs a real holdout H;
no row alignment. All variables; ranges over O, A and H together. For each avatar
a_j: d_O(j), its Gower distance to the nearest original (search ``dcr_originals``:
the avatars as queries, every original a candidate), and d_H(j) to the nearest
holdout record (``dcr_holdout``). With e = n / (n + |H|), the share expected of a
generator that never saw O:

    share = (#{d_O < d_H} + e #{d_O = d_H}) / m
    DCR Share Protection = 100 (1 - max(0, share - e) / (1 - e))

Both are computed from the integer counts in exact rational arithmetic and rounded
once (the spec is silent on rounding; this makes the figure the same on every
machine). ``ims_originals`` and ``ims_holdout`` are the shares of avatars at distance
0 from some original and from some holdout record. Counted in Spark: the avatars'
distances are never collected, nor written (an avatar is not a person; records/
stays one row per original). With ``query_sample``, the queries are the avatars of
the keyed sample "sample_avatars" (``engine.split.draw_avatar_sample``) against every
original and holdout record, and ``ci95`` is the Wilson interval of the weighted
count, mapped through the protection.
"""

from __future__ import annotations

from fractions import Fraction

from pyspark.sql import functions as F

from ..config import Config
from ..engine.aggregate import histogram_top, histograms_of
from ..engine.search import nearest
from ..engine.split import draw_avatar_sample
from ..io import ID
from ..plots import figure, histogram_svg
from ..schema import Inputs
from ..summaries import ranges_of
from ..stats import Estimate, share_interval
from .base import Metric, MetricResult, whole

KEY_NAME = "dcr_share_protection"
SEARCHES = ("dcr_originals", "dcr_holdout")
BINS = 40
SERIES = (("to originals", "#c62828"), ("to holdout", "#1f77b4"))
NO_HOLDOUT = ("needs a real holdout (records set aside before the avatars were generated): the share of avatars "
              "closer to the originals means something only beside people the generator never saw (the "
              "approximate holdout's records were seen by it); give the holdout table")


def protection(share: Fraction, e: Fraction) -> Fraction:
    """``100 (1 - max(0, share - e) / (1 - e))``: 100 for a share at most ``e``, 0 for a share of 1."""
    return 100 * (1 - max(Fraction(0), share - e) / (1 - e))


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if inputs.holdout is None:
        return MetricResult.not_computed(target, NO_HOLDOUT)
    draw_avatar_sample(inputs, cfg.query_sample, cfg.seed)
    variables = inputs.typed()
    ranges = ranges_of(inputs.stats_of("originals", "avatars", "holdout"), variables)
    queries, m = inputs.queries_of("avatars")
    found, largest = [], []
    try:
        for name, role, count in zip(SEARCHES, ("originals", "holdout"), (inputs.n_originals, inputs.n_holdout)):
            df, st = nearest(queries, dict(inputs.tables())[role], variables, ranges, name=name, search=cfg.search,
                             n_candidates=count, n_queries=m, first_only=True, with_stats=True,
                             whole=whole(inputs, role))  # d1 only
            found.append(df)
            largest.append(st.largest)
        both = (found[0].select(ID, F.col("d1").alias("d_o"))
                .join(found[1].select(ID, F.col("d1").alias("d_h")), ID))
        # the histograms' range is the largest distance, which the searches took: the counts and
        # the histograms in one action
        hi = histogram_top(*largest)
        row = histograms_of(both, {"o": [("d_o", 0.0, hi, BINS)], "h": [("d_h", 0.0, hi, BINS)]}, counts={
            "m": F.lit(True),
            "closer": F.col("d_o") < F.col("d_h"),
            "ties": F.col("d_o") == F.col("d_h"),
            "ims_o": F.col("d_o") == 0,
            "ims_h": F.col("d_h") == 0,
        })
        if row["m"] != m:
            raise RuntimeError(f"{KEY_NAME}: {row['m']} of {m} avatars have both distances: this is a bug")
    finally:
        for df in found:
            df.unpersist()
    n, n_h = inputs.n_originals, inputs.n_holdout
    e = Fraction(n, n + n_h)
    closer, ties = int(row["closer"]), int(row["ties"])
    share = (closer + e * ties) / m
    value = protection(share, e)
    details = {
        "share": float(share),
        "expected": float(e),
        "closer_to_originals": closer,
        "ties": ties,
        "avatars": m,
        "ims_originals": float(Fraction(int(row["ims_o"]), m)),
        "ims_holdout": float(Fraction(int(row["ims_h"]), m)),
        "histograms": {"lo": 0.0, "hi": hi, SERIES[0][0]: row["o"], SERIES[1][0]: row["h"]},
        "sampled_avatars": inputs.n_avatars_sampled,
    }
    if inputs.n_avatars_sampled is not None:
        lo, up = share_interval(closer + e * ties, m)
        ci = (float(protection(Fraction(up), e)), float(protection(Fraction(lo), e)))
        details.update(Estimate(float(value), ci, None).details())
    return MetricResult.ok(float(value), target, details)


def reading(m: dict) -> str:
    d = m["details"]
    return (f"{100 * d['share']:.2f}% of the avatars lie closer to an original than to any holdout record (ties "
            f"counted at the expected share); a generator that never saw the originals gives about "
            f"{100 * d['expected']:.2f}%. {100 * d['ims_originals']:.2f}% of the avatars are identical to an "
            f"original, against {100 * d['ims_holdout']:.2f}% identical to a holdout record.")


def figures(m: dict) -> list[str]:
    d = m["details"]
    if "histograms" not in d:
        return []
    svg = histogram_svg("plot-dcr-share", d["histograms"], "distance of each avatar to its closest record", None, "",
                        series=SERIES)
    return [figure(svg, "Each avatar's distance to its closest original and to its closest holdout record: a "
                        "generator that did not memorise its training data draws the two alike.")]


METRIC = Metric(
    key=KEY_NAME,
    lane=0,
    title="DCR Share Protection",
    target=90,
    compute=compute,
    reading=reading,
    advice=("The avatars lie closer to their training records than to people the generator never saw: it "
            "memorises. Increase k, or add noise, and look at the identical match shares for copied records."),
    needs=frozenset({"holdout"}),
    avatar_queries=True,
    figures=figures,
)
