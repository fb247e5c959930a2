"""Linkability Protection Rate (spec: "Linkability Protection Rate", seeds 000 and 003).

K is shuffled with the seed and split into K_A (first ceil(|K|/2)) and K_B,
unless the configuration names the halves. Each original's nearest avatar is
searched on K_A and on K_B (ranges over originals and avatars together, ties
broken by the keyed hash, the two halves being two searches). An original is
linked when both searches choose the same avatar.
LPR = 100 * (1 - linked / n).
"""

from __future__ import annotations

import logging

from pyspark.sql import functions as F

from ..config import Config
from ..engine.search import nearest
from ..io import ID
from ..kernels.keyed import shuffle_key
from ..plots import bars_svg, figure
from .base import MetricResult, whole
from ..schema import Inputs
from ..summaries import ranges_of
from .base import Metric
from .sampled import rate_details

KEY_NAME = "linkability_protection_rate"

SEARCHES = ("linkability/A", "linkability/B")

# Avatars tied at the nearest distance, per original on average, above which a
# half is called coarse in the log (each tie is hashed for the tie-break).
COARSE_TIES = 1000

log = logging.getLogger("avatar_metrics")


def split_known(known, seed: int) -> tuple[list[str], list[str]]:
    """The seeded shuffle of K (order of a keyed hash of each name), cut in two."""
    shuffled = sorted(known, key=lambda name: shuffle_key(seed, name))
    cut = (len(shuffled) + 1) // 2
    return shuffled[:cut], shuffled[cut:]


def compute(inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets[KEY_NAME]
    if cfg.linkability_halves:
        halves = [list(cfg.linkability_halves[0]), list(cfg.linkability_halves[1])]
        how = "configured"
    else:
        if len(inputs.known) < 2:
            return MetricResult.not_computed(
                target,
                f"needs at least two known variables, got {len(inputs.known)}: set known_variables (or linkability_halves)",
            )
        halves = list(split_known(inputs.known, cfg.seed))
        how = "shuffled with the seed"

    stats = inputs.stats_of("originals", "avatars")
    results = []
    records = None
    try:
        for name, half in zip(SEARCHES, halves):
            variables = inputs.typed(half)
            res = nearest(inputs.queries(), inputs.avatars, variables, ranges_of(stats, variables),
                          name=name, search=cfg.search, n_candidates=inputs.n_avatars,
                          n_queries=inputs.n_queries, first_only=True, whole=whole(inputs, "avatars"))  # cid, n1 only
            results.append(res)
        a = results[0].select(ID, F.col("cid").alias("ca"), F.col("n1").alias("na"))
        b = results[1].select(ID, F.col("cid").alias("cb"), F.col("n1").alias("nb"))
        pairs = a.join(b, ID)
        if cfg.records:  # computed in the records step, from the searches kept until then (``holds``)
            records = pairs.select(
                ID,
                (F.col("ca") == F.col("cb")).alias("lpr_linked"),
            )  # whether, never which avatar: it carries the original's known values (spec: "Small groups")
        row = pairs.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum((F.col("ca") == F.col("cb")).cast("long")).alias("linked"),
            F.sum((F.col("na") > 1).cast("long")).alias("ties_a"),
            F.sum((F.col("nb") > 1).cast("long")).alias("ties_b"),
            F.sum("na").alias("pairs_a"),
            F.sum("nb").alias("pairs_b"),
        ).collect()[0]
        n = inputs.n_queries
        if row["n"] != n:
            raise RuntimeError(f"linkability searches returned {row['n']} of {n} originals")
    except BaseException:
        records = None
        raise
    finally:
        if records is None:
            for r in results:
                r.unpersist()
    linked = int(row["linked"] or 0)
    tied = [int(row["pairs_a"] or 0), int(row["pairs_b"] or 0)]
    for half, pairs in zip(halves, tied):
        if n and pairs / n > COARSE_TIES:
            log.warning(
                "linkability: the half %s ties each original with %.0f avatars on average at its nearest distance "
                "(%d pairs): the spec's tie-break hashes every one, so this search costs about n x %.0f hashes. "
                "Halves this coarse also make the rate say little: add variables to the halves "
                "(linkability_halves, known_variables) to make them finer.",
                half, pairs / n, pairs, pairs / n)
    result = MetricResult.ok(
        100.0 * (1.0 - linked / n),
        target,
        {
            "halves": halves,
            "halves_from": how,
            "linked": linked,
            "n": n,
            "queries_with_ties": [int(row["ties_a"] or 0), int(row["ties_b"] or 0)],
            "tied_pairs": tied,
            **rate_details(inputs, linked, n),
        },
    )
    result.records, result.holds = records, results
    return result


def reading(m: dict) -> str:
    d = m["details"]
    return (f"{m['value']:.2f}% of the originals are not linked to the same avatar from two halves of the "
            f"attacker's knowledge ({d['linked']} of {d['n']} are).")


def figures(m: dict) -> list[str]:
    d = m["details"]
    bars = bars_svg("plot-linkability", [("linked", d["linked"]), ("not linked", d["n"] - d["linked"])],
                    max(d["n"], 1), None, "originals")
    return [figure(bars, "Originals linked to the same avatar from both halves of the known variables.")]


METRIC = Metric(
    key=KEY_NAME,
    title="Linkability Protection Rate",
    target=90,
    compute=compute,
    reading=reading,
    advice=("Increase k, the number of neighbours each avatar is made from: avatars blended from more "
            "individuals cannot be linked back through two separate sources."),
    needs=frozenset({"known"}),
    records=("lpr_linked",),
    figures=figures,
)
