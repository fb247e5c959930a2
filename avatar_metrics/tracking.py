"""Logging a report to MLflow (configuration key ``mlflow``, ``Report.log_mlflow``).

One MLflow run per evaluation, in the named experiment, or in the active run
when the caller has one (a notebook's ``mlflow.start_run()``: then the run is
the caller's to end). What is logged, and only this:

- metrics: each computed metric's value under its key, and, when it comes from
  a sample, its interval as ``<key>.ci95_low`` and ``<key>.ci95_high``;
- tags: ``<key>.passed`` per metric (``true``, ``false`` or ``not computed``) and
  ``avatar_metrics.targets_missed`` (the keys, comma separated);
- params: the configuration flattened with dotted keys, without paths (the inputs'
  paths, ``output``), without ``spark.conf`` (its values can be credentials) and
  without ``mlflow.tracking_uri``; the input sizes (``inputs.*``) and the versions
  (``versions.*``);
- artifacts: ``report.json`` and ``report.html``, the aggregates the command line
  writes. Never ``records/`` nor any per-record figure: an experiment's artifacts
  are readable by everyone who can read the experiment.

mlflow (the extra ``avatar-metrics[mlflow]``, which installs ``mlflow-skinny``) is
imported only here, and only when asked for.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any

from .config import MlflowSettings
from .errors import ConfigError

log = logging.getLogger(__name__)

EXTRA = "pip install 'avatar-metrics[mlflow]'"

# the configuration keys never logged: where data lives, and what can hold a credential
PRIVATE = ("originals.path", "avatars.path", "holdout.path", "output", "spark.conf", "mlflow.tracking_uri")
INPUTS = ("originals_rows", "avatars_rows", "holdout_rows", "reference", "avatars_aligned", "query_sample",
          "query_sample_holdout", "query_sample_avatars")
PARAM_LENGTH = 6000  # MLflow's longest parameter value
BATCH = 100  # MLflow's most params and tags per request


def require() -> None:
    """ConfigError (exit 2) when mlflow cannot be imported: checked before any work or file."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise ConfigError(f"configuration key mlflow is set and the package mlflow is not installed: install the "
                          f"extra ({EXTRA}, which brings mlflow-skinny), or set mlflow: null") from None


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """A nested mapping as {dotted key: text}; lists, numbers, booleans and null as JSON."""
    if isinstance(value, dict) and value:
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) > PARAM_LENGTH:
        cut = f"... ({len(text)} characters: see report.json)"
        text = text[: PARAM_LENGTH - len(cut)] + cut
    return {prefix: text}


def _master(url: str) -> str:
    """A Spark master URL without what can carry a credential (``sc://host/;token=...``, ``user:pass@``)."""
    return re.sub(r"//[^/@]*@", "//", url.split(";", 1)[0])


def params(report) -> dict[str, str]:
    config = report.config.to_dict() if report.config is not None else {}
    if "spark" in config:
        config["spark"] = {"master": _master(config["spark"]["master"])}
    flat = {k: v for k, v in flatten(config).items() if not any(k == p or k.startswith(p + ".") for p in PRIVATE)}
    flat.update(flatten({"inputs": {k: report.inputs.get(k) for k in INPUTS}}))
    flat.update(flatten({"versions": dict(report.versions)}))
    return flat


def metrics_and_tags(report) -> tuple[dict[str, float], dict[str, str]]:
    values: dict[str, float] = {}
    tags: dict[str, str] = {}
    for key, m in report.metrics.items():
        if not m.computed:
            tags[f"{key}.passed"] = "not computed"
            continue
        values[key] = float(m.value)
        ci = m.details.get("ci95")
        if ci is not None:
            values[f"{key}.ci95_low"], values[f"{key}.ci95_high"] = float(ci[0]), float(ci[1])
        tags[f"{key}.passed"] = "true" if m.passed else "false"
    tags["avatar_metrics.targets_missed"] = ",".join(report.missed_targets())
    return values, tags


def _experiment_id(client, name: str | None, store_given: bool) -> str:
    """The named experiment's id, created when missing; with no name, the session's default
    (MLFLOW_EXPERIMENT_ID or _NAME, a notebook's own experiment, or MLflow's default one), or,
    in a tracking store named by the configuration, MLFLOW_EXPERIMENT_NAME or the default one."""
    if name is None and store_given:
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if name is None:
            return "0"
    if name is None:
        import mlflow.tracking.fluent as fluent

        return fluent._get_experiment_id() or "0"
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - created meanwhile by another run: take it
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def log_report(report, settings: MlflowSettings | None = None) -> str:
    """Log ``report`` as an MLflow run (``settings``: where; None: the session's defaults).
    Returns the run's id. A run started here is ended here, FINISHED or FAILED."""
    require()
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    settings = settings or MlflowSettings()
    active = mlflow.active_run()
    if active is not None:
        if settings.experiment is not None or settings.tracking_uri is not None:
            log.info("mlflow: logging into the active run %s (the configured experiment and tracking URI "
                     "apply to runs started here)", active.info.run_id)
        client, run_id, own = MlflowClient(), active.info.run_id, False
    else:
        client = MlflowClient(tracking_uri=settings.tracking_uri)
        experiment = _experiment_id(client, settings.experiment, settings.tracking_uri is not None)
        run = client.create_run(experiment, run_name=settings.run_name,
                                tags={"avatar_metrics.version": report.versions.get("avatar_metrics", "")})
        run_id, own = run.info.run_id, True
    try:
        now = int(time.time() * 1000)
        values, tags = metrics_and_tags(report)
        client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in values.items()])
        entries = [Param(k, v) for k, v in params(report).items()] + [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(entries), BATCH):
            chunk = entries[i: i + BATCH]
            client.log_batch(run_id, params=[e for e in chunk if isinstance(e, Param)],
                             tags=[e for e in chunk if isinstance(e, RunTag)])
        client.log_text(run_id, report.to_json() + "\n", "report.json")
        client.log_text(run_id, report.html(), "report.html")
    except BaseException:
        if own:
            try:
                client.set_terminated(run_id, "FAILED")
            except Exception:  # noqa: BLE001 - the store is down: the first error is the one to show
                pass
        raise
    if own:
        client.set_terminated(run_id, "FINISHED")
    log.info("mlflow: run %s logged (%d metrics, report.json and report.html)", run_id, len(values))
    return run_id

