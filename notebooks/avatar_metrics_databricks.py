# Databricks notebook source
# MAGIC %md
# MAGIC # avatar-metrics on Databricks
# MAGIC Privacy metrics of synthetic data (avatars) on tables of the metastore.
# MAGIC Build the wheel with `pip wheel --no-deps -w dist .`, upload it to a volume
# MAGIC or the workspace, and install it on the cluster (or with `%pip` below).

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/wheels/avatar_metrics-0.1.0-py3-none-any.whl

# COMMAND ----------

dbutils.widgets.text("originals", "main.health.patients")  # noqa: F821 - Databricks globals
dbutils.widgets.text("avatars", "main.health.patients_avatars")  # noqa: F821
dbutils.widgets.text("holdout", "")  # noqa: F821
dbutils.widgets.text("known_variables", "age,sex,zip")  # noqa: F821

# COMMAND ----------

from avatar_metrics import evaluate

originals = spark.read.table(dbutils.widgets.get("originals"))  # noqa: F821
avatars = spark.read.table(dbutils.widgets.get("avatars"))  # noqa: F821
holdout_name = dbutils.widgets.get("holdout")  # noqa: F821
holdout = spark.read.table(holdout_name) if holdout_name else None  # noqa: F821

report = evaluate(
    spark,  # noqa: F821
    originals,
    avatars,
    holdout,
    config={
        "known_variables": [v.strip() for v in dbutils.widgets.get("known_variables").split(",") if v.strip()],  # noqa: F821
        "seed": 0,
    },
)
print(report.summary())

# COMMAND ----------

# The report as JSON (the same as report.json of the command line)
import json

print(json.dumps(report.to_dict(), indent=2))

# COMMAND ----------

# Per-original results (no variable values): who is exposed, not who they are
display(report.records)  # noqa: F821
