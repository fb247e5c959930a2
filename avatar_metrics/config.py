"""Configuration types (``Config``, ``TableSpec``, ``SearchSettings``), the
defaults, the YAML reader and the checks of single values.

The key names are a contract (``shared/spec/INTERFACE.md``): keys may be added,
never renamed. Every error names the key at fault and what is expected.
Turning a whole mapping into a ``Config`` needs the metrics' targets, so it
lives above the registry, in ``configure.py``.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from .errors import ConfigError
from .outputs import expand

FORMATS = ("parquet", "csv", "delta")

# the smallest min_group a user may set: a figure from four people is still theirs
MIN_GROUP_FLOOR = 5

DEFAULTS: dict[str, Any] = {
    "originals": None,
    "avatars": None,
    "holdout": None,
    "row_key": None,
    "exclude": [],
    "categorical": [],
    "known_variables": [],
    "linkability_halves": None,
    "seed": 0,
    "quantile": 5,
    "targets": {},  # one per metric, from its declaration (metrics.REGISTRY)
    "output": "out/",
    # write records/ (per-original results, no variable values) next to report.json
    "records": True,
    # false: synthetic data with no link to the originals (any number of records)
    "avatars_aligned": True,
    # Local Cloaking counts exactly up to this many avatars (spec: "Local Cloaking", Cap)
    "local_cloaking_cap": 1000,
    # the Attribute Inference secrets (null: every variable not known)
    "secret_variables": None,
    # null: every original is a query; N: the N originals of smallest keyed hash, searched
    # against all candidates, with confidence intervals (spec: "Sampled queries")
    "query_sample": None,
    # no published figure from fewer records (spec: "Small groups"); at least MIN_GROUP_FLOOR
    "min_group": 10,
    "spark": {"master": "local[*]", "conf": {}},
    # records/ also saved as this table of the session's catalog (db.name or catalog.schema.name)
    "records_table": None,
    # log the report to MLflow: {experiment, run_name, tracking_uri}, each may be null
    "mlflow": None,
    # Additions to the interface (documented in conf/template.yaml):
    # the metrics to compute, by key (null: every one); the others are reported as not asked for
    "metrics": None,
    "search": {
        # candidates shipped to the executors in one Spark pass (one block); null: automatic,
        # one block up to ONE_BLOCK_UP_TO candidates, blocks of AUTO_BLOCK_SIZE beyond
        "block_size": None,
        # repartition the queries into this many partitions (null: as read)
        "query_partitions": None,
        # deprecated and ignored: every search of several blocks starts with the home job
        "home_from": None,
        # a block of fewer candidates is scanned whole, with no index: building the index (and,
        # in a new Python worker, compiling it) costs more than it saves on so few candidates
        "plain_below": 4096,
    },
}


@dataclass(frozen=True)
class TableSpec:
    """Where a table comes from: a path with a format, or a metastore table."""

    path: str | None = None
    format: str | None = None
    table: str | None = None

    def describe(self) -> str:
        return f"table {self.table}" if self.table else f"{self.format} file {self.path}"


# ``search.block_size: null``. A search of up to ONE_BLOCK_UP_TO candidates takes them as one
# block: on data with no locality (census-shaped) a query visits nearly every block and pays
# the categorical walk's lookups in each (census 200,000: 115.3 s job in one block, 287.5 in
# four of 50,000; census 1,000,000: 559.4 s wall in one, 894.2 in four of 250,000), and one
# block needs no home job, no later pass and no block fetched twice. More candidates go in
# blocks of AUTO_BLOCK_SIZE: in blocks of 1,000,000, census 5,000,000 with query_sample 20,000
# peaked at 17.18 GiB (a later pass's Python worker holds its chain's two indexes, about 2 GiB
# each), for about the same time step by step as blocks of 250,000 (docs/performance.md).
ONE_BLOCK_UP_TO = 1_000_000
AUTO_BLOCK_SIZE = 250_000


def block_size_for(block_size: int | None, n_candidates: int) -> int:
    """The candidates per block of a search of ``n_candidates`` (``search.block_size``; None:
    automatic)."""
    if block_size is not None:
        return block_size
    return max(1, n_candidates) if n_candidates <= ONE_BLOCK_UP_TO else AUTO_BLOCK_SIZE


@dataclass(frozen=True)
class SearchSettings:
    """What every nearest-neighbour search of a run shares, built once per run."""

    seed: int
    block_size: int | None  # candidates shipped to the executors per pass (None: ``block_size_for``)
    query_partitions: int | None  # repartition the queries (None: engine.search decides by their number)
    plain_below: int = 4096  # blocks of fewer candidates: the plain scan, no index


@dataclass(frozen=True)
class MlflowSettings:
    """Where an evaluation is logged (configuration key ``mlflow``): None for each means the
    session's own (the active run, MLFLOW_EXPERIMENT_NAME, or MLflow's default experiment;
    MLFLOW_TRACKING_URI or MLflow's default store)."""

    experiment: str | None = None
    run_name: str | None = None
    tracking_uri: str | None = None


MLFLOW_KEYS = ("experiment", "run_name", "tracking_uri")


@dataclass(frozen=True)
class Config:
    originals: TableSpec | None
    avatars: TableSpec | None
    holdout: TableSpec | None
    row_key: str | None
    exclude: tuple[str, ...]
    categorical: tuple[str, ...]
    known_variables: tuple[str, ...]
    linkability_halves: tuple[tuple[str, ...], tuple[str, ...]] | None
    seed: int
    quantile: float
    targets: Mapping[str, float]
    output: str
    records: bool
    avatars_aligned: bool
    local_cloaking_cap: int
    spark_master: str
    spark_conf: Mapping[str, str]
    search: SearchSettings
    query_sample: int | None = None
    min_group: int = 10
    secret_variables: tuple[str, ...] | None = None  # None: every variable not known
    metrics: tuple[str, ...] | None = None  # the metrics to compute (None: every one)
    records_table: str | None = None  # records/ also saved as this catalog table
    mlflow: MlflowSettings | None = None  # log the report to MLflow

    @property
    def block_size(self) -> int | None:
        return self.search.block_size

    @property
    def query_partitions(self) -> int | None:
        return self.search.query_partitions

    def tables(self) -> list[tuple[str, TableSpec]]:
        """(role, spec) of the input tables given, originals first."""
        named = (("originals", self.originals), ("avatars", self.avatars), ("holdout", self.holdout))
        return [(role, spec) for role, spec in named if spec is not None]

    def to_dict(self) -> dict[str, Any]:
        def table(t: TableSpec | None):
            if t is None:
                return None
            return {"table": t.table} if t.table else {"path": t.path, "format": t.format}

        return {
            "originals": table(self.originals),
            "avatars": table(self.avatars),
            "holdout": table(self.holdout),
            "row_key": self.row_key,
            "exclude": list(self.exclude),
            "categorical": list(self.categorical),
            "known_variables": list(self.known_variables),
            "linkability_halves": (
                [list(h) for h in self.linkability_halves] if self.linkability_halves else None
            ),
            "seed": self.seed,
            "quantile": self.quantile,
            "targets": dict(self.targets),
            "output": self.output,
            "records": self.records,
            "avatars_aligned": self.avatars_aligned,
            "local_cloaking_cap": self.local_cloaking_cap,
            "query_sample": self.query_sample,
            "min_group": self.min_group,
            "secret_variables": None if self.secret_variables is None else list(self.secret_variables),
            "metrics": None if self.metrics is None else list(self.metrics),
            "records_table": self.records_table,
            "mlflow": None if self.mlflow is None else {k: getattr(self.mlflow, k) for k in MLFLOW_KEYS},
            "spark": {"master": self.spark_master, "conf": dict(self.spark_conf)},
            "search": {"block_size": self.block_size, "query_partitions": self.query_partitions,
                       "plain_below": self.search.plain_below},
        }


# ---------------------------------------------------------------- loading


# A configuration is a few hundred bytes; a file much larger is not one.
MAX_CONFIG_BYTES = 1 << 20


MAX_DEPTH = 32  # a configuration nests three levels; past this YAML's parser would recurse without end


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (nested aliases expand exponentially: an "alias bomb"),
    a key given twice in one mapping (the last would silently win) and nesting past MAX_DEPTH."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(
                f"the configuration uses a YAML alias (*{event.anchor}) at line {event.start_mark.line + 1}: "
                "aliases are not accepted, write the value out"
            )
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"the configuration nests more than {MAX_DEPTH} levels (line {line}): "
                                  "it is not a configuration")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise ConfigError(f"the configuration gives the key {key} twice in one mapping (line "
                                      f"{key_node.start_mark.line + 1}): keep one")
                seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str):
    """YAML without aliases, repeated keys or deep nesting (``ConfigError`` on one); YAMLError on bad syntax."""
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass


def load_yaml(path: str | Path) -> dict[str, Any]:
    if "\x00" in str(path):
        raise ConfigError("the configuration file's path holds a NUL character, which no file system takes: check it")
    p = Path(os.path.expanduser(str(path)))
    if p.is_dir():
        raise ConfigError(f"configuration file {p} is a folder: give --config a YAML file")
    if not p.is_file():
        raise ConfigError(f"configuration file {p} does not exist: give --config a YAML file")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"configuration file {p} is larger than {MAX_CONFIG_BYTES} bytes: it is not a configuration")
    try:
        data = parse_yaml(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"configuration file {p} is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"configuration file {p} is not valid YAML{where}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"configuration file {p} must hold a mapping of keys, not a {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply ``key=value`` overrides; dotted keys reach into mappings, values are YAML."""
    data = copy.deepcopy(data)
    for item in overrides or ():
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value (dotted keys for nested values)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"--set {item!r}: the key is empty")
        try:
            value = parse_yaml(raw) if raw.strip() else None
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}=...: the value is not valid YAML") from None
        parts = key.split(".")
        if parts[:2] == ["spark", "conf"] and len(parts) > 3:
            # Spark setting names have dots of their own: spark.conf.spark.driver.memory=4g
            parts = parts[:2] + [".".join(parts[2:])]
        node = data
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = {}
                node[part] = nxt
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a mapping")
            node = nxt
        node[parts[-1]] = value
    return data


# ---------------------------------------------------------------- validation


def _check_keys(data: Mapping[str, Any], allowed, where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown configuration key {prefix}{unknown[0]}: allowed keys"
            f"{' under ' + where if where else ''} are {', '.join(sorted(allowed))}"
        )


def _table(value: Any, key: str, required: bool) -> TableSpec | None:
    if value is None:
        if required:
            raise ConfigError(f"configuration key {key} is required: give {{path: ..., format: parquet}} or {{table: db.name}}")
        return None
    if isinstance(value, str):
        raise ConfigError(f"configuration key {key} must be a mapping such as {{path: data/x.parquet, format: parquet}} or {{table: db.name}}")
    if not isinstance(value, dict):
        raise ConfigError(f"configuration key {key} must be a mapping, not {type(value).__name__}")
    _check_keys(value, ("path", "format", "table"), key)
    if value.get("table") is not None:
        if value.get("path") is not None:
            raise ConfigError(f"configuration key {key}: give either path or table, not both")
        if not isinstance(value["table"], str) or not value["table"]:
            raise ConfigError(f"configuration key {key}.table must be a table name")
        return TableSpec(table=value["table"])
    path = value.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigError(f"configuration key {key}.path is required (or {key}.table)")
    if "\x00" in path:
        raise ConfigError(f"configuration key {key}.path holds a NUL character, which no file system takes: check it")
    fmt = value.get("format") or "parquet"
    if fmt not in FORMATS:
        shown = repr(fmt) if isinstance(fmt, str) and len(fmt) <= 40 else f"a {type(fmt).__name__}"
        raise ConfigError(f"configuration key {key}.format is {shown}: use one of {', '.join(FORMATS)}")
    return TableSpec(path=expand(path), format=fmt)


def _names(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"configuration key {key} must be a list of column names")
    if len(set(value)) != len(value):
        raise ConfigError(f"configuration key {key} names a column twice")
    return tuple(value)


def _number(value: Any, key: str, lo: float, hi: float, integer: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool):
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"configuration key {key} must be {kind}, not {type(value).__name__}")
    if not (lo <= value <= hi):
        if integer and hi >= 2**62:  # no practical upper bound: do not print one
            raise ConfigError(f"configuration key {key} must be a whole number of at least {lo:g}, not {value}")
        raise ConfigError(f"configuration key {key} must be between {lo:g} and {hi:g}")
    return value


def _table_name(value: Any, key: str) -> str | None:
    """A catalog table's name: two or three dot-separated parts (db.name, catalog.schema.name)."""
    if value is None:
        return None
    parts = value.split(".") if isinstance(value, str) else []
    if not (2 <= len(parts) <= 3) or not all(p.strip() and p == p.strip() and "`" not in p for p in parts):
        raise ConfigError(f"configuration key {key} must be a table name db.name or catalog.schema.name "
                          "(no backquotes, no spaces around the dots)")
    return value


def _mlflow(value: Any) -> MlflowSettings | None:
    if value is None or value is False:
        return None
    if value is True:
        return MlflowSettings()
    if not isinstance(value, Mapping):
        raise ConfigError("configuration key mlflow must be null, true, or a mapping "
                          "{experiment: /Users/me/avatar-metrics, run_name: null, tracking_uri: null}")
    _check_keys(value, MLFLOW_KEYS, "mlflow")
    for k in MLFLOW_KEYS:
        v = value.get(k)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise ConfigError(f"configuration key mlflow.{k} must be a name (a string) or null")
    return MlflowSettings(**{k: value.get(k) for k in MLFLOW_KEYS})
