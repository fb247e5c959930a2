"""The search's blocks of candidates and how they travel (``engine.search``): the
variables selected and encoded in one layout for blocks, queries, pairs and the blocks'
summaries (``encode``; ``encode_block``, ``encode_queries``: categorical values as codes of
the block), the driver's fetching of
a block, its slices when it is too large for one pass or for a Spark Connect message
(``_blocks``, ``closure_cap``), materializing a chain (a cache, or a local checkpoint
under Spark Connect), and the names of the columns the passes carry."""

from __future__ import annotations

import itertools
import logging
import math
import pickle
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..io import ID, checkpoint, col, persist
from ..kernels.gower import Space
from ..kernels.terms import Summary, summarize
from ..schema import Variable


log = logging.getLogger(__name__)


def _select(df: DataFrame, variables: Sequence[Variable], carry=()) -> DataFrame:
    """ID, the carried columns and the variables as v0, v1, ...: numbers as float64,
    categories as they are (strings or booleans: ``schema`` turns numeric
    categories into exact text)."""
    cols = [F.col(ID), *[F.col(c) for c in carry]]
    for i, v in enumerate(variables):
        c = col(v.name)
        if v.kind == "numeric":
            c = c.cast("double")
        cols.append(c.alias(f"v{i}"))
    return df.select(*cols)


@dataclass
class Block:
    """One block of candidates, encoded for the kernel."""

    C: np.ndarray
    cids: np.ndarray
    uniques: list  # per variable: pandas Index of the block's categories (None for numeric)
    summary: Summary | None = None  # set: queries it cannot matter to skip the block
    plain: bool = False  # scanned whole, with no index (fewer candidates than search.plain_below)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # names this block in the workers' cache


def encode(pdf: pd.DataFrame, variables: Sequence[Variable], codes, prefix: str = "v") -> np.ndarray:
    """The one encoding of records for the kernels (``kernels.gower``): a float64 matrix, a
    column per variable in the order of V (``pdf``'s ``v0, v1, ...``, or another ``prefix``).
    A number as float64, a category as the integer ``codes(i, column)`` gives its values (-1:
    one the other side lacks), null as NaN."""
    X = np.empty((len(pdf), len(variables)))
    for i, v in enumerate(variables):
        col = pdf[f"{prefix}{i}"]
        if v.kind == "numeric":
            X[:, i] = col.to_numpy(dtype="float64", na_value=np.nan)
        else:
            X[:, i] = np.where(col.isna().to_numpy(), np.nan, np.asarray(codes(i, col), dtype=np.float64))
    return X


def encode_block(pdf: pd.DataFrame, variables: Sequence[Variable]) -> Block:
    """A block of candidates: categories as codes of the block's own values (``uniques``)."""
    uniques = [None] * len(variables)

    def own(i, col):
        codes, values = pd.factorize(col, use_na_sentinel=True)
        uniques[i] = pd.Index(values)
        return codes

    C = encode(pdf, variables, own)
    return Block(C=C, cids=pdf[ID].to_numpy(dtype=np.int64), uniques=uniques)


def encode_queries(pdf: pd.DataFrame, variables: Sequence[Variable], block: Block) -> np.ndarray:
    """Queries against a block: categories as the block's codes, -1 for a value no candidate of
    the block has (queries are never compared with each other)."""
    return encode(pdf, variables, lambda i, col: block.uniques[i].get_indexer(col))


# Blocks folded in one Spark job, one after the other, each carrying the
# queries' state to the next (tighter pruning): one pass (``folds._pass``) whose
# Python worker holds the chain's blocks and their indexes, so a chain costs
# memory; longer chains of cached steps would make Spark's plans grow without
# bound. Chains are merged exactly.
CHAIN = 2


# Queries searched at once: Arrow batches are gathered up to this many rows,
# so that queries sharing a categorical profile are met together.
QUERY_CHUNK = 50_000


def _rechunk(batches, rows: int):
    buf, n = [], 0
    for pdf in batches:
        buf.append(pdf)
        n += len(pdf)
        if n >= rows:
            yield pd.concat(buf, ignore_index=True)
            buf, n = [], 0
    if buf:
        yield pd.concat(buf, ignore_index=True)


# columns the passes carry besides the state: a query's reach from the first
# job (``Fold.reach``), the blocks it searched, and its home block
REACH = "__am_reach"


VISITS = "__am_visits"
# the kernels' work, summed over a pass's rows: distances evaluated, candidates looked up without
# one (``CandidateIndex.work``); a chunk of queries adds its counts to its first row, so only
# a column's sum means something
WORK = ("__am_evaluated", "__am_looked_up")


HOME = "__am_home"


FIRST_LE = "__am_first_le"  # the first job's counts within a radius, read by the later passes' cap


FIRST_LT = "__am_first_lt"


def is_connect(df: DataFrame) -> bool:
    """Whether ``df`` belongs to a Spark Connect session."""
    return type(df).__module__.startswith("pyspark.sql.connect")


def _materialize(df: DataFrame, remote: bool, work: list | None = None,
                 largest: dict | None = None) -> tuple[DataFrame, int, int]:
    """``df`` computed once and kept on the executors, its number of rows, and
    the sum of its ``VISITS`` column (0 without one): one job on classic Spark
    (the aggregate fills the cache), two under Spark Connect. With ``work``, the sums of the
    ``WORK`` columns are added to it (the same job); with ``largest``, its ``d1`` entry is set
    to the largest ``d1`` (None without the column or a value), in the same job too.

    Classic Spark: cached, so a lost executor's part is recomputed from the
    plan. Spark Connect: a local checkpoint. A Connect plan travels whole with
    every request, and a search's plan holds every block of candidates it
    shipped (the closures of its passes): after a few blocks it would exceed
    the server's message limit (``spark.connect.grpc.maxInboundMessageSize``,
    128 MiB by default). The checkpoint is referred to by an id instead; the
    price is that a lost executor's part of it cannot be recomputed.
    """
    df = checkpoint(df) if remote else persist(df)
    visits = F.sum(VISITS) if VISITS in df.columns else F.lit(0)
    sums = [F.sum(c) if work is not None and c in df.columns else F.lit(0) for c in WORK]
    top = F.max("d1") if largest is not None and "d1" in df.columns else F.lit(None)
    row = df.agg(F.count(F.lit(1)), visits, *sums, top).first()
    if work is not None:
        work[0] += int(row[2] or 0)
        work[1] += int(row[3] or 0)
    if largest is not None:
        largest["d1"] = None if row[4] is None else float(row[4])
    return df, int(row[0]), int(row[1] or 0)


# Under Spark Connect, the part of the server's message limit that the blocks
# of one chain (their closures) may take together; the rest is for the plan of
# the queries
CLOSURE_SHARE = 0.75


CONNECT_MESSAGE_LIMIT = 128 * 1024 * 1024  # the server's default


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def closure_cap(spark) -> int:
    """Bytes one block's closure may take under Spark Connect: a share of the
    server's message limit (its configured value when the server tells it),
    divided among the ``CHAIN`` blocks of a job."""
    limit = CONNECT_MESSAGE_LIMIT
    try:
        text = spark.conf.get("spark.connect.grpc.maxInboundMessageSize", None)
    except Exception:  # a server that does not say: its default
        text = None
    m = _SIZE.match(str(text)) if text is not None else None
    if m:
        unit = m.group(2).lower()
        limit = int(m.group(1)) * (1024 ** ("kmgt".index(unit) + 1) if unit else 1)
    return max(1, int(limit * CLOSURE_SHARE / CHAIN))


def _closure_bytes(block: Block) -> int:
    return len(pickle.dumps(block, protocol=5))


# A block of more than this many times ``search.block_size`` candidates (Spark made
# fewer ranges than asked, say) goes in slices of about ``block_size``
MOST_PER_BLOCK = 2


@dataclass
class Fetch:
    """The driver's fetching of blocks: the seconds it took (``toArrow``, encoding) and how many."""

    seconds: float = 0.0
    blocks: int = 0
    pieces: int = 0  # passes the blocks took (a block in slices takes several)


class Whole:
    """A table's rows in the driver, fetched once (``_select`` of every variable through Arrow) and
    taken whole by any number of one-block searches over it: a run's small tables are each a
    Spark job fetched once rather than once per search. ``rows(variables)`` gives what fetching
    ``_select(table, variables)`` would (ID, then v0, v1, ...), or None for a variable it lacks."""

    def __init__(self, table: DataFrame, variables: Sequence[Variable]):
        self.table, self.variables = table, list(variables)
        self.lock, self.pdf = threading.Lock(), None

    def rows(self, variables: Sequence[Variable]) -> pd.DataFrame | None:
        at = {v: i for i, v in enumerate(self.variables)}
        if any(v not in at for v in variables):
            return None
        with self.lock:  # two lanes' searches over one table: fetched once
            if self.pdf is None:
                self.pdf = _select(self.table, self.variables).toArrow().to_pandas()
        return self.pdf[[ID, *[f"v{at[v]}" for v in variables]]].set_axis(
            [ID, *[f"v{i}" for i in range(len(variables))]], axis=1)


def _blocks(c: DataFrame, numbers: Sequence[int], variables, space: Space | None, cap: int | None, name: str,
            block_size: int, fetch: Fetch, plain_below: int = 0, whole: Whole | None = None):
    """The candidates' blocks of these numbers in order, each encoded, as (block, rows, block
    number); with ``space``, each carries its summary; one of fewer than ``plain_below``
    candidates is marked to be scanned whole (``Block.plain``). ``whole``: a one-block
    search's rows (every candidate) as the driver already holds them, fetched by no job.

    A block of more than ``MOST_PER_BLOCK`` x ``block_size`` rows, or whose
    closure would exceed ``cap`` bytes, goes as several slices of its rows,
    each its own pass (exact: the passes may cut the candidates in any way).
    ``fetch`` adds up the driver's time.
    """
    for b in numbers:
        t = time.perf_counter()
        # through Arrow whatever spark.sql.execution.arrow.pyspark.enabled says (the same frame:
        # float64 with NaN for null numbers, objects for categories; census-shaped, 200,000 x 16:
        # 0.5 s against 0.8 s for toPandas row by row)
        pdf = whole.rows(variables) if whole is not None else None
        if pdf is None:
            pdf = c.filter(F.col("__am_block") == b).drop("__am_block").toArrow().to_pandas()
        if len(pdf) == 0:
            fetch.seconds += time.perf_counter() - t
            continue
        fetch.blocks += 1
        pdf = pdf.sort_values(ID, kind="stable").reset_index(drop=True)
        rows_k = 1 if len(pdf) <= MOST_PER_BLOCK * block_size else math.ceil(len(pdf) / block_size)
        bytes_k = 1
        if rows_k == 1 or cap is not None:
            block = _encoded(pdf, variables, space, plain_below)
            size = 0 if cap is None else _closure_bytes(block)
            if cap is not None and size > cap and len(pdf) > 1:
                bytes_k = min(len(pdf), math.ceil(size / cap) + 1)
                log.info("search %s: block %d goes in %d slices (%.0f MiB, over the %.0f MiB a Spark Connect plan "
                         "may carry per block)", name, b + 1, bytes_k, size / 2**20, cap / 2**20)
            if rows_k == bytes_k == 1:
                fetch.seconds += time.perf_counter() - t
                fetch.pieces += 1
                yield block, len(pdf), b
                continue
            del block
        if rows_k > 1:
            log.info("search %s: block %d holds %d candidates, more than %d times search.block_size: it goes in %d "
                     "slices", name, b + 1, len(pdf), MOST_PER_BLOCK, rows_k)
        k = max(rows_k, bytes_k)
        fetch.seconds += time.perf_counter() - t
        cuts = np.linspace(0, len(pdf), k + 1).astype(int)
        for lo, hi in itertools.pairwise(cuts):
            if hi > lo:
                t = time.perf_counter()
                piece = _encoded(pdf.iloc[lo:hi].reset_index(drop=True), variables, space, plain_below)
                fetch.seconds += time.perf_counter() - t
                fetch.pieces += 1
                yield piece, int(hi - lo), b


def _encoded(pdf: pd.DataFrame, variables, space: Space | None, plain_below: int = 0) -> Block:
    block = encode_block(pdf, variables)
    block.plain = len(pdf) < plain_below
    if space is not None:
        block.summary = summarize(block.C, space)
    return block
