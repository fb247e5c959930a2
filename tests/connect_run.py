"""Run evaluate() under a Spark Connect session; print the report as JSON (subprocess of the tests)."""

import json
import sys

from pyspark.sql import SparkSession

from avatar_metrics import evaluate
from avatar_metrics.configure import load_config
from avatar_metrics.io import read_table

spark = SparkSession.builder.remote("local[2]").getOrCreate()
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
cfg = load_config(sys.argv[1])
for k, v in cfg.spark_conf.items():  # runtime settings of the configuration (shuffle partitions)
    spark.conf.set(k, v)
tables = [read_table(spark, t, r) for t, r in ((cfg.originals, "originals"), (cfg.avatars, "avatars"), (cfg.holdout, "holdout"))]
report = evaluate(spark, *tables, cfg)
n_records = report.records.count()
print("REPORT " + json.dumps({"report": report.to_dict(), "records": n_records}))
spark.stop()
