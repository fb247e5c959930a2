"""Membership Inference Protection (spec: "Beyond the suite", "Membership Inference Protection").

Needs a real holdout H; no row alignment. All variables; ranges over O, A and
H together. The score of a record is its Gower distance to the nearest avatar:
members are the originals (Closest Rate's d^WA, one search shared with it,
``closest.to_avatars``), non-members the holdout records (search ``membership``).
AUC = P(s(member) < s(non-member)) + P(tie) / 2 over all pairs (Mann-Whitney,
counted exactly in Spark: ``aggregate.mann_whitney``);
advantage = max(0, 2 AUC - 1); MIP = 100 (1 - advantage).
``tpr_at_1pct_fpr``: with k = floor(|H| / 100) and h_k the holdout score of
0-based rank k, a threshold t may accuse at most k non-members exactly when
t < h_k, so the best attack at 1 % false positives finds #{o : s(o) < h_k}.
With ``query_sample``, the sampled originals and holdout records are the
queries (every avatar a candidate) and ``ci95`` is Hanley and McNeil's.
"""

from __future__ import annotations

from pyspark.sql import functions as F

from ..config import Config
from ..engine.aggregate import elements_of, histogram_top, histograms_of, mann_whitney
from ..engine.carried import carry
from ..engine.search import nearest
from ..stats import Estimate, auc_interval
from ..plots import figure, roc_svg
from ..schema import Inputs
from ..summaries import ranges_of
from .base import Metric, MetricResult, whole
from .closest import to_avatars

KEY_NAME = "membership_inference_protection"
SEARCH = "membership"
BINS = 100  # the ROC curve's thresholds on the page
NO_HOLDOUT = ("needs a real holdout (records set aside before the avatars were generated): without one there are "
              "no non-members to compare the originals with (the approximate holdout's records were seen by the "
              "generator); give the holdout table")


def advantage(auc: float) -> float:
    return max(0.0, 2.0 * auc - 1.0)


def protection(auc: float) -> float:
    return 100.0 * (1.0 - advantage(auc))


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if inputs.holdout is None:
        return MetricResult.not_computed(target, NO_HOLDOUT)
    variables = inputs.typed()
    stats = inputs.stats_of("originals", "avatars", "holdout")
    members, to_members = to_avatars(inputs, cfg, with_stats=True)
    n_h = inputs.n_holdout_queries
    non, to_non = nearest(inputs.holdout_queries(), inputs.avatars, variables, ranges_of(stats, variables),
                          name=SEARCH, search=cfg.search, n_candidates=inputs.n_avatars, n_queries=n_h,
                          first_only=True, with_stats=True, whole=whole(inputs, "avatars"))  # d1 only
    try:
        scores = (members.select(F.col("d1").alias("s"), F.lit(True).alias("member"))
                  .unionByName(non.select(F.col("d1").alias("s"), F.lit(False).alias("member"))))
        ranking = mann_whitney(scores, "s", "member")
        n_o = inputs.n_queries
        if (ranking.positives, ranking.negatives) != (n_o, n_h):
            raise RuntimeError(f"membership: {ranking.positives} of {n_o} originals and {ranking.negatives} of {n_h} "
                               "holdout records scored: this is a bug")
        k = n_h // 100  # the most non-members the attack may accuse: #{h : s(h) <= t} <= |H| / 100
        h_k = elements_of(non, {"d1": [k]}, rows=n_h)[("d1", k)]
        # the threshold is a holdout record's score: carried as data (engine.carried)
        with_h, h = carry(scores, {"h_k": h_k})
        # the histograms' range is the largest score, which the searches took: the counts and the
        # histograms in one action
        hi = histogram_top(to_members.largest, to_non.largest)
        sides = with_h.select("*", F.when(F.col("member"), F.col("s")).alias("m"),
                              F.when(~F.col("member"), F.col("s")).alias("h"))
        row = histograms_of(sides, {"members": [("m", 0.0, hi, BINS)], "non_members": [("h", 0.0, hi, BINS)]},
                            counts={"tp": F.col("member") & (F.col("s") < h["h_k"]),
                                    "fp": ~F.col("member") & (F.col("s") < h["h_k"])})
    finally:
        non.unpersist()
    auc = ranking.auc
    details = {
        "auc": auc,
        "advantage": advantage(auc),
        "tpr_at_1pct_fpr": 100.0 * (row["tp"] / n_o),
        "members": n_o,
        "non_members": n_h,
        "roc": {"lo": 0.0, "hi": hi, "members": row["members"], "non_members": row["non_members"],
                "point": [row["fp"] / n_h, row["tp"] / n_o]},
    }
    if inputs.n_sampled is not None or inputs.n_holdout_sampled is not None:
        lo, up = auc_interval(auc, n_o, n_h)
        details.update(Estimate(protection(auc), (protection(up), protection(lo)), inputs.n_sampled).details(),
                       sampled_holdout=inputs.n_holdout_sampled, auc_ci95=[lo, up])
    return MetricResult.ok(protection(auc), target, details)


def curve(roc: dict) -> list[tuple[float, float]]:
    """The ROC points at the bins' upper edges (thresholds), from (0, 0) to (1, 1)."""
    n_m, n_h = sum(roc["members"]), sum(roc["non_members"])
    points, tp, fp = [(0.0, 0.0)], 0, 0
    for m, h in zip(roc["members"], roc["non_members"]):
        tp, fp = tp + m, fp + h
        points.append((fp / max(n_h, 1), tp / max(n_m, 1)))
    return points


def reading(m: dict) -> str:
    d = m["details"]
    return (f"An attacker who calls a record a member when it lies close to some avatar tells the originals from "
            f"records never seen by the generator with an AUC of {d['auc']:.4f} (0.5 is a guess, 1 is certain); "
            f"allowed to accuse 1% of the non-members, the attack finds {d['tpr_at_1pct_fpr']:.2f}% of the originals.")


def figures(m: dict) -> list[str]:
    d = m["details"]
    svg = roc_svg("plot-membership-roc", curve(d["roc"]), d["auc"], tuple(d["roc"]["point"]))
    return [figure(svg, "The membership attack's ROC curve: the share of originals (members) against the share of "
                        "holdout records (non-members) it calls members, as the distance threshold grows; the "
                        "diagonal is a guess, the dot the attack that accuses at most 1% of the non-members.")]


METRIC = Metric(
    key=KEY_NAME,
    lane=1,
    title="Membership Inference Protection",
    target=90,
    compute=compute,
    reading=reading,
    advice=("The avatars lie closer to the originals than to other people of the same population: increase k, or "
            "add noise, so that being near an avatar says nothing about having been in the training data."),
    needs=frozenset({"holdout"}),
    holdout_queries=True,
    figures=figures,
)
