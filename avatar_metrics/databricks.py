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

from .cli import EXIT_BAD_INPUT, main
from .errors import ConfigError

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


def entry() -> None:
    try:
        argv = translate(sys.argv[1:])
    except ConfigError as exc:
        print(f"avatar-metrics: error: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(main(argv))
