"""Submitted to the test cluster: where do the executors import avatar_metrics from?"""

import pandas as pd
from pyspark.sql import SparkSession


def where(batches):
    import avatar_metrics

    for _ in batches:
        yield pd.DataFrame({"path": [avatar_metrics.__file__]})


spark = SparkSession.builder.appName("probe").getOrCreate()
for row in spark.range(0, 4, numPartitions=4).mapInPandas(where, "path string").collect():
    print("executor module:", row.path)
spark.stop()
