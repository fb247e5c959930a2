"""Exact, partitioning-independent aggregates that Spark's own do not give.

Spark's ``avg`` and ``stddev`` sum doubles in partition order, so their last
bits depend on partitioning. Here Spark sums the integer parts of the values
per exponent (``exact_summaries``) and the driver adds those integers: exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ..io import col
from .carried import carry
from ..stats import Ranking, midpoint_ranks
from ..kernels.exact import SHIFT, recompose  # M = hi * 2**SHIFT + lo

NOT_FINITE = 9999  # the exponent that marks an infinite value (refused)


def _parts(x: Column) -> list[Column]:
    """Exponent e and the integer M = x * 2**(53 - e) of a finite non-zero double, in Spark SQL.

    ``log2`` only guesses e; two exact comparisons with powers of two fix it
    (Java's ``Math.pow`` is exact when both arguments are integers and the
    result is a double). The scaling is done in two factors so that neither
    overflows, and each product is exact: the result is an integer below 2**53.
    """
    ax = F.abs(x)
    guess = (F.floor(F.log2(ax)) + 1).cast("int")
    e = (F.when(ax >= F.pow(F.lit(2.0), guess), guess + 1)
         .when(ax < F.pow(F.lit(2.0), guess - 1), guess - 1)
         .otherwise(guess))
    shift = F.lit(53) - e
    half = F.floor(shift / 2).cast("int")
    M = (x * F.pow(F.lit(2.0), half) * F.pow(F.lit(2.0), shift - half)).cast("long")
    return [e, M]


@dataclass(frozen=True)
class Summary:
    """Exact sum and count of a column's non-null values, and its smallest and largest (None when none)."""

    total: Fraction
    n: int
    lo: float | None
    hi: float | None


def exact_summaries(df: DataFrame, columns: Mapping[str, Column]) -> dict[str, Summary]:
    """Exact sum, count and range of the non-null values of each column expression.

    Each value is split into its exponent and an integer mantissa, the
    mantissas are added per (column, exponent) in 64-bit integers (high and
    low halves apart, so no sum overflows), and the driver adds the few
    parts as a rational number: the same total in any order, on any
    partitioning (the idea of ``kernels.exact``, in Spark SQL: no Python
    worker, one Spark action).
    """
    names = list(columns)
    if not names:
        return {}
    return weighted_summaries(long_values(df, columns).withColumn("w", F.lit(1).cast("long")), names)


def long_values(df: DataFrame, columns: Mapping[str, Column]) -> DataFrame:
    """Rows (var, x): each record's value of each column expression as a double, ``var`` its position."""
    cells = F.explode(F.array(*[
        F.struct(F.lit(i).alias("var"), c.cast("double").alias("x")) for i, c in enumerate(columns.values())
    ]))
    return df.select(cells.alias("c")).select("c.var", "c.x")


def weighted_summaries(values: DataFrame, names: Sequence[str]) -> dict[str, Summary]:
    """``exact_summaries`` of values given as rows (var, x, w): ``w`` times the value ``x`` of ``names[var]``.

    A table of distinct values with their counts gives the statistics of the
    records they stand for, exactly: a mantissa times a count is an integer,
    and the high and low halves of the products add up to no more than those
    of the records would (null ``x`` left out, ``w`` at least 1).
    """
    values = values.filter(F.col("x").isNotNull())
    zero = F.col("x") == 0
    bad = F.abs(F.col("x")) == F.lit(float("inf"))
    e, M = _parts(F.col("x"))
    parts = values.select(
        "var", "x", "w",
        F.when(zero, F.lit(0)).when(bad, F.lit(NOT_FINITE)).otherwise(e).alias("e"),
        F.when(zero | bad, F.lit(0).cast("long")).otherwise(M).alias("M"),
    )
    hi = F.shiftright(F.col("M"), SHIFT)
    agg = (
        parts.groupBy("var", "e")
        .agg(F.sum(hi * F.col("w")).alias("hi"), F.sum((F.col("M") - F.shiftleft(hi, SHIFT)) * F.col("w")).alias("lo"),
             F.sum("w").alias("n"), F.min("x").alias("xmin"), F.max("x").alias("xmax"))
        .collect()
    )
    if any(r["e"] == NOT_FINITE for r in agg):
        raise ValueError("exact sums need finite values")
    out: dict[str, Summary] = {}
    for i, name in enumerate(names):
        rows = [r for r in agg if r["var"] == i]
        total = recompose((r["e"], r["hi"], r["lo"]) for r in rows)
        out[name] = Summary(total, int(sum(r["n"] for r in rows)),
                            min((r["xmin"] for r in rows), default=None), max((r["xmax"] for r in rows), default=None))
    return out


def summaries_of_rows(rows, names: Sequence[str]) -> dict[str, Summary]:
    """``weighted_summaries`` of rows (var, x, w) already in the driver: the same exact totals,
    counts and ranges (a rational sum is one number whatever the order it is added in)."""
    out: dict[str, Summary] = {}
    for i, name in enumerate(names):
        xs = [(float(x), int(w)) for var, x, w in rows if var == i and x is not None]
        if any(not math.isfinite(x) for x, _ in xs):
            raise ValueError("exact sums need finite values")
        out[name] = Summary(sum((Fraction(x) * w for x, w in xs), Fraction(0)), sum(w for _, w in xs),
                            min((x for x, _ in xs), default=None), max((x for x, _ in xs), default=None))
    return out


def midpoint_percentiles(df: DataFrame, column: str, qs) -> tuple[list[float | None], int]:
    """Exact percentiles with midpoint interpolation, computed by Spark.

    With m sorted values x and h = (m - 1) * q / 100:
    Q = (x[floor h] + x[ceil h]) / 2. Each x[k] is an element of the data,
    picked by ``percentile_disc((k + 0.5) / m)``; only those elements reach
    the driver. Returns the percentiles (None when there are no values) and m.
    """
    return percentiles_of(df, {column: qs})[column]


@dataclass(frozen=True)
class Counting:
    """How ``percentiles_of`` counts: buckets per column and round; a bucket of more values than
    ``collect`` that holds the element sought is cut again rather than collected; after
    ``rounds`` rounds, what is left goes to ``percentile_disc``. The work changes with them,
    never a result (the tests take every path with small ones)."""

    buckets: int = 4096
    collect: int = 100_000
    rounds: int = 8


COUNTING = Counting()


def percentiles_of(df: DataFrame, wanted: Mapping[str, Sequence[float]], counting: Counting = COUNTING,
                   rows: int | None = None) -> dict[str, tuple[list[float | None], int]]:
    """``midpoint_percentiles`` of several columns, each element found by counting, not sorting.

    Null values are left out. The first action counts each column's values and
    takes their min and max; a column of at most ``counting.collect`` values then
    sends its distinct values, with their counts, to the driver in one action
    (``_collected``). For the others, per round, one action counts the values of
    the ranges still sought in equal-width buckets (monotone in the value, so
    each bucket is the range [its min, its max]), and the element of rank k
    lies in the bucket where the counts pass k. A bucket of one value gives it;
    one of at most ``counting.collect`` values sends them, with their counts, to the
    driver, which ranks them; a larger one is cut again in the next round.
    Spark's ``percentile_disc`` brings every distinct value of a column, with
    its count, to one task; this reads the table a few times and keeps counts. Columns with
    NaN or infinite values take ``percentile_disc`` (its order: NaN last), and
    so do the elements not found in ``counting.rounds`` rounds (values spread over
    many orders of magnitude). ``rows``, at most ``counting.collect``: the caller knows ``df``
    has at most that many records; then every column's distinct values, with their counts,
    come in one action, and the driver ranks them all (``_values``), NaN last. The elements
    are the same either way; ``rows`` only picks the way.
    """
    names = list(wanted)

    def pairs(c, m):
        return [midpoint_ranks(m, q) for q in wanted[c]]

    found, counts = _by_rank(df, names, lambda c, m: _ranks(pairs(c, m)) if m else [], counting, rows)
    return {c: ([(found[(c, lo)] + found[(c, hi)]) / 2 for lo, hi in pairs(c, m)] if m
                else [None for _ in wanted[c]], m)
            for c, m in counts.items()}


def elements_of(df: DataFrame, ranks: Mapping[str, Sequence[int]], counting: Counting = COUNTING,
                rows: int | None = None) -> dict[tuple[str, int], float]:
    """The elements of 0-based rank k, for each k of ``ranks[c]``, among the non-null values of each
    column c (as ``percentiles_of`` finds them: by counting, or in one action with ``rows``):
    ``{(c, k): value}``."""
    def wanted(c, m):
        if any(not 0 <= k < m for k in ranks[c]):
            raise ValueError(f"ranks {list(ranks[c])} of {c}: it has {m} values")
        return sorted(set(ranks[c]))

    return _by_rank(df, list(ranks), wanted, counting, rows)[0]


def _by_rank(df: DataFrame, names: Sequence[str], wanted, counting: Counting, rows: int | None):
    """({(c, k): element}, {c: m}): each column's number m of non-null values, and its elements
    of the ranks ``wanted(c, m)``. Every value in one action when ``rows``, the caller's bound
    on the records, is at most ``counting.collect``; else a first count, then rounds of counting."""
    if rows is not None and rows <= counting.collect:
        values = _values(df, names)
        counts = {c: sum(n for _, n in values[c]) for c in names}
        return {(c, k): at_rank(values[c], k, c) for c in names for k in wanted(c, counts[c])}, counts
    first = _first(df, names)
    counts = {c: first[c][0] for c in names}
    return _elements(df, first, {c: ks for c in names if (ks := wanted(c, counts[c]))}, counting), counts


def _first(df: DataFrame, names: Sequence[str]) -> dict[str, tuple]:
    """One action: per column, (values, min, max, NaN count, position among ``names``)."""
    row = df.agg(*[a for i, c in enumerate(names) for a in (
        F.count(col(c)).alias(f"m{i}"), F.min(col(c)).alias(f"lo{i}"), F.max(col(c)).alias(f"hi{i}"),
        F.count(F.when(F.isnan(col(c).cast("double")), 1)).alias(f"nan{i}"))]).collect()[0]
    return {c: (int(row[f"m{i}"]), row[f"lo{i}"], row[f"hi{i}"], row[f"nan{i}"], i) for i, c in enumerate(names)}


def _elements(df: DataFrame, first: dict, ranks: Mapping[str, Sequence[int]], counting: Counting) -> dict:
    """The elements of the given ranks, by rounds of counting (``percentiles_of``)."""
    sought, slow = {}, []
    for c, ks in ranks.items():
        m, lo, hi, nan, _ = first[c]
        lo, hi = float(lo), float(hi)
        if nan or not (math.isfinite(lo) and math.isfinite(hi)):
            slow.append(c)
            continue
        for k in ks:
            sought[(c, k)] = (lo, hi, k)  # the element of rank k among the values in [lo, hi]
    plan = lambda cs: {c: (first[c][4], first[c][0], ranks[c]) for c in cs}
    found = _disc(df, plan(slow)) if slow else {}
    # a column of at most counting.collect values: its values and their counts, all at once (no
    # bucket round, and no range that a plan would have to carry)
    few = sorted({c for c, _ in sought if first[c][0] <= counting.collect})
    if few:
        found.update(_collected(df, few, {key: k for key, (_, _, k) in sought.items() if key[0] in few}))
        sought = {key: v for key, v in sought.items() if key[0] not in few}
    for _ in range(counting.rounds):
        if not sought:
            break
        found.update(_bucket_round(df, sought, counting))
    if sought:  # values spread over many scales (each round narrows by the buckets): percentile_disc
        late = {c for c, _ in sought}
        found.update({key: v for key, v in _disc(df, plan(late)).items() if key in sought})
    return found


def _collected(df: DataFrame, columns: Sequence[str], ranks: Mapping[tuple[str, int], int]) -> dict:
    """The elements of the given 0-based ranks among each column's non-null values, from its
    distinct values and their counts, collected in one action: {(column, k): value}."""
    values = _values(df, columns)
    return {key: at_rank(values[key[0]], rank, key[0]) for key, rank in ranks.items()}


def _values(df: DataFrame, names: Sequence[str]) -> dict[str, list[tuple[float, int]]]:
    """Each column's distinct non-null values with their counts, in one action, in
    ``percentile_disc``'s order (NaN last): {column: [(value, count), ...]}."""
    tagged = [F.when(col(c).isNotNull(), F.struct(F.lit(j).alias("j"), col(c).cast("double").alias("x")))
              for j, c in enumerate(names)]
    rows = (_tagged(df, tagged).groupBy(F.col("t.j").alias("j"), F.col("t.x").alias("x"))
            .agg(F.count(F.lit(1)).alias("n")).collect())
    values: dict[str, list] = {c: [] for c in names}
    for row in rows:
        values[names[row["j"]]].append((float(row["x"]), int(row["n"])))
    return {c: sorted(v, key=lambda p: (math.isnan(p[0]), p[0])) for c, v in values.items()}


def at_rank(ordered: Sequence[tuple[float, int]], rank: int, column: str) -> float:
    """The value of 0-based ``rank`` among ``(value, count)`` pairs in increasing order."""
    seen = 0
    for x, n in ordered:
        seen += n
        if seen > rank:
            return x
    raise RuntimeError(f"percentiles: rank {rank} is past the {seen} values of {column}")


def _ranks(pairs) -> list[int]:
    """The ranks whose elements the midpoint pairs need, each once."""
    return sorted({k for pair in pairs for k in pair})


def _tagged(df: DataFrame, tagged: list) -> DataFrame:
    """One row ``t`` per non-null struct of ``tagged`` per record (a record may be in several ranges)."""
    return df.select(F.explode(F.filter(F.array(*tagged), lambda t: t.isNotNull())).alias("t"))


def _bucket_round(df: DataFrame, sought: dict, counting: Counting) -> dict:
    """One round of ``percentiles_of``: finds what it can of ``sought`` and narrows the rest in place."""
    ranges = sorted({(key[0], lo, hi) for key, (lo, hi, _) in sought.items()})
    number = {rng: r for r, rng in enumerate(ranges)}
    buckets = counting.buckets
    widths = {}
    for r, (c, lo, hi) in enumerate(ranges):
        width = hi / buckets - lo / buckets if hi > lo else 1.0  # finite; hi - lo may overflow
        widths[r] = width if width > 0 else hi - lo
    # the ranges' ends are values of the data: carried as data (engine.carried), not in the plan
    df, v = carry(df, {f"{part}{r}": x for r, (_, lo, hi) in enumerate(ranges)
                       for part, x in (("lo", lo), ("hi", hi), ("w", widths[r]))})
    tagged = []
    for r, (c, lo, hi) in enumerate(ranges):
        x = col(c).cast("double")
        # monotone in x: a difference, a division by a positive number, a clamp and floor all are
        b = F.floor(F.least((x - v[f"lo{r}"]) / v[f"w{r}"], F.lit(float(buckets - 1)))).cast("int")
        inside = (x >= v[f"lo{r}"]) & (x <= v[f"hi{r}"])
        tagged.append(F.when(inside, F.struct(F.lit(r).alias("r"), b.alias("b"), x.alias("x"))))
    cells = (_tagged(df, tagged)
             .groupBy(F.col("t.r").alias("r"), F.col("t.b").alias("b"))
             .agg(F.count(F.lit(1)).alias("n"), F.min("t.x").alias("lo"), F.max("t.x").alias("hi"))
             .collect())
    per = {}
    for row in cells:
        per.setdefault(row["r"], []).append((row["b"], row["n"], row["lo"], row["hi"]))
    found, collect = {}, {}
    for key, (lo, hi, k) in list(sought.items()):
        r = number[(key[0], lo, hi)]
        before = 0
        for _, n, blo, bhi in sorted(per.get(r, [])):
            if before + n > k:
                break
            before += n
        else:
            raise RuntimeError(f"percentiles: rank {k} is past the {before} values of {key[0]}")
        if blo == bhi:
            found[key] = float(blo)
            del sought[key]
        elif n <= counting.collect:
            collect.setdefault((key[0], float(blo), float(bhi)), []).append((key, k - before))
            del sought[key]
        else:
            sought[key] = (float(blo), float(bhi), k - before)
    if collect:
        parts = list(collect)
        df, v = carry(df, {f"{end}{j}": x for j, (_, lo, hi) in enumerate(parts) for end, x in (("lo", lo), ("hi", hi))})
        tagged = []
        for j, (c, _, _) in enumerate(parts):
            x = col(c).cast("double")
            tagged.append(F.when((x >= v[f"lo{j}"]) & (x <= v[f"hi{j}"]), F.struct(F.lit(j).alias("j"), x.alias("x"))))
        rows = (_tagged(df, tagged)
                .groupBy(F.col("t.j").alias("j"), F.col("t.x").alias("x")).agg(F.count(F.lit(1)).alias("n"))
                .collect())
        values = {}
        for row in rows:
            values.setdefault(row["j"], []).append((float(row["x"]), int(row["n"])))
        for j, part in enumerate(parts):
            ordered = sorted(values.get(j, []))
            for key, rank in collect[part]:
                found[key] = at_rank(ordered, rank, key[0])
    return found


def _disc(df: DataFrame, plan: dict) -> dict:
    """Elements by ``percentile_disc`` (NaN sorts last): {(column, k): value}; ``plan[c]`` is
    (position, values, ranks)."""
    exprs = []
    for c, (i, m, ks) in plan.items():
        name = "`" + c.replace("`", "``") + "`"
        for k in ks:
            exprs.append(F.expr(f"percentile_disc(CAST({(k + 0.5) / m!r} AS DOUBLE)) WITHIN GROUP (ORDER BY {name})")
                         .alias(f"p{i}_{k}"))
    row = df.agg(*exprs).collect()[0]
    return {(c, k): float(row[f"p{i}_{k}"]) for c, (i, m, ks) in plan.items() for k in ks}


def kth_smallest_pairs(df: DataFrame, key: str, tie: str, k: int) -> tuple[int, int]:
    """The (key, tie) pair of rank ``k`` (0-based) in (key, tie) order; both long.

    Counts per bucket of the key's top 16 bits reach the driver, then the pairs
    of the one bucket that holds rank k: no sort of the whole table.
    """
    buckets = (
        df.groupBy(F.shiftright(F.col(key), 48).alias("b"))
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    )
    before = 0
    for r in sorted(buckets, key=lambda r: r["b"]):
        if before + r["n"] > k:
            rows = df.filter(F.shiftright(F.col(key), 48) == r["b"]).select(key, tie).collect()
            pairs = sorted((int(x[key]), int(x[tie])) for x in rows)
            return pairs[k - before]
        before += r["n"]
    raise ValueError(f"rank {k} is past the {before} records")


def _bin(col, lo: Column, width: Column, bins: int):
    return F.least(F.greatest(F.floor((col - lo) / width), F.lit(0)), F.lit(bins - 1)).cast("int")


Axis = tuple[str, float, float, int]  # column, lo, hi, bins


def histogram_top(*largest: float | None) -> float:
    """The upper edge of histograms of distances from 0: the largest of the values given (None
    left out), and at least 1e-9, so that every bin has a width."""
    return max([float(x) for x in largest if x is not None] + [1e-9])


def histograms_of(df: DataFrame, wanted: Mapping[str, Sequence[Axis]],
                  counts: Mapping[str, Column] | None = None) -> dict[str, list | int]:
    """Counts per bin of several histograms in one Spark action.

    Each histogram has one axis (a list of counts) or two (counts[i][j]:
    records in bin i of the first axis and bin j of the second); a record
    counts where none of its axis columns is null. Values outside [lo, hi]
    go to the end bins. ``counts``: conditions whose records are counted in
    the same action (a histogram of one bin), each an int under its name.
    """
    counts = dict(counts or {})
    if set(counts) & set(wanted):
        raise ValueError(f"histograms_of: {sorted(set(counts) & set(wanted))} named as a histogram and a count")
    names = list(wanted)
    # the axes' ends may be statistics of the data (the largest distance): carried as data
    edges = {}
    for h, name in enumerate(names):
        for a, (_, lo, hi, bins) in enumerate(wanted[name]):
            edges[f"lo{h}_{a}"], edges[f"w{h}_{a}"] = lo, (hi - lo) / bins if hi > lo else 1.0
    df, v = carry(df, edges)
    cells = []
    for h, name in enumerate(names):
        axes = wanted[name]
        cell = F.lit(0)
        present = F.lit(True)
        for a, (c, lo, hi, bins) in enumerate(axes):
            cell = cell * F.lit(bins) + _bin(col(c), v[f"lo{h}_{a}"], v[f"w{h}_{a}"], bins)
            present = present & col(c).isNotNull()
        cells.append(F.struct(F.lit(h).alias("h"), F.when(present, cell).alias("cell")))
    for j, condition in enumerate(counts.values()):
        cells.append(F.struct(F.lit(len(names) + j).alias("h"), F.when(condition, F.lit(0)).alias("cell")))
    rows = (df.select(F.explode(F.array(*cells)).alias("x")).select("x.*").filter(F.col("cell").isNotNull())
            .groupBy("h", "cell").count().collect())
    out = {}
    for h, name in enumerate(names):
        axes = wanted[name]
        flat = [0] * math.prod(bins for *_, bins in axes)
        for r in rows:
            if r["h"] == h:
                flat[r["cell"]] = int(r["count"])
        if len(axes) == 2:
            width = axes[1][3]
            flat = [flat[i * width:(i + 1) * width] for i in range(axes[0][3])]
        out[name] = flat
    for j, name in enumerate(counts):
        out[name] = sum(int(r["count"]) for r in rows if r["h"] == len(names) + j)
    return out


def mann_whitney(df: DataFrame, score: str, positive: str) -> Ranking:
    """The exact Mann-Whitney counts of ``score`` (non-null doubles, no NaN) between the rows where
    ``positive`` is true and the others, ties counted half.

    Spark counts each group's records per distinct score, then range-partitions the distinct
    scores: every partition holds one interval of them, which its task sorts to count its own
    pairs; the driver adds the pairs across partitions from each partition's totals. No task
    holds more than its share of the distinct scores, and the counts are integers: the result
    is the same on any partitioning.
    """
    s = col(score)
    counts = (df.groupBy(s.alias("s"))
              .agg(F.count(F.when(col(positive), 1)).cast("long").alias("p"),
                   F.count(F.when(~col(positive), 1)).cast("long").alias("q"))
              .repartitionByRange("s"))

    def run(batches):
        import numpy as np
        import pandas as pd

        frames = [b for b in batches if len(b)]
        if not frames:
            return
        pdf = pd.concat(frames).sort_values("s")
        p, q = pdf["p"].to_numpy(np.int64), pdf["q"].to_numpy(np.int64)
        after = int(q.sum()) - np.cumsum(q)  # negatives of a greater score, in this partition
        wins2 = int(np.sum(2 * p * after + p * q))
        yield pd.DataFrame({"lo": [float(pdf["s"].iloc[0])], "p": [int(p.sum())], "q": [int(q.sum())],
                            "wins2": [wins2]})

    parts = sorted((r["lo"], r["p"], r["q"], r["wins2"]) for r in
                   counts.mapInPandas(run, "lo double, p long, q long, wins2 long").collect())
    wins2, later = 0, sum(q for _, _, q, _ in parts)
    for _, p, q, w in parts:
        later -= q
        wins2 += w + 2 * p * later
    return Ranking(sum(p for _, p, _, _ in parts), sum(q for _, _, q, _ in parts), wins2)
