import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    """A local session for the suite; an active one (Databricks, say) is reused."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    session = (
        SparkSession.builder.master("local[2]")
        .appName("avatar-metrics-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
        .config("spark.sql.debug.maxToStringFields", "200")
        .getOrCreate()
    )
    yield session
    session.stop()


def to_spark(spark, pdf, partitions=None):
    df = spark.createDataFrame(pdf)
    if partitions:
        df = df.repartition(partitions)
    return df
