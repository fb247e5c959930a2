"""Variables, their kinds, record ids and the validation of the inputs.

Every check names the table and the column and says what to do; no message
carries a record value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .config import Config
from .errors import ConfigError, InputError
from . import positions
from .io import ID, KEY, RESERVED_PREFIX, cache_plain, check_input_order, col, column_name, csv_roles
from .summaries import TableStats, summarise

NUMERIC_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
INTEGRAL_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
CATEGORICAL_TYPES = (T.StringType, T.BooleanType)


@dataclass(frozen=True)
class Variable:
    """A variable of the Gower distance: its column name and kind."""

    name: str
    kind: str  # "numeric" | "categorical"


def type_class(dt: T.DataType) -> str | None:
    for types, name in ((NUMERIC_TYPES, "number"), (T.StringType, "string"), (T.BooleanType, "boolean")):
        if isinstance(dt, types):
            return name
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
    stats: dict[str, TableStats] = field(default_factory=dict)  # per table role
    aligned: bool = True  # avatar i made from original i (configuration key avatars_aligned)
    shared: dict = field(default_factory=dict)  # what several metrics share: cached frames (released with the inputs), counts
    # query_sample (spec: "Sampled queries"): a boolean column of any table with ID, true for
    # the sampled originals, and how many; None: every original is a query (exact)
    sample_mark: Column | None = None
    n_sampled: int | None = None
    # the holdout records asked about by the searches that take them as queries (Membership, the
    # control of Attribute Inference): the keyed sample "sample_holdout", or None: every one
    holdout_mark: Column | None = None
    n_holdout_sampled: int | None = None
    # the avatars asked about by the searches that take them as queries (DCR Share): the keyed
    # sample "sample_avatars", or None: every one (``engine.split.draw_avatar_sample``)
    avatars_mark: Column | None = None
    n_avatars_sampled: int | None = None
    secrets: tuple[str, ...] = ()  # the Attribute Inference secrets (secret_variables, or every variable not known)
    cached: list[DataFrame] = field(default_factory=list)  # the caches the tables are read from (released with them)

    def queries_of(self, side: str) -> tuple[DataFrame, int]:
        """The records of one side (``"originals"``, ``"holdout"`` or ``"avatars"``) that the
        searches asking about that side take as queries, and how many: the side's keyed sample,
        or every record of it. A filter, not one more cache: a search's plan refers to its
        queries many times. The search itself takes any side's queries alike."""
        table, n, mark, sampled = {
            "originals": (self.originals, self.n_originals, self.sample_mark, self.n_sampled),
            "holdout": (self.holdout, self.n_holdout, self.holdout_mark, self.n_holdout_sampled),
            "avatars": (self.avatars, self.n_avatars, self.avatars_mark, self.n_avatars_sampled),
        }[side]
        if table is None:
            raise ValueError(f"no {side}")
        return (table, n) if mark is None else (table.filter(mark), sampled)

    def queries(self) -> DataFrame:  # the originals asked about
        return self.queries_of("originals")[0]

    @property
    def n_queries(self) -> int:
        return self.n_originals if self.n_sampled is None else self.n_sampled

    def holdout_queries(self) -> DataFrame:  # the holdout records asked about (never as candidates)
        return self.queries_of("holdout")[0]

    @property
    def n_holdout_queries(self) -> int | None:
        return self.n_holdout if self.n_holdout_sampled is None else self.n_holdout_sampled

    def stats_of(self, *roles: str) -> list[TableStats]:
        """The statistics of the tables named (``"originals"``, ``"avatars"``, ``"holdout"``), whose
        union the metrics take ranges over."""
        return [self.stats[role] for role in roles]

    @property
    def names(self) -> list[str]:
        return list(self.variables)

    def typed(self, names=None) -> list[Variable]:
        """The variables (all, or ``names`` in that order) as typed records, in the order of V."""
        return [Variable(v, self.variables[v]) for v in (self.variables if names is None else names)]

    def kinds(self, names) -> list[str]:
        return [self.variables[v] for v in names]

    def tables(self):
        out = [("originals", self.originals), ("avatars", self.avatars)]
        if self.holdout is not None:
            out.append(("holdout", self.holdout))
        return out


def _fail(msg: str):
    raise InputError(msg)


def _empty(role: str):
    _fail(f"{role}: the table is empty: check the path or table name")


def derive_variables(o: DataFrame, a: DataFrame, h: DataFrame | None, cfg: Config,
                     csv: frozenset[str] = frozenset()) -> dict[str, str]:
    """The variables V and their kinds. ``csv``: the roles whose names may be values (``csv_roles``)."""
    o_cols = {f.name: f.dataType for f in o.schema.fields}
    a_cols = {f.name: f.dataType for f in a.schema.fields}
    h_cols = {f.name: f.dataType for f in h.schema.fields} if h is not None else None
    everywhere = set(o_cols) | set(a_cols) | (set(h_cols) if h_cols else set())
    for role, cols in (("originals", o_cols), ("avatars", a_cols), ("holdout", h_cols)):
        for c in cols or ():
            if c.lower().startswith(RESERVED_PREFIX):  # Spark compares names without case
                _fail(f"{role}: {column_name(c, cols, role, csv)} starts with {RESERVED_PREFIX} (in any case), which "
                      "this tool keeps for its own columns: rename it")
    if not set(o_cols) & set(a_cols):
        # never quote the names: a CSV read without its header row makes them of its first record
        _fail("originals and avatars share no column name: check that both are the right tables, and that "
              "every CSV file starts with a header row")

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
                _fail(f"{role}: {column_name(c, o_cols, 'originals', csv)} of the originals is missing: add it to the "
                      f"{role} or list it under exclude (and check that every CSV file starts with a header row)")
        for c in cols:
            if c not in skip and c not in o_cols:
                _fail(f"{role}: {column_name(c, cols, role, csv)} is not in the originals: remove it or list it under "
                      "exclude (and check that every CSV file starts with a header row)")
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
                _fail(f"{role}: {column_name(c, cols, role, csv)} has type {cols[c].simpleString()}, which has no "
                      "meaning for these metrics: cast it to a number or a string, or list it under exclude")
            kinds[role] = tc
        if len(set(kinds.values())) > 1:
            detail = ", ".join(f"{r} {k}" for r, k in kinds.items())
            named = column_name(c, o_cols, "originals", csv)
            _fail(f"{named} has conflicting types ({detail}): make the tables agree, or list it under exclude")
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


def _secrets(cfg: Config, variables: dict[str, str], known: tuple[str, ...]) -> tuple[str, ...]:
    """The Attribute Inference secrets: ``secret_variables``, or every variable not known."""
    if cfg.secret_variables is None:
        return tuple(v for v in variables if v not in known)
    for c in cfg.secret_variables:
        if c not in variables:
            raise ConfigError(f"configuration key secret_variables names column {c}, which is not a variable "
                              "(missing or excluded): check the spelling")
        if c in known:
            raise ConfigError(f"configuration key secret_variables names column {c}, which is also a known variable: "
                              "a secret is what the attacker does not know; take it out of one of the two lists")
    return tuple(cfg.secret_variables)


def _clean(df: DataFrame, variables: dict[str, str], id_expr, key: str | None = None,
           exact: Mapping[str, str] | None = None, keep: str | None = None) -> DataFrame:
    """Select the id (and row key) and the variables, in the forms every metric compares.

    NaN becomes null (the spec: NaN is a null); decimals become float64. A
    numeric column forced to ``categorical`` becomes the text of its exact
    value when it has an exact type (integers, decimals) in every table: the
    text of ``exact[c]``, one decimal type for all the tables, so that codes
    such as 2**60 + k stay distinct everywhere; else the text of its float64
    value (-0.0 as 0.0).
    """
    exact = exact or {}
    cols = [id_expr.alias(ID)]
    if keep is not None and keep in df.columns:  # a column the caller needs in the cache too
        cols.append(col(keep))
    if key is not None:
        cols.append(col(key).alias(KEY))
    for c, kind in variables.items():
        dt = df.schema[c].dataType
        x = col(c)
        if isinstance(dt, (T.FloatType, T.DoubleType)):
            x = F.when(F.isnan(x), F.lit(None)).otherwise(x)
        if kind == "categorical" and isinstance(dt, NUMERIC_TYPES):
            if c in exact:
                x = x.cast(exact[c]).cast("string")
            else:
                x = x.cast("double")
                x = F.when(x == 0, F.lit(0.0)).otherwise(x).cast("string")
        elif isinstance(dt, T.DecimalType):
            x = x.cast("double")
        cols.append(x.alias(c))
    return df.select(*cols)


FLOAT_TYPES = (T.FloatType, T.DoubleType)


def exact_text_type(types: Sequence[T.DataType]) -> str | None:
    """The one decimal type that holds every value of these exact numeric types (integers, decimals)
    exactly, so that its text compares them exactly across tables; None when one of them is not exact
    (a float) or no decimal holds them all (more than 38 digits)."""
    if not types or not all(isinstance(t, INTEGRAL_TYPES + (T.DecimalType,)) for t in types):
        return None
    whole = max(19 if isinstance(t, INTEGRAL_TYPES) else t.precision - t.scale for t in types)
    scale = max(0 if isinstance(t, INTEGRAL_TYPES) else t.scale for t in types)
    if whole + scale > 38:
        return None
    return f"decimal({whole + scale},{scale})"


def key_id(df: DataFrame, key: str):
    """The record id from a row key: the integer itself, or a 64-bit hash of the value
    (-0.0 hashed as 0.0: the two compare equal, so they are one key)."""
    dt = df.schema[key].dataType
    if isinstance(dt, INTEGRAL_TYPES):
        return col(key).cast("long")
    x = col(key)
    if isinstance(dt, FLOAT_TYPES):
        x = F.when(x == 0, F.lit(0.0).cast(dt)).otherwise(x)
    return F.xxhash64(x.cast("string"))


def key_kind(dt: T.DataType) -> str:
    """The kind of a row key's type, for comparing the tables' keys."""
    if isinstance(dt, INTEGRAL_TYPES):
        return "integer"
    if isinstance(dt, FLOAT_TYPES):
        return "floating-point"
    return dt.simpleString()


def check_key_types(raws, key: str) -> None:
    """Every table's row key of one kind: an integer key never equals a double key's hash."""
    kinds = {role: key_kind(raw.schema[key].dataType) for role, raw in raws}
    if len(set(kinds.values())) > 1:
        detail = ", ".join(f"{kind} in the {role}" for role, kind in kinds.items())
        _fail(f"row key column {key} has different types ({detail}): cast it to one type in every table")


def key_missing(df: DataFrame, key: str) -> Column:
    """Whether a record has no row key: null, or NaN (which equals no key, itself included)."""
    missing = col(key).isNull()
    return missing | F.isnan(col(key)) if isinstance(df.schema[key].dataType, FLOAT_TYPES) else missing


def check_keys(role: str, df: DataFrame, raw: DataFrame, key: str) -> None:
    """Row keys: none null (NaN counts as null), none duplicated (``df`` carries the ids made from them)."""
    nulls = raw.filter(key_missing(raw, key)).limit(1).count()
    if nulls:
        _fail(f"{role}: row key column {key} has null (or NaN) values: every record needs a key")
    dup = df.groupBy(ID).count().filter("count > 1").limit(1).count()
    if dup:
        if isinstance(raw.schema[key].dataType, T.StringType) and raw.select(col(key)).distinct().count() == raw.count():
            _fail(f"{role}: row key column {key} has values whose hashes collide: use an integer key")
        _fail(f"{role}: row key column {key} has duplicated values: the key must be unique, or set row_key: null")


def _check_values(stats: dict[str, TableStats], variables: dict[str, str], name) -> None:
    """Every numeric variable finite, with a finite range over all the tables; ``name(c, role)``
    names a column in a message."""
    for c, kind in variables.items():
        if kind != "numeric":
            continue
        for role, st in stats.items():
            if st[c].infinite:
                _fail(f"{role}: {name(c, role)} has {st[c].infinite} infinite value(s): Gower distances need finite "
                      "numbers; replace them by null or a finite value, or list the column under exclude")
        lows = [st[c].min for st in stats.values() if st[c].min is not None]
        highs = [st[c].max for st in stats.values() if st[c].max is not None]
        if lows and not math.isfinite(max(highs) - min(lows)):
            _fail(f"{name(c, 'originals')}: its range (largest minus smallest value over the tables) overflows "
                  "float64: values this far apart cannot be compared; rescale the column or list it under exclude")


def prepare_inputs(originals: DataFrame, avatars: DataFrame, holdout: DataFrame | None, cfg: Config) -> Inputs:
    try:
        csv = csv_roles(cfg, (('originals', originals), ('avatars', avatars), ('holdout', holdout)))
        variables = derive_variables(originals, avatars, holdout, cfg, csv)
    except InputError:
        # a CSV with only its header has string columns everywhere: say it is empty
        for role, raw in (("originals", originals), ("avatars", avatars), ("holdout", holdout)):
            if raw is not None and raw.limit(1).count() == 0:
                _empty(role)
        raise
    known = _known(cfg, variables)
    secrets = _secrets(cfg, variables, known)
    raws = [(role, raw) for role, raw in (("originals", originals), ("avatars", avatars), ("holdout", holdout))
            if raw is not None]
    exact = {c: t for c in cfg.categorical if c in variables
             for t in [exact_text_type([raw.schema[c].dataType for _, raw in raws])] if t is not None}

    if cfg.row_key is not None:
        check_key_types(raws, cfg.row_key)
    cached = {}
    try:
        for role, raw in raws if cfg.row_key is None else ():
            check_input_order(raw, role)
        once = {role for role, raw in raws if cfg.row_key is None and positions.in_one_pass(raw)}
        tables, stats = _read(raws, variables, exact, cfg.row_key, once, cached)
        for role, raw in raws:
            if stats[role].rows == 0:
                _empty(role)
            if stats[role].rows < cfg.min_group:  # spec: "Small groups"
                _fail(f"{role}: {stats[role].rows} records, fewer than min_group ({cfg.min_group}): its figures would give a handful of people back")
            if cfg.row_key is not None:
                check_keys(role, tables[role], raw, cfg.row_key)
        columns = {role: raw.columns for role, raw in raws}
        name = lambda c, role: column_name(c, columns[role], role, csv)  # by position in a CSV role  # noqa: E731
        _check_values(stats, variables, name)

        n_o, n_a = stats["originals"].rows, stats["avatars"].rows
        for c in variables:
            if stats["originals"][c].non_null == 0 and stats["avatars"][c].non_null == 0:
                _fail(f"{name(c, 'originals')} is null in every record of originals and avatars: it carries nothing to compare; list it under exclude")

        if not cfg.avatars_aligned:
            pass  # synthetic data with no link: any number of records, any keys
        elif cfg.row_key is not None:
            o_ids = tables["originals"].select(ID)
            a_ids = tables["avatars"].select(ID)
            missing = o_ids.join(a_ids, ID, "left_anti").limit(1).count()
            extra = a_ids.join(o_ids, ID, "left_anti").limit(1).count()
            if missing or extra:
                side = "some originals have no avatar" if missing else "some avatars have no original"
                _fail(f"avatars: the row key {cfg.row_key} values differ from the originals' ({side}): both tables need "
                      "the same key set, or set avatars_aligned: false for synthetic data with no link to the originals")
        elif n_o != n_a:
            _fail(f"avatars: {n_a} records against {n_o} originals: avatars are aligned with originals row by row, "
                  "so both tables need the same number of records (or a row_key); for synthetic data with no link to "
                  "the originals, set avatars_aligned: false")
    except BaseException:
        for df in cached.values():
            df.unpersist()
        raise

    return Inputs(
        originals=tables["originals"],
        avatars=tables["avatars"],
        holdout=tables.get("holdout"),
        variables=variables,
        known=known,
        secrets=secrets,
        n_originals=n_o,
        n_avatars=n_a,
        n_holdout=stats["holdout"].rows if "holdout" in stats else None,
        row_key=cfg.row_key,
        stats=stats,
        aligned=cfg.avatars_aligned,
        cached=list(cached.values()),
    )


def _read(raws, variables, exact, key, once, cached) -> tuple[dict[str, DataFrame], dict[str, TableStats]]:
    """The tables, cleaned, cached (into ``cached``) and placed, and their statistics.

    One action fills the caches and takes the statistics; the tables of one file or none
    (``once``) are placed from the same action (``positions``), the others by a counting pass
    first, which decodes no column. A table that its partitions cannot place goes the second
    way after all, read again.
    """
    later = [(role, raw) for role, raw in raws if key is None and role not in once]
    counted = dict(zip([role for role, _ in later], positions.with_positions([raw for _, raw in later]) if later else []))
    grouped = {}
    for role, raw in raws:
        if key is not None:
            df = _clean(raw, variables, key_id(raw, key), key, exact)
        elif role in once:
            df = _clean(positions.tag(raw), variables, F.col(positions.MID), exact=exact, keep=positions.SPLIT)
            grouped[role] = positions.partition_counts(df)
        else:
            df = _clean(counted[role], variables, F.col(ID), exact=exact)
        cached[role] = cache_plain(df)
    stats, parts = summarise(cached, variables, grouped)
    tables = dict(cached)
    for role, raw in raws:
        if role in grouped:
            tables[role] = positions.place(cached[role], parts[role])
            if tables[role] is None:
                cached.pop(role).unpersist()
                again, again_stats = _read([(role, raw)], variables, exact, key, (), cached)
                tables[role], stats[role] = again[role], again_stats[role]
    return tables, stats


def release(inputs: Inputs) -> None:
    for df in [df for _, df in inputs.tables()] + inputs.cached + list(inputs.shared.values()):
        if hasattr(df, "unpersist"):
            df.unpersist()
    inputs.shared.clear()
