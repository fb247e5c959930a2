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
"""

from __future__ import annotations

import sys

from .cli import main


def translate(argv: list[str]) -> list[str]:
    """``--key=value`` parameters -> ``run --config ... --set key=value ...``."""
    out = ["run"]
    for arg in argv:
        if not arg.startswith("--"):
            raise SystemExit(f"avatar-metrics-databricks: expected --key=value, got {arg!r}")
        key, _, value = arg[2:].partition("=")
        key = key.replace("-", "_") if key in ("fail-on-target", "debug") else key
        if key == "config":
            out += ["--config", value]
        elif key in ("fail_on_target", "debug"):
            if value.strip().lower() in ("", "true", "1", "yes"):
                out.append("--" + key.replace("_", "-"))
        else:
            out += ["--set", f"{key}={value}"]
    return out


def entry() -> None:
    sys.exit(main(translate(sys.argv[1:])))
