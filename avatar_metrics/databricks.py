"""Databricks wheel-task entry point.

A ``python_wheel_task`` with ``package_name: avatar_metrics`` and
``entry_point: avatar-metrics-databricks`` passes its ``named_parameters`` as
``--key=value`` arguments. ``config`` names a YAML file (a workspace or
``/dbfs`` path); every other key is a configuration override (dotted keys
reach nested values), so a job can run without any file::

    named_parameters:
      originals.table: main.health.patients
      avatars.table: main.health.patients_avatars
      known_variables: "[age, sex, zip]"
      output: /dbfs/avatar-metrics/run-1
      fail_on_target: "true"

The job's session is used as it is (never stopped). Exit codes as the CLI's.

Task values: where ``dbutils`` is importable (a Databricks job), a run that computed
its report (exit 0 or 3) also sets each computed metric's value as a task value named by
its key, and ``targets_missed`` (the keys, a list), so that a later task of the job can
branch on them (``dbutils.jobs.taskValues.get(taskKey=..., key="closest_rate")``).
Outside Databricks, or if setting them fails, nothing is set and the exit code is kept.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from .cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_TARGET_MISSED, main
from .errors import ConfigError

log = logging.getLogger(__name__)

FLAGS = ("fail_on_target", "debug")


def translate(argv: list[str]) -> list[str]:
    """``--key=value`` parameters -> ``run --config ... --set key=value ...``.

    ``fail_on_target`` and ``debug`` take ``true`` or ``false`` (any case; a
    bare ``--fail_on_target`` is true): anything else is a ConfigError, never
    a silent false.
    """
    out = ["run"]
    for i, arg in enumerate(argv):
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"parameter {i + 1} is not of the form --key=value: give named parameters only")
        key, _, value = arg[2:].partition("=")
        key = key.replace("-", "_") if key.replace("-", "_") in FLAGS else key
        if key == "config":
            out += ["--config", value]
        elif key in FLAGS:
            word = value.strip().lower()
            if word not in ("", "true", "false"):
                raise ConfigError(f"parameter {key} must be true or false")
            if word != "false":
                out.append("--" + key.replace("_", "-"))
        else:
            out += ["--set", f"{key}={value}"]
    return out


def set_task_values(argv: list[str], code: int, dbutils=None) -> dict | None:
    """The headline figures of the report the run ``argv`` wrote, as the job's task values
    (``dbutils``: Databricks' own, imported when not given); what was set, or None when there
    was no report or no ``dbutils``. Never raises: a task value is a convenience."""
    if code not in (EXIT_OK, EXIT_TARGET_MISSED):
        return None
    try:
        if dbutils is None:
            if not os.environ.get("DATABRICKS_RUNTIME_VERSION"):
                return None  # not a Databricks job (databricks-sdk's dbutils would look for credentials)
            try:
                from databricks.sdk.runtime import dbutils  # type: ignore[import-not-found]
            except ImportError:
                return None
        from .configure import load_config
        from .outputs import destination

        config = argv[argv.index("--config") + 1] if "--config" in argv else None
        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        report = json.loads((destination(load_config(config, sets).output, "output") / "report.json").read_text())
        values = {k: m["value"] for k, m in report["metrics"].items() if m["computed"]}
        values["targets_missed"] = [k for k, m in report["metrics"].items() if m["passed"] is False]
        for key, value in values.items():
            dbutils.jobs.taskValues.set(key=key, value=value)
        return values
    except Exception as exc:  # noqa: BLE001
        log.warning("task values not set: %s", type(exc).__name__)
        return None


def entry() -> None:
    try:
        argv = translate(sys.argv[1:])
    except ConfigError as exc:
        print(f"avatar-metrics: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    code = main(argv)
    set_task_values(argv, code)
    sys.exit(code)
