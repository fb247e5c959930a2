"""The library under Spark Connect gives the classic report."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, SMALL_TABLES, comparable, write_example_config as write_config

pytest.importorskip("grpc", reason="the Spark Connect client needs grpcio")


def test_connect_report_equals_classic(tmp_path, local_report):
    # (two blocks, every search starting with the home job: the classic report searched one)
    # (adaptive execution as Spark has it, on: the suite's one whole report computed with it, against
    # the suite's report, computed without)
    conf = {k: v for k, v in SMALL_TABLES.items() if k != "spark.sql.adaptive.enabled"}
    cfg = write_config(tmp_path, search={"block_size": 1500}, spark={"master": "local[2]", "conf": conf})
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "connect_run.py"), str(cfg)], env=env,
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    out = json.loads(line[len("REPORT "):])
    assert out["records"] == 3000
    assert comparable(out["report"]) == local_report
