"""Kafka in and out against a real broker (scripts/kafka.sh; HEADWATER_TEST_KAFKA).

One windowed pipeline with late data and retractions reads a three-partition
topic filled in two phases (record timestamps T1 < T2: the arrival
times): on Spark (Spark's Kafka source, one availableNow run per phase, its
offsets in the checkpoint), on the local runner (confluent-kafka), and from a
pandas frame of the same events with the same arrival times. The panes agree;
the undecodable records are dead letters with their offsets on both runners;
the upsert topic the sink writes, read back as a table, is the final table
view of the panes.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

import headwater as hw
from headwater.api import AfterCount, AfterWatermark, FixedWindows
from headwater.io.end_of_input import InputEndedError
from headwater.io.kafka import (
    REJECT_COLUMNS,
    KafkaSource,
    avro_dir,
    cached_spark_jars,
    consume,
    decode_pandas,
    decode_spark,
    parse_schema,
)
from headwater.io.sinks import fan_out
from headwater.io.sinks.kafka import KafkaSink, read_upserts

pytestmark = pytest.mark.kafka

SCHEMA = "user string, score bigint, ts timestamp"
PARTITIONS = 3


@pytest.fixture(scope="module")
def bootstrap(kafka_bootstrap: str) -> str:
    return kafka_bootstrap


def _ts(ms: int) -> str:
    return pd.Timestamp(ms, unit="ms", tz="UTC").isoformat()


def _event(user: str, ms: int, score: int) -> str:
    return json.dumps({"user": user, "score": score, "ts": _ts(ms)})


def _raw_records(values: list) -> pd.DataFrame:
    """Records of partition 0 of topic ``t`` as the local reader gives them, one per
    value, at offsets 0, 1, ..."""
    return pd.DataFrame(
        {
            "kafka_topic": "t",
            "kafka_partition": 0,
            "kafka_offset": range(len(values)),
            "kafka_timestamp": 0,
            "kafka_key": None,
            "kafka_value": pd.Series(values, dtype=object),
        }
    )


#: The raw values of each phase. Fixed 10 s windows, watermark 2 s behind, 8 s
#: lateness. Phase 1: watermark 116 s: [100, 110) fires on time. Phase 2: a@103 s
#: is late but within lateness (a late pane, retracting the on-time one), a@95 s
#: beyond it (its window [90, 100) expired at 108 s: a dead letter); watermark
#: 129 s: [110, 120) fires.
PHASES: list[list[str]] = [
    [
        _event("a", 101_000, 1),
        _event("b", 101_500, 2),
        "not json",
        _event("a", 112_000, 5),
        json.dumps({"user": "x", "score": "oops", "ts": _ts(102_000)}),
        _event("b", 118_000, 1),
        json.dumps({"user": "y", "score": 3}),
    ],
    [_event("a", 103_000, 7), _event("a", 95_000, 3), _event("c", 131_000, 4), "[1, 2]"],
]
#: The rejected records: (phase, index in the phase) -> reason.
REJECTED = {(0, 2): "malformed", (0, 4): "malformed", (0, 6): "null_event_time"}
REJECTED[(1, 3)] = "malformed"


def _topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"hw-test-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[
        name
    ].result(30)
    return name


def _produce(
    bootstrap: str, topic: str, values: list[str] | list[bytes], timestamp: int
) -> list[tuple]:
    """Write ``values`` round-robin over the partitions; their (partition, offset)."""
    from confluent_kafka import Producer

    delivered: dict[int, tuple] = {}
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, v in enumerate(values):
        producer.produce(
            topic,
            value=v if isinstance(v, bytes) else v.encode(),
            partition=i % PARTITIONS,
            timestamp=timestamp,
            on_delivery=lambda err, msg, i=i: delivered.__setitem__(
                i, (err, msg.partition(), msg.offset())
            ),
        )
    assert producer.flush(30) == 0
    assert all(delivered[i][0] is None for i in range(len(values)))
    return [delivered[i][1:] for i in range(len(values))]


def _pipeline(stream):
    return (
        stream.window(
            FixedWindows("10 seconds"),
            trigger=AfterWatermark(late=AfterCount(1)),
            allowed_lateness="8 seconds",
            accumulation="retracting",
        )
        .group_by("user")
        .agg(total=hw.sum("score"), n=hw.count())
    )


def _ms(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for c in ("window_start", "window_end", "timestamp", "event_time"):
        if c in out and pd.api.types.is_datetime64_any_dtype(out[c]):
            utc = out[c].dt.tz_localize("UTC") if out[c].dt.tz is None else out[c]
            out[c] = (utc - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return out


PANE_COLS = [
    "user",
    "window_start",
    "window_end",
    "total",
    "n",
    "timestamp",
    "pane_index",
    "timing",
    "is_last",
    "is_retraction",
]


def _panes(frame: pd.DataFrame) -> list[tuple]:
    """The panes, comparable across runners (times as epoch ms)."""
    frame = _ms(frame)
    rows = frame[PANE_COLS].astype(object).itertuples(index=False, name=None)
    return sorted(tuple(int(v) if isinstance(v, (int, bool)) else v for v in r) for r in rows)


def _table_view(panes: pd.DataFrame) -> list[tuple]:
    """Last pane per (user, window), withdrawn ones removed: the current results."""
    frame = _ms(panes).sort_values(["pane_index", "is_retraction"], kind="stable")
    last = frame.groupby(["user", "window_start", "window_end"]).tail(1)
    last = last[~last["is_retraction"].astype(bool)]
    return sorted(last[["user", "window_start", "window_end", "total"]].itertuples(index=False))


def _upserts_view(topic: str, bootstrap: str) -> list[tuple]:
    table = read_upserts(topic, bootstrap)
    table["window_start"] = pd.to_datetime(table["window_start"], utc=True)
    table["window_end"] = pd.to_datetime(table["window_end"], utc=True)
    table = _ms(table)
    return sorted(table[["user", "window_start", "window_end", "total"]].itertuples(index=False))


def _expected_panes() -> pd.DataFrame:
    """The same pipeline over the same events from a pandas frame (local runner)."""
    rows = []
    for phase, values in enumerate(PHASES):
        for i, v in enumerate(values):
            if (phase, i) in REJECTED:
                continue
            record = json.loads(v)
            rows.append({**record, "arrival": pd.Timestamp(phase, unit="s", tz="UTC")})
    frame = pd.DataFrame(rows)
    frame["ts"] = pd.to_datetime(frame["ts"], utc=True, format="ISO8601")
    stream = hw.from_pandas(frame, "ts", arrival_time="arrival", watermark="2 seconds")
    return _pipeline(stream).to_pandas()


@pytest.fixture(scope="module")
def filled(bootstrap):
    """A three-partition topic with both phases, and each record's offsets."""
    topic = _topic(bootstrap)
    base = int(time.time() * 1000)
    offsets = [
        _produce(bootstrap, topic, values, base + 1000 * phase)
        for phase, values in enumerate(PHASES)
    ]
    return topic, offsets, base


def _check_rejects(letters: pd.DataFrame, topic: str, offsets: list[list[tuple]]) -> None:
    assert set(REJECT_COLUMNS) <= set(letters.columns)
    got = letters[letters["kafka_offset"].notna()]
    expected = sorted(
        (offsets[p][i][0], offsets[p][i][1], reason, PHASES[p][i])
        for (p, i), reason in REJECTED.items()
    )
    assert (
        sorted(
            zip(
                got["kafka_partition"].astype(int),
                got["kafka_offset"].astype(int),
                got["reason"],
                got["kafka_value"],
                strict=True,
            )
        )
        == expected
    )
    assert set(got["kafka_topic"]) == {topic}
    assert got["error"].notna().all()


def test_local_runner_reads_the_topic(bootstrap, filled):
    topic, offsets, _ = filled
    agg = _pipeline(
        hw.from_kafka(
            topic, bootstrap, schema=SCHEMA, event_time="ts", watermark="2 seconds", runner="local"
        )
    )
    panes = agg.to_pandas()
    expected = _expected_panes()
    assert _panes(panes) == _panes(expected)
    assert panes["is_retraction"].any()  # the late pane retracted the on-time one
    letters = agg.dead_letters()
    _check_rejects(letters, topic, offsets)
    late = letters[letters["reason"] == "late"]
    assert late[["user", "score"]].values.tolist() == [["a", 3]]

    # The upsert sink from the local runner's panes, read back as a table.
    out = _topic(bootstrap, partitions=2)
    KafkaSink(out, bootstrap)(panes.drop(columns=["kafka_timestamp"], errors="ignore"), 0)
    assert _upserts_view(out, bootstrap) == _table_view(panes)


@pytest.mark.spark
def test_spark_reads_the_topic_and_writes_upserts(spark, bootstrap, tmp_path):
    if cached_spark_jars() is None:
        pytest.fail("Spark's Kafka connector is not resolved: run bash scripts/kafka.sh")
    topic = _topic(bootstrap)  # filled phase by phase, one availableNow run each
    upserts, changelog = _topic(bootstrap), _topic(bootstrap)
    agg = _pipeline(
        hw.from_kafka(
            topic, bootstrap, schema=SCHEMA, event_time="ts", watermark="2 seconds", spark=spark
        )
    )
    got: dict[tuple[str, int], pd.DataFrame] = {}
    sinks = fan_out(
        lambda b, i: got.__setitem__(("p", i), b.toPandas()),
        KafkaSink(upserts, bootstrap),
        KafkaSink(changelog, bootstrap, mode="changelog"),
    )
    base = int(time.time() * 1000)
    offsets = []
    for phase, values in enumerate(PHASES):
        offsets.append(_produce(bootstrap, topic, values, base + 1000 * phase))
        # The second run resumes from the offsets in the checkpoint; an incremental
        # job: every run but the last keeps its input open, the last one ends it.
        query = agg.start(
            checkpoint_location=str(tmp_path / "ck"),
            panes_sink=sinks,
            dead_letter_sink=lambda b, i: got.__setitem__(("d", i), b.toPandas()),
            trigger={"availableNow": True},
            end_of_input=None if phase == len(PHASES) - 1 else False,
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    panes = pd.concat([v for k, v in got.items() if k[0] == "p"], ignore_index=True)
    letters = pd.concat([v for k, v in got.items() if k[0] == "d"], ignore_index=True)
    # The last run ended the input: every window closed, as in the bounded run.
    assert _panes(panes) == _panes(_expected_panes())
    assert _ms(panes)["window_end"].max() == 140_000  # c@131 s: its window closed at the end
    timings = set(panes.loc[~panes["is_retraction"], "timing"])
    assert panes["is_retraction"].sum() == 1 and timings == {"ON_TIME", "LATE"}
    _check_rejects(letters, topic, offsets)
    late = letters[letters["reason"] == "late"]
    assert late[["user", "score"]].values.tolist() == [["a", 3]]
    assert _upserts_view(upserts, bootstrap) == _table_view(panes)
    ops = read_changelog_ops(changelog, bootstrap)
    assert "-U" in ops and "+I" in ops and "+U" in ops
    # The end is final: a run after it is refused, its rows are not dropped as late.
    _produce(bootstrap, topic, [_event("a", 150_000, 1)], base + 5000)
    with pytest.raises(InputEndedError, match="has ended"):
        agg.start(checkpoint_location=str(tmp_path / "ck"), trigger={"availableNow": True})


def read_changelog_ops(topic: str, bootstrap: str) -> list[str]:
    """The ``op`` of every message of a changelog topic."""
    source = KafkaSource(topic, bootstrap, {"t": "bigint"}, "t")
    raw = consume(source)
    return [json.loads(v)["op"] for v in raw["kafka_value"]]


def test_decode_rules():
    """Each rule once, without a broker (the same rules run on Spark above)."""
    source = KafkaSource("t", "unused", parse_schema(SCHEMA), "ts")
    values = DECODE_CASES[:9]
    raw = _raw_records(values)
    records, rejects = decode_pandas(raw, source)
    assert records["user"].tolist() == ["a", "7", "a"]  # a string takes any JSON value
    assert records["score"].tolist()[:2] == [1, 1] and pd.isna(records["score"].iloc[2])
    assert rejects[["kafka_offset", "reason", "error"]].values.tolist() == [
        [1, "malformed", "not a JSON object"],
        [2, "malformed", "score: not a bigint"],
        [3, "malformed", "score: not a bigint"],
        [6, "null_event_time", "ts: null event time"],
        [7, "malformed", "ts: not a timestamp"],
        [8, "malformed", "not a JSON object"],
    ]


#: Values whose decoding is easy to get wrong: every rule of test_decode_rules, and
#: blanks before an object, a wrong field beside good ones, a missing field.
DECODE_CASES = [
    _event("a", 1000, 1),
    "{not json",
    json.dumps({"user": "a", "score": 1.5, "ts": _ts(0)}),
    json.dumps({"user": "a", "score": "1", "ts": _ts(0)}),
    json.dumps({"user": 7, "score": 1, "ts": _ts(0)}),
    json.dumps({"user": "a", "score": None, "ts": _ts(0)}),
    json.dumps({"user": "a", "score": 1, "ts": None}),
    json.dumps({"user": "a", "score": 1, "ts": "yesterday"}),
    "42",
    "  " + _event("b", 2000, 2),
    json.dumps({"user": "a", "ts": _ts(0)}),
    json.dumps({"user": {"x": 1}, "score": True, "ts": _ts(0)}),
    "",
    None,
    *(TRAILING := [_event("c", 0, 1) + suffix for suffix in (" trailing", "}", " {}", "] {}")]),
    _event("d", 0, 1) + " \n",
]


def test_text_after_the_object_is_malformed():
    """``{...} trailing`` is not one JSON object: a dead letter (Spark's parsers stop
    after the first value; test_spark_decodes_as_the_local_runner holds Spark to it)."""
    source = KafkaSource("t", "unused", parse_schema(SCHEMA), "ts")
    first = DECODE_CASES.index(TRAILING[0])
    records, rejects = decode_pandas(_raw_records(DECODE_CASES), source)
    trailing = rejects[rejects["kafka_offset"] >= first]
    assert trailing[["kafka_offset", "reason", "error"]].values.tolist() == [
        [first + i, "malformed", "not a JSON object"] for i in range(len(TRAILING))
    ]
    assert trailing["kafka_value"].tolist() == TRAILING
    assert records["user"].tolist()[-1] == "d"  # blanks after the object are no text


def test_spark_decodes_as_the_local_runner(spark):
    """Spark's decoding (one typed parse, the text parse only for records that do not
    come out whole) gives each record the reason, error and fields DuckDB's does."""
    source = KafkaSource("t", "unused", parse_schema(SCHEMA), "ts")
    raw = _raw_records(DECODE_CASES)
    records, expected = decode_pandas(raw, source)
    frame = spark.createDataFrame(raw, schema=RAW_DDL)
    decoded = decode_spark(frame, source).orderBy("kafka_offset").toPandas()
    got = decoded[decoded["reason"].notna()]
    columns = ["kafka_offset", "reason", "error"]
    assert len(got) > 5 and got[columns].values.tolist() == expected[columns].values.tolist()
    ok = decoded[decoded["reason"].isna()]
    assert ok["user"].tolist() == records["user"].tolist()
    assert ok["score"].astype("Int64").tolist() == records["score"].astype("Int64").tolist()
    assert pd.to_datetime(ok["ts"], utc=True).tolist() == records["ts"].tolist()


def test_spark_decode_plan_computes_each_step_once(spark, capsys):
    """Each record is parsed once typed (and once as text when it does not come out
    whole), and no decode step is copied into the fields that use it: the plan Spark
    optimizes again every micro-batch stays small."""
    source = KafkaSource("t", "unused", parse_schema(SCHEMA), "ts")
    frame = spark.createDataFrame(_raw_records(DECODE_CASES[:2]), schema=RAW_DDL)
    decode_spark(frame, source).explain(mode="extended")
    # The analyzed plan: the expressions as built (a local frame's optimized plan is
    # folded into a constant relation).
    plan = capsys.readouterr().out.split("== Analyzed Logical Plan ==")[1]
    plan = plan.split("== Optimized Logical Plan ==")[0]
    assert plan.count("from_json(") == 2  # the typed parse, the text parse
    assert plan.count("concat_ws(") == 1  # the wrong-type text
    assert plan.count("json_array_length(") == 1  # text after the object


RAW_DDL = (
    "kafka_topic string, kafka_partition int, kafka_offset bigint, "
    "kafka_timestamp bigint, kafka_key string, kafka_value string"
)


def test_sink_messages_from_panes_and_a_sql_changelog():
    """The message rules without a broker: the last change per key (upsert), the
    ``op`` of every change (changelog), a retraction without replacement."""
    w0, w1 = pd.Timestamp(0, tz="UTC"), pd.Timestamp(10_000, tz="UTC")
    panes = pd.DataFrame(
        {
            "user": ["a", "a", "a", "b", "b"],
            "window_start": [w0] * 5,
            "window_end": [w1] * 5,
            "total": [1, 1, 8, 2, 2],
            "pane_index": [0, 0, 1, 0, 0],
            "is_retraction": [False, True, False, False, True],
        }
    )
    upsert = KafkaSink("t", "unused").messages(panes.iloc[::-1])  # order comes from the rows
    by_key = {json.loads(k)["user"]: v for k, v in zip(upsert["key"], upsert["value"], strict=True)}
    assert json.loads(by_key["a"])["total"] == 8
    assert json.loads(by_key["a"])["window_start"] == "1970-01-01T00:00:00.000000Z"
    assert by_key["b"] is None  # withdrawn with no replacement: a tombstone
    changes = KafkaSink("t", "unused", mode="changelog").messages(panes)
    ops = [(json.loads(k)["user"], json.loads(v)["op"]) for k, v in changes.values]
    assert ops == [("a", "+I"), ("b", "+I"), ("a", "-U"), ("b", "-D"), ("a", "+U")]

    sql = pd.DataFrame(
        {"window_end": [1, 1, 1], "total": [2.0, 2.0, 6.0], "undo": [False, True, False]}
    ).assign(ptime=[5, 7, 7], ver=[0, 1, 2])
    with pytest.raises(ValueError, match="key="):
        KafkaSink("t", "unused").messages(sql)
    changes = KafkaSink("t", "unused", mode="changelog", key=["window_end"]).messages(sql)
    assert [json.loads(v)["op"] for v in changes["value"]] == ["+I", "-U", "+U"]
    upsert = KafkaSink("t", "unused", key=["window_end"]).messages(sql)
    assert [json.loads(v)["total"] for v in upsert["value"]] == [6.0]


SQL_QUERY = (
    "SELECT window_start, window_end, SUM(price) AS total FROM TABLE(TUMBLE(TABLE Bid, "
    "DESCRIPTOR(bidtime), INTERVAL '10' MINUTES)) GROUP BY window_start, window_end"
)


@pytest.fixture(scope="module")
def bids(bootstrap) -> str:
    """A topic of bids in two phases; its 'kafka' source declaration (``{extra}``:
    more options). 8:07 arrives after the watermark passed 8:10, within lateness."""
    topic = _topic(bootstrap)
    minute = 60_000
    phases = [
        [(1, 4.0, "a"), (3, 2.0, "b"), (12, 5.0, "c"), (16, 1.0, "f")],  # watermark 8:11
        [(7, 1.0, "d"), (25, 3.0, "e")],  # 8:07 late, within lateness: [8:00, 8:10) changes
    ]
    base = int(time.time() * 1000)
    for p, rows in enumerate(phases):
        values = [
            json.dumps({"bidtime": _ts(8 * 60 * minute + m * minute), "price": x, "item": i})
            for m, x, i in rows
        ]
        _produce(bootstrap, topic, values, base + 1000 * p)
    return (
        "CREATE TABLE Bid (bidtime TIMESTAMP, price DOUBLE, item VARCHAR, "
        "WATERMARK FOR bidtime AS bidtime - INTERVAL '5' MINUTES) "
        f"WITH ('connector' = 'kafka', 'topic' = '{topic}', "
        f"'properties.bootstrap.servers' = '{bootstrap}', "
        "'scan.startup.mode' = 'earliest-offset', 'format' = 'json', "
        "'allowed_lateness' = '10 minutes'{extra});\n"
    )


def _sql_upserts(bids: str, bootstrap: str, **options) -> tuple[list, list]:
    """Run the script (INSERT INTO an upsert-kafka sink, then the plain query):
    ``(the query's final table, the sink's topic read back)``."""
    from headwater.sql.script import run_script

    totals = _topic(bootstrap, partitions=2)
    script = (
        bids.format(extra="")
        + "CREATE TABLE Totals (window_start TIMESTAMP, window_end TIMESTAMP, total DOUBLE) "
        f"WITH ('connector' = 'upsert-kafka', 'topic' = '{totals}', "
        f"'properties.bootstrap.servers' = '{bootstrap}', "
        "'key.fields' = 'window_start;window_end', 'format' = 'json');\n"
        f"INSERT INTO Totals {SQL_QUERY} EMIT STREAM;\n{SQL_QUERY};"
    )
    (result,) = list(run_script(script, **options))
    final = sorted(
        (pd.Timestamp(s).isoformat(), float(t))
        for s, t in zip(result["window_start"], result["total"], strict=True)
    )
    table = read_upserts(totals, bootstrap)
    topic = sorted(
        (pd.Timestamp(s).tz_localize(None).isoformat(), float(t))
        for s, t in zip(table["window_start"], table["total"], strict=True)
    )
    return final, topic


#: The final totals per window (8:00 includes the late 8:07).
SQL_FINAL = [
    ("1970-01-01T08:00:00", 7.0),
    ("1970-01-01T08:10:00", 6.0),
    ("1970-01-01T08:20:00", 3.0),
]


def test_sql_script_reads_kafka_and_writes_upsert_kafka(bootstrap, bids):
    """Flink's DDL: a 'kafka' source and an 'upsert-kafka' sink on the local runner;
    the sink's topic read back equals the query's final table."""
    from headwater.sql.errors import SqlError
    from headwater.sql.script import run_script

    assert _sql_upserts(bids, bootstrap) == (SQL_FINAL, SQL_FINAL)
    with pytest.raises(SqlError, match="unknown option 'scan.bounded.mode'"):
        list(run_script(bids.format(extra=", 'scan.bounded.mode' = 'latest-offset'") + SQL_QUERY))


@pytest.mark.spark
def test_sql_script_on_spark(spark, bootstrap, bids):
    """The same script on the Spark runner: the same table, the same topic."""
    assert _sql_upserts(bids, bootstrap, runner="spark", spark=spark) == (SQL_FINAL, SQL_FINAL)


@pytest.mark.spark
def test_spark_source_caps_micro_batches(spark, bootstrap, tmp_path):
    """max_offsets_per_trigger reaches Spark's source: 7 records, at most 3 a batch."""
    if cached_spark_jars() is None:
        pytest.fail("Spark's Kafka connector is not resolved: run bash scripts/kafka.sh")
    topic = _topic(bootstrap)
    _produce(
        bootstrap, topic, [_event("a", 1000 * i, i) for i in range(7)], int(time.time() * 1000)
    )
    stream = hw.from_kafka(
        topic, bootstrap, schema=SCHEMA, event_time="ts", spark=spark, max_offsets_per_trigger=3
    )
    query = (
        stream.df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(rows) == 7 and max(rows) <= 3 and len(rows) >= 3


def test_the_connector_is_of_the_pinned_pyspark_version():
    """Spark's Kafka connector must match the Spark it runs in (scripts/kafka.sh's
    default and headwater.io.kafka agree with the installed PySpark)."""
    from importlib.metadata import version

    from headwater.io.kafka import CONNECTOR_VERSION

    script = (Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh").read_text()
    assert CONNECTOR_VERSION == version("pyspark")
    assert f'connector="${{HEADWATER_SPARK_KAFKA:-{CONNECTOR_VERSION}}}"' in script
    # spark-avro (from_avro) too: the same version, in the cache the session reads.
    assert 'avro_dir="$cache/spark-avro-$connector"' in script
    assert avro_dir().name == f"spark-avro-{CONNECTOR_VERSION}"


AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Score",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "score", "type": "long"},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "note", "type": ["null", {"type": "map", "values": "string"}]},
        ],
    }
)
#: (user, event time ms, score); the fourth value is not Avro (a dead letter).
AVRO_EVENTS = [("a", 101_000, 1), ("b", 101_500, 2), ("a", 112_000, 5), ("c", 131_000, 4)]
GARBAGE = b"not avro"


def _avro_values() -> list[bytes]:
    import fastavro

    schema = fastavro.parse_schema(json.loads(AVRO_SCHEMA))
    out = []
    for user, ms, score in AVRO_EVENTS:
        buf = io.BytesIO()
        ts = pd.Timestamp(ms, unit="ms", tz="UTC").to_pydatetime()
        fastavro.schemaless_writer(buf, schema, {"user": user, "score": score, "ts": ts})
        out.append(buf.getvalue())
    return out[:3] + [GARBAGE] + out[3:]


def _avro_expected() -> pd.DataFrame:
    frame = pd.DataFrame(AVRO_EVENTS, columns=["user", "ts", "score"])
    frame["ts"] = pd.to_datetime(frame["ts"], unit="ms", utc=True)
    frame["arrival"] = pd.Timestamp(0, tz="UTC")
    stream = hw.from_pandas(frame, "ts", arrival_time="arrival", watermark="2 seconds")
    return _pipeline(stream).to_pandas()


@pytest.fixture(scope="module")
def avro_topic(bootstrap):
    """A three-partition topic of Avro records and one garbage value; its (partition, offset)."""
    topic = _topic(bootstrap)
    offsets = _produce(bootstrap, topic, _avro_values(), int(time.time() * 1000))
    return topic, offsets[3]


def _check_avro_letter(letters: pd.DataFrame, topic: str, where: tuple) -> None:
    got = letters[letters["kafka_offset"].notna()]
    rows = [
        (t, int(p), int(o), r, bytes(v))
        for t, p, o, r, v in got[
            ["kafka_topic", "kafka_partition", "kafka_offset", "reason", "kafka_value"]
        ].itertuples(index=False)
    ]
    assert rows == [(topic, *where, "malformed", GARBAGE)]


def _avro_stream(topic: str, bootstrap: str, **kwargs):
    return hw.from_kafka(
        topic,
        bootstrap,
        schema="user string, score bigint, ts timestamp",  # not the map field
        event_time="ts",
        watermark="2 seconds",
        format="avro",
        avro_schema=AVRO_SCHEMA,
        **kwargs,
    )


def test_local_runner_reads_avro(bootstrap, avro_topic):
    topic, where = avro_topic
    agg = _pipeline(_avro_stream(topic, bootstrap, runner="local"))
    assert _panes(agg.to_pandas()) == _panes(_avro_expected())
    _check_avro_letter(agg.dead_letters(), topic, where)


@pytest.mark.spark
def test_spark_reads_avro(spark, bootstrap, avro_topic, tmp_path):
    topic, where = avro_topic
    agg = _pipeline(_avro_stream(topic, bootstrap, spark=spark))
    got: dict[tuple[str, int], pd.DataFrame] = {}
    query = agg.start(
        checkpoint_location=str(tmp_path / "ck"),
        panes_sink=lambda b, i: got.__setitem__(("p", i), b.toPandas()),
        dead_letter_sink=lambda b, i: got.__setitem__(("d", i), b.toPandas()),
        trigger={"availableNow": True},
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    panes = pd.concat([v for k, v in got.items() if k[0] == "p"], ignore_index=True)
    letters = pd.concat([v for k, v in got.items() if k[0] == "d"], ignore_index=True)
    assert _panes(panes) == _panes(_avro_expected())
    _check_avro_letter(letters, topic, where)


def test_avro_decode_rules():
    """The local Avro decoder without a broker: bad values in a row, a truncated
    one, a null value, at the ends; a null event time; micros and float types."""
    import fastavro

    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "x", "type": "float"},
            {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        ],
    }
    parsed = fastavro.parse_schema(schema)

    def enc(x: float, ts: int | None) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"x": x, "ts": ts})
        return buf.getvalue()

    good = enc(1.5, 2_000_000)
    values = [b"\xff", good, b"zz", b"\x01", good[:-1], None, enc(2.5, None), good, b""]
    raw = _raw_records(values)
    source = KafkaSource(
        "t",
        "u",
        {"x": "double", "ts": "timestamp"},
        "ts",
        format="avro",
        avro_schema=json.dumps(schema),
    )
    records, rejects = decode_pandas(raw, source)
    assert records["x"].tolist() == [1.5, 1.5]
    assert records["ts"].tolist() == [pd.Timestamp(2_000_000, unit="us", tz="UTC")] * 2
    assert rejects[["kafka_offset", "reason"]].values.tolist() == [
        [0, "malformed"],
        [2, "malformed"],
        [3, "malformed"],
        [4, "malformed"],
        [5, "malformed"],
        [6, "null_event_time"],
        [8, "malformed"],
    ]
    assert rejects["kafka_value"].tolist() == [v for i, v in enumerate(values) if i not in (1, 7)]


def test_avro_schema_rules():
    """Declared columns must be fields of the Avro record, of the same type."""
    with pytest.raises(ValueError, match="'score' bigint is Avro type string"):
        KafkaSource(
            "t",
            "u",
            {"score": "bigint"},
            "score",
            format="avro",
            avro_schema=json.dumps(
                {"type": "record", "name": "R", "fields": [{"name": "score", "type": "string"}]}
            ),
        )
    with pytest.raises(ValueError, match="field 'note' has a type"):
        hw.from_kafka("t", "u", event_time="ts", format="avro", avro_schema=AVRO_SCHEMA)
    with pytest.raises(ValueError, match="avro_schema is not valid"):
        KafkaSource(
            "t", "u", {}, "ts", format="avro", avro_schema='{"type": "record", "fields": []}'
        )
    with pytest.raises(ValueError, match="takes avro_schema"):
        KafkaSource("t", "u", {"ts": "timestamp"}, "ts", format="avro")


def test_sql_script_reads_avro(bootstrap, avro_topic):
    """'format' = 'avro' with 'avro.schema' in the DDL, on the local runner: the
    window totals of the Avro records; the garbage value fails the script with its
    partition and offset (a SQL source's rule for undecodable records)."""
    from headwater.sql.errors import SqlError
    from headwater.sql.script import run_script

    good = _topic(bootstrap)
    _produce(bootstrap, good, [v for v in _avro_values() if v != GARBAGE], 0)
    query = (
        "SELECT window_start, SUM(score) AS total FROM TABLE(TUMBLE(TABLE S, "
        "DESCRIPTOR(ts), INTERVAL '10' SECONDS)) GROUP BY window_start, window_end"
    )

    def script(topic: str) -> str:
        return (
            "CREATE TABLE S (`user` VARCHAR, score BIGINT, ts TIMESTAMP, "
            "WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) "
            f"WITH ('connector' = 'kafka', 'topic' = '{topic}', "
            f"'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'avro', "
            f"'avro.schema' = '{AVRO_SCHEMA}');\n{query};"
        )

    (result,) = list(run_script(script(good)))
    got = sorted(
        (pd.Timestamp(s).value // 10**6, int(t))
        for s, t in zip(result["window_start"], result["total"], strict=True)
    )
    assert got == [(100_000, 3), (110_000, 5), (130_000, 4)]
    topic, (partition, offset) = avro_topic
    with pytest.raises(SqlError, match=f"partition {partition}, offset {offset}: not an Avro"):
        list(run_script(script(topic)))
