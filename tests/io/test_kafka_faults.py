"""Faults between Kafka and the sinks, against real brokers (scripts/kafka.sh).

A windowed pipeline reads a topic on Spark and keeps a Delta table
(:class:`DeltaSink`) and an upsert topic (:class:`KafkaSink`) equal to its
table view. Every window fires an early pane per micro-batch
(``early=AfterCount(1)``) and nothing is late, so once the input is read the
table view is the bounded aggregate over every event: the tests compare the
Delta table and the upsert topic (read as a table) with it.

* killed: the query dies in a micro-batch after both sinks wrote it, before
  Spark commits it; restarted from its checkpoint it runs that batch again
  (same id, same panes): the Delta sink skips it, the upsert topic gets the
  same keys again. Nothing lost, nothing counted twice.
* broker restart: a second broker of our own (the shared one stays up) is
  stopped and started again while the query runs; the query waits for it (or
  fails naming Kafka and restarts from its checkpoint) and ends equal too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
from pyspark.errors import StreamingQueryException

import headwater as hw
from headwater.io.sinks import fan_out
from headwater.io.sinks.delta import DeltaSink
from headwater.io.sinks.kafka import KafkaSink, read_upserts

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SCHEMA = "user string, score bigint, ts timestamp"
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"
KEY = ["user", "window_start", "window_end", "total", "n"]
EPOCH = pd.Timestamp(0, tz="UTC")


@pytest.fixture(scope="module")
def bootstrap(kafka_bootstrap: str) -> str:
    pytest.importorskip("deltalake")
    return kafka_bootstrap


def _events(phase: int, n: int) -> pd.DataFrame:
    """``n`` events of phase ``phase``: users a/b/c, event times 1 s apart from
    ``phase * n`` s (later phases, later windows, some shared)."""
    i = pd.RangeIndex(n)
    start = phase * n * 1000
    return pd.DataFrame(
        {
            "user": pd.Series(["a", "b", "c"])[i % 3].to_numpy(),
            "score": (i * 7 % 11 + 1).to_numpy(),
            "ts": pd.to_datetime(start + i * 1000, unit="ms", utc=True),
        }
    )


def _topic(bootstrap: str, partitions: int = 2) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"hw-fault-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(name, num_partitions=partitions, replication_factor=1)
    admin.create_topics([new])[name].result(30)
    return name


def _produce(bootstrap: str, topic: str, events: pd.DataFrame, partitions: int = 2) -> None:
    """The events as JSON records, round-robin over the partitions."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    records = events.assign(ts=events.ts.map(pd.Timestamp.isoformat)).to_dict("records")
    for i, record in enumerate(records):
        producer.produce(topic, value=json.dumps(record).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _pipeline(stream):
    return (
        stream.window(
            hw.FixedWindows("10 seconds"),
            trigger=hw.AfterWatermark(early=hw.AfterCount(1)),
            allowed_lateness="1 hour",
            accumulation="retracting",
        )
        .group_by("user")
        .agg(total=hw.sum("score"), n=hw.count())
    )


def _bounded(events: pd.DataFrame) -> list[tuple]:
    """The same aggregate over the same events, bounded (the local runner)."""
    final = (
        hw.from_pandas(events, event_time="ts")
        .window(hw.FixedWindows("10 seconds"))
        .group_by("user")
        .agg(total=hw.sum("score"), n=hw.count())
        .to_pandas()
    )
    return _rows(final)


def _rows(frame: pd.DataFrame) -> list[tuple]:
    """(user, window_start ms, window_end ms, total, n), sorted."""
    if frame.empty:
        return []
    out = frame[KEY].copy()
    for c in ("window_start", "window_end"):
        out[c] = (pd.to_datetime(out[c], utc=True) - EPOCH) // pd.Timedelta(milliseconds=1)
    return sorted((u, int(s), int(e), int(t), int(n)) for u, s, e, t, n in out.values)


class Recorder:
    """A sink that records the batch ids it saw and fails once, in ``crash_at``,
    after the sinks before it wrote the batch."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.crash_at = crash_at
        self.seen: list[int] = []

    def __call__(self, batch, batch_id: int) -> None:
        self.seen.append(int(batch_id))
        if batch_id == self.crash_at:
            self.crash_at = None
            raise RuntimeError(f"killed in batch {batch_id}, after the sinks wrote it")


def _run(agg, checkpoint: str, sinks, timeout: float = 300, end_of_input=False):
    """One availableNow run over what the topic holds; the query, terminated.
    ``end_of_input``: False (the default) as the topic grows between runs; "never"
    to resume a long-running query's checkpoint (it read no control stream)."""
    query = agg.start(
        checkpoint_location=checkpoint,
        panes_sink=sinks,
        trigger={"availableNow": True},
        end_of_input=end_of_input,
    )
    try:
        query.awaitTermination(timeout)
    except StreamingQueryException:
        pass  # the caller reads query.exception()
    finally:
        query.stop()
    return query


def test_killed_mid_stream_restarts_from_its_checkpoint(spark, bootstrap, tmp_path):
    topic, upserts = _topic(bootstrap), _topic(bootstrap)
    first, second = _events(0, 12), _events(1, 6)
    _produce(bootstrap, topic, first)
    stream = hw.from_kafka(
        topic,
        bootstrap,
        schema=SCHEMA,
        event_time="ts",
        watermark="2 seconds",
        spark=spark,
        max_offsets_per_trigger=6,  # 12 records, then 6: 3 micro-batches
    )
    agg = _pipeline(stream)
    delta = DeltaSink(tmp_path / "delta", aggregation=agg)
    applied: list[tuple[int, bool]] = []  # (batch id, whether Delta applied it)
    recorder = Recorder(crash_at=1)
    sinks = fan_out(
        lambda batch, i: applied.append((int(i), delta.write(batch, i))),
        KafkaSink(upserts, bootstrap),
        recorder,
    )
    checkpoint = str(tmp_path / "ck")

    query = _run(agg, checkpoint, sinks)
    assert "killed in batch 1" in str(query.exception())
    assert recorder.seen == [0, 1] and delta.last_batch_id() == 1

    # More input while it was down; the restart replays batch 1 first.
    _produce(bootstrap, topic, second)
    query = _run(agg, checkpoint, sinks)
    assert query.exception() is None, query.exception()
    assert recorder.seen[:3] == [0, 1, 1] and len(recorder.seen) >= 4
    # Batch 1 ran twice; Delta applied it once (the replay was skipped).
    assert [ok for i, ok in applied if i == 1] == [True, False]

    expected = _bounded(pd.concat([first, second], ignore_index=True))
    assert _rows(delta.read()) == expected
    assert _rows(read_upserts(upserts, bootstrap)) == expected


# --------------------------------------------------------------- broker restart
def _free_port_pair() -> int:
    """A port whose next port is free too (the broker and its controller)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free adjacent ports")


class Broker:
    """A second single-node broker of this test's own (scripts/kafka.sh with its
    own port and log directory), stopped and started at will."""

    def __init__(self, directory: Path) -> None:
        self.port = _free_port_pair()
        self.env = {
            **os.environ,
            "HEADWATER_KAFKA_PORT": str(self.port),
            "HEADWATER_KAFKA_DIR": str(directory),
        }

    def _script(self, action: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), action],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start(self) -> str:
        return self._script("start")

    def stop(self) -> None:
        self._script("stop")


@pytest.fixture
def broker(bootstrap, tmp_path):
    own = Broker(tmp_path / "broker")
    try:
        yield own
    finally:
        own.stop()


def _wait_for(condition, timeout: float, query) -> bool:
    """Poll ``condition()`` until true, the query ends, or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if not query.isActive:
            return condition()
        time.sleep(0.5)
    return False


def _both_sinks(delta: DeltaSink, upserts: str, address: str) -> list[tuple] | None:
    """The rows both sinks hold, when they agree (else None).

    A batch writes Delta first and the topic second: a test that stopped the
    query once Delta was complete could cut the batch's topic write short.
    """
    rows = _rows(delta.read())
    return rows if _rows(read_upserts(upserts, address)) == rows else None


def test_broker_restart_mid_stream(spark, broker, tmp_path):
    address = broker.start()
    topic, upserts = _topic(address), _topic(address)
    first, second = _events(0, 12), _events(1, 9)
    _produce(address, topic, first)
    agg = _pipeline(
        hw.from_kafka(
            topic, address, schema=SCHEMA, event_time="ts", watermark="2 seconds", spark=spark
        )
    )
    delta = DeltaSink(tmp_path / "delta", aggregation=agg)
    sinks = fan_out(delta, KafkaSink(upserts, address))
    checkpoint = str(tmp_path / "ck")
    query = agg.start(
        checkpoint_location=checkpoint,
        panes_sink=sinks,
        trigger={"processingTime": "1 second"},
    )
    try:
        expected = _bounded(first)
        assert _wait_for(lambda: _both_sinks(delta, upserts, address) == expected, 300, query)

        broker.stop()  # while the query polls the topic
        time.sleep(3)
        broker.start()  # the same port and log directory: the same topics, offsets
        _produce(address, topic, second)
        expected = _bounded(pd.concat([first, second], ignore_index=True))
        converged = _wait_for(lambda: _both_sinks(delta, upserts, address) == expected, 300, query)
        error = query.exception()
    finally:
        query.stop()
    print("broker restart:", "the query waited" if converged else f"the query failed: {error}")
    if not converged:
        # It failed instead of waiting: the error names Kafka, and a restart from
        # the checkpoint finishes the input.
        assert error is not None, (
            "in 300 s the sinks neither converged nor did the query fail: "
            f"expected {expected}, Delta {_rows(delta.read())}, "
            f"upserts {_rows(read_upserts(upserts, address))}, "
            f"last batches {[p.batchId for p in query.recentProgress][-5:]}"
        )
        assert "kafka" in str(error).lower(), error
        query = _run(agg, checkpoint, sinks, end_of_input="never")
        assert query.exception() is None, query.exception()
    assert _rows(delta.read()) == expected
    assert _rows(read_upserts(upserts, address)) == expected
