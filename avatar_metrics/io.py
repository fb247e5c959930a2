"""Reading the input tables, and the settings, caches and checkpoints every step goes through.

Spark has no row order of its own: whether a table's plan keeps its input's
order is checked here (``check_input_order``); each record's position in that
order is ``positions``' work.
"""

from __future__ import annotations

import logging
import os
import re
import threading

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .config import TableSpec
from .errors import InputError, describe, error_class

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
            if spec.format == "parquet":
                check_parquet_files(spec.path, role)
            df = spark.read.format(spec.format).load(spec.path)
        df.schema  # force analysis, so a missing file fails here
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark raises many kinds
        raise InputError(f"{role}: cannot read {spec.describe()}: {read_failure(exc, spec)}") from None
    return df


# What a Spark error class means for an input being read, and what to do. Spark's own text is
# never shown: a parser's message quotes the row it failed on, values included.
READ_FAILURES = {
    "PATH_NOT_FOUND": "the path does not exist: check it",
    "TABLE_OR_VIEW_NOT_FOUND": "there is no such table: check the table name (and its catalog and schema)",
    "UNABLE_TO_INFER_SCHEMA": "there is no data to read there (an empty folder?): check the path and the format",
    "MALFORMED_CSV_RECORD": (
        "a row cannot be parsed (more than 20,480 fields, Spark's maxColumns, or a field over its "
        "maxCharsPerColumn, say): fix the file (the row is not shown: it holds personal data)"),
    "COLUMN_ALREADY_EXISTS": (
        "two of its columns have the same name, or names that differ only in case (Spark compares column "
        "names without case): rename one of them"),
    "PARQUET_TYPE_ILLEGAL": (
        "a column has a Parquet type Spark cannot read (a nanosecond timestamp, say): write it with "
        "microsecond timestamps, cast it, or drop the column"),
    "PARQUET_TYPE_NOT_SUPPORTED": (
        "a column has a Parquet type Spark cannot read: cast it to a number or a string, or drop the column"),
    "PARQUET_TYPE_NOT_RECOGNIZED": (
        "a column has a Parquet type Spark cannot read: cast it to a number or a string, or drop the column"),
}


def check_parquet_files(path: str, role: str) -> None:
    """A local Parquet folder: every data file (Spark skips names starting with ``_`` or ``.``) is
    Parquet, and all agree on each column's type. Spark finds either only while computing, deep
    in a job, and names no file; here the footers alone are read, and the message names the file."""
    import pyarrow.parquet as pq

    from .outputs import local_pattern

    local = local_pattern(path)
    if local is None or not os.path.isdir(local):
        return
    files = sorted(os.path.join(d, f) for d, dirs, names in os.walk(local) for f in names
                   if not f.startswith(("_", ".")) and not any(p.startswith(("_", ".")) for p in
                                                               os.path.relpath(d, local).split(os.sep) if p != "."))
    seen: dict[str, tuple[str, str]] = {}
    for f in files:
        try:
            schema = pq.read_schema(f)
        except Exception:  # noqa: BLE001 - pyarrow says why in words that may quote bytes
            raise InputError(f"{role}: {f} in the Parquet folder {path} is not a Parquet file: move it out of "
                             "the folder (Spark reads every file in it)") from None
        for field in schema:
            kind = _family(field.type)
            first = seen.setdefault(field.name, (kind, f))
            if first[0] != kind:
                raise InputError(f"{role}: the Parquet files of {path} disagree on column {field.name}: {first[0]} "
                                 f"in {first[1]}, {kind} in {f}; write them with one type")


def _family(t) -> str:
    """A Parquet column's type as Spark tells it apart: the width of a number or a dictionary
    encoding (pandas' categories) is no disagreement."""
    import pyarrow.types as pt

    if pt.is_dictionary(t):
        t = t.value_type
    for name, test in (("integer", pt.is_integer), ("floating-point", pt.is_floating), ("boolean", pt.is_boolean),
                       ("string", lambda x: pt.is_string(x) or pt.is_large_string(x)), ("decimal", pt.is_decimal),
                       ("timestamp", pt.is_timestamp), ("date", pt.is_date)):
        if test(t):
            return name
    return str(t)


def read_failure(exc: BaseException, spec: TableSpec) -> str:
    """Why a table could not be read and what to do, from Spark's error class alone."""
    cond = error_class(exc)
    known = READ_FAILURES.get(cond or "")
    if known:
        return known
    if spec.table:
        hint = "check the table name"
    else:
        hint = f"check that {spec.path} exists and holds {spec.format} data" + (
            " (delta needs the delta-spark package and its Spark settings)" if spec.format == "delta" else "")
    return f"Spark error {describe(exc)}; {hint} (rerun with --debug for Spark's message, which may show data)"


def _read_csv(spark: SparkSession, spec: TableSpec, role: str) -> DataFrame:
    from pyspark.sql import types as T

    def reader():
        return spark.read.option("header", True).option("mode", "PERMISSIVE")

    inferred = reader().option("inferSchema", True).csv(spec.path).schema
    names = inferred.names
    _check_header(names, 0, role, spec)
    schema = T.StructType(inferred.fields + [T.StructField(CORRUPT, T.StringType())])
    df = reader().option("columnNameOfCorruptRecord", CORRUPT).schema(schema).csv(spec.path)
    # One pass over the file: its malformed rows, and how often each text column holds its own
    # header name as a value (a header row that is a record: "Lyon" recurs in the city column,
    # a real header "city" does not). Every column is referenced, so that Spark parses whole
    # rows (a pruned read does not see an extra field) and allows the corrupt column in the query.
    text = [c for c in names if isinstance(inferred[c].dataType, T.StringType)]
    bad = col(CORRUPT).isNotNull()
    rows = (
        df.select(bad.alias("bad"), F.xxhash64(*[col(c) for c in names]).alias("h"),
                  F.col("_metadata.file_path").alias("file"),
                  *[(col(c) == F.lit(c)).alias(f"e{i}") for i, c in enumerate(text)])
        .groupBy("file")
        .agg(F.count(F.when(F.col("bad"), 1)).alias("n"), F.max(F.when(F.col("bad"), F.col("h"))).alias("h"),
             *[F.count(F.when(F.col(f"e{i}"), 1)).alias(f"e{i}") for i in range(len(text))])
        .collect()
    )
    bad_files = sorted((r for r in rows if r["n"]), key=lambda r: r["file"])
    if bad_files:
        total = sum(r["n"] for r in bad_files)
        where = ", ".join(f"{r['n']} in {r['file']}" for r in bad_files[:3]) + (", ..." if len(bad_files) > 3 else "")
        raise InputError(
            f"{role}: {total} malformed CSV row(s) ({where}): a row with more fields than the header, or an "
            "unbalanced quote, say. Fix the file (the rows are not shown: they hold personal data)"
        )
    recurring = sum(1 for i in range(len(text)) if any(r[f"e{i}"] for r in rows))
    _check_header(names, recurring, role, spec)
    return df.drop(CORRUPT)


# a date or a date and time as data holds it: 1984-03-02, 02/03/1984, 2.3.84 12:30
DATE = re.compile(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?")


def _looks_like_value(name: str) -> bool:
    """A column name that reads as a value: a number, a date, a boolean, empty, or Spark's ``_c0``
    of a missing name."""
    text = name.strip()
    try:
        float(text)
        return True
    except ValueError:
        pass
    return (text == "" or name.startswith("_c") or text.lower() in ("true", "false")
            or DATE.fullmatch(text) is not None)


def _check_header(names: list[str], recurring: int, role: str, spec: TableSpec) -> None:
    """A CSV without a header row turns its first record into column names: never quote them.

    The first row is taken for data as soon as one of its fields reads as a value (a number, a
    date, a boolean, an empty field: no column name is one) or, ``recurring``, is text that
    occurs again in its own column further down.
    """
    if any(_looks_like_value(n) for n in names) or recurring:
        raise InputError(
            f"{role}: the first row of {spec.path} does not look like a header (a field is a number, a date, a "
            "boolean, empty, or a value that recurs in its column): the CSV format needs a header row with the "
            "column names; add one"
        )


def csv_roles(cfg, tables) -> frozenset[str]:
    """The roles whose column names come from a CSV header row (a configured CSV, or a
    DataFrame reading .csv files): such a name may be a record's value, when the file has no
    header, so a message about one of their columns gives its position, never its name."""
    roles = {role for role, spec in cfg.tables() if spec.format == "csv" and not spec.table}
    for role, df in tables:
        if df is not None and any(".csv" in f.lower() for f in input_files(df)):
            roles.add(role)
    return frozenset(roles)


def column_name(c: str, cols, role: str, csv: frozenset[str]) -> str:
    """A column named in a message: by its position when it may be a value of a headerless CSV."""
    if role in csv:
        return f"column number {list(cols).index(c) + 1} (not named: it may be a value of a CSV without header)"
    return f"column {c}"


def input_files(df: DataFrame) -> list[str]:
    """The files a DataFrame reads ([] for in-memory data or a source that does not say)."""
    try:
        return list(df.inputFiles())
    except Exception:  # noqa: BLE001 - not every source lists its files
        return []


# The nodes of an analyzed plan whose output keeps its input's row order, run after run (spec:
# "Inputs", row alignment): reading files or a table, local data, projections and filters, a
# coalesce. Any other node (a join, an aggregation, a shuffle, a sort with ties) has none.
ORDERED_NODES = frozenset({"Relation", "HiveTableRelation", "RelationV2", "DataSourceV2Relation", "LocalRelation",
                           "LogicalRDD", "Range", "Project", "Filter", "SubqueryAlias", "View", "ResolvedHint"})


def plan_nodes(df: DataFrame) -> list[str]:
    """The analyzed plan's lines, each from its node's name on (Spark's own explain text; classic
    and Connect print it alike)."""
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        df.explain(mode="extended")
    plan = text.getvalue().split("== Analyzed Logical Plan ==", 1)[-1].split("== Optimized Logical Plan ==", 1)[0]
    return [line.lstrip(" :+-|") for line in plan.strip().splitlines()[1:] if line.strip()]  # [0]: the schema


def unordered_node(df: DataFrame) -> str | None:
    """The first node of ``df``'s plan that gives its rows no reproducible order, or None."""
    for line in plan_nodes(df):
        name = line.split(" ", 1)[0].split("[", 1)[0]
        if name == "Repartition" and line.rstrip().endswith(", false"):  # a coalesce: no shuffle
            continue
        if name not in ORDERED_NODES:
            return name
    return None


def check_input_order(df: DataFrame, role: str) -> None:
    """Refuse to align ``df`` by input order when Spark gives its rows none that is reproducible."""
    node = unordered_node(df)
    if node is not None:
        raise InputError(
            f"{role}: with row_key: null, records are aligned by input order, and this DataFrame has none that "
            f"Spark reproduces (its plan has a {node}: a shuffle hands rows over in a different order from run to "
            "run, and again when a task is retried). Add a key column to every table and set row_key, or give "
            "tables read from files or made from local data")


COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"

# Spark's error classes for a session that refuses a setting, a cache or a checkpoint (open-source
# Spark for its static and core settings; Databricks serverless and shared clusters for most)
REFUSALS = ("CANNOT_MODIFY_CONFIG", "CANNOT_MODIFY_STATIC_CONFIG", "CONFIG_NOT_AVAILABLE",
            "NOT_SUPPORTED_WITH_SERVERLESS", "NOT_SUPPORTED_WITH_SHARED_CLUSTER")
_REFUSED: set[str] = set()  # what this process was refused, logged once each


def _refusal(exc: Exception, what: str) -> bool:
    """Whether ``exc`` is the session refusing ``what`` (then logged, once per process)."""
    cls = error_class(exc) or ""
    if not (cls in REFUSALS or cls.startswith("NOT_SUPPORTED")):
        return False
    if what not in _REFUSED:
        _REFUSED.add(what)
        log.warning("this Spark session refuses %s (%s): carrying on without it", what, cls)
    return True


def set_conf(spark: SparkSession, key: str, value: str | None) -> bool:
    """Every Spark setting the package makes at run time goes through here: ``key`` set to
    ``value`` (None: unset), True when the session took it; a session that refuses it
    (a managed platform, a static setting) is logged once and the run carries on."""
    try:
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
        return True
    except Exception as exc:
        if _refusal(exc, f"the setting {key}"):
            return False
        raise


def persist(df: DataFrame) -> DataFrame:
    """``df.cache()``; where the session refuses caching, ``df`` itself: read again, it is
    computed again, to the same result (every step is deterministic), at more cost."""
    try:
        return df.cache()
    except Exception as exc:
        if _refusal(exc, "cache()"):
            return df
        raise


def checkpoint(df: DataFrame) -> DataFrame:
    """``df.localCheckpoint(eager=True)``, or ``persist(df)`` where the session refuses it."""
    try:
        return df.localCheckpoint(eager=True)
    except Exception as exc:
        if _refusal(exc, "localCheckpoint()"):
            return persist(df)
        raise


def cache_plain(df: DataFrame) -> DataFrame:
    """``df.cache()`` without Spark's columnar compression, for a table read several times.

    Compressing a cached 1,000,000 x 16 table costs about 2.5 s of 2 cores
    more than storing it plain (census-shaped, measured: 5.8 s against 3.4 s
    to fill the cache), for 51 MB against 118 MB; a cache past its memory
    spills to disk either way. Spark reads the setting when ``cache()`` is
    called, so it is switched off for that call and put back as it was; a
    session that refuses the change (a managed platform) caches as it would.
    """
    spark = df.sparkSession
    with _SETTING:  # two lanes of metrics (api): one setting, put back by the one who changed it
        try:
            before = spark.conf.get(COMPRESSED, None)
        except Exception:  # noqa: BLE001 - a setting the session will not even show: the default cache
            return persist(df)
        if not set_conf(spark, COMPRESSED, "false"):
            return persist(df)
        try:
            return persist(df)
        finally:
            set_conf(spark, COMPRESSED, before)


_SETTING = threading.Lock()
