"""Knowledge Protection Rate (spec: "Knowledge Protection Rate", seed 002).

U: originals whose profile on the known variables K occurs once in O.
Numeric known variables are binned with step 0.05*|mean| from min - sd/10
(mean, min, sd over U; a zero mean uses 0.05*(max - min); a constant variable
is one bin); categorical values, and null, are kept as they are.
B1: binned avatar profiles that occur once in A.  S = {x in U : b(x) in B1}.
KPR = 100 * (1 - |S| / n).

Mean and standard deviation are exact (``engine.aggregate.exact_sums``) so the
bins do not depend on partitioning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..engine.aggregate import exact_sums
from ..io import ID, col
from ..kernels.exact import deviation_scale, mean_of, sd_of
from ..config import Config
from ..plots import bars_svg, figure
from ..report import MetricResult
from ..schema import Inputs
from .base import Metric

KEY_NAME = "knowledge_protection_rate"


BIG = 2.0**52  # from here on every float64 is an integer


@dataclass(frozen=True)
class Bins:
    """Binning of one numeric variable: ``floor((x - lo) / step)``, or one bin."""

    lo: float | None
    step: float | None  # None: constant variable, every value in bin 0

    def to_dict(self):
        return {"lo": self.lo, "step": self.step}


def bins_for(n: int, vmin, vmax, mean: float, sd: float) -> Bins:
    """The spec's bin grid from statistics over U."""
    if n == 0 or vmin is None or vmin == vmax:
        return Bins(lo=None, step=None)
    step = 0.05 * abs(mean)
    if step == 0.0:
        step = 0.05 * (vmax - vmin)
    lo = vmin - sd / 10
    return Bins(lo=lo, step=step)


def _binned(df: DataFrame, known, kinds, bins: dict[str, Bins]) -> DataFrame:
    cols = [F.col(ID)]
    for i, (c, kind) in enumerate(zip(known, kinds)):
        if kind == "numeric":
            b = bins[c]
            x = col(c).cast("double")
            if b.step is None:
                binned = F.when(x.isNull(), F.lit(None).cast("double")).otherwise(F.lit(0.0))
            else:
                # the bin index as a float64 integer: past 2**52 every float64 is one
                # already, and values far outside the range must not overflow a long
                q = (x - F.lit(b.lo)) / F.lit(b.step)
                binned = F.when(F.abs(q) < F.lit(BIG), F.floor(q).cast("double")).otherwise(q)
            cols.append(binned.alias(f"k{i}"))
        else:
            cols.append(col(c).alias(f"k{i}"))
    return df.select(*cols)


def unique_profiles(df: DataFrame, cols) -> DataFrame:
    """Records whose profile on ``cols`` occurs exactly once (null is a value)."""
    return df.groupBy(*cols).agg(F.count(F.lit(1)).alias("__c"), F.min(ID).alias(ID)).filter("__c = 1").drop("__c")


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    keep_records = cfg.records
    known = list(inputs.known)
    if not known:
        return MetricResult.not_computed(target, "no known variables: set known_variables in the configuration")
    kinds = inputs.kinds(known)
    n = inputs.n_originals
    kcols = [f"k{i}" for i in range(len(known))]

    o_raw = inputs.originals.select(ID, *[col(c).alias(f"k{i}") for i, c in enumerate(known)])
    u_ids = unique_profiles(o_raw, kcols).select(ID)
    U = inputs.originals.join(u_ids, ID).cache()
    try:
        n_u = U.count()
        numeric = [c for c, k in zip(known, kinds) if k == "numeric"]
        bins: dict[str, Bins] = {}
        if numeric:
            mm = U.agg(
                *[F.min(col(c).cast("double")).alias(f"lo{i}") for i, c in enumerate(numeric)],
                *[F.max(col(c).cast("double")).alias(f"hi{i}") for i, c in enumerate(numeric)],
            ).collect()[0]
            sums = exact_sums(U, {c: col(c) for c in numeric})
            means = {c: (mean_of(s, cnt) if cnt else math.nan) for c, (s, cnt) in sums.items()}
            scale = {c: deviation_scale(max(mm[f"hi{i}"] - means[c], means[c] - mm[f"lo{i}"]))
                     for i, c in enumerate(numeric) if sums[c][1]}

            def square(c):
                d = (col(c).cast("double") - F.lit(means[c])) * F.lit(2.0 ** -scale[c])
                return d * d

            dev = exact_sums(U, {c: square(c) for c in scale})
            for i, c in enumerate(numeric):
                cnt = sums[c][1]
                sd = math.ldexp(sd_of(dev[c][0], cnt), scale[c]) if cnt else math.nan
                bins[c] = bins_for(cnt, mm[f"lo{i}"], mm[f"hi{i}"], means[c], sd)

        u_binned = _binned(U, known, kinds, bins)
        a_binned = _binned(inputs.avatars, known, kinds, bins)
        b1 = unique_profiles(a_binned, kcols).drop(ID)
        cond = [u_binned[k].eqNullSafe(b1[k]) for k in kcols]
        matched_ids = u_binned.join(b1, cond, "left_semi").select(ID, F.lit(True).alias("kpr_matched"))
        records = None
        if keep_records:
            records = (
                U.select(ID, F.lit(True).alias("kpr_unique"))
                .join(matched_ids, ID, "left")
                .select(ID, "kpr_unique", F.coalesce("kpr_matched", F.lit(False)).alias("kpr_matched"))
                .cache()
            )
            matched = records.filter("kpr_matched").count()
        else:
            matched = matched_ids.count()
    finally:
        U.unpersist()

    value = 100.0 * (1.0 - matched / n)
    result = MetricResult.ok(
        value,
        target,
        {
            "unique_originals": n_u,
            "matched": matched,
            "n": n,
            "known_variables": known,
            "bins": {c: b.to_dict() for c, b in bins.items()},
        },
    )
    result.records = records
    return result


def reading(m: dict) -> str:
    d = m["details"]
    return (f"{m['value']:.2f}% of the originals cannot be singled out by their known variables: "
            f"{d['matched']} of {d['n']} have a unique profile that matches a unique avatar.")


def figures(m: dict) -> list[str]:
    d = m["details"]
    bars = bars_svg("plot-knowledge", [("originals", d["n"]), ("unique profiles", d["unique_originals"]),
                                       ("matched", d["matched"])], max(d["n"], 1), None, "originals")
    return [figure(bars, "Originals, those with a unique profile on the known variables, and those matched "
                         "by a unique avatar.")]


def finish_records(records: DataFrame, inputs: Inputs) -> DataFrame:
    return records.fillna(False, subset=["kpr_unique", "kpr_matched"])


METRIC = Metric(
    key=KEY_NAME,
    title="Knowledge Protection Rate",
    target=90,
    compute=compute,
    reading=reading,
    advice=("Increase k, and remove or coarsen the known variables that single people out "
            "(exact ages, rare categories): fewer unique profiles, fewer unique matches."),
    needs=frozenset({"known"}),
    records=("kpr_unique", "kpr_matched"),
    finish_records=finish_records,
    figures=figures,
)
