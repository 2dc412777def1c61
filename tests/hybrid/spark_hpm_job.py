"""HPM on Spark in a process of its own, killed in the middle of a correction.

Run by ``tests/hybrid/test_spark.py`` (``python spark_hpm_job.py JOB.pkl``): it
starts its own SparkSession (``local[2]``), runs HPM over the job's source and
work directory (``headwater.hybrid.on_spark.hpm_run``) and, when the batch
module is about to upsert the results of its ``crash_at``-th correction (the
changelog already has them), SIGKILLs its whole process group: the driver, its
JVM and the Python workers die at once, with a micro-batch in flight and its
offsets logged but not committed. The test then restarts the run from the
checkpoint in its own session.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from pathlib import Path

from headwater.hybrid.on_spark import hpm_run
from headwater.hybrid.sparkrun import spark_session
from headwater.io.sinks import CurrentResultsSink


def main(path: str) -> None:
    job = pickle.loads(Path(path).read_bytes())
    real_write = CurrentResultsSink.write
    corrections = []

    def write(self, batch, batch_id):
        if batch_id % 2 == 1:  # a correction's upsert (stream panes have even ids)
            corrections.append(batch_id)
            if len(corrections) == job["crash_at"]:
                Path(job["marker"]).write_text(str(batch_id))
                os.killpg(os.getpgrp(), signal.SIGKILL)
        return real_write(self, batch, batch_id)

    CurrentResultsSink.write = write
    spark = spark_session("local[2]", Path(job["work"]) / "scratch-job")
    hpm_run(
        spark,
        job["source"],
        job["query"],
        job["strategy"],
        gamma=job["gamma"],
        shards=job["shards"],
        work=Path(job["work"]),
        files_per_trigger=job["files_per_trigger"],
    )


if __name__ == "__main__":
    main(sys.argv[1])
