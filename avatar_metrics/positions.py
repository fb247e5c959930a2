"""Each input record's position: its place in the input order, the id that aligns the tables.

Spark has no row order of its own. The position of a record is its place in
the input: files in path order, then byte offset of the file split, then
order within the split; for data with no file (local data), the order of its
partitions. ``monotonically_increasing_id`` alone depends on how Spark packs
splits into partitions; combined with the split's offset it does not.

Two ways, one result:

- **In the pass that fills the cache** (``tag``, ``place``), for a table of one
  file or none. Each record carries its ``monotonically_increasing_id`` (the
  partition in its upper bits, the order inside it in the lower) and its
  split's offset into the cache; the same action that fills it counts each
  partition's records. When every partition holds one split, ordering the
  partitions by offset gives each one its first position, and a record's
  position is its id minus its partition's first id plus that: an expression
  over the cached columns, with one number per partition in the plan. The
  input is read once.
- **A counting pass first** (``with_positions``), for several files, or where
  a partition holds two splits: the counts per (file, split, partition) come
  to the driver, then the table is read again with its positions.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .io import ID, input_files

MID = "__am_mid"  # monotonically_increasing_id: the Spark partition in bits 33 and up
SPLIT = "__am_split"  # the byte offset of the record's file split (tables of one file)
# At most this many partitions put their first positions in the plan (a map of numbers that
# every query over the table carries); past it, the counting pass: one file of over 1,024
# splits (128 GB at Spark's default split size), or local data in over 1,024 partitions
MOST_PARTITIONS = 1024


def partition_of(mid: Column) -> Column:
    """The Spark partition a ``monotonically_increasing_id`` was given in (its bits 33 and up)."""
    return F.shiftright(mid, 33)


def _has_file_metadata(df: DataFrame) -> bool:
    try:
        if not df.inputFiles():  # in-memory data: nothing to probe
            return False
        df.select(F.col("_metadata.file_path"), F.col("_metadata.file_block_start")).schema
        return True
    except Exception:  # noqa: BLE001
        return False


# Past this many rows a table of numbers goes through createDataFrame: a VALUES text of
# thousands of rows costs Spark's parser and analyser more than the job it saves.
LOCAL_ROWS = 2000


def _local_longs(spark, rows, names) -> DataFrame:
    """A small table of 64-bit integers held in the plan itself (SQL ``VALUES``).

    ``createDataFrame`` would make it an RDD, and broadcasting it a Spark job
    of its own (about a second with a cold JVM); a local table is broadcast
    from the driver. Only numbers the driver computed go into the text.
    """
    if len(rows) > LOCAL_ROWS:
        return spark.createDataFrame(rows, ", ".join(f"{n} long" for n in names))
    if not rows:
        rows, where = [(0,) * len(names)], " WHERE false"
    else:
        where = ""
    values = ", ".join("(" + ", ".join(f"{int(v)}L" for v in r) + ")" for r in rows)
    return spark.sql(f"SELECT * FROM VALUES {values} AS t({', '.join(names)}){where}")


def with_position(df: DataFrame, col: str = ID) -> DataFrame:
    """Add ``col``: the 0-based position of each record in the input order (``with_positions``
    of this one table)."""
    return with_positions([df], col)[0]


def with_positions(dfs: Sequence[DataFrame], col: str = ID) -> list[DataFrame]:
    """Each DataFrame with ``col`` added: the 0-based position of each record in its input order.

    For file sources the order is (file path, split offset, order in split);
    for other DataFrames (in-memory, say) the order of their partitions. Only
    per-split counts reach the driver, never records.

    A first pass counts the records of each (file, split, Spark partition)
    and notes the first ``monotonically_increasing_id`` of each: a split's
    records have consecutive ids inside their partition. The tables' counts
    come back in one action (their union), so that a run's inputs cost one
    planning and one wait rather than one per table. The second pass needs no
    file metadata: it finds each record's split by its partition and id range
    (a broadcast join on the partition number), a quarter cheaper than joining
    on the file path of every record.
    """
    mid = "__am_mid"

    def tag(frame):
        return frame.withColumn(mid, F.monotonically_increasing_id()).withColumn("__am_p", partition_of(F.col(mid)))

    union = None
    for t, df in enumerate(dfs):
        if _has_file_metadata(df):
            keys = [F.col("_metadata.file_path").alias("__am_f"), F.col("_metadata.file_block_start").alias("__am_b")]
        else:
            keys = [F.lit("").alias("__am_f"), F.lit(0).cast("long").alias("__am_b")]
        counts = (tag(df.select("*", *keys)).groupBy("__am_f", "__am_b", "__am_p")
                  .agg(F.count(F.lit(1)).alias("n"), F.min(mid).alias("m0"))
                  .select(F.lit(t).alias("__am_t"), "__am_f", "__am_b", "__am_p", "n", "m0"))
        union = counts if union is None else union.unionByName(counts)
    groups: list[list] = [[] for _ in dfs]
    for r in union.collect() if union is not None else ():
        groups[r["__am_t"]].append(r)
    out = []
    for df, rows in zip(dfs, groups):
        rows.sort(key=lambda r: (r["__am_f"], r["__am_b"], r["m0"]))
        offsets, total = [], 0
        for r in rows:
            offsets.append((r["__am_p"], r["m0"], r["m0"] + r["n"], total))
            total += r["n"]
        table = _local_longs(df.sparkSession, offsets, ("__am_q", "__am_m0", "__am_m1", "__am_off"))
        tagged = tag(df)
        inside = ((F.col("__am_p") == F.col("__am_q")) & (F.col(mid) >= F.col("__am_m0"))
                  & (F.col(mid) < F.col("__am_m1")))
        joined = tagged.join(F.broadcast(table), inside)
        joined = joined.withColumn(col, F.col("__am_off") + F.col(mid) - F.col("__am_m0"))
        out.append(joined.drop("__am_p", "__am_q", "__am_m0", "__am_m1", "__am_off", mid))
    return out


def in_one_pass(df: DataFrame) -> bool:
    """Whether ``df``'s positions can come from the pass that fills its cache: it reads one
    file, or no file (local data, or a source that does not list its files)."""
    return len(input_files(df)) <= 1


def tag(df: DataFrame) -> DataFrame:
    """``df`` with ``MID``, and ``SPLIT`` when it reads a file: what ``place`` needs, cached
    with the table."""
    cols = [F.monotonically_increasing_id().alias(MID)]
    if _has_file_metadata(df):
        cols.append(F.col("_metadata.file_block_start").alias(SPLIT))
    return df.select("*", *cols)


def partition_counts(df: DataFrame) -> tuple[Column, list[Column]]:
    """The grouping column and the aggregates, over a tagged table whose ``ID`` holds ``MID``,
    that ``place`` takes: per partition its first and last id and its smallest and largest
    split offset (with the records' count, named ``n``)."""
    split = F.col(SPLIT) if SPLIT in df.columns else F.lit(0).cast("long")
    return (partition_of(F.col(ID)).alias("__am_p"),
            [F.min(ID).alias("__am_m0"), F.max(ID).alias("__am_m1"),
             F.min(split).alias("__am_b0"), F.max(split).alias("__am_b1")])


def place(df: DataFrame, parts: Sequence, most: int | None = None) -> DataFrame | None:
    """``df`` (tagged, ``ID`` holding ``MID``) with its positions in ``ID`` and without
    ``SPLIT``; None when its partitions cannot give them (a partition with two splits, or over
    ``most`` partitions): then the counting pass does. ``parts``: a row per non-empty partition
    with ``n`` and ``partition_counts``' aggregates; ``most``: ``MOST_PARTITIONS`` unless given."""
    most = MOST_PARTITIONS if most is None else most
    if len(parts) > most or any(r["__am_b0"] != r["__am_b1"] or r["__am_m1"] - r["__am_m0"] + 1 != r["n"]
                                for r in parts):
        return None
    shift, total = {}, 0  # partition -> its first position minus its first id
    for r in sorted(parts, key=lambda r: (r["__am_b0"], r["__am_m0"])):
        shift[r["__am_p"]] = total - r["__am_m0"]
        total += r["n"]
    if len(shift) <= 1:
        position = F.col(ID) + F.lit(next(iter(shift.values()), 0)).cast("long")
    else:
        table = F.create_map(*[F.lit(v).cast("long") for p, s in sorted(shift.items()) for v in (p, s)])
        position = F.col(ID) + F.element_at(table, partition_of(F.col(ID)))
    return df.select(position.alias(ID), *[c for c in df.columns if c not in (ID, SPLIT)])
