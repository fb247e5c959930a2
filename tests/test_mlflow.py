"""MLflow: an evaluation logged to a real local tracking store (a file: URI), read back with MlflowClient."""

import json
import sys

import pytest

from avatar_metrics.cli import main
from avatar_metrics.configure import build_config
from avatar_metrics.databricks import translate
from avatar_metrics.errors import ConfigError
from avatar_metrics.tracking import PARAM_LENGTH, _master, flatten
from conftest import write_example_config

mlflow = pytest.importorskip("mlflow")
from mlflow import MlflowClient  # noqa: E402


@pytest.fixture
def store(tmp_path, monkeypatch):
    # MLflow 3 keeps file stores for those who ask (MLFLOW_ALLOW_FILE_STORE): a real store, on disk
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return (tmp_path / "mlruns").as_uri()


def test_a_sampled_run_from_the_databricks_entry_point(tmp_path, store, capsys):
    """The Databricks parameters (the command line's keys): one run in the named experiment, with each
    computed value and its interval as metrics, passed as tags, the configuration without paths nor
    spark.conf, the versions, and report.json / report.html as artifacts, never records."""
    cfg = write_example_config(tmp_path, spark={"master": "local[2]", "conf": {"spark.secret.token": "s3cr3t"}})
    out = tmp_path / "out"
    code = main(translate([f"--config={cfg}", "--metrics=[hidden_rate, knowledge_protection_rate]",
                           "--query_sample=300", f"--mlflow={{experiment: /Users/me/am, run_name: gen-1, "
                                                 f"tracking_uri: '{store}'}}"]))
    assert code == 0
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("/Users/me/am")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "gen-1" and run.info.status == "FINISHED"
    report = json.loads((out / "report.json").read_text())
    hr, kpr = report["metrics"]["hidden_rate"], report["metrics"]["knowledge_protection_rate"]
    assert run.data.metrics == {"hidden_rate": hr["value"], "hidden_rate.ci95_low": hr["details"]["ci95"][0],
                                "hidden_rate.ci95_high": hr["details"]["ci95"][1],
                                "knowledge_protection_rate": kpr["value"]}
    tags = run.data.tags
    assert tags["hidden_rate.passed"] == str(hr["passed"]).lower()
    assert tags["knowledge_protection_rate.passed"] == str(kpr["passed"]).lower()
    assert tags["closest_rate.passed"] == "not computed"
    assert tags["avatar_metrics.targets_missed"] == ",".join(k for k, m in report["metrics"].items()
                                                             if m["passed"] is False)
    params = run.data.params
    assert params["query_sample"] == "300" and params["seed"] == "3" and params["known_variables"] == json.dumps(
        ["age", "sex", "region", "children"])
    assert params["targets.hidden_rate"] == "90.0" and params["spark.master"] == "local[2]"
    assert params["originals.format"] == "parquet" and params["inputs.originals_rows"] == "3000"
    assert params["versions.avatar_metrics"] == report["versions"]["avatar_metrics"]
    assert params["mlflow.experiment"] == "/Users/me/am"
    text = json.dumps(params) + json.dumps(tags)
    for private in (str(tmp_path), "s3cr3t", "spark.secret", store):
        assert private not in text
    artifacts = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    assert artifacts == ["report.html", "report.json"]
    got = client.download_artifacts(run.info.run_id, "report.json", str(tmp_path / "got"))
    assert json.loads(open(got).read()) == report
    captured = capsys.readouterr()
    assert "mlflow: run" in captured.err and f"mlflow run: {run.info.run_id}" in captured.out


def test_the_library_logs_into_the_active_run(spark, tmp_path, store):
    """Report.log_mlflow() in a notebook that has a run: that run gets the figures and stays the caller's."""
    from avatar_metrics import evaluate
    from avatar_metrics.configure import load_config
    from avatar_metrics.io import read_table

    cfg = load_config(write_example_config(tmp_path, records=False))
    tables = [read_table(spark, t, r) for t, r in ((cfg.originals, "originals"), (cfg.avatars, "avatars"))]
    report = evaluate(spark, *tables, config=cfg, only=["column_direct_match_protection"])
    mlflow.set_tracking_uri(store)
    try:
        with mlflow.start_run(run_name="notebook") as active:
            assert report.log_mlflow(experiment="/ignored") == active.info.run_id
            assert mlflow.active_run().info.run_id == active.info.run_id  # not ended here
    finally:
        mlflow.set_tracking_uri(None)
    run = MlflowClient(tracking_uri=store).get_run(active.info.run_id)
    assert run.data.metrics == {"column_direct_match_protection":
                                report.metrics["column_direct_match_protection"].value}
    assert run.data.params["records"] == "false"


def test_missing_package_is_exit_2_before_any_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what Python does when the package is not installed
    cfg = write_example_config(tmp_path)
    code = main(["run", "--config", str(cfg), "--set", "mlflow={experiment: x}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "avatar-metrics[mlflow]" in err and "configuration key mlflow" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_the_key_is_checked():
    assert build_config({"mlflow": True}, require_inputs=False).mlflow.experiment is None
    assert build_config({"mlflow": None}, require_inputs=False).mlflow is None
    for bad in ("exp", {"experiment": 3}, {"experiment": "x", "run": "y"}, [1]):
        with pytest.raises(ConfigError, match="mlflow"):
            build_config({"mlflow": bad}, require_inputs=False)


def test_what_params_never_carry():
    assert _master("sc://host:443/;token=abc;user_id=u") == "sc://host:443/"
    assert _master("spark://user:pw@host:7077") == "spark://host:7077"
    long = flatten({"a": {"b": ["x" * 10] * 1000}})["a.b"]
    assert len(long) == PARAM_LENGTH and long.endswith("characters: see report.json)")
    assert flatten({"a": None, "b": {}, "c": True, "d": "s"}) == {"a": "null", "b": "{}", "c": "true", "d": "s"}
