"""A streaming copy job for the restart test, run with spark-submit on the cluster:
``format("josef")`` topic -> ``format("josef")`` topic (exactly once), checkpointed.

    copy_job.py BOOTSTRAP SOURCE SINK CHECKPOINT MAX_PER_TRIGGER [--available-now]

Without ``--available-now`` it runs micro-batches until killed.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def main(argv: list[str]) -> int:
    bootstrap, source, sink, checkpoint, per_trigger = argv[:5]
    available_now = "--available-now" in argv[5:]
    sys.path.insert(0, REPO)
    from pyspark.sql import SparkSession

    from connectors.spark import register

    spark = SparkSession.builder.appName("josef-copy-job").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    writer = (spark.readStream.format("josef").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", per_trigger).load()
              .selectExpr("key", "value")
              .writeStream.format("josef").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", sink).option("checkpointLocation", checkpoint))
    query = writer.trigger(availableNow=True).start() if available_now else writer.start()
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    print(f"copied {sum(p['numInputRows'] for p in query.recentProgress)} records", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
