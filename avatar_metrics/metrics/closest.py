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

from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..config import Config
from ..engine.aggregate import histogram_top, histograms_of, percentiles_of
from ..engine.carried import carry
from ..engine.search import nearest
from ..engine.split import working_ids
from ..io import ID, persist
from ..plots import figure, heatmap_svg, histogram_svg
from .base import MetricResult, whole
from ..schema import Inputs
from ..summaries import TableStats, ranges_of, table_stats
from .base import Metric
from .sampled import rate_details

KEY_NAME = "closest_rate"
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


def _histograms(rec: DataFrame, d_hi: float, at_risk: Column) -> tuple[dict, int]:
    """Distributions for the report's plots, and the records ``at_risk``, counted by Spark in one
    pass (no records collected)."""
    d, r = (d_hi, BINS), (1.0, BINS)
    h = histograms_of(rec, {
        "d_wa": [("d_wa", 0.0, *d)], "d_ho": [("d_ho", 0.0, *d)],
        "r_wa": [("r_wa", 0.0, *r)], "r_ho": [("r_ho", 0.0, *r)],
        "both": [("d_wa", 0.0, d_hi, 25), ("r_wa", 0.0, 1.0, 25)],
    }, counts={"at_risk": at_risk})
    return {
        "distance": {"lo": 0.0, "hi": d_hi, "avatars": h["d_wa"], "holdout": h["d_ho"]},
        "ratio": {"lo": 0.0, "hi": 1.0, "avatars": h["r_wa"], "holdout": h["r_ho"]},
        "distance_ratio": {"d_hi": d_hi, "r_hi": 1.0, "counts": h["both"]},
    }, h["at_risk"]


@dataclass
class Reference:
    """The tables the Closest Rate compares: WO against WA and against HO."""

    name: str  # "holdout" | "approximate_holdout"
    wo: DataFrame  # the working originals asked about (with query_sample: those sampled)
    wa: DataFrame
    ho: DataFrame
    n_wo: int  # the working originals
    n_wa: int
    n_ho: int
    stats: list[TableStats]  # whose union covers WO, WA and HO (the ranges)
    cached: list[DataFrame] = field(default_factory=list)  # to unpersist when done
    n_queries: int = 0  # the working originals asked about (all of WO without query_sample)

    def sizes(self) -> dict:
        return {"reference": self.name, "working_originals": self.n_wo, "working_avatars": self.n_wa,
                "holdout_records": self.n_ho}

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


def references(inputs: Inputs, cfg: Config) -> Reference:
    """The holdout when given, else the seeded approximate holdout."""
    if inputs.holdout is not None:
        stats = inputs.stats_of("originals", "avatars", "holdout")
        return Reference("holdout", inputs.queries(), inputs.avatars, inputs.holdout,
                         inputs.n_originals, inputs.n_avatars, inputs.n_holdout, stats, n_queries=inputs.n_queries)
    n = inputs.n_originals
    ids = working_ids(inputs.originals, n, cfg.seed)
    ho = inputs.originals.join(ids, ID, "left_anti")
    wa = inputs.avatars.join(ids, ID, "left_semi")
    n_wo = (n + 1) // 2
    wa_stats = table_stats(wa, inputs.variables)
    stats = [inputs.stats["originals"], wa_stats]  # WO and HO together are O
    cached = [ids]
    if inputs.n_sampled is None:
        wo, n_queries = inputs.originals.join(ids, ID, "left_semi"), n_wo
    else:  # the sampled originals that are working ones; every holdout record stays a candidate
        wo = inputs.queries().join(ids, ID, "left_semi")
        n_queries = wo.count()
    return Reference("approximate_holdout", wo, wa, ho, n_wo, wa_stats.rows, n - n_wo, stats, cached, n_queries)


def to_avatars(inputs: Inputs, cfg: Config, with_stats: bool = False):
    """With a real holdout: the originals asked about against every avatar, all variables, ranges
    over O, A and H (``nearest``: d1, d2, n1, cid). Closest Rate's d^WA search, which Membership
    Inference reads too: computed once per run, released with the inputs. ``with_stats``: (the
    DataFrame, its ``SearchStats``)."""
    if SEARCHES[0] not in inputs.shared:
        variables = inputs.typed()
        stats = inputs.stats_of("originals", "avatars", "holdout")
        inputs.shared[SEARCHES[0]], inputs.shared[SEARCHES[0] + " stats"] = nearest(
            inputs.queries(), inputs.avatars, variables, ranges_of(stats, variables), name=SEARCHES[0],
            search=cfg.search, n_candidates=inputs.n_avatars, n_queries=inputs.n_queries, with_stats=True,
            whole=whole(inputs, "avatars"))
    df = inputs.shared[SEARCHES[0]]
    return (df, inputs.shared[SEARCHES[0] + " stats"]) if with_stats else df


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if inputs.holdout is None and not inputs.aligned:
        return MetricResult.not_computed(
            target, "needs a holdout: the approximate holdout takes the avatars of half the originals, which needs "
                    "avatars aligned with them (avatars_aligned is false)")
    ref = references(inputs, cfg)
    sizes = ref.sizes()
    if ref.n_queries == 0:
        ref.release()
        return MetricResult.not_computed(
            target, "no working original is in the query sample: raise query_sample", sizes)
    if ref.n_wa < 2 or ref.n_ho < 2:
        ref.release()
        return MetricResult.not_computed(
            target,
            f"needs at least two records in the avatars compared ({ref.n_wa}) and in the holdout reference ({ref.n_ho})",
            sizes,
        )
    variables = inputs.typed()
    ranges = ranges_of(ref.stats, variables)
    results = []
    rec = records = None
    try:
        for name, candidates, count in zip(SEARCHES, (ref.wa, ref.ho), (ref.n_wa, ref.n_ho)):
            if name == SEARCHES[0] and ref.name == "holdout":  # the same search as Membership Inference's
                results.append(to_avatars(inputs, cfg))
                continue
            # (the holdout in the driver is taken only when it is the candidates: not an approximate one)
            results.append(nearest(ref.wo, candidates, variables, ranges, name=name, search=cfg.search,
                                   n_candidates=count, n_queries=ref.n_queries, whole=whole(inputs, "holdout")))
        rec = persist(per_record(*results))
        q = cfg.quantile
        # the 100th percentiles are the largest distances, for the histograms' range
        p = percentiles_of(rec, {"d_ho": [q, 50, 100], "r_ho": [q, 50], "d_wa": [50, 100], "r_wa": [50]},
                           rows=ref.n_queries)  # a record per original asked about
        (tau_d, med_d_ho, max_d_ho), _ = p["d_ho"]
        (tau_r, med_r_ho), _ = p["r_ho"]
        (med_d_wa, max_d_wa), _ = p["d_wa"]
        (med_r_wa,), n = p["r_wa"]
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
        # the thresholds are statistics of the originals' distances: carried as data (engine.carried)
        rec_tau, tau = carry(rec, {"d": tau_d, "r": tau_r})
        risky = F.col("r_wa").isNotNull() & (F.col("d_wa") <= tau["d"]) & (F.col("r_wa") <= tau["r"])
        details["histograms"], at_risk = _histograms(
            rec_tau, histogram_top(max_d_wa, max_d_ho), risky)
        if cfg.records:  # computed in the records step, from ``rec`` kept cached until then (``holds``)
            records = rec_tau.select(
                ID,
                F.col("d_wa").alias("closest_d_wa"),
                F.col("r_wa").alias("closest_r_wa"),
                F.col("d_ho").alias("closest_d_ho"),
                F.col("r_ho").alias("closest_r_ho"),
                F.coalesce(risky, F.lit(False)).alias("closest_at_risk"),
            )
    except BaseException:
        records = None
        raise
    finally:
        for df in [rec, *results]:
            if (df is not None and not any(df is kept for kept in inputs.shared.values())
                    and not (records is not None and df is rec)):
                df.unpersist()
        ref.release()
    details["at_risk"] = at_risk
    if inputs.n_sampled is not None:
        details.update(rate_details(inputs, at_risk, n))
        details["sampled"] = ref.n_queries
        details["ci95_thresholds"] = "fixed"  # the interval of at_risk/n takes tau_d and tau_r as given
    result = MetricResult.ok(100.0 * (1.0 - at_risk / n), target, details)
    result.records, result.holds = records, ([rec] if records is not None else [])
    return result


def reading(m: dict) -> str:
    d = m["details"]
    return (f"{m['value']:.2f}% of the originals have avatars no closer to them than records never seen by the "
            f"generator are ({d['at_risk']} of {d['n']} at risk, against the {d['reference'].replace('_', ' ')}).")


def figures(m: dict) -> list[str]:
    d = m["details"]
    if "histograms" not in d:
        return []
    hs = d["histograms"]
    return [
        figure(histogram_svg("plot-distance", hs["distance"], "distance to the closest record (d1)", d["tau_d"], "tau_d"),
               "Distance of each original to its closest avatar and to its closest holdout record; tau_d is the "
               "holdout's q-th percentile."),
        figure(histogram_svg("plot-ratio", hs["ratio"], "closest distances ratio (d1/d2)", d["tau_r"], "tau_r"),
               "Ratio of the closest to the second-closest distance; tau_r is the holdout's q-th percentile."),
        figure(heatmap_svg("plot-distance-ratio", hs["distance_ratio"], d["tau_d"], d["tau_r"]),
               f"Originals by distance and ratio against the avatars; the shaded corner holds the {d['at_risk']} "
               "originals at risk."),
    ]


def finish_records(records: DataFrame, inputs: Inputs) -> DataFrame:
    # with the approximate holdout, the holdout half has no closest figures; with query_sample,
    # an original not sampled was not asked about: null
    working = F.col("closest_d_wa").isNotNull()
    return records.withColumn("closest_working", F.when(F.col("sampled"), working))


METRIC = Metric(
    key=KEY_NAME,
    lane=1,
    title="Closest Rate",
    target=90,
    compute=compute,
    reading=reading,
    advice=("Increase k in the avatar generation: it moves avatars away from their originals and makes "
            "an original/avatar pair harder to tell apart from the other avatars."),
    needs=frozenset({"holdout or alignment"}),
    records=("closest_d_wa", "closest_r_wa", "closest_d_ho", "closest_r_ho", "closest_at_risk", "closest_working"),
    finish_records=finish_records,
    figures=figures,
)
