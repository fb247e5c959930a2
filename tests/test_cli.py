"""The command line and the spark-submit job, end to end on the example data."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import reference as ref
from avatar_metrics.cli import _without_adaptive, main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "conf" / "example.yaml"
METRICS = ["linkability_protection_rate", "closest_rate", "knowledge_protection_rate", "column_direct_match_protection",
           "hidden_rate", "local_cloaking", "row_direct_match_protection", "membership_inference_protection",
           "attribute_inference_protection", "dcr_share_protection"]


def env():
    e = dict(os.environ)
    e["PYSPARK_PYTHON"] = sys.executable
    e["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return e


def check_report(path: Path):
    rep = json.loads(path.read_text())
    assert set(rep) == {"metrics", "inputs", "seed", "versions", "timings"}
    assert list(rep["metrics"]) == METRICS
    for m in rep["metrics"].values():
        assert set(m) == {"value", "target", "passed", "computed", "reason", "details"}
        if m["computed"]:
            assert 0 <= m["value"] and m["passed"] == (m["value"] >= m["target"]) and m["reason"] is None
        else:
            assert m["value"] is None and m["passed"] is None and m["reason"]
    assert rep["inputs"]["originals_rows"] == 3000 and rep["inputs"]["holdout_rows"] == 3000
    assert rep["inputs"]["variables"]["sex"] == "categorical" and rep["inputs"]["variables"]["age"] == "numeric"
    assert {"avatar_metrics", "spark", "python", "pandas", "numpy"} <= set(rep["versions"])
    assert "total" in rep["timings"]
    return rep


def example_reference():
    O = pd.read_parquet(ROOT / "data/example/originals.parquet")
    A = pd.read_parquet(ROOT / "data/example/avatars.parquet")
    kinds = {c: ("numeric" if pd.api.types.is_numeric_dtype(O[c]) and not pd.api.types.is_bool_dtype(O[c]) else "categorical") for c in O}
    return O, A, kinds


def test_console_script_end_to_end(tmp_path):
    """The one fresh-process run of the command line (the cluster test runs the spark-submit job)."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "avatar_metrics", "run", "--config", str(EXAMPLE), "--set", f"output={out}",
           "--fail-on-target"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    # the example misses targets (Knowledge among them): exit code 3, the outputs written all the same
    assert proc.returncode == 3, proc.stderr[-3000:]
    rep = check_report(out / "report.json")
    assert rep["metrics"]["knowledge_protection_rate"]["passed"] is False
    assert "Knowledge Protection Rate" in proc.stdout and "report:" in proc.stdout
    assert "plot-distance-ratio" in (out / "report.html").read_text()
    assert "step linkability_protection_rate: done" in proc.stderr
    assert "small inputs" in proc.stderr  # the example's files: the quick JIT of a short run
    assert "query plans as text up to 10,000 characters" in proc.stderr
    assert "adaptive query execution off" in proc.stderr  # the example's files: one Spark job a query
    records = pd.read_parquet(out / "records")
    assert len(records) == 3000 and "position" in records.columns
    assert set(records.columns).isdisjoint(rep["inputs"]["variables"])  # no variable values
    assert int(records.lpr_linked.sum()) == rep["metrics"]["linkability_protection_rate"]["details"]["linked"]
    assert int(records.closest_at_risk.sum()) == rep["metrics"]["closest_rate"]["details"]["at_risk"]
    assert int(records.kpr_matched.sum()) == rep["metrics"]["knowledge_protection_rate"]["details"]["matched"]
    assert int(records.hidden_hit.sum()) == rep["metrics"]["hidden_rate"]["details"]["hits"]
    assert float(records.local_cloaking.median()) == rep["metrics"]["local_cloaking"]["value"]
    # no column that rebuilds a value with the avatars: which avatar was linked or guessed, and how right
    assert {"aip_avatar", "aip_right", "lpr_avatar_a", "lpr_avatar_b"}.isdisjoint(records.columns)
    assert "plot-membership-roc" in (out / "report.html").read_text()
    O, A, kinds = example_reference()
    value, cols = ref.column_direct_match(O, A, list(O.columns))
    assert rep["metrics"]["column_direct_match_protection"]["value"] == value
    assert rep["metrics"]["column_direct_match_protection"]["details"]["columns"] == cols
    known = rep["inputs"]["known_variables"]
    assert rep["metrics"]["knowledge_protection_rate"]["value"] == ref.knowledge(O, A, known, kinds)[0]
    # the example is realistic: values are neither trivial nor perfect
    assert 0 < rep["metrics"]["knowledge_protection_rate"]["value"] < 100


# ----------------------------------------------------------- in-process (reuses the session)


def write_config(tmp_path, **overrides):
    cfg = {
        "originals": {"path": str(ROOT / "data/example/originals.parquet"), "format": "parquet"},
        "avatars": {"path": str(ROOT / "data/example/avatars.parquet"), "format": "parquet"},
        "output": str(tmp_path / "out"),
        "known_variables": ["age", "sex", "region"],
    }
    cfg.update(overrides)
    p = tmp_path / "c.yaml"
    import yaml

    p.write_text(yaml.safe_dump(cfg))
    return p


def test_bad_configuration_exit_2_and_no_report(spark, tmp_path, capsys):
    cfg = write_config(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg), "--set", "quantile=500"]) == 2
    err = capsys.readouterr().err
    assert "quantile" in err
    assert main(["run", "--config", str(cfg), "--set", "originals.path=/nowhere/o.parquet"]) == 2
    err = capsys.readouterr().err
    assert "originals" in err and "/nowhere/o.parquet" in err
    assert not out.exists()


def test_a_failed_run_leaves_the_earlier_outputs_whole(spark, tmp_path, monkeypatch, capsys):
    # (files, not metrics: one metric without a search is enough)
    cfg = write_config(tmp_path, records=False, metrics=["column_direct_match_protection"])
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def crash(report):
        raise RuntimeError("disk full")

    monkeypatch.setattr("avatar_metrics.html.render", crash)
    assert main(["run", "--config", str(cfg), "--set", "seed=9"]) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no mixture
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []  # no staging left


def test_bad_input_exit_2(spark, tmp_path, capsys):
    cfg = write_config(tmp_path, exclude=["job"])
    assert main(["run", "--config", str(cfg), "--set", "known_variables=[agee]"]) == 2
    assert "agee" in capsys.readouterr().err
    assert main(["run", "--config", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize("conf,off", [
    ({}, True),
    ({"spark.sql.shuffle.partitions": "16"}, True),  # 8 a core, 2 cores
    ({"spark.sql.shuffle.partitions": 17}, False),  # more: adaptive execution coalesces them
    ({"spark.sql.shuffle.partitions": "auto"}, False),
    ({"spark.sql.adaptive.enabled": "true"}, False),  # the user's say, either way
    ({"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "4"}, False),
])
def test_small_local_runs_go_without_adaptive_execution(conf, off):
    """A session the command line builds for small local inputs turns adaptive execution off, unless
    the configuration sets it or asks for many shuffle partitions (the end-to-end run logs it)."""
    assert _without_adaptive(conf, 2) is off
