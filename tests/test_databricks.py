"""The Databricks wheel-task entry point: --key=value parameters -> the command line."""

import json

import pytest

from avatar_metrics.cli import main
from avatar_metrics.databricks import translate
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
    code = main(translate([f"--config={cfg}", f"--output={out}", "--records=false", "--seed=3",
                           "--metrics=[knowledge_protection_rate]"]))
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["seed"] == 3 and not (out / "records").exists()
    assert [k for k, m in report["metrics"].items() if m["computed"]] == ["knowledge_protection_rate"]
    assert spark.range(1).count() == 1  # the session the task was given is still alive
