"""Closest Rate, Distance To Closest, Closest Distances Ratio (spec: "Closest Rate", seed 001).

Reference: the holdout H when given (WO = O, WA = A, HO = H); otherwise the
approximate holdout: O split with the seed into WO (ceil(n/2)) and HO, WA the
avatars of WO. All variables; ranges over WO, WA and HO together.
For each i in WO: d1, d2 against WA and against HO; d = d1, r = d1/d2 when
d2 > 0. tau_d, tau_r: the q-th percentiles (midpoint) of d^HO and r^HO.
At risk: d^WA <= tau_d and r^WA <= tau_r.
Closest Rate = 100 * (1 - at risk / n), n = WO records with a ratio r^WA.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..config import Config
from ..engine.aggregate import histogram2d, histograms, midpoint_percentiles
from ..engine.search import nearest
from ..engine.split import working_ids
from ..io import ID
from ..report import MetricResult
from ..schema import Inputs, Variable, ranges_of, table_stats

SEARCHES = ("closest/avatars", "closest/holdout")


def per_record(wa: DataFrame, ho: DataFrame) -> DataFrame:
    """ID, d_wa, r_wa, d_ho, r_ho of each working original."""
    ratio = lambda p: F.when(F.col(f"{p}2") > 0, F.col(f"{p}1") / F.col(f"{p}2"))
    a = wa.select(ID, F.col("d1").alias("a1"), F.col("d2").alias("a2"))
    h = ho.select(ID, F.col("d1").alias("h1"), F.col("d2").alias("h2"))
    return a.join(h, ID).select(
        ID,
        F.col("a1").alias("d_wa"),
        ratio("a").alias("r_wa"),
        F.col("h1").alias("d_ho"),
        ratio("h").alias("r_ho"),
    )


BINS = 40


def _histograms(rec: DataFrame) -> dict:
    """Distributions for the report's plots, counted by Spark (no records collected)."""
    top = rec.agg(F.max("d_wa").alias("a"), F.max("d_ho").alias("h")).collect()[0]
    d_hi = max(v for v in (top["a"], top["h"], 1e-9) if v is not None)
    d = histograms(rec, ["d_wa", "d_ho"], 0.0, d_hi, BINS)
    r = histograms(rec, ["r_wa", "r_ho"], 0.0, 1.0, BINS)
    return {
        "distance": {"lo": 0.0, "hi": d_hi, "avatars": d["d_wa"], "holdout": d["d_ho"]},
        "ratio": {"lo": 0.0, "hi": 1.0, "avatars": r["r_wa"], "holdout": r["r_ho"]},
        "distance_ratio": {"d_hi": d_hi, "r_hi": 1.0, "counts": histogram2d(rec, "d_wa", "r_wa", (0.0, d_hi), (0.0, 1.0), 25)},
    }


def references(inputs: Inputs, cfg: Config):
    """(reference name, WO, WA, HO, their sizes, stats of the three, cached frames)."""
    if inputs.holdout is not None:
        stats = [inputs.stats["originals"], inputs.stats["avatars"], inputs.stats["holdout"]]
        sizes = (inputs.n_originals, inputs.n_avatars, inputs.n_holdout)
        return "holdout", inputs.originals, inputs.avatars, inputs.holdout, sizes, stats, []
    n = inputs.n_originals
    ids = working_ids(inputs.originals, n, cfg.seed)
    wo = inputs.originals.join(ids, ID, "left_semi")
    ho = inputs.originals.join(ids, ID, "left_anti")
    wa = inputs.avatars.join(ids, ID, "left_semi")
    n_wo = (n + 1) // 2
    wa_stats = table_stats(wa, inputs.variables)
    stats = [inputs.stats["originals"], wa_stats]  # WO and HO together are O
    return "approximate_holdout", wo, wa, ho, (n_wo, wa_stats.rows, n - n_wo), stats, [ids]


def compute(spark: SparkSession, inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets["closest_rate"]
    reference, wo, wa, ho, (n_wo, n_wa, n_ho), stats, cached = references(inputs, cfg)
    sizes = {"reference": reference, "working_originals": n_wo, "working_avatars": n_wa, "holdout_records": n_ho}
    if n_wa < 2 or n_ho < 2:
        for df in cached:
            df.unpersist()
        return MetricResult.not_computed(
            target,
            f"needs at least two records in the avatars compared ({n_wa}) and in the holdout reference ({n_ho})",
            sizes,
        )
    variables = [Variable(v, k) for v, k in inputs.variables.items()]
    ranges = ranges_of(stats, variables)
    results = []
    rec = records = None
    try:
        for name, candidates, count in zip(SEARCHES, (wa, ho), (n_wa, n_ho)):
            results.append(
                nearest(wo, candidates, variables, ranges, search_name=name, seed=cfg.seed,
                        block_size=cfg.block_size, n_candidates=count, query_partitions=cfg.query_partitions)
            )
        rec = per_record(*results).cache()
        q = cfg.quantile
        (tau_d, med_d_ho), _ = midpoint_percentiles(rec, "d_ho", [q, 50])
        (tau_r, med_r_ho), n_r_ho = midpoint_percentiles(rec, "r_ho", [q, 50])
        (med_d_wa,), _ = midpoint_percentiles(rec, "d_wa", [50])
        (med_r_wa,), n = midpoint_percentiles(rec, "r_wa", [50])
        details = {
            **sizes,
            "tau_d": tau_d,
            "tau_r": tau_r,
            "quantile": q,
            "n": n,
            "distance_to_closest": med_d_wa,
            "closest_distances_ratio": med_r_wa,
            "holdout_distance_to_closest": med_d_ho,
            "holdout_closest_distances_ratio": med_r_ho,
        }
        if tau_r is None:
            return MetricResult.not_computed(
                target, "no working original has a ratio against the holdout (every second distance is 0)", details
            )
        if n == 0:
            return MetricResult.not_computed(
                target, "no working original has a ratio against the avatars (every second distance is 0)", details
            )
        details["histograms"] = _histograms(rec)
        risky = F.col("r_wa").isNotNull() & (F.col("d_wa") <= F.lit(tau_d)) & (F.col("r_wa") <= F.lit(tau_r))
        at_risk = rec.filter(risky).count()
        if cfg.records:
            records = rec.select(
                ID,
                F.col("d_wa").alias("closest_d_wa"),
                F.col("r_wa").alias("closest_r_wa"),
                F.col("d_ho").alias("closest_d_ho"),
                F.col("r_ho").alias("closest_r_ho"),
                F.coalesce(risky, F.lit(False)).alias("closest_at_risk"),
            ).cache()
            records.count()
    finally:
        for df in [rec, *results, *cached]:
            if df is not None:
                df.unpersist()
    details["at_risk"] = at_risk
    result = MetricResult.ok(100.0 * (1.0 - at_risk / n), target, details)
    result.records = records
    return result
