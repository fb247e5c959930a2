"""Linkability Protection Rate (spec: "Linkability Protection Rate", seeds 000 and 003).

K is shuffled with the seed and split into K_A (first ceil(|K|/2)) and K_B,
unless the configuration names the halves. Each original's nearest avatar is
searched on K_A and on K_B (ranges over originals and avatars together, ties
broken by the keyed hash, the two halves being two searches). An original is
linked when both searches choose the same avatar.
LPR = 100 * (1 - linked / n).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ..config import Config
from ..engine.search import nearest
from ..io import ID
from ..kernels.keyed import shuffle_key
from ..report import MetricResult
from ..schema import Inputs, Variable, ranges_of

SEARCHES = ("linkability/A", "linkability/B")


def split_known(known, seed: int) -> tuple[list[str], list[str]]:
    """The seeded shuffle of K (order of a keyed hash of each name), cut in two."""
    shuffled = sorted(known, key=lambda name: shuffle_key(seed, name))
    cut = (len(shuffled) + 1) // 2
    return shuffled[:cut], shuffled[cut:]


def compute(spark: SparkSession, inputs: Inputs, cfg: Config) -> MetricResult:
    target = cfg.targets["linkability_protection_rate"]
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

    stats = [inputs.stats["originals"], inputs.stats["avatars"]]
    results = []
    records = None
    try:
        for name, half in zip(SEARCHES, halves):
            variables = [Variable(v, inputs.variables[v]) for v in half]
            res = nearest(
                inputs.originals,
                inputs.avatars,
                variables,
                ranges_of(stats, variables),
                search_name=name,
                seed=cfg.seed,
                block_size=cfg.block_size,
                n_candidates=inputs.n_avatars,
                query_partitions=cfg.query_partitions,
            )
            results.append(res)
        a = results[0].select(ID, F.col("cid").alias("ca"), F.col("n1").alias("na"))
        b = results[1].select(ID, F.col("cid").alias("cb"), F.col("n1").alias("nb"))
        pairs = a.join(b, ID)
        if cfg.records:
            records = pairs.select(
                ID,
                (F.col("ca") == F.col("cb")).alias("lpr_linked"),
                F.col("ca").alias("lpr_avatar_a"),
                F.col("cb").alias("lpr_avatar_b"),
            ).cache()
            records.count()
        row = pairs.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum((F.col("ca") == F.col("cb")).cast("long")).alias("linked"),
            F.sum((F.col("na") > 1).cast("long")).alias("ties_a"),
            F.sum((F.col("nb") > 1).cast("long")).alias("ties_b"),
        ).collect()[0]
    finally:
        for r in results:
            r.unpersist()

    n = inputs.n_originals
    if row["n"] != n:
        raise RuntimeError(f"linkability searches returned {row['n']} of {n} originals")
    linked = int(row["linked"] or 0)
    result = MetricResult.ok(
        100.0 * (1.0 - linked / n),
        target,
        {
            "halves": halves,
            "halves_from": how,
            "linked": linked,
            "n": n,
            "queries_with_ties": [int(row["ties_a"] or 0), int(row["ties_b"] or 0)],
        },
    )
    result.records = records
    return result
