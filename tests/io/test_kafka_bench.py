"""`headwater bench kafka` on a tiny topic: it runs both engines and reports
(structure and agreement only; timings are never asserted)."""

from __future__ import annotations

import json

import pytest

from headwater.bench import kafka as bench_kafka

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_bench_kafka_runs_both_engines(spark, capsys, kafka_bootstrap):
    address = kafka_bootstrap
    argv = ["--events", "1000", "--keys", "3", "--window", "1", "--delay", "0", "--disorder", "1"]
    argv += ["--max-offsets-per-trigger", "500", "--warmup-events", "0", "--repeat", "2"]
    argv += ["--bootstrap", address, "--json"]
    assert bench_kafka.main(argv, spark=spark) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["native"]["input_rows"] == 1000
    # headwater's plan reads the topic once for the records and the rejects.
    assert report["headwater"]["input_rows"] == 1000
    for engine in ("native", "headwater"):
        assert report[engine]["events_per_s"] > 0 and report[engine]["batches"] >= 1
        runs = report[engine]["runs_s"]  # two runs, the median's (the slower's) reported
        assert len(runs) == 2 and report[engine]["seconds"] == max(runs)
        spent = report[engine]["phases_ms"]
        assert {"addBatch", "queryPlanning", "triggerExecution", "first_batch"} <= set(spent)
        assert spent["first_batch"] <= spent["triggerExecution"]
        planner = report[engine]["planner"]  # Spark's rule metrics were read
        assert 0 < planner["analyzer_runs"] < planner["rule_runs"], planner
    assert report["ratio"] > 0
    # 1000 events 2 ms apart in two micro-batches: the second batch's watermark
    # (1 s) closes the first 1 s window of each of the 3 keys; both tables agree.
    assert report["windows"]["headwater"] >= 1
    assert report["windows_agree"], report["windows"]
