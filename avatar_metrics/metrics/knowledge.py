"""Knowledge Protection Rate (spec: "Knowledge Protection Rate", seed 002).

U: originals whose profile on the known variables K occurs once in O.
Numeric known variables are binned with step 0.05*|mean| from min - sd/10
(mean, min, sd over U; a zero mean uses 0.05*(max - min); a constant variable
is one bin); categorical values, and null, are kept as they are.
B1: binned avatar profiles that occur once in A.  S = {x in U : b(x) in B1}.
KPR = 100 * (1 - |S| / n).

Mean and standard deviation are exact (``engine.aggregate.weighted_summaries``) so
the bins do not depend on partitioning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..engine.aggregate import COUNTING, long_values, summaries_of_rows, weighted_summaries
from ..engine.carried import carry
from ..io import ID, cache_plain, col
from ..kernels.exact import deviation_scale, mean_of, sd_of
from ..config import Config
from ..plots import bars_svg, figure
from .base import MetricResult
from ..schema import Inputs
from .base import Metric

KEY_NAME = "knowledge_protection_rate"


BIG = 2.0**52  # from here on every float64 is an integer
DRIVER_ROWS = COUNTING.collect  # distinct (variable, value) rows of U the driver takes its statistics from
PROFILE = "__profile"  # a 64-bit hash of a binned profile: the key both sides of the join are partitioned by


@dataclass(frozen=True)
class Bins:
    """Binning of one numeric variable: ``floor((x - lo) / step)``, or one bin.

    ``lo`` and ``step`` come from the unique originals' values, the most
    identifiable people: with two of them, both values could be solved back
    from the pair. They stay inside the run; the report gets ``count`` only.
    """

    lo: float | None
    step: float | None  # None: constant variable, every value in bin 0
    count: int | None = 1  # bins from lo to U's largest value (None: too many to count in float64)

    def to_dict(self):
        return self.count


def bins_for(n: int, vmin, vmax, mean: float, sd: float) -> Bins:
    """The spec's bin grid from statistics over U."""
    if n == 0 or vmin is None:
        return Bins(lo=None, step=None, count=0)  # no value in U: nulls only
    if vmin == vmax:
        return Bins(lo=None, step=None)
    step = 0.05 * abs(mean)
    if step == 0.0:
        step = 0.05 * (vmax - vmin)
    lo = vmin - sd / 10
    span = math.floor((vmax - lo) / step) if step > 0 else math.inf
    return Bins(lo=lo, step=step, count=int(span) + 1 if math.isfinite(span) and span < BIG else None)


def _binned(df: DataFrame, names, kinds, bins: list[Bins | None]) -> DataFrame:
    """``ID``, the binned profile ``k0, k1, ...`` from the columns ``names``, and its hash ``PROFILE``.

    No bin is -0.0 (Spark's ``floor`` gives a long), so equal bins hash alike.
    """
    # lo and step are statistics of the unique originals: carried as data (engine.carried)
    grid = {}
    for i, (kind, b) in enumerate(zip(kinds, bins)):
        if kind == "numeric" and b.step is not None:
            grid[f"lo{i}"], grid[f"step{i}"] = b.lo, b.step
    df, v = carry(df, grid)
    cols = [F.col(ID)]
    for i, (c, kind, b) in enumerate(zip(names, kinds, bins)):
        if kind == "numeric":
            x = col(c).cast("double")
            if b.step is None:
                binned = F.when(x.isNull(), F.lit(None).cast("double")).otherwise(F.lit(0.0))
            else:
                # the bin index as a float64 integer: past 2**52 every float64 is one
                # already, and values far outside the range must not overflow a long
                q = (x - v[f"lo{i}"]) / v[f"step{i}"]
                binned = F.when(F.abs(q) < F.lit(BIG), F.floor(q).cast("double")).otherwise(q)
            cols.append(binned.alias(f"k{i}"))
        else:
            cols.append(col(c).alias(f"k{i}"))
    out = df.select(*cols)
    return out.withColumn(PROFILE, _profile_hash([f"k{i}" for i in range(len(names))]))


def _profile_hash(cols) -> Column:
    """Where a binned profile goes: equal profiles hash alike; unequal ones may too (checked in the join)."""
    return F.xxhash64(*cols)


def unique_profiles(df: DataFrame, cols) -> DataFrame:
    """The profiles on ``cols`` that occur exactly once (null is a value), with their record's id."""
    return df.groupBy(*cols).agg(F.count(F.lit(1)).alias("__c"), F.min(ID).alias(ID)).filter("__c = 1").drop("__c")


def _numeric_bins(U: DataFrame, kcols, kinds, most: int) -> list[Bins | None]:
    """The bins of the numeric known variables from exact statistics over U (of at most ``most`` records).

    The statistics are taken from each variable's distinct values in U with
    their counts (a small table where values repeat, as ages and hours do):
    the squared deviations need a second pass, over that table, not over U.
    When that table cannot have more than ``DRIVER_ROWS`` rows, it comes to
    the driver, which takes both passes (one Spark action instead of two and
    the means' carrying): the same float64 operations, the same exact sums.
    """
    numeric = [k for k, kind in zip(kcols, kinds) if kind == "numeric"]
    bins: list[Bins | None] = [None] * len(kcols)
    if not numeric:
        return bins
    distinct = (long_values(U, {k: col(k) for k in numeric}).filter(F.col("x").isNotNull())
                .groupBy("var", "x").agg(F.count(F.lit(1)).alias("w")))
    if most * len(numeric) <= DRIVER_ROWS:
        rows = distinct.collect()
        first = summaries_of_rows(rows, numeric)
        means, scale = _centre(first)
        at = {i: (means[k], 2.0 ** -scale[k]) for i, k in enumerate(numeric) if k in means}

        def square(var, x):
            m, s = at[var]
            d = (x - m) * s
            return d * d

        dev = summaries_of_rows([(var, square(var, x), w) for var, x, w in rows if var in at], numeric)
    else:
        distinct = cache_plain(distinct)
        try:
            first = weighted_summaries(distinct, numeric)
            means, scale = _centre(first)
            # the means are statistics of the unique originals: carried as data (engine.carried)
            centred, v = carry(distinct, {**{f"m{i}": means[k] for i, k in enumerate(numeric) if k in means},
                                          **{f"s{i}": 2.0 ** -scale[k] for i, k in enumerate(numeric) if k in means}})
            d = F.lit(None).cast("double")
            for i, k in enumerate(numeric):
                if k in means:
                    d = F.when(F.col("var") == i, (F.col("x") - v[f"m{i}"]) * v[f"s{i}"]).otherwise(d)
            dev = weighted_summaries(centred.select("var", (d * d).alias("x"), "w"), numeric)
        finally:
            distinct.unpersist()
    for i, k in enumerate(kcols):
        if k in first:
            s = first[k]
            sd = math.ldexp(sd_of(dev[k].total, s.n), scale[k]) if s.n else math.nan
            bins[i] = bins_for(s.n, s.lo, s.hi, means.get(k, math.nan), sd)
        elif k in numeric:
            bins[i] = bins_for(0, None, None, math.nan, math.nan)
    return bins


def _centre(first: dict) -> tuple[dict, dict]:
    """Each variable's exact mean (where it has values), and the power of two its deviations are
    scaled by before squaring (``deviation_scale``)."""
    means = {k: mean_of(s.total, s.n) for k, s in first.items() if s.n}
    return means, {k: deviation_scale(max(first[k].hi - m, m - first[k].lo)) for k, m in means.items()}


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    keep_records = cfg.records
    known = list(inputs.known)
    if not known:
        return MetricResult.not_computed(target, "no known variables: set known_variables in the configuration")
    kinds = inputs.kinds(known)
    n = inputs.n_originals
    kcols = [f"k{i}" for i in range(len(known))]

    # U straight from the grouping: a unique profile is its record's known values
    # (grouping takes -0.0 as 0.0, which changes no statistic and no bin); read
    # again only when numeric statistics are taken from it
    o_raw = inputs.originals.select(ID, *[col(c).alias(k) for k, c in zip(kcols, known)])
    U = unique_profiles(o_raw, kcols)
    if "numeric" in kinds:
        U = cache_plain(U)
    try:
        bins = _numeric_bins(U, kcols, kinds, n)
        # the avatars partitioned by their profile's hash before grouping: the grouping
        # adds no shuffle, and its output is already where the join on that hash wants
        # it. The profiles' own equality is one opaque condition checked after the hash
        # matches, so that Spark does not make its columns join keys too (it would
        # shuffle both sides once more by all of them).
        u_binned = _binned(U, kcols, kinds, bins)
        a_binned = _binned(inputs.avatars, known, kinds, bins).repartition(PROFILE)
        # b1 holds each profile once; the join is Spark's choice (a hash join forced on it would
        # hold a partition of b1 in memory, which at scale can be millions of unique profiles)
        b1 = (a_binned.groupBy(PROFILE, *kcols).agg(F.count(F.lit(1)).alias("__c")).filter("__c = 1")
              .select(PROFILE, *kcols, F.lit(True).alias("__hit")))
        differ = [F.when(u_binned[k].eqNullSafe(b1[k]), 0).otherwise(1) for k in kcols]
        same = (F.greatest(*differ) if len(differ) > 1 else differ[0]) == 0
        cond = (u_binned[PROFILE] == b1[PROFILE]) & same
        # one join: b1 has each profile once, so every record of U comes out once
        joined = u_binned.join(b1, cond, "left").select(ID, F.coalesce("__hit", F.lit(False)).alias("kpr_matched"))
        records = None
        if keep_records:
            records = cache_plain(joined.select(ID, F.lit(True).alias("kpr_unique"), "kpr_matched"))
            joined = records
        counts = joined.agg(F.count(F.lit(1)).alias("n_u"),
                            F.count(F.when(F.col("kpr_matched"), 1)).alias("matched")).collect()[0]
        n_u, matched = counts["n_u"], counts["matched"]
    finally:
        U.unpersist()

    value = 100.0 * (1.0 - matched / n)
    details = {"unique_originals": n_u, "matched": matched, "n": n, "known_variables": known}
    if n_u >= cfg.min_group:
        details["bins"] = {c: b.to_dict() for c, b in zip(known, bins) if b is not None}
    else:  # a bin count over two unique originals pins one's value from the other's (spec: "Small groups")
        details["bins_left_out"] = (f"the bins come from {n_u} unique originals, fewer than min_group "
                                    f"({cfg.min_group}): their number is not published")
    result = MetricResult.ok(value, target, details)
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
