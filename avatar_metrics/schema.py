"""Variables, their kinds, record ids and the validation of the inputs.

Every check names the table and the column and says what to do; no message
carries a record value.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .config import Config
from .errors import ConfigError, InputError
from .io import ID, KEY, with_position

log = logging.getLogger(__name__)

NUMERIC_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
CATEGORICAL_TYPES = (T.StringType, T.BooleanType)


def type_class(dt: T.DataType) -> str | None:
    if isinstance(dt, NUMERIC_TYPES):
        return "number"
    if isinstance(dt, T.StringType):
        return "string"
    if isinstance(dt, T.BooleanType):
        return "boolean"
    return None


@dataclass
class Inputs:
    """The validated inputs: each table has ``ID`` and the variables, NaN as null."""

    originals: DataFrame
    avatars: DataFrame
    holdout: DataFrame | None
    variables: dict[str, str]  # name -> "numeric" | "categorical", in the order of V
    known: tuple[str, ...]
    n_originals: int
    n_avatars: int
    n_holdout: int | None
    row_key: str | None
    stats: dict[str, dict] = field(default_factory=dict)  # per table: per variable min, max, non-null

    @property
    def names(self) -> list[str]:
        return list(self.variables)

    def kinds(self, names) -> list[str]:
        return [self.variables[v] for v in names]

    def tables(self):
        out = [("originals", self.originals), ("avatars", self.avatars)]
        if self.holdout is not None:
            out.append(("holdout", self.holdout))
        return out


def _fail(msg: str):
    raise InputError(msg)


def derive_variables(o: DataFrame, a: DataFrame, h: DataFrame | None, cfg: Config) -> dict[str, str]:
    o_cols = {f.name: f.dataType for f in o.schema.fields}
    a_cols = {f.name: f.dataType for f in a.schema.fields}
    h_cols = {f.name: f.dataType for f in h.schema.fields} if h is not None else None
    everywhere = set(o_cols) | set(a_cols) | (set(h_cols) if h_cols else set())

    for c in cfg.exclude:
        if c not in everywhere:
            raise ConfigError(f"configuration key exclude names column {c}, which is in none of the tables: check the spelling")
    others = [("avatars", a_cols)] + ([("holdout", h_cols)] if h_cols is not None else [])
    if cfg.row_key is not None:
        for role, cols in [("originals", o_cols), *others]:
            if cfg.row_key not in cols:
                _fail(f"{role}: row key column {cfg.row_key} is missing: add it to the table or set row_key: null for input order")

    skip = set(cfg.exclude) | ({cfg.row_key} if cfg.row_key else set())
    o_vars = [c for c in o_cols if c not in skip]
    for role, cols in others:
        for c in o_vars:
            if c not in cols:
                _fail(f"{role}: column {c} of the originals is missing: add it to the {role} or list it under exclude")
        for c in cols:
            if c not in skip and c not in o_cols:
                _fail(f"{role}: column {c} is not in the originals: remove it or list it under exclude")
    if not o_vars:
        _fail("originals: no variable is left to compare once exclude and row_key are taken out")

    variables: dict[str, str] = {}
    for c in o_vars:
        kinds = {}
        for role, cols in (("originals", o_cols), ("avatars", a_cols), ("holdout", h_cols)):
            if cols is None:
                continue
            tc = type_class(cols[c])
            if tc is None:
                _fail(
                    f"{role}: column {c} has type {cols[c].simpleString()}, which has no meaning for these metrics: "
                    "cast it to a number or a string, or list it under exclude"
                )
            kinds[role] = tc
        if len(set(kinds.values())) > 1:
            detail = ", ".join(f"{r} {k}" for r, k in kinds.items())
            _fail(f"column {c} has conflicting types ({detail}): make the tables agree, or list it under exclude")
        tc = kinds["originals"]
        variables[c] = "numeric" if tc == "number" else "categorical"

    for c in cfg.categorical:
        if c not in variables:
            raise ConfigError(f"configuration key categorical names column {c}, which is not a variable (missing or excluded)")
        variables[c] = "categorical"
    return variables


def _known(cfg: Config, variables: dict[str, str]) -> tuple[str, ...]:
    for c in cfg.known_variables:
        if c not in variables:
            raise ConfigError(f"configuration key known_variables names column {c}, which is not a variable (missing or excluded): check the spelling")
    known = cfg.known_variables
    if cfg.linkability_halves:
        for i, half in enumerate(cfg.linkability_halves):
            for c in half:
                if c not in variables:
                    raise ConfigError(f"configuration key linkability_halves[{i}] names column {c}, which is not a variable")
                if known and c not in known:
                    raise ConfigError(f"configuration key linkability_halves[{i}] names column {c}, which is not in known_variables")
        if not known:
            known = tuple(cfg.linkability_halves[0]) + tuple(cfg.linkability_halves[1])
    return tuple(known)


def _clean(df: DataFrame, variables: dict[str, str], id_expr, key: str | None = None) -> DataFrame:
    """Select the id (and row key) and the variables; NaN becomes null (the spec: NaN is a null)."""
    cols = [id_expr.alias(ID)]
    if key is not None:
        cols.append(F.col(f"`{key}`").alias(KEY))
    for c in variables:
        dt = df.schema[c].dataType
        col = F.col(f"`{c}`")
        if isinstance(dt, (T.FloatType, T.DoubleType)):
            col = F.when(F.isnan(col), F.lit(None)).otherwise(col)
        if isinstance(dt, T.DecimalType):
            col = col.cast("double")
        cols.append(col.alias(c))
    return df.select(*cols)


def key_id(df: DataFrame, key: str):
    """The record id from a row key: the integer itself, or a 64-bit hash of the value."""
    dt = df.schema[key].dataType
    if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return F.col(f"`{key}`").cast("long")
    return F.xxhash64(F.col(f"`{key}`").cast("string"))


def _check_keys(role: str, df: DataFrame, raw: DataFrame, key: str) -> None:
    nulls = raw.filter(F.col(f"`{key}`").isNull()).limit(1).count()
    if nulls:
        _fail(f"{role}: row key column {key} has null values: every record needs a key")
    dup = df.groupBy(ID).count().filter("count > 1").limit(1).count()
    if dup:
        if isinstance(raw.schema[key].dataType, (T.StringType,)) and raw.select(key).distinct().count() == raw.count():
            _fail(f"{role}: row key column {key} has values whose hashes collide: use an integer key")
        _fail(f"{role}: row key column {key} has duplicated values: the key must be unique, or set row_key: null")


def table_stats(df: DataFrame, variables: dict[str, str]) -> dict:
    """Rows, and per variable: non-null count, min and max (numeric)."""
    aggs = [F.count(F.lit(1)).alias("__n")]
    for i, (c, kind) in enumerate(variables.items()):
        aggs.append(F.count(F.col(f"`{c}`")).alias(f"nn{i}"))
        if kind == "numeric":
            col = F.col(f"`{c}`").cast("double")
            aggs += [F.min(col).alias(f"lo{i}"), F.max(col).alias(f"hi{i}")]
    row = df.agg(*aggs).collect()[0]
    out = {"__n": row["__n"]}
    for i, (c, kind) in enumerate(variables.items()):
        out[c] = {
            "non_null": row[f"nn{i}"],
            "min": row[f"lo{i}"] if kind == "numeric" else None,
            "max": row[f"hi{i}"] if kind == "numeric" else None,
        }
    return out


def prepare_inputs(originals: DataFrame, avatars: DataFrame, holdout: DataFrame | None, cfg: Config) -> Inputs:
    # an empty table first: a CSV with only its header has string columns everywhere
    for role, raw in (("originals", originals), ("avatars", avatars), ("holdout", holdout)):
        if raw is not None and raw.limit(1).count() == 0:
            _fail(f"{role}: the table is empty: check the path or table name")
    variables = derive_variables(originals, avatars, holdout, cfg)
    known = _known(cfg, variables)

    tables = {}
    stats = {}
    for role, raw in (("originals", originals), ("avatars", avatars), ("holdout", holdout)):
        if raw is None:
            continue
        if cfg.row_key is not None:
            df = _clean(raw, variables, key_id(raw, cfg.row_key), cfg.row_key)
        else:
            df = _clean(with_position(raw), variables, F.col(ID))
        df = df.cache()
        st = table_stats(df, variables)
        if cfg.row_key is not None:
            _check_keys(role, df, raw, cfg.row_key)
        tables[role] = df
        stats[role] = st

    n_o, n_a = stats["originals"]["__n"], stats["avatars"]["__n"]
    for c in variables:
        if stats["originals"][c]["non_null"] == 0 and stats["avatars"][c]["non_null"] == 0:
            _fail(f"column {c} is null in every record of originals and avatars: it carries nothing to compare; list it under exclude")

    if cfg.row_key is not None:
        o_ids = tables["originals"].select(ID)
        a_ids = tables["avatars"].select(ID)
        missing = o_ids.join(a_ids, ID, "left_anti").limit(1).count()
        extra = a_ids.join(o_ids, ID, "left_anti").limit(1).count()
        if missing or extra:
            side = "some originals have no avatar" if missing else "some avatars have no original"
            _fail(f"avatars: the row key {cfg.row_key} values differ from the originals' ({side}): both tables need the same key set")
    elif n_o != n_a:
        _fail(
            f"avatars: {n_a} records against {n_o} originals: avatars are aligned with originals row by row, "
            "so both tables need the same number of records (or a row_key)"
        )

    return Inputs(
        originals=tables["originals"],
        avatars=tables["avatars"],
        holdout=tables.get("holdout"),
        variables=variables,
        known=known,
        n_originals=n_o,
        n_avatars=n_a,
        n_holdout=stats["holdout"]["__n"] if "holdout" in stats else None,
        row_key=cfg.row_key,
        stats=stats,
    )


def release(inputs: Inputs) -> None:
    for _, df in inputs.tables():
        df.unpersist()
