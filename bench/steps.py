"""Benchmark of the linear steps alone: reading and checking the inputs, Knowledge
Protection Rate, Column Direct Match, Row Direct Match and ``records``. Not a test.

    python bench/steps.py --n 1000000 --shape census [--master local[2]]

The searches (Linkability, Closest Rate, Hidden Rate, Local Cloaking) are
left out, so the steps that should cost a few passes over the data can be
timed at sizes where the searches take long; ``records`` joins what these
metrics give. The inputs are read twice: the first time pays for a cold JVM,
as the first step of any run does; the metrics use the second. Data as in ``bench/run.py`` (generated once under
bench/data/). Prints seconds and Spark jobs per step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from run import data_for, spark_jobs  # noqa: E402

STEPS = ("knowledge_protection_rate", "column_direct_match_protection", "row_direct_match_protection")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--shape", default="census")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--data", default=str(ROOT / "bench" / "data"))
    a = p.parse_args()
    data = data_for(a.n, Path(a.data), a.shape)
    known = json.loads((data / "known.json").read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from avatar_metrics import metrics as declared
    from avatar_metrics.api import _Timer, per_original_records
    from avatar_metrics.config import as_config
    from avatar_metrics.schema import prepare_inputs, release

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "events").mkdir()
        spark = (SparkSession.builder.master(a.master).config("spark.driver.memory", "4g")
                 .config("spark.sql.shuffle.partitions", "8").config("spark.log.level", "ERROR")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.eventLog.enabled", "true").config("spark.eventLog.compress", "false")
                 .config("spark.eventLog.dir", Path(tmp).as_uri() + "/events")
                 .getOrCreate())
        cfg = as_config({"known_variables": known["known"], "linkability_halves": known.get("halves")})
        tables = [spark.read.parquet(str(data / f"{t}.parquet")) for t in ("originals", "avatars", "holdout")]
        timer = _Timer(spark)
        with timer.step("inputs"):
            inputs = prepare_inputs(*tables, cfg)
        # the first step pays for a cold JVM (classes loaded, code compiled): once more, warm
        release(inputs)
        with timer.step("inputs again (warm JVM)"):
            inputs = prepare_inputs(*tables, cfg)
        by_key = {m.key: m for m in declared.REGISTRY}
        results = {}
        for key in STEPS:
            with timer.step(key):
                results[key] = by_key[key].compute(inputs, cfg)
        with timer.step("records"):
            records = per_original_records(inputs, results)
        records.unpersist()
        release(inputs)
        spark.stop()
        jobs = spark_jobs(Path(tmp) / "events")
    print(f"== shape {a.shape}, n = {a.n:,}; master {a.master}; the linear steps alone")
    print(f"{'step':<36}{'seconds':>10}{'Spark jobs':>12}")
    for step, sec in timer.timings.items():
        print(f"{step:<36}{sec:>10.1f}{jobs.get(step, 0):>12}")
    for key, r in results.items():
        print(f"  {key}: {r.value}")


if __name__ == "__main__":
    main()
