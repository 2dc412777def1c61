"""Kafka in: a topic of JSON records as a pipeline's input, on Spark and locally.

On Spark the records come from Spark's own Kafka source (``format("kafka")``:
offsets in the query's checkpoint, ``startingOffsets``, ``maxOffsetsPerTrigger``,
any number of partitions); its jars are local files that :func:`spark_jars`
resolves once (``scripts/kafka.sh jars``, Maven) and a session takes as
``spark.jars``. The local runner reads the same topic with ``confluent-kafka``
(the ``kafka`` extra), up to the end offsets at the time of the call, and
replays the records in micro-batches of equal record timestamp (the time the
producer or broker stamped: processing time), so a pipeline runs unchanged on
both runners.

Decoding (the same rules on both runners): the value is a JSON object; a field
of an integral type must be a JSON integer, a ``double`` a JSON number, a
``boolean`` a JSON boolean, a ``timestamp`` an ISO-8601 string, a ``string``
any JSON value (non-strings as their JSON text); a missing field or JSON
``null`` is null. A record that is not a JSON object, has a field of the wrong
type, or a null event time is never dropped and never fails the query: it goes
to the dead letters (:data:`REJECT_COLUMNS`: reason ``malformed`` or
``null_event_time``, an ``error`` text, and the record's topic, partition,
offset, timestamp, key and raw value).

``format="avro"`` with ``avro_schema`` (an Avro record schema, JSON): each value
is one record in Avro's binary encoding (:mod:`headwater.io.kafka_avro`); a
value that does not decode is a ``malformed`` dead letter whose ``kafka_value``
is the raw bytes.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from headwater.io.kafka_avro import check_columns, decode_avro_pandas, decode_avro_spark

#: Spark's connector, of the pinned PySpark's version (pyproject.toml pins 4.2.0, the
#: newest PySpark whose connector Maven Central serves: 4.3.0's is not published).
CONNECTOR_VERSION = "4.2.0"

#: The dead-letter columns of a record that could not be decoded.
REJECT_COLUMNS = (
    "reason",
    "error",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "kafka_key",
    "kafka_value",
)
MALFORMED = "malformed"
NULL_EVENT_TIME = "null_event_time"
#: The value formats a source decodes.
FORMATS = ("json", "avro")

#: Declared types -> (Spark type, DuckDB type, JSON types the field accepts).
_TYPES: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "string": ("string", "VARCHAR", None),
    "bigint": ("bigint", "BIGINT", ("BIGINT", "UBIGINT")),
    "long": ("bigint", "BIGINT", ("BIGINT", "UBIGINT")),
    "int": ("int", "INTEGER", ("BIGINT", "UBIGINT")),
    "integer": ("int", "INTEGER", ("BIGINT", "UBIGINT")),
    "double": ("double", "DOUBLE", ("BIGINT", "UBIGINT", "DOUBLE")),
    "boolean": ("boolean", "BOOLEAN", ("BOOLEAN",)),
    "timestamp": ("timestamp", "TIMESTAMPTZ", ("VARCHAR",)),
}


def parse_schema(schema: str | dict[str, str]) -> dict[str, str]:
    """``"user string, score bigint, ts timestamp"`` (or a dict) as ``{name: type}``."""
    if isinstance(schema, dict):
        pairs = list(schema.items())
    else:
        pairs = [tuple(part.split()) for part in schema.split(",") if part.strip()]
    out: dict[str, str] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(f"Kafka schema: expected 'name type', got {' '.join(pair)!r}")
        name, kind = pair[0], pair[1].lower()
        if kind not in _TYPES:
            raise ValueError(
                f"Kafka schema: column {name!r} has type {kind!r}; "
                f"supported: {', '.join(sorted(_TYPES))}"
            )
        out[name] = kind
    return out


@dataclass(frozen=True)
class KafkaSource:
    """A topic of JSON (or Avro, with ``avro_schema``) records and how to read it."""

    topic: str
    bootstrap_servers: str
    schema: dict[str, str]
    event_time: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    format: str = "json"
    avro_schema: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"Kafka source {self.topic!r}: format {self.format!r}; use one of {FORMATS}"
            )
        if (self.format == "avro") != (self.avro_schema is not None):
            raise ValueError(
                f"Kafka source {self.topic!r}: format 'avro' takes avro_schema (the Avro "
                "record schema, JSON), and only it does"
            )
        if self.avro_schema is not None:
            check_columns(self.topic, self.schema, self.avro_schema)
        if self.event_time not in self.schema:
            raise ValueError(
                f"Kafka source {self.topic!r}: event time {self.event_time!r} is not in "
                f"the schema ({', '.join(self.schema)})"
            )
        clash = sorted(set(self.schema) & {*REJECT_COLUMNS, REJECTED_COLUMN})
        if clash:
            raise ValueError(
                f"Kafka source {self.topic!r}: schema columns {clash} clash with the "
                "dead-letter columns of rejected records: rename them"
            )
        kind = self.schema[self.event_time]
        if kind not in ("timestamp", "bigint", "long"):
            raise ValueError(
                f"Kafka source {self.topic!r}: event time {self.event_time!r} must be a "
                f"timestamp or bigint (epoch ms), not {kind}"
            )


# ----------------------------------------------------------------------- jars
def spark_jars(script: str | os.PathLike | None = None) -> list[str]:
    """Spark's Kafka connector jars and spark-avro's (local paths), for a session's
    ``spark.jars``.

    Resolved once into ``$HEADWATER_CACHE`` (default ``~/.cache/headwater``) by
    ``scripts/kafka.sh jars`` (Maven); later calls read the cache, offline."""
    cached = cached_spark_jars()
    if cached is not None:
        return cached.split(",")
    path = Path(script) if script else Path(__file__).resolve().parents[2] / "scripts/kafka.sh"
    if not path.exists():
        raise FileNotFoundError(
            f"Spark's Kafka connector is not in {cached} and {path} is missing: run "
            "scripts/kafka.sh jars from a headwater checkout, or pass spark.jars.packages="
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{CONNECTOR_VERSION},"
            f"org.apache.spark:spark-avro_2.13:{CONNECTOR_VERSION}"
        )
    out = subprocess.run(["bash", str(path), "jars"], check=True, capture_output=True, text=True)
    return [p for p in out.stdout.strip().split(",") if p]


def connector_dir() -> Path:
    """Where ``scripts/kafka.sh`` puts Spark's connector jars."""
    cache = os.environ.get("HEADWATER_CACHE") or os.path.expanduser("~/.cache/headwater")
    return Path(cache) / f"spark-sql-kafka-{CONNECTOR_VERSION}"


def avro_dir() -> Path:
    """Where ``scripts/kafka.sh`` puts spark-avro (``from_avro``, for Avro values)."""
    return connector_dir().with_name(f"spark-avro-{CONNECTOR_VERSION}")


def cached_spark_jars() -> str | None:
    """The connector and spark-avro jars as a ``spark.jars`` value when already
    resolved, else None."""
    dirs = (connector_dir(), avro_dir())
    if not all((d / ".complete").exists() for d in dirs):
        return None
    return ",".join(sorted(str(p) for d in dirs for p in d.glob("*.jar")))


# ----------------------------------------------------------------------- Spark
@dataclass(frozen=True)
class SparkRejects:
    """Where a Spark source's rejected records are: ``column`` of its one streaming
    DataFrame holds each as JSON (null on decoded records), of Spark type ``ddl``
    (:data:`REJECT_COLUMNS`); :func:`expand_rejects` turns them into dead letters."""

    column: str
    ddl: str


#: The column of :func:`read_spark`'s rows that holds a rejected record (JSON).
REJECTED_COLUMN = "__headwater_rejected"


def read_spark(spark: Any, source: KafkaSource) -> tuple[Any, SparkRejects]:
    """ONE streaming DataFrame over the topic, read once: the schema's columns, and
    :data:`REJECTED_COLUMN`, null on the records that decoded and the whole
    rejected record (:data:`REJECT_COLUMNS` as JSON) on the others, whose schema
    columns are null. The streaming runner routes the rejected rows to the dead
    letters from the same micro-batch (``compile_streaming(rejected_col=...)``)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", source.bootstrap_servers)
        .option("subscribe", source.topic)
        .option("startingOffsets", source.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if source.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(source.max_offsets_per_trigger))
    for key, value in source.options.items():
        reader = reader.option(key, value)
    raw = reader.load().select(
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").cast("string").alias("kafka_key"),
        (F.col("value") if source.avro_schema else F.col("value").cast("string")).alias(
            "kafka_value"
        ),
    )
    decoded = decode_spark(raw, source)
    ok = F.col("reason").isNull()
    rejected = F.when(~ok, F.to_json(F.struct(*REJECT_COLUMNS)))
    rows = decoded.select(
        *[F.when(ok, F.col(f"`{n}`")).alias(n) for n in source.schema],
        rejected.alias(REJECTED_COLUMN),
    )
    ddl = ", ".join(
        f"`{f.name}` {f.dataType.simpleString()}"
        for f in decoded.select(*REJECT_COLUMNS).schema.fields
    )
    return rows, SparkRejects(REJECTED_COLUMN, ddl)


def decode_spark(raw: Any, source: KafkaSource) -> Any:
    """``raw`` with the schema's columns, ``reason`` and ``error`` (null when decoded).

    JSON is parsed once with the declared types, as ``[value]``: an array of one
    record, so that the same parse also refuses text after the object (Spark's
    parsers stop after the first value: ``{...} trailing`` would pass alone; see
    :func:`_ends`). Only a record that does not come out whole (not one object, or
    a typed field null) is parsed again with every field a string: a field present
    as text but null when typed has the wrong type."""
    from pyspark.sql import functions as F

    if source.avro_schema is not None:
        return _decode_avro_spark(raw, source)

    corrupt = "__headwater_corrupt"
    typed_ddl = ", ".join(f"`{n}` {_TYPES[t][0]}" for n, t in source.schema.items())
    text_ddl = ", ".join(f"`{n}` string" for n in source.schema) + f", `{corrupt}` string"
    opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt}
    value = F.col("kafka_value")
    # Each step is a column of its own, referenced by name: Spark keeps a step that
    # is used twice in a projection of its own instead of copying its expression,
    # so the plan (planned again every micro-batch) stays small.
    wrapped = F.concat(F.lit("["), value, F.lit("]"))
    records = F.from_json(wrapped, f"array<struct<{typed_ddl}>>", {"mode": "PERMISSIVE"})
    out = raw.withColumn("__records", records)
    typed = F.when(F.size("__records") == 1, F.col("__records").getItem(0))
    out = out.withColumn("__typed", typed).drop("__records")
    whole = value.isNotNull() & F.col("__typed").isNotNull()
    for n in source.schema:
        whole = whole & F.col(f"__typed.`{n}`").isNotNull()
    whole = whole & F.coalesce(F.ltrim(value).startswith("{") & _closed(value), F.lit(False))
    out = out.withColumn("__whole", whole)
    out = out.withColumn("__text", F.when(~F.col("__whole"), F.from_json(value, text_ddl, opts)))
    not_object = ~F.col("__whole") & (
        F.col("__text").isNull()
        | F.col(f"__text.{corrupt}").isNotNull()
        | ~F.coalesce(F.ltrim(value).startswith("{"), F.lit(False))
        | ~_ends(value)
    )
    wrong = [
        F.when(
            F.col(f"__text.`{n}`").isNotNull() & F.col(f"__typed.`{n}`").isNull(),
            F.lit(f"{n}: not a {t}"),
        )
        for n, t in source.schema.items()
    ]
    out = out.withColumns(
        {
            "__not_object": not_object,
            "__wrong": F.when(~F.col("__whole"), F.concat_ws("; ", *wrong)),
        }
    )
    malformed = F.col("__not_object") | (F.col("__wrong") != "")
    null_time = F.col(f"__typed.`{source.event_time}`").isNull()
    error = (
        F.when(F.col("__whole"), F.lit(None).cast("string"))
        .when(F.col("__not_object"), F.lit("not a JSON object"))
        .when(F.col("__wrong") != "", F.col("__wrong"))
        .when(null_time, F.lit(f"{source.event_time}: null event time"))
    )
    reason = (
        F.when(F.col("__whole"), F.lit(None).cast("string"))
        .when(malformed, F.lit(MALFORMED))
        .when(null_time, F.lit(NULL_EVENT_TIME))
    )
    return out.select(
        *raw.columns,
        *[F.col(f"__typed.`{n}`").alias(n) for n in source.schema],
        error.alias("error"),
        reason.alias("reason"),
    )


def _ends(value: Any) -> Any:
    """True when the JSON value ends the text (blanks aside), as DuckDB's
    ``json_valid`` requires: Spark's parsers stop after the first value and accept
    ``{...} trailing``. Wrapped as ``[value]`` it must be an array of one element,
    and :func:`_closed`; no text after the value passes both."""
    from pyspark.sql import functions as F

    one = F.json_array_length(F.concat(F.lit("["), value, F.lit("]"))) == 1
    return F.coalesce(one & _closed(value), F.lit(False))


def _closed(value: Any) -> Any:
    """False for a value that closes the ``[value]`` wrapping early (``{...}] ...``
    parses as an array of one element, the rest unread): such a value holds a
    ``]``, and only then is it also wrapped as ``{"x": value}``, which must be an
    object of one key (an early ``}`` cannot also close the array)."""
    from pyspark.sql import functions as F

    keys = F.json_object_keys(F.concat(F.lit('{"x":'), value, F.lit("}")))
    return F.when(~value.contains("]"), F.lit(True)).otherwise(F.size(keys) == 1)


def _decode_avro_spark(raw: Any, source: KafkaSource) -> Any:
    """:func:`decode_spark` of Avro values (:func:`decode_avro_spark`)."""
    from pyspark.sql import functions as F

    spark_types = {n: _TYPES[t][0] for n, t in source.schema.items()}
    out, typed, not_avro = decode_avro_spark(raw, source.schema, spark_types, source.avro_schema)
    et = source.event_time
    event_null = F.col(f"__avro.`{et}`").isNull()
    error = F.when(not_avro.isNotNull(), not_avro).when(event_null, F.lit(f"{et}: null event time"))
    reason = (
        F.when(not_avro.isNotNull(), F.lit(MALFORMED))
        .when(event_null, F.lit(NULL_EVENT_TIME))
        .otherwise(F.lit(None).cast("string"))
    )
    return out.select("*", *typed, error.alias("error"), reason.alias("reason")).drop("__avro")


def expand_rejects(output: Any, rejects: SparkRejects) -> Any:
    """The streaming runner's output with each rejected record's dead letter in
    full: its ``dropped`` struct carries the runner's fields (``reason`` the
    record's, ``elements`` 1, the others null) then :data:`REJECT_COLUMNS` (null
    on the runner's own dead letters), instead of the JSON text."""
    from pyspark.sql import functions as F

    dropped = F.col("dropped")
    # Parsed once into a column of its own: referenced by name, the parse is not
    # copied into every field (a smaller plan, planned again every micro-batch).
    parsed_col = "__headwater_parsed"
    output = output.withColumn(
        parsed_col, F.from_json(dropped.getField(rejects.column), rejects.ddl)
    )
    parsed = F.col(parsed_col)
    is_rejected = parsed.isNotNull()
    fields = [n for n in output.schema["dropped"].dataType.fieldNames() if n != rejects.column]
    values = []
    for name in fields:
        value = dropped.getField(name)
        if name in REJECT_COLUMNS:
            value = F.when(is_rejected, parsed.getField(name)).otherwise(value)
        values.append(value.alias(name))
    values += [parsed.getField(c).alias(c) for c in REJECT_COLUMNS if c not in fields]
    expanded = F.when(dropped.isNotNull(), F.struct(*values))
    return output.withColumn("dropped", expanded).drop(parsed_col)


# ----------------------------------------------------------------------- local
def read_pandas(source: KafkaSource, timeout: float = 30.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(records, rejects)`` of the topic up to its end offsets now, with
    ``confluent-kafka``. ``records`` has the schema's columns and
    ``kafka_timestamp`` (the arrival time, ms); ``rejects`` :data:`REJECT_COLUMNS`."""
    raw = consume(source, timeout)
    return decode_pandas(raw, source)


def consume(source: KafkaSource, timeout: float = 30.0) -> pd.DataFrame:
    """The topic's records from ``starting_offsets`` to the end offsets at the call,
    as a frame (``kafka_topic, kafka_partition, kafka_offset, kafka_timestamp``
    (ms), ``kafka_key, kafka_value``), in (timestamp, partition, offset) order."""
    try:
        from confluent_kafka import Consumer, TopicPartition
    except ModuleNotFoundError as exc:  # pragma: no cover - the extra is missing
        raise ModuleNotFoundError(
            "the local runner reads Kafka with confluent-kafka: pip install 'headwater[kafka]'"
        ) from exc
    if source.starting_offsets not in ("earliest", "latest"):
        raise ValueError("the local runner's Kafka source takes starting_offsets earliest|latest")
    conf = {
        "bootstrap.servers": source.bootstrap_servers,
        "group.id": f"headwater-local-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    }
    consumer = Consumer(conf)
    try:
        meta = consumer.list_topics(source.topic, timeout=timeout).topics[source.topic]
        if meta.error is not None:
            raise ValueError(f"Kafka topic {source.topic!r}: {meta.error}")
        ends: dict[int, int] = {}
        assignment = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(source.topic, p), timeout=timeout
            )
            start = low if source.starting_offsets == "earliest" else high
            if high > start:
                ends[p] = high
                assignment.append(TopicPartition(source.topic, p, start))
        messages = []
        if assignment:
            consumer.assign(assignment)
            messages = _drain(consumer, source.topic, ends, timeout)
    finally:
        consumer.close()
    frame = pd.DataFrame(
        {
            "kafka_topic": [m.topic() for m in messages],
            "kafka_partition": pd.array([m.partition() for m in messages], dtype="int32"),
            "kafka_offset": pd.array([m.offset() for m in messages], dtype="int64"),
            "kafka_timestamp": pd.array([m.timestamp()[1] for m in messages], dtype="int64"),
            "kafka_key": [_text(m.key()) for m in messages],
            "kafka_value": [
                m.value() if source.avro_schema else _text(m.value()) for m in messages
            ],
        }
    )
    order = ["kafka_timestamp", "kafka_partition", "kafka_offset"]
    return frame.sort_values(order, kind="stable").reset_index(drop=True)


def _drain(consumer: Any, topic: str, ends: dict[int, int], timeout: float) -> list:
    """The assigned partitions' records below ``ends``: read until every position
    reaches its end offset (offsets may have gaps: transaction markers, compaction)."""
    from confluent_kafka import TopicPartition

    messages: list = []
    pending = set(ends)
    deadline = time.monotonic() + timeout
    while pending:
        batch = consumer.consume(num_messages=10_000, timeout=1.0)
        for m in batch:
            if m.error() is not None:
                raise ValueError(f"Kafka topic {topic!r}: {m.error()}")
        messages.extend(m for m in batch if m.offset() < ends[m.partition()])
        positions = consumer.position([TopicPartition(topic, p) for p in pending])
        left = {tp.partition for tp in positions if tp.offset < ends[tp.partition]}
        if batch or left != pending:
            deadline = time.monotonic() + timeout
        elif time.monotonic() > deadline:
            raise TimeoutError(f"Kafka topic {topic!r}: no progress in {timeout}s")
        pending = left
    return messages


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def decode_pandas(raw: pd.DataFrame, source: KafkaSource) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The decoding rules of :func:`decode_spark`: JSON in one DuckDB query."""
    import duckdb

    if source.avro_schema is not None:
        decoded = _decode_avro_pandas(raw, source)
    else:
        con = duckdb.connect()
        try:
            con.register("raw", raw)
            decoded = con.execute(_decode_sql(source)).df()
        finally:
            con.close()
    bad = decoded["reason"].notna()
    records = decoded.loc[~bad, [*source.schema, "kafka_timestamp"]]
    for name, kind in source.schema.items():
        if kind == "timestamp":
            records[name] = pd.to_datetime(records[name], utc=True)
    records["kafka_timestamp"] = pd.to_datetime(records["kafka_timestamp"], unit="ms", utc=True)
    rejects = decoded.loc[bad, list(REJECT_COLUMNS)]
    rejects["kafka_timestamp"] = pd.to_datetime(rejects["kafka_timestamp"], unit="ms", utc=True)
    return records.reset_index(drop=True), rejects.reset_index(drop=True)


def _decode_avro_pandas(raw: pd.DataFrame, source: KafkaSource) -> pd.DataFrame:
    """``raw`` with the typed columns, ``error`` and ``reason`` (Avro values)."""
    typed, error = decode_avro_pandas(raw["kafka_value"], source.schema, source.avro_schema)
    et = source.event_time
    not_avro = error.notna()
    event_null = ~not_avro & typed[et].isna()
    error = error.mask(event_null, f"{et}: null event time")
    reason = pd.Series(None, index=raw.index, dtype=object)
    reason[not_avro] = MALFORMED
    reason[event_null] = NULL_EVENT_TIME
    return pd.concat([raw, typed], axis=1).assign(error=error, reason=reason)


def _decode_sql(source: KafkaSource) -> str:
    """One DuckDB query: typed fields, ``error`` and ``reason`` per record."""

    def path(n: str) -> str:
        return "'$.\"" + n.replace('"', '\\"') + "\"'"

    typed, wrong = [], []
    for n, t in source.schema.items():
        duck, accepted = _TYPES[t][1], _TYPES[t][2]
        jt = f"json_type(j, {path(n)})"
        raw_text = f"json_extract_string(j, {path(n)})"
        present = f"({jt} IS NOT NULL AND {jt} <> 'NULL')"
        ok = "TRUE" if accepted is None else f"{jt} IN ({', '.join(repr(a) for a in accepted)})"
        if t == "timestamp":
            ok = f"{ok} AND TRY_CAST({raw_text} AS TIMESTAMPTZ) IS NOT NULL"
        value = raw_text if duck == "VARCHAR" else f"TRY_CAST({raw_text} AS {duck})"
        typed.append(f'CASE WHEN {present} AND {ok} THEN {value} END AS "{n}"')
        wrong.append(f"CASE WHEN {present} AND NOT ({ok}) THEN '{n}: not a {t}' END")
    et = source.event_time
    not_object = "(j IS NULL OR json_type(j) <> 'OBJECT')"
    wrong_types = f"concat_ws('; ', {', '.join(wrong)})"
    event_null = f"(json_type(j, {path(et)}) IS NULL OR json_type(j, {path(et)}) = 'NULL')"
    return f"""
        WITH parsed AS (
            SELECT *, CASE WHEN json_valid(kafka_value) THEN kafka_value::JSON END AS j FROM raw
        ), checked AS (
            SELECT *, {wrong_types} AS wrong FROM parsed
        )
        SELECT kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, kafka_key,
            kafka_value,
            {", ".join(typed)},
            CASE WHEN {not_object} THEN 'not a JSON object'
                 WHEN wrong <> '' THEN wrong
                 WHEN {event_null} THEN '{et}: null event time' END AS error,
            CASE WHEN {not_object} OR wrong <> '' THEN '{MALFORMED}'
                 WHEN {event_null} THEN '{NULL_EVENT_TIME}' END AS reason
        FROM checked
    """


__all__ = [
    "CONNECTOR_VERSION",
    "FORMATS",
    "KafkaSource",
    "REJECTED_COLUMN",
    "REJECT_COLUMNS",
    "SparkRejects",
    "avro_dir",
    "cached_spark_jars",
    "connector_dir",
    "consume",
    "decode_pandas",
    "decode_spark",
    "expand_rejects",
    "parse_schema",
    "read_pandas",
    "read_spark",
    "spark_jars",
]
