"""The blocks' catalogue (``engine.search``): the candidates cut into blocks by locality
(``_by_locality``, ``_locality_order``), each block's
summary and categorical values computed by Spark in one job (``_need`` -> ``Need``), the
lower bounds and marks a query takes from them, where its sort key falls among the
blocks (``Need.ranged``), and its home block (``_homes``)."""

from __future__ import annotations

import itertools
import math
import pickle
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from ..io import ID
from ..kernels.gower import Space
from ..kernels.terms import Summary, lower_bounds

from .blocks import Block, encode


# in the home job: 1 for a candidate's row, 0 for a query's; where a row goes; the
# position of the block whose range holds a query's sort key (``Need.ranged``)
RANGED = "__am_ranged"


def _homes(need: Need, pdf: pd.DataFrame, variables, space: Space) -> np.ndarray:
    """Per query, its home block: one of least lower bound, the block whose range of the
    blocks' sort holds the query's own key when it is one of them (``RANGED``, from
    ``Need.ranged``), else one picked by a hash of its id (queries alike spread over the
    blocks alike). Any choice gives the same result; a near one gives a small first reach,
    so that few blocks are left to search. Many queries tie at a lower bound of 0 (at
    5,000,000 default-shape records, 61 %), and a hash pick among the tied blocks often
    lands on one far from the query (``bench/homes.py``)."""
    lb = np.nan_to_num(need.bounds(pdf, variables, space), nan=np.inf)
    tied = lb <= lb.min(axis=1, keepdims=True)
    count = tied.sum(axis=1).astype(np.uint64)
    mixed = pdf[ID].to_numpy(dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    pick = (mixed >> np.uint64(32)) % np.maximum(count, np.uint64(1))
    j = np.argmax(tied & (np.cumsum(tied, axis=1) - 1 == pick[:, None].astype(np.int64)), axis=1)
    if RANGED in pdf.columns and len(pdf):
        own = pdf[RANGED].to_numpy(dtype=np.float64, na_value=np.nan)
        ok = (own >= 0) & (own < len(need.blocks))  # (NaN: not known)
        at = np.where(ok, own, 0).astype(np.int64)
        j = np.where(ok & tied[np.arange(len(pdf)), at], at, j)
    return np.asarray(need.blocks, dtype=np.int64)[j]


def _level_counts(c: DataFrame, variables) -> dict[str, int]:
    """Per categorical column (``v0, v1, ...``), its number of values over all the candidates,
    approximately (HyperLogLog, 5 % relative error): one Spark job, none without a categorical."""
    cats = [f"v{i}" for i, v in enumerate(variables) if v.kind == "categorical"]
    if not cats:
        return {}
    row = c.agg(*[F.approx_count_distinct(x).alias(x) for x in cats]).first()
    return {x: int(row[x]) for x in cats}


def _locality_order(c: DataFrame, variables, levels: dict[str, int] | None = None) -> list[str]:
    """The variables' columns in the order the blocks sort the candidates: categories of
    most levels first (``levels``, or ``_level_counts``), then numbers."""
    levels = _level_counts(c, variables) if levels is None else levels
    cats = sorted(levels, key=lambda x: -levels[x])
    return [*cats, *(f"v{i}" for i, v in enumerate(variables) if v.kind != "categorical")]


HASHED = "__am_hashed"


def _sort_key(order: Sequence[str]):
    """A record's place in the blocks' sort: its ``order`` columns, then a hash of its id
    (so that equal records spread over blocks), as one struct (Spark's ordering of structs
    is that of the sort: field by field, nulls first, NaN last)."""
    return F.struct(*[F.col(x).alias(x) for x in order], F.xxhash64(F.col(ID)).alias(HASHED))


def _by_locality(c: DataFrame, variables, n_blocks: int, order: Sequence[str] | None = None) -> DataFrame:
    """The candidates with ``__am_block``: ranges of the candidates sorted by their
    categories, those of most levels first, then their numbers (then a hash of
    the id, so that equal records spread over blocks): ``_locality_order``, unless
    ``order`` is given. Records of a block share
    values, so a block's summary bounds the distance of a query far from them
    well. Which block a record lands in never changes a result, only the work."""
    order = _locality_order(c, variables) if order is None else order
    # (one struct: ``Need.ranged`` compares it with each block's least; Spark may make fewer
    # ranges than asked, never more; the least() keeps every id among the blocks)
    return c.repartitionByRange(n_blocks, _sort_key(order)).withColumn(
        "__am_block", F.least(F.spark_partition_id(), F.lit(n_blocks - 1)))


# The blocks each query must search after its home, as bits of long columns
NEED = "__am_need"


NEED_BITS = 62


# A block's categorical of more values than this has no value list in its summary (no bound
# from it); nor has one whose values over all blocks are more than MAX_UNION
MAX_LEVELS = 20_000


MAX_UNION = 200_000


def need_column(k: int) -> str:
    return f"{NEED}{k}"


@dataclass
class Need:
    """What the home job needs to pick each query's home and mark the blocks it must search later.

    Per block: its summary, its number of candidates and, per categorical, the
    values it holds (``None``: not recorded, any value may occur), computed by
    Spark over every block before any is fetched (``_need``). A query must
    search block b when b's lower bound does not exceed its reach after its
    home; the later jobs read only the queries marked for their blocks, so a
    query's unneeded blocks cost it nothing, not even a pass. Each block, in
    the home job and when fetched, is checked against its summary (``check``):
    a mark from a summary that did not cover the block could drop a candidate
    that matters.
    """

    blocks: list[int]
    summaries: list[Summary]
    values: list[list]  # per block, per variable: a list of values, or None
    unions: list  # per variable: pd.Index of every recorded value, or None
    present: list[list]  # per block, per variable: bool over the union and a last False, or None
    words: int
    rows: list[int] = field(default_factory=list)  # per block, its candidates
    order: list | None = None  # the blocks' sort (``_locality_order``), when they are ranges of it
    lows: list | None = None  # per block, its least sort key (a tuple), with ``order``

    @property
    def columns(self) -> list[str]:
        return [need_column(k) for k in range(self.words)]

    def bits(self, pdf: pd.DataFrame, variables, reach: np.ndarray, space: Space) -> np.ndarray:
        """Per query, the bits of the blocks whose lower bound does not exceed ``reach``."""
        out = np.zeros((len(pdf), self.words), dtype=np.int64)
        for j, lb in enumerate(self.bounds(pdf, variables, space).T):
            b = self.blocks[j]
            out[:, b // NEED_BITS] |= (~(lb > reach)).astype(np.int64) << np.int64(b % NEED_BITS)
        return out

    def bounds(self, pdf: pd.DataFrame, variables, space: Space) -> np.ndarray:
        """Per query and block (in the order of ``blocks``), the block's lower bound."""
        out = np.empty((len(pdf), len(self.blocks)))
        # a category 0: a value the block may hold; -1 (below): one it lacks; NaN: null
        base = encode(pdf, variables, lambda i, col: np.zeros(len(col)))
        codes = {i: self.unions[i].get_indexer(pdf[f"v{i}"])  # -1: in no block's list
                 for i, v in enumerate(variables) if v.kind != "numeric" and self.unions[i] is not None}
        for j in range(len(self.blocks)):
            Q = base
            for i, g in codes.items():
                held = self.present[j][i]
                if held is not None:
                    Q = Q.copy() if Q is base else Q
                    Q[:, i] = np.where(held[g] | np.isnan(base[:, i]), base[:, i], -1.0)  # a null stays NaN
            out[:, j] = lower_bounds(Q, self.summaries[j], space)
        return out

    def ranged(self, queries: DataFrame) -> DataFrame:
        """``queries`` with ``RANGED``: per query, the position in ``blocks`` of the block whose
        range of the blocks' sort holds the query's own sort key (``_sort_key``), from each
        block's least key (below them all: the block of least key). Spark compares the keys, by
        the ordering that cut the blocks: it sorts the blocks' least keys, and the query meets
        the ranges between them in a broadcast join (a small table, not literals: the plan
        shows no record value). The ranges come from that sort, not from the block numbers,
        so that they never overlap (a query joined twice would be searched twice), whatever
        the blocks. Null without ``order``."""
        if self.order is None:
            return queries.withColumn(RANGED, F.lit(None).cast("long"))
        key = _sort_key(self.order)
        kind = queries.select(key.alias("k")).schema["k"].dataType
        spark, lo, hi = queries.sparkSession, "__am_lo", "__am_hi"
        schema = [StructField(RANGED, LongType(), False), StructField(lo, kind)]
        least = spark.createDataFrame(list(enumerate(self.lows)), StructType(schema))
        order = [int(r[0]) for r in least.orderBy(lo, RANGED).select(RANGED).collect()]
        rows = [(j, None if k == 0 else self.lows[j], self.lows[order[k + 1]] if k + 1 < len(order) else None)
                for k, j in enumerate(order)]
        ranges = spark.createDataFrame(rows, StructType([*schema, StructField(hi, kind)]))
        inside = (F.col(lo).isNull() | (key >= F.col(lo))) & (F.col(hi).isNull() | (key < F.col(hi)))
        return queries.join(F.broadcast(ranges), inside, "left").drop(lo, hi)

    @staticmethod
    def marked(b: int):
        """Whether a query is marked for block ``b`` (a Spark column)."""
        return F.col(need_column(b // NEED_BITS)).bitwiseAND(F.lit(1 << (b % NEED_BITS)).cast("long")) != 0

    def wanted(self, blocks):
        """The queries marked for any of ``blocks``."""
        cond = F.lit(False)
        for b in blocks:
            cond = cond | self.marked(b)
        return cond

    def counts(self, df: DataFrame) -> list[int]:
        """Per block (in the order of ``blocks``), the queries of ``df`` marked for it: one Spark job."""
        row = df.agg(*[F.sum(self.marked(b).cast("long")) for b in self.blocks]).first()
        return [int(x or 0) for x in row]

    def check(self, b: int, block: Block) -> None:
        """Stop when the fetched block (or slice) ``b`` holds what its summary does not."""
        j = self.blocks.index(b) if b in self.blocks else None
        ok = j is not None
        if ok:
            s, mine = self.summaries[j], block.summary
            ok = not (mine.nulls & ~s.nulls).any()
            for i, values in enumerate(self.values[j]):
                if block.uniques[i] is not None:
                    ok = ok and (values is None or bool(block.uniques[i].isin(values).all()))
                elif not np.isnan(mine.lo[i]):
                    ok = ok and bool(s.lo[i] <= mine.lo[i]) and bool(mine.hi[i] <= s.hi[i])
        if not ok:
            raise RuntimeError(f"search: block {b} holds candidates its summary does not cover; "
                               "this is a bug, please report it with the log")


def _many_levels(c: DataFrame, variables, max_levels: int, levels: dict[str, int] | None = None) -> dict[int, list[int]]:
    """Per categorical (its position in ``variables``), the blocks whose values are too many to
    list: their approximate count (HyperLogLog, 5 % relative error) is over twice ``max_levels``.
    One Spark job, in bounded memory per block, so that ``_need`` collects the values of the
    other blocks only (``collect_set`` holds every distinct value of a block before any slice).
    A categorical of at most that many values over all the candidates (``levels``, from
    ``_level_counts``) has no such block: with none left, no job."""
    cats = [i for i, v in enumerate(variables) if v.kind != "numeric"]
    many = [i for i in cats if levels is None or levels[f"v{i}"] > 2 * max_levels]
    out = {i: [] for i in cats}
    if many:
        rows = (c.groupBy("__am_block").agg(*[F.approx_count_distinct(f"v{i}").alias(f"d{i}") for i in many])
                .collect())
        out.update({i: sorted(int(r["__am_block"]) for r in rows if r[f"d{i}"] > 2 * max_levels) for i in many})
    return out


def _need(c: DataFrame, variables, n_blocks: int, order: Sequence[str] | None = None,
          max_levels: int | None = None, levels: dict[str, int] | None = None) -> Need:
    """Every block's summary and categorical values, in one Spark job over the candidates
    (after ``_many_levels``, which leaves out the blocks of too many values); with ``order``
    (the blocks' sort, ``_locality_order``), each block's least sort key. ``max_levels``:
    ``MAX_LEVELS`` unless given; ``levels``: ``_level_counts`` of the candidates, when known."""
    max_levels = MAX_LEVELS if max_levels is None else max_levels
    many = _many_levels(c, variables, max_levels, levels)
    aggs = [F.min(_sort_key(order)).alias("__low")] if order is not None else []
    for i, v in enumerate(variables):
        x = F.col(f"v{i}")
        if v.kind == "numeric":
            value = F.when(~F.isnan(x), x)
            aggs += [F.max((x.isNull() | F.isnan(x)).cast("int")).alias(f"n{i}"),
                     F.min(value).alias(f"lo{i}"), F.max(value).alias(f"hi{i}")]
        else:
            listed = F.when(~F.col("__am_block").isin(many[i]), x) if many[i] else x
            aggs += [F.max(x.isNull().cast("int")).alias(f"n{i}"),
                     F.slice(F.collect_set(listed), 1, max_levels + 1).alias(f"s{i}")]
    aggs.append(F.count(F.lit(1)).alias("__rows"))
    rows = sorted(c.groupBy("__am_block").agg(*aggs).collect(), key=lambda r: r["__am_block"])
    nv = len(variables)
    blocks, summaries, values, counts, lows = [], [], [], [], []
    for r in rows:
        b = int(r["__am_block"])
        if not 0 <= b < n_blocks:
            continue  # never fetched: the search's count of candidates stops it
        lo, hi, vals = np.full(nv, np.nan), np.full(nv, np.nan), []
        for i, v in enumerate(variables):
            if v.kind == "numeric":
                vals.append(None)
                if r[f"lo{i}"] is not None:
                    lo[i], hi[i] = float(r[f"lo{i}"]), float(r[f"hi{i}"])
            else:
                held = r[f"s{i}"]
                vals.append(None if len(held) > max_levels or b in many[i] else list(held))
        blocks.append(b)
        counts.append(int(r["__rows"]))
        lows.append(tuple(r["__low"]) if order is not None else None)
        summaries.append(Summary(nulls=np.array([bool(r[f"n{i}"]) for i in range(nv)]), lo=lo, hi=hi))
        values.append(vals)
    unions = []
    for i in range(nv):
        lists = [vals[i] for vals in values if vals[i] is not None]
        union = pd.Index(list(dict.fromkeys(itertools.chain.from_iterable(lists))), dtype=object) if lists else None
        if union is not None and len(union) > MAX_UNION:
            union = None
            for vals in values:
                vals[i] = None
        unions.append(union)
    present = [[None if vals[i] is None or unions[i] is None else np.append(unions[i].isin(vals[i]), False)
                for i in range(nv)] for vals in values]
    return trimmed(Need(blocks=blocks, summaries=summaries, values=values, unions=unions, present=present,
                        words=max(1, math.ceil(n_blocks / NEED_BITS)), rows=counts,
                        order=None if order is None else list(order), lows=lows if order is not None else None))


# The most bytes the marks' summaries (a ``Need``, pickled) may take: they travel in the
# closures of the first job and of each chain's last pass, beside the blocks, and under
# Spark Connect the blocks already take ``CLOSURE_SHARE`` of the message limit
NEED_BYTES = 8 * 2**20


def need_bytes(need: Need) -> int:
    return len(pickle.dumps(need, protocol=5))


def trimmed(need: Need, most: int = NEED_BYTES) -> Need:
    """``need`` within ``most`` bytes: while over, the categorical with the most recorded values
    loses its lists (any value may then occur in any block). Exact: a block's lower bound only
    drops, so a query is marked for more blocks, never fewer."""
    while need_bytes(need) > most:
        sizes = [len(u) if u is not None else -1 for u in need.unions]
        i = int(np.argmax(sizes)) if sizes else -1
        if i < 0 or sizes[i] < 0:
            break  # no lists left: the numeric summaries alone
        need.unions[i] = None
        for j in range(len(need.blocks)):
            need.values[j][i] = None
            need.present[j][i] = None
    return need
