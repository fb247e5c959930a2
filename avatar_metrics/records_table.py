"""records/ as a table of the session's catalog (configuration key ``records_table``).

A governed workspace keeps per-record tables in its catalog (Unity Catalog, a
Hive metastore). The table holds what records/ holds, nothing more: one row per
original, its row key (or position) and what each metric found, no variable
value. It is written with Delta where the session has it (Databricks, or a
session with Delta's extension), else as Parquet.

Whose table it is: the tool marks the tables it writes with the table property
``MARKER``. A name that exists without it (a view, another team's table) is
refused, nothing written (exit 2); a table with it is replaced, never appended
to. ``check`` is run before any work and again just before the write.
"""

from __future__ import annotations

import logging
import os

from .errors import InputError
from .version import __version__

log = logging.getLogger(__name__)

MARKER = "avatar_metrics.records"
COMMENT = ("avatar-metrics records: one row per original (its row key or position, and what each privacy "
           "metric found for it), no variable values. Written and replaced by avatar-metrics runs that name "
           "this table in records_table.")


def quoted(name: str) -> str:
    """``a.b.c`` as ``\\`a\\`.\\`b\\`.\\`c\\``` (names were checked: no backquotes)."""
    return ".".join(f"`{part}`" for part in name.split("."))


def check(spark, name: str) -> bool:
    """True when ``name`` is a table this tool wrote (to be replaced), False when there is none;
    InputError when the name is taken by anything else."""
    if not spark.catalog.tableExists(name):
        return False
    what = "a view" if spark.catalog.getTable(name).tableType in ("VIEW", "TEMPORARY") else "a table"
    properties = {row[0]: row[1] for row in spark.sql(f"SHOW TBLPROPERTIES {quoted(name)}").collect()}
    if what == "a view" or MARKER not in properties:
        raise InputError(f"configuration key records_table: {name} is {what} that avatar-metrics did not write "
                         "(it lacks the table property " + MARKER + "): it is never replaced; name another "
                         "table, or drop this one yourself")
    return True


def has_delta(spark) -> bool:
    """Whether the session writes Delta tables: Databricks, or Delta's extension configured."""
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return True
    try:
        return "DeltaSparkSessionExtension" in (spark.conf.get("spark.sql.extensions", "") or "")
    except Exception:  # noqa: BLE001 - a session that will not say: Parquet is always there
        return False


def save(spark, records, name: str) -> str:
    """Write ``records`` (a DataFrame) as the table ``name``; returns the format used."""
    exists = check(spark, name)
    fmt = "delta" if has_delta(spark) else "parquet"
    writer = (records.writeTo(quoted(name)).using(fmt)
              .tableProperty(MARKER, __version__).tableProperty("comment", COMMENT))
    if exists and fmt == "delta":
        writer.createOrReplace()  # Delta replaces in one commit, keeping the table's history and grants
    else:
        if exists:  # checked ours just now: a Parquet table is replaced by dropping it first
            spark.sql(f"DROP TABLE {quoted(name)}")
        writer.create()
    log.info("records: saved as the table %s (%s)", name, fmt)
    return fmt
