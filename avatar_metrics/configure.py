"""Reading a configuration: a YAML file and ``--set`` overrides, or a mapping,
-> one validated, frozen ``Config``.

This is the one part of the configuration that knows the metrics (their
targets' defaults and ranges come from the registry), so it sits above them;
``config.py`` below holds the types and the checks of single values.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Mapping

from . import metrics as declared
from .config import (
    DEFAULTS, MIN_GROUP_FLOOR, Config, SearchSettings, _check_keys, _mlflow, _names, _number, _table, _table_name,
    apply_overrides, expand, load_yaml,
)
from .errors import ConfigError

log = logging.getLogger(__name__)


def load_config(path: str | Path | None = None, overrides=(), *, require_inputs: bool = True) -> Config:
    data = load_yaml(path) if path is not None else {}
    return build_config(apply_overrides(data, list(overrides)), require_inputs=require_inputs)


def build_config(data: Mapping[str, Any], *, require_inputs: bool = True) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError(f"the configuration must be a mapping of keys, not {type(data).__name__}")
    _check_keys(data, DEFAULTS, "")
    merged = copy.deepcopy(DEFAULTS)
    registry = declared.REGISTRY
    merged["targets"] = {m.key: m.target for m in registry}
    for k, v in data.items():
        if k in ("targets", "spark", "search"):
            if v is None:
                continue
            if not isinstance(v, Mapping):
                raise ConfigError(f"configuration key {k} must be a mapping")
            _check_keys(v, merged[k], k)
            merged[k].update(v)
        else:
            merged[k] = v

    row_key = merged["row_key"]
    if row_key is not None and (not isinstance(row_key, str) or not row_key):
        raise ConfigError("configuration key row_key must be a column name or null")

    halves = merged["linkability_halves"]
    if halves is not None:
        if (
            not isinstance(halves, (list, tuple))
            or len(halves) != 2
            or not all(isinstance(h, (list, tuple)) and h for h in halves)
        ):
            raise ConfigError("configuration key linkability_halves must be null or two non-empty lists: [[a, b], [c, d]]")
        halves = (_names(halves[0], "linkability_halves[0]"), _names(halves[1], "linkability_halves[1]"))
        common = set(halves[0]) & set(halves[1])
        if common:
            raise ConfigError(f"configuration key linkability_halves: column {sorted(common)[0]} is in both halves")

    seed = merged["seed"]
    _number(seed, "seed", 0, 2**63 - 1, integer=True)
    quantile = float(_number(merged["quantile"], "quantile", 0, 100))
    targets = {m.key: float(_number(merged["targets"][m.key], f"targets.{m.key}", *m.target_range()))
               for m in registry}
    output = merged["output"]
    if not isinstance(output, str) or not output.strip():
        raise ConfigError("configuration key output must be a directory path")
    output = expand(output)
    for flag in ("records", "avatars_aligned"):
        if not isinstance(merged[flag], bool):
            raise ConfigError(f"configuration key {flag} must be true or false")
    cap = int(_number(merged["local_cloaking_cap"], "local_cloaking_cap", 1, 2**62, integer=True))
    lc_target = targets.get("local_cloaking")
    if lc_target is not None and cap < 2 * lc_target:
        raise ConfigError(
            f"configuration key local_cloaking_cap ({cap}) must be at least twice the Local Cloaking target "
            f"({lc_target:g}): below that, a median computed up to the cap could pass or miss the target "
            "differently from the exact one")
    min_group = int(_number(merged["min_group"], "min_group", MIN_GROUP_FLOOR, 2**62, integer=True))
    sample = merged["query_sample"]
    if sample is not None:
        sample = int(_number(sample, "query_sample", 1, 2**62, integer=True))
        if sample < min_group:
            raise ConfigError(f"configuration key query_sample ({sample}) is under min_group ({min_group}): every "
                              "figure of a sampled metric would come from fewer people; sample at least min_group")
    master = merged["spark"]["master"]
    if not isinstance(master, str) or not master:
        raise ConfigError("configuration key spark.master must be a Spark master URL such as local[*]")
    conf = merged["spark"]["conf"] or {}
    if not isinstance(conf, Mapping):
        raise ConfigError("configuration key spark.conf must be a mapping of Spark settings")
    for k, v in conf.items():
        if not isinstance(k, str) or not k.strip():
            raise ConfigError("configuration key spark.conf has an empty setting name: give settings as "
                              "spark.conf.<name>=<value>, such as spark.conf.spark.driver.memory=4g")
        if v is None or isinstance(v, (Mapping, list)):
            raise ConfigError(f"configuration key spark.conf.{k} must be one value (a string, number or "
                              "true/false), not " + ("empty" if v is None else "a mapping" if isinstance(v, Mapping)
                                                     else "a list"))
    block = merged["search"]["block_size"]
    if block is not None:
        block = int(_number(block, "search.block_size", 1, 10**7, integer=True))
    qp = merged["search"]["query_partitions"]
    if qp is not None:
        qp = int(_number(qp, "search.query_partitions", 1, 10**6, integer=True))
    plain_below = int(_number(merged["search"]["plain_below"], "search.plain_below", 0, 10**7, integer=True))
    chosen = merged["metrics"]
    if chosen is not None:
        keys = [m.key for m in registry]
        if not isinstance(chosen, (list, tuple, str)) or not chosen or not all(isinstance(k, str) for k in chosen):
            raise ConfigError("configuration key metrics must be null (every metric) or a list of metric keys: "
                              + ", ".join(keys))
        chosen = (chosen,) if isinstance(chosen, str) else tuple(dict.fromkeys(chosen))
        unknown = [k for k in chosen if k not in keys]
        if unknown:
            raise ConfigError(f"configuration key metrics: unknown metric key {unknown[0]}; the keys are: "
                              + ", ".join(keys))
    records_table = _table_name(merged["records_table"], "records_table")
    if records_table is not None and not merged["records"]:
        raise ConfigError("configuration key records_table saves records/ as a table, and records is false: "
                          "set records: true, or records_table: null")
    if merged["search"]["home_from"] is not None:
        log.warning("search.home_from is deprecated and ignored: every search of several blocks now starts "
                    "with the home job (remove the key from the configuration)")

    return Config(
        originals=_table(merged["originals"], "originals", require_inputs),
        avatars=_table(merged["avatars"], "avatars", require_inputs),
        holdout=_table(merged["holdout"], "holdout", False),
        row_key=row_key,
        exclude=_names(merged["exclude"], "exclude"),
        categorical=_names(merged["categorical"], "categorical"),
        known_variables=_names(merged["known_variables"], "known_variables"),
        linkability_halves=halves,
        seed=int(seed),
        quantile=quantile,
        targets=targets,
        output=output,
        records=merged["records"],
        avatars_aligned=merged["avatars_aligned"],
        local_cloaking_cap=cap,
        spark_master=master,
        spark_conf={str(k): str(v) for k, v in conf.items()},
        search=SearchSettings(seed=int(seed), block_size=block, query_partitions=qp, plain_below=plain_below),
        query_sample=sample,
        min_group=min_group,
        secret_variables=(None if merged["secret_variables"] is None
                          else _names(merged["secret_variables"], "secret_variables")),
        metrics=chosen,
        records_table=records_table,
        mlflow=_mlflow(merged["mlflow"]),
    )


def as_config(config: Config | Mapping[str, Any] | None) -> Config:
    """Accept a Config, a mapping of keys (library use: inputs not needed), or None."""
    if isinstance(config, Config):
        return config
    return build_config(dict(config or {}), require_inputs=False)
