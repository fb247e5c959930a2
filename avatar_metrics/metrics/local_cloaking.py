"""Local Cloaking (spec: "Beyond the seeds", "Local Cloaking").

Needs row alignment. All variables; ranges over O and A together.
LC_i = #{j != i : G(x_i, a_j) <= G(x_i, a_i)}: the avatars that look at least
as much like original i as its own avatar does (a tie counts). The headline is
the median of LC_i (midpoint percentile at 50); also reported: the share of
originals with LC_i = 0 (``uncloaked``). Target: a median of at least 5.

One exact search serves this metric and the Hidden Rate (``cloaking``): the
radius of original i is the distance to its own avatar, computed by the same
float64 terms as the search's, so its own avatar is counted exactly once, at
the radius; ``le - 1`` is LC_i. The same search tells whether the own avatar
is the nearest with the spec's tie-break: no avatar closer (``lt == 0``) and
the smallest keyed hash among those at the radius is its own.

The cap (``local_cloaking_cap``, spec: "Local Cloaking", Cap): LC_i is needed
only up to the cap K, so the search may leave an original once a block has
shown it more than K avatars within its radius, one of them strictly inside
(then its own avatar is not the nearest: the Hidden Rate stays exact). The
metric reports ``min(LC_i, K)``, exact whatever the search skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..config import Config
from ..engine.aggregate import at_rank, midpoint_percentiles
from ..engine.folds import pair_distances
from ..engine.search import within
from ..io import ID, persist
from ..stats import Estimate, median_interval, midpoint_ranks
from ..plots import figure, histogram_svg
from .base import MetricResult, whole
from ..schema import Inputs
from ..summaries import ranges_of
from .base import COUNT, Metric

KEY_NAME = "local_cloaking"
SEARCH = "hidden_rate"  # the spec's search name of the tie-break (shared with the Hidden Rate)
BINS = 20  # counts 0..18 each in a bin of their own, 19 and more in the last


def cloaking(inputs: Inputs, cfg: Config) -> DataFrame:
    """ID, ``local_cloaking`` (LC_i) and ``hidden_hit`` per original; computed once per run (cached;
    ``tally`` fills the cache)."""
    if "cloaking" not in inputs.shared:
        variables = inputs.typed()
        ranges = ranges_of(inputs.stats_of("originals", "avatars"), variables)
        radius = pair_distances(inputs.queries(), inputs.avatars, variables, ranges)
        queries = inputs.queries().join(radius, ID)
        cap = cfg.local_cloaking_cap
        counts = within(queries, inputs.avatars, variables, ranges, name=SEARCH, search=cfg.search,
                        n_candidates=inputs.n_avatars, n_queries=inputs.n_queries, cap=cap,
                        whole=whole(inputs, "avatars"))
        out = persist(counts.select(
            ID,
            F.least(F.col("le") - 1, F.lit(cap)).alias("local_cloaking"),
            (F.col("le") - 1 >= cap).alias("local_cloaking_capped"),
            ((F.col("lt") == 0) & (F.col("cid") == F.col(ID))).alias("hidden_hit"),
        ))
        inputs.shared["cloaking_tally"] = tally(out, cap, sampled=inputs.n_sampled is not None)
        counts.unpersist()
        inputs.shared["cloaking"] = out
    return inputs.shared["cloaking"]


# Caps below which the counts of each value of LC_i (at most cap + 1 of them, twice: hit or not)
# come to the driver, one action for both metrics; a larger cap takes an aggregate and the
# percentiles by counting (``engine.aggregate``), which bring no more than their buckets
GROUPED_BELOW = 100_000


@dataclass
class Tally:
    """What the Hidden Rate and the Local Cloaking report of the per-original table."""

    n: int  # originals counted
    hits: int
    zero: int
    capped: int
    lost: int  # originals without their own avatar at their radius (LC_i < 0): must be 0
    bins: list  # originals by LC_i, 0 .. BINS - 2 one bin each, the rest in the last
    median: float | None
    by_value: list | None  # (LC_i, originals) in order: a sampled run's interval around the median


def tally(per: DataFrame, cap: int, sampled: bool) -> Tally:
    """The counts both metrics need, from the first action on ``per`` (which fills its cache)."""
    if cap < GROUPED_BELOW:  # counts per value: everything, exactly, in one action
        rows = per.groupBy("local_cloaking", "hidden_hit").count().collect()
        values: dict[int, int] = {}
        hits = 0
        for value, hit, k in rows:
            values[int(value)] = values.get(int(value), 0) + int(k)
            hits += int(k) if hit else 0
        by_value = sorted(values.items())
        n = sum(values.values())
        median = None
        if n:
            lo, hi = midpoint_ranks(n, 50)
            median = (at_rank(by_value, lo, "local_cloaking") + at_rank(by_value, hi, "local_cloaking")) / 2
        return Tally(n=n, hits=hits, zero=values.get(0, 0), capped=values.get(cap, 0),
                     lost=sum(k for v, k in by_value if v < 0),
                     bins=[sum(k for v, k in by_value if min(v, BINS - 1) == b) for b in range(BINS)],
                     median=median, by_value=by_value if sampled else None)
    row = per.agg(
        F.count(F.lit(1)).alias("n"),
        F.count(F.when(F.col("hidden_hit"), 1)).alias("hits"),
        F.count(F.when(F.col("local_cloaking_capped"), 1)).alias("capped"),
        F.count(F.when(F.col("local_cloaking") == 0, 1)).alias("zero"),
        F.count(F.when(F.col("local_cloaking") < 0, 1)).alias("lost"),
        *[F.count(F.when(F.least(F.col("local_cloaking"), F.lit(BINS - 1)) == b, 1)).alias(f"b{b}") for b in range(BINS)],
    ).collect()[0]
    (median,), _ = midpoint_percentiles(per, "local_cloaking", [50])
    by_value = None
    if sampled:  # (counts by value: at most cap + 1, and at most the originals' count)
        by_value = sorted((int(r[0]), int(r[1])) for r in per.groupBy("local_cloaking").count().collect())
    return Tally(n=int(row["n"]), hits=int(row["hits"]), zero=int(row["zero"]), capped=int(row["capped"]),
                 lost=int(row["lost"]), bins=[int(row[f"b{b}"]) for b in range(BINS)], median=median,
                 by_value=by_value)


def not_aligned(target: float) -> MetricResult:
    return MetricResult.not_computed(
        target, "needs avatars aligned with the originals (avatar i made from original i): avatars_aligned is false")


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if not inputs.aligned:
        return not_aligned(target)
    per = cloaking(inputs, cfg)
    t: Tally = inputs.shared["cloaking_tally"]
    n = inputs.n_queries
    if t.n != n or t.lost:  # each original's own avatar is counted once, at its radius
        raise RuntimeError(f"local cloaking: {t.n} of {n} originals counted, {t.lost} without their own avatar")
    median, cap = t.median, cfg.local_cloaking_cap
    sampled = {}
    if inputs.n_sampled is not None:  # the order statistics around the median
        lo, hi = median_interval(t.by_value)
        sampled = Estimate(median, (lo, hi), n).details()
    result = MetricResult.ok(median, target, {
        "median": median,
        "uncloaked": 100.0 * t.zero / n,
        "n": n,
        "cap": cap,
        "capped": t.capped,
        "median_at_cap": median == cap,
        "histogram": {"lo": 0, "hi": BINS, "counts": list(t.bins)},
        **sampled,
    })
    if cfg.records:
        result.records = per.select(ID, "local_cloaking", "local_cloaking_capped")  # (as the Hidden Rate)
    return result


def reading(m: dict) -> str:
    d = m["details"]
    if m["value"] == 0:
        return (f"At least half of the originals have no other avatar as close to them as their own (median 0): "
                f"{d['uncloaked']:.2f}% are uncloaked, their own avatar is the closest one, alone.")
    capped = (f" The count stops at {d['cap']:g} avatars (local_cloaking_cap): the median is at that cap, so it "
              "is at least that." if d.get("median_at_cap") else "")
    return (f"Half of the originals have at least {m['value']:g} other avatars as close to them as their own "
            f"avatar; {d['uncloaked']:.2f}% have none (their own avatar is the closest one, alone)."
            f"{capped}")


def figures(m: dict) -> list[str]:
    h = m["details"]["histogram"]
    hist = {"lo": h["lo"], "hi": h["hi"], "avatars": h["counts"], "holdout": [0] * len(h["counts"])}
    svg = histogram_svg("plot-local-cloaking", hist, f"avatars at least as close as one's own (last bin: {h['hi'] - 1}+)",
                        m["value"], "median", series=(("avatars", "#1f77b4"),), target=m["target"])
    return [figure(svg, "Originals by the number of other avatars at least as close to them as their own avatar; "
                        "the median and the target are marked.")]


METRIC = Metric(
    key=KEY_NAME,
    title="Local Cloaking",
    target=5,
    unit=COUNT,
    compute=compute,
    reading=reading,
    advice=("Too few avatars surround each original's own avatar: increase k, so that each avatar blends more "
            "individuals and lies among others rather than alone next to its original."),
    needs=frozenset({"alignment"}),
    records=("local_cloaking", "local_cloaking_capped"),
    figures=figures,
)
