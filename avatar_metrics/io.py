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


CORRUPT = "__am_corrupt"  # the column where Spark puts a malformed CSV row (never shown)
RESERVED_PREFIX = "__am_"  # internal column names; input columns may not start with it


def col(name: str):
    """A column by its exact name: dots, spaces and backticks are part of the name."""
    return F.col("`" + name.replace("`", "``") + "`")


def read_table(spark: SparkSession, spec: TableSpec, role: str) -> DataFrame:
    """Load one input table; an unreadable one is an InputError naming it.

    CSV is read in Spark's PERMISSIVE mode with a corrupt-record column, so
    that a malformed row is counted here (and the input refused) instead of
    being logged, whole, by Spark's parser.
    """
    try:
        if spec.table:
            df = spark.read.table(spec.table)
        elif spec.format == "csv":
            df = _read_csv(spark, spec, role)
        else:
            df = spark.read.format(spec.format).load(spec.path)
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


def _read_csv(spark: SparkSession, spec: TableSpec, role: str) -> DataFrame:
    from pyspark.sql import types as T

    def reader():
        return spark.read.option("header", True).option("mode", "PERMISSIVE")

    inferred = reader().option("inferSchema", True).csv(spec.path).schema
    _check_header(inferred.names, role, spec)
    schema = T.StructType(inferred.fields + [T.StructField(CORRUPT, T.StringType())])
    df = reader().option("columnNameOfCorruptRecord", CORRUPT).schema(schema).csv(spec.path)
    # every column is referenced, so that Spark parses whole rows (a pruned read
    # does not see an extra field) and allows the corrupt column in the query
    bad = (
        df.select(col(CORRUPT).isNotNull().alias("bad"), F.xxhash64(*[col(c) for c in inferred.names]).alias("h"),
                  F.col("_metadata.file_path").alias("file"))
        .filter("bad")
        .groupBy("file")
        .agg(F.count(F.lit(1)).alias("n"), F.max("h").alias("h"))
        .collect()
    )
    if bad:
        bad.sort(key=lambda r: r["file"])
        total = sum(r["n"] for r in bad)
        where = ", ".join(f"{r['n']} in {r['file']}" for r in bad[:3]) + (", ..." if len(bad) > 3 else "")
        raise InputError(
            f"{role}: {total} malformed CSV row(s) ({where}): a row with more fields than the header, or an "
            "unbalanced quote, say. Fix the file (the rows are not shown: they hold personal data)"
        )
    return df.drop(CORRUPT)


def _check_header(names: list[str], role: str, spec: TableSpec) -> None:
    """A CSV without a header row turns its first record into column names: never quote them."""
    def looks_like_data(name: str) -> bool:
        try:
            float(name)
            return True
        except ValueError:
            return name.strip() == "" or name.startswith("_c")

    if names and sum(looks_like_data(n) for n in names) * 2 > len(names):
        raise InputError(
            f"{role}: the first row of {spec.path} does not look like a header (most of its fields are numbers "
            "or empty): the CSV format needs a header row with the column names; add one"
        )


def input_files(df: DataFrame) -> list[str]:
    """The files a DataFrame reads ([] for in-memory data or a source that does not say)."""
    try:
        return list(df.inputFiles())
    except Exception:  # noqa: BLE001 - not every source lists its files
        return []


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
    """Add ``col``: the 0-based position of each record in the input order.

    For file sources the order is (file path, split offset, order in split);
    for other DataFrames (in-memory, say) the order of their partitions. Only
    per-split counts reach the driver, never records.

    A first pass counts the records of each (file, split, Spark partition)
    and notes the first ``monotonically_increasing_id`` of each: a split's
    records have consecutive ids inside their partition. The second pass
    needs no file metadata: it finds each record's split by its partition
    and id range (a broadcast join on the partition number), a quarter
    cheaper than joining on the file path of every record.
    """
    mid = "__am_mid"
    if _has_file_metadata(df):
        keys = [F.col("_metadata.file_path").alias("__am_f"), F.col("_metadata.file_block_start").alias("__am_b")]
    else:
        keys = [F.lit("").alias("__am_f"), F.lit(0).cast("long").alias("__am_b")]

    def tag(frame):
        return frame.withColumn(mid, F.monotonically_increasing_id()).withColumn("__am_p", F.shiftright(F.col(mid), 33))

    groups = (
        tag(df.select("*", *keys)).groupBy("__am_f", "__am_b", "__am_p")
        .agg(F.count(F.lit(1)).alias("n"), F.min(mid).alias("m0"))
        .collect()
    )
    groups.sort(key=lambda r: (r["__am_f"], r["__am_b"], r["m0"]))
    offsets, total = [], 0
    for r in groups:
        offsets.append((r["__am_p"], r["m0"], r["m0"] + r["n"], total))
        total += r["n"]
    table = _local_longs(df.sparkSession, offsets, ("__am_q", "__am_m0", "__am_m1", "__am_off"))
    tagged = tag(df)
    inside = ((F.col("__am_p") == F.col("__am_q")) & (F.col(mid) >= F.col("__am_m0"))
              & (F.col(mid) < F.col("__am_m1")))
    out = tagged.join(F.broadcast(table), inside)
    out = out.withColumn(col, F.col("__am_off") + F.col(mid) - F.col("__am_m0"))
    return out.drop("__am_p", "__am_q", "__am_m0", "__am_m1", "__am_off", mid)


COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def cache_plain(df: DataFrame) -> DataFrame:
    """``df.cache()`` without Spark's columnar compression, for a table read several times.

    Compressing a cached 1,000,000 x 16 table costs about 2.5 s of 2 cores
    more than storing it plain (census-shaped, measured: 5.8 s against 3.4 s
    to fill the cache), for 51 MB against 118 MB; a cache past its memory
    spills to disk either way. Spark reads the setting when ``cache()`` is
    called, so it is switched off for that call and put back as it was; a
    session that refuses the change (a managed platform) caches as it would.
    """
    conf = df.sparkSession.conf
    try:
        before = conf.get(COMPRESSED, None)
        conf.set(COMPRESSED, "false")
    except Exception:  # noqa: BLE001 - a locked configuration: the default cache
        return df.cache()
    try:
        return df.cache()
    finally:
        if before is None:
            conf.unset(COMPRESSED)
        else:
            conf.set(COMPRESSED, before)
