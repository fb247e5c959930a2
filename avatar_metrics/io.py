"""Reading the input tables and giving every record a deterministic id.

Spark has no row order of its own. The positional index of a record is its
place in the input: files in path order, then byte offset of the file split,
then order within the split. ``monotonically_increasing_id`` alone depends on
how Spark packs files into partitions; combined with ``_metadata`` it does not.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .config import TableSpec
from .errors import InputError

log = logging.getLogger(__name__)

ID = "__am_id"  # the record id column used inside the engine
KEY = "__am_key"  # the row key's own value, kept for the per-record output


def read_table(spark: SparkSession, spec: TableSpec, role: str) -> DataFrame:
    """Load one input table; an unreadable one is an InputError naming it."""
    try:
        if spec.table:
            df = spark.read.table(spec.table)
        else:
            reader = spark.read.format(spec.format)
            if spec.format == "csv":
                reader = reader.option("header", True).option("inferSchema", True).option("mode", "FAILFAST")
            df = reader.load(spec.path)
        df.schema  # force analysis, so a missing file fails here
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark raises many kinds
        reason = _short_reason(exc)
        hint = (
            "check the table name"
            if spec.table
            else f"check that {spec.path} exists and holds {spec.format} data"
            + (" (delta needs the delta-spark package and its Spark settings)" if spec.format == "delta" else "")
        )
        raise InputError(f"{role}: cannot read {spec.describe()}: {reason}; {hint}") from None
    return df


def _short_reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # Spark error classes look like [PATH_NOT_FOUND] Path does not exist: ...
    return text[:300]


def _has_file_metadata(df: DataFrame) -> bool:
    try:
        if not df.inputFiles():  # in-memory data: nothing to probe
            return False
        df.select(F.col("_metadata.file_path"), F.col("_metadata.file_block_start")).schema
        return True
    except Exception:  # noqa: BLE001
        return False


def with_position(df: DataFrame, col: str = ID) -> DataFrame:
    """Add ``col``: the 0-based position of each record in the input order.

    For file sources the order is (file path, split offset, order in split);
    for other DataFrames (in-memory, say) the order of their partitions. Only
    per-split counts reach the driver, never records.
    """
    mid = "__am_mid"
    if _has_file_metadata(df):
        keys = [F.col("_metadata.file_path").alias("__am_f"), F.col("_metadata.file_block_start").alias("__am_b")]
    else:
        keys = [F.lit("").alias("__am_f"), F.lit(0).cast("long").alias("__am_b")]
    tagged = df.select("*", *keys, F.monotonically_increasing_id().alias(mid))
    tagged = tagged.withColumn("__am_p", F.shiftright(F.col(mid), 33))
    groups = (
        tagged.groupBy("__am_f", "__am_b", "__am_p")
        .agg(F.count(F.lit(1)).alias("n"), F.min(mid).alias("m0"))
        .collect()
    )
    groups.sort(key=lambda r: (r["__am_f"], r["__am_b"], r["m0"]))
    offsets, total = [], 0
    for r in groups:
        offsets.append((r["__am_f"], r["__am_b"], r["__am_p"], r["m0"], total))
        total += r["n"]
    spark = df.sparkSession
    table = spark.createDataFrame(
        offsets, "__am_f string, __am_b long, __am_p long, __am_m0 long, __am_off long"
    )
    out = tagged.join(F.broadcast(table), ["__am_f", "__am_b", "__am_p"])
    out = out.withColumn(col, F.col("__am_off") + F.col(mid) - F.col("__am_m0"))
    return out.drop("__am_f", "__am_b", "__am_p", "__am_m0", "__am_off", mid)
