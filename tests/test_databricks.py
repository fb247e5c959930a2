"""The Databricks wheel-task entry point: --key=value parameters -> the command line."""

import json

import pytest

from avatar_metrics.cli import main
from avatar_metrics.databricks import set_task_values, translate
from avatar_metrics.errors import ConfigError
from conftest import write_example_config


def test_translate():
    assert translate(["--config=/dbfs/c.yaml", "--seed=7", "--known_variables=[age, sex]",
                      "--fail_on_target=true", "--originals.table=main.x.y"]) == [
        "run", "--config", "/dbfs/c.yaml", "--set", "seed=7", "--set", "known_variables=[age, sex]",
        "--fail-on-target", "--set", "originals.table=main.x.y"]
    assert translate(["--fail_on_target=false"]) == ["run"]
    with pytest.raises(ConfigError):
        translate(["seed=7"])


def test_wheel_task_runs_on_the_active_session(spark, tmp_path):
    cfg = write_example_config(tmp_path)
    out = tmp_path / "dbx"
    # (the entry point's path, not the metrics': one metric, asked for as a task parameter)
    argv = translate([f"--config={cfg}", f"--output={out}", "--records=false", "--seed=3",
                      "--metrics=[knowledge_protection_rate]"])
    code = main(argv)
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["seed"] == 3 and not (out / "records").exists()
    assert [k for k, m in report["metrics"].items() if m["computed"]] == ["knowledge_protection_rate"]
    assert spark.range(1).count() == 1  # the session the task was given is still alive

    # task values: the headline figures of the report this run wrote, where dbutils exists
    class TaskValues:
        def __init__(self):
            self.got = {}

        def set(self, key, value):
            self.got[key] = value

    class DBUtils:
        class jobs:
            taskValues = TaskValues()

    assert set_task_values(argv, code) is None  # no Databricks here: nothing set, nothing raised
    kpr = report["metrics"]["knowledge_protection_rate"]
    want = {"knowledge_protection_rate": kpr["value"],
            "targets_missed": ["knowledge_protection_rate"] if kpr["passed"] is False else []}
    assert set_task_values(argv, code, DBUtils) == want == DBUtils.jobs.taskValues.got
    assert set_task_values(argv, 2, DBUtils) is None  # no report was computed


def test_the_bundle_example_runs_the_entry_point_with_configuration_keys():
    """deploy/databricks.yml: a serverless job and a classic-cluster job, each a python_wheel_task on
    the entry point the package declares, whose named parameters (the bundle's variables put in)
    are all keys the entry point accepts: the configuration they make loads and validates."""
    import re
    import tomllib
    from pathlib import Path

    import yaml

    from avatar_metrics.configure import load_config

    root = Path(__file__).resolve().parents[1]
    bundle = yaml.safe_load((root / "deploy" / "databricks.yml").read_text())
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    defaults = {k: str(v["default"]) for k, v in bundle["variables"].items()}
    jobs = bundle["resources"]["jobs"]
    assert set(jobs) == {"avatar_metrics_serverless", "avatar_metrics_cluster"}
    assert "job_clusters" not in jobs["avatar_metrics_serverless"] and jobs["avatar_metrics_serverless"]["environments"]
    assert jobs["avatar_metrics_cluster"]["job_clusters"][0]["new_cluster"]["num_workers"] >= 1
    for job in jobs.values():
        for task in job["tasks"]:
            wheel = task["python_wheel_task"]
            assert wheel["package_name"] == "avatar_metrics"
            assert scripts[wheel["entry_point"]] == "avatar_metrics.databricks:entry"
            params = {k: re.sub(r"\$\{var\.(\w+)\}", lambda m: defaults[m.group(1)], str(v))
                      for k, v in wheel["named_parameters"].items()}
            argv = translate([f"--{k}={v}" for k, v in params.items()])
            sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
            cfg = load_config(None, sets)  # an unknown or malformed key raises ConfigError
            assert cfg.originals.table == defaults["originals_table"] and cfg.holdout is not None
            assert cfg.known_variables == ("age", "sex", "zip") and "--fail-on-target" in argv
