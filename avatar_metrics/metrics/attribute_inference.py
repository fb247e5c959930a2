"""Attribute Inference Protection (spec: "Beyond the suite", "Attribute Inference Protection").

Needs a real holdout H and at least one known variable; no row alignment. The
attacker knows a target's known variables K, takes its nearest avatar on K
(ranges over O, A and H on K; ties by the keyed hash: search ``attribute``
for the originals, ``attribute_control`` for the holdout records) and guesses
each secret s as that avatar's value. A guess is right when the values are
equal (categorical s; null equals null), or within 5 % of s's range over O, A
and H (numeric s; null against null right, null against a value wrong).
p_O(s), p_H(s): the shares of right guesses on the originals and on the
holdout; risk(s) = (p_O - p_H) / (1 - p_H) clipped to [0, 1] (0 when p_H = 1);
AIP_s = 100 (1 - risk(s)); AIP = min over s. With ``query_sample``, the sampled
originals and holdout records are the targets, and ``ci95`` combines the Wilson
intervals of p_O and p_H into the widest risk interval.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..config import Config
from ..engine.carried import carry
from ..engine.search import nearest
from ..io import ID, col
from ..stats import Estimate, inference_risk, least_protection_interval, risk_interval
from ..plots import figure, pairs_svg
from ..schema import Inputs
from ..summaries import ranges_of
from .base import Metric, MetricResult, whole
from .membership import NO_HOLDOUT

KEY_NAME = "attribute_inference_protection"
SEARCHES = ("attribute", "attribute_control")
TOLERANCE = 0.05  # a numeric guess is right within this share of the secret's range


CHOSEN = "__am_aip_cid"  # internal names: a variable may be called anything


def right_guesses(chosen: DataFrame, table: DataFrame, avatars: DataFrame, inputs: Inputs, secrets,
                  tolerances) -> DataFrame:
    """ID, the chosen avatar (``CHOSEN``) and ``right_<i>`` (whether it gives secret i away) per
    target; ``chosen`` has ID and ``cid`` (a search's result), ``table`` the targets' values."""
    x = table.select(ID, *[col(s).alias(f"__am_x{i}") for i, s in enumerate(secrets)])
    a = avatars.select(F.col(ID).alias(CHOSEN), *[col(s).alias(f"__am_a{i}") for i, s in enumerate(secrets)])
    joined = chosen.select(ID, F.col("cid").alias(CHOSEN)).join(x, ID).join(a, CHOSEN)
    # the tolerances come from the variables' ranges: carried as data (engine.carried)
    joined, tol = carry(joined, {i: t for i, t in enumerate(tolerances)})
    return joined.select(ID, CHOSEN, *[
        _right(F.col(f"__am_x{i}"), F.col(f"__am_a{i}"), inputs.variables[s], tol[i]).alias(f"right_{i}")
        for i, s in enumerate(secrets)])


def _right(x: Column, a: Column, kind: str, tol: Column) -> Column:
    if kind == "categorical":
        return x.eqNullSafe(a)
    both = x.isNull() & a.isNull()
    return F.when(both, F.lit(True)).when(x.isNull() | a.isNull(), F.lit(False)).otherwise(
        F.abs(x.cast("double") - a.cast("double")) <= tol)


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if inputs.holdout is None:
        return MetricResult.not_computed(target, NO_HOLDOUT)
    if not inputs.known:
        return MetricResult.not_computed(target, "needs at least one known variable: set known_variables")
    secrets = list(inputs.secrets)
    if not secrets:
        return MetricResult.not_computed(
            target, "no secret: every variable is known; set secret_variables, or leave some variables out of "
                    "known_variables")
    stats = inputs.stats_of("originals", "avatars", "holdout")
    known = inputs.typed(list(inputs.known))
    ranges = ranges_of(stats, known)
    tolerances = [TOLERANCE * float(r) if kind == "numeric" else 0.0
                  for r, kind in zip(ranges_of(stats, inputs.typed(secrets)), inputs.kinds(secrets))]
    sides = ((inputs.queries(), inputs.originals, inputs.n_queries),
             (inputs.holdout_queries(), inputs.holdout, inputs.n_holdout_queries))
    found, counts = [], []
    try:
        for name, (queries, table, n) in zip(SEARCHES, sides):
            res = nearest(queries, inputs.avatars, known, ranges, name=name, search=cfg.search,
                          n_candidates=inputs.n_avatars, n_queries=n, first_only=True,
                          whole=whole(inputs, "avatars"))  # cid only
            found.append(res)
            right = right_guesses(res, table, inputs.avatars, inputs, secrets, tolerances)
            row = right.agg(F.count(F.lit(1)).alias("n"),
                            *[F.count(F.when(F.col(f"right_{i}"), 1)).alias(f"r{i}") for i in range(len(secrets))]
                            ).collect()[0]
            if row["n"] != n:
                raise RuntimeError(f"attribute inference ({name}): {row['n']} of {n} targets guessed: this is a bug")
            counts.append([int(row[f"r{i}"]) for i in range(len(secrets))])
        # no records/ column: which avatar guessed and whether it was right rebuild the secret
        # together with the avatars (spec: "Small groups")
    finally:
        for res in found:
            res.unpersist()
    n_o, n_h = inputs.n_queries, inputs.n_holdout_queries
    sampled = inputs.n_sampled is not None or inputs.n_holdout_sampled is not None
    per = {}
    for i, s in enumerate(secrets):
        r_o, r_h = counts[0][i], counts[1][i]
        p_o, p_h = r_o / n_o, r_h / n_h
        risk = inference_risk(p_o, p_h)
        per[s] = {"p_o": p_o, "p_h": p_h, "risk": risk, "protection": 100.0 * (1.0 - risk),
                  "right_o": r_o, "right_h": r_h}
        if sampled:
            lo, hi = risk_interval(r_o, n_o, r_h, n_h)
            per[s]["ci95"] = [100.0 * (1.0 - hi), 100.0 * (1.0 - lo)]
    value = min(v["protection"] for v in per.values())
    order = sorted(per, key=lambda s: (per[s]["protection"], s))
    details = {
        "secrets": per,
        "most_exposed": [s for s in order if per[s]["protection"] < target],
        "n": n_o,
        "n_control": n_h,
        "known": list(inputs.known),
        "tolerance": TOLERANCE,
    }
    if sampled:  # the headline is the smallest protection: each secret's interval at the Bonferroni z
        ci = least_protection_interval(list(zip(counts[0], counts[1])), n_o, n_h)
        details.update(Estimate(value, ci, inputs.n_sampled).details(), sampled_holdout=inputs.n_holdout_sampled)
    return MetricResult.ok(value, target, details)


def reading(m: dict) -> str:
    d = m["details"]
    worst = min(d["secrets"], key=lambda s: (d["secrets"][s]["protection"], s))
    w = d["secrets"][worst]
    k, under = len(d["known"]), len(d["most_exposed"])
    return (f"Knowing {k} variable{'s' if k > 1 else ''} of a person and taking the closest avatar on them, an attacker "
            f"guesses {worst} right for {100 * w['p_o']:.2f}% of the originals against {100 * w['p_h']:.2f}% of "
            f"people never seen by the generator: the avatars give away {100 * w['risk']:.2f}% of what could not be "
            f"guessed anyway ({under} secret{'s' if under != 1 else ''} under the target).")


def figures(m: dict) -> list[str]:
    d = m["details"]
    order = sorted(d["secrets"], key=lambda s: (d["secrets"][s]["protection"], s))
    items = [(s, 100 * d["secrets"][s]["p_o"], 100 * d["secrets"][s]["p_h"]) for s in order]
    svg = pairs_svg("plot-attribute-inference", items, ("originals", "holdout"), "right guesses, percent")
    return [figure(svg, "Per secret, most exposed first: the share guessed right from the closest avatar on the "
                        "known variables, for the originals and for the holdout records (the control: what the "
                        "avatars let anyone guess about people who were not in the training data).")]


METRIC = Metric(
    key=KEY_NAME,
    lane=1,
    title="Attribute Inference Protection",
    target=90,
    compute=compute,
    reading=reading,
    advice=("The closest avatar on what an attacker knows gives away the listed secrets more often for the "
            "originals than for outsiders: increase k, or add noise to the known variables or to those secrets, "
            "so that an avatar stops carrying its originals' values."),
    needs=frozenset({"holdout", "known"}),
    holdout_queries=True,
    figures=figures,
)
