"""Kafka tables in SQL scripts, declared with Flink's connector options.

A source (a table with ``WATERMARK FOR``)::

    CREATE TABLE Bid (bidtime TIMESTAMP, price DOUBLE, item VARCHAR,
                      WATERMARK FOR bidtime AS bidtime - INTERVAL '5' SECOND)
      WITH ('connector' = 'kafka', 'topic' = 'bids',
            'properties.bootstrap.servers' = '127.0.0.1:59092',
            'scan.startup.mode' = 'earliest-offset', 'format' = 'json');

(``'format' = 'avro'`` with ``'avro.schema'``: Avro values, see
:mod:`headwater.io.kafka_avro`; the declared columns are fields of that record)

is the topic as it is when the script runs (read with ``confluent-kafka``,
decoded by the rules of :mod:`headwater.io.kafka`), a stream whose processing
times are the records' timestamps, on either runner. A record that does not
decode fails the script with its partition, offset and the reason (a SQL
query has no place for its raw value; ``hw.from_kafka`` routes it to the dead
letters instead). A sink (no ``WATERMARK FOR``) is ``'connector' =
'upsert-kafka'`` (the current result per key, tombstones for withdrawn rows)
or ``'kafka'`` (the changelog with ``op``); ``'key.fields'`` (``;``-separated,
as Flink) or the table's ``PRIMARY KEY (...) NOT ENFORCED`` names the columns of
the message key. Options other than those
listed in :data:`SOURCE_OPTIONS` / :data:`SINK_OPTIONS` are an error naming
the option.
"""

from __future__ import annotations

import pandas as pd

from headwater.io.kafka import KafkaSource, read_pandas
from headwater.io.sinks.kafka import KafkaSink
from headwater.model.time import to_millis
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql.errors import SqlError
from headwater.sql.parse.ddl import SourceDef
from headwater.sql.plan.catalog import PTIME, Table

CONNECTORS = ("kafka", "upsert-kafka")
SOURCE_OPTIONS = frozenset(
    {
        "connector",
        "topic",
        "properties.bootstrap.servers",
        "scan.startup.mode",
        "format",
        "avro.schema",
        "allowed_lateness",
        "state.ttl",
    }
)
SINK_OPTIONS = frozenset(
    {"connector", "topic", "properties.bootstrap.servers", "format", "key.fields"}
)
STARTUP_MODES = {"earliest-offset": "earliest", "latest-offset": "latest"}
#: SQL column types -> the Kafka decoder's.
_TYPES = {
    "VARCHAR": "string",
    "STRING": "string",
    "TEXT": "string",
    "BIGINT": "bigint",
    "INT": "int",
    "INTEGER": "int",
    "DOUBLE": "double",
    "FLOAT": "double",
    "BOOLEAN": "boolean",
    "TIMESTAMP": "timestamp",
}


def is_kafka(d: SourceDef) -> bool:
    return d.options.get("connector", "").lower() in CONNECTORS


def _checked(d: SourceDef, allowed: frozenset[str], what: str) -> dict[str, str]:
    """The options, each known, with the required ones present."""
    d.check_options(allowed, f"Kafka {what}")
    for required in ("topic", "properties.bootstrap.servers"):
        if required not in d.options:
            raise SqlError(f"Kafka {what} {d.name!r} has no {required!r}", d.line)
    fmt = d.options.get("format", "json").lower()
    formats = ("json", "avro") if "avro.schema" in allowed else ("json",)
    if fmt not in formats:
        raise SqlError(
            f"Kafka {what} {d.name!r}: format {fmt!r}",
            d.line,
            None,
            f"Use {' or '.join(repr(f) for f in formats)}",
        )
    if (fmt == "avro") != ("avro.schema" in d.options):
        raise SqlError(
            f"Kafka {what} {d.name!r}: 'format' = 'avro' takes 'avro.schema' and only it does",
            d.line,
            None,
            "Give the Avro record schema (JSON) of the values as 'avro.schema'",
        )
    return d.options


def kafka_source(d: SourceDef) -> Table:
    """The topic as a stream table (its records' timestamps as processing times)."""
    options = _checked(d, SOURCE_OPTIONS, "source")
    if options["connector"].lower() != "kafka" or d.event_time is None:
        raise SqlError(
            f"Kafka source {d.name!r} needs 'connector' = 'kafka' and WATERMARK FOR",
            d.line,
            None,
            "Declare WATERMARK FOR its event time; 'upsert-kafka' is a sink",
        )
    mode = options.get("scan.startup.mode", "earliest-offset").lower()
    if mode not in STARTUP_MODES:
        raise SqlError(
            f"Kafka source {d.name!r}: scan.startup.mode {mode!r}",
            d.line,
            None,
            f"Use {' or '.join(STARTUP_MODES)}",
        )
    schema = {}
    for column, sql_type in d.columns.items():
        base = sql_type.split("(")[0].upper()
        if base not in _TYPES:
            raise SqlError(f"Kafka source {d.name!r}: column {column!r} has type {sql_type}")
        schema[column] = _TYPES[base]
    try:
        source = KafkaSource(
            options["topic"],
            options["properties.bootstrap.servers"],
            schema,
            d.event_time,
            STARTUP_MODES[mode],
            format=options.get("format", "json").lower(),
            avro_schema=options.get("avro.schema"),
        )
    except ValueError as exc:
        raise SqlError(str(exc), d.line) from None
    records, rejects = read_pandas(source)
    if len(rejects):
        first = rejects.iloc[0]
        raise SqlError(
            f"Kafka source {d.name!r}: {len(rejects)} records of topic {source.topic!r} do "
            f"not decode (first: partition {first.kafka_partition}, offset "
            f"{first.kafka_offset}: {first.error})",
            d.line,
            None,
            "Fix or skip them, or read the topic with hw.from_kafka, which routes them "
            "to the dead letters",
        )
    frame = records.drop(columns="kafka_timestamp")
    for column, kind in schema.items():
        if kind == "timestamp":
            frame[column] = frame[column].dt.tz_convert("UTC").dt.tz_localize(None)
    epoch = pd.Timestamp(0, tz="UTC")
    frame[PTIME] = ((records["kafka_timestamp"] - epoch) // pd.Timedelta(milliseconds=1)).to_numpy()
    return Table(
        d.name,
        frame=frame,
        event_time=d.event_time,
        watermark=BoundedOutOfOrderness(d.watermark_delay_ms or 0),
        allowed_lateness=to_millis(options.get("allowed_lateness")),
        types=dict(d.columns),
    )


def kafka_sink(d: SourceDef) -> KafkaSink:
    """``'upsert-kafka'``: upserts and tombstones; ``'kafka'``: the changelog with ``op``."""
    options = _checked(d, SINK_OPTIONS, "sink")
    keys = d.key_fields()
    if not keys:
        raise SqlError(
            f"Kafka sink {d.name!r} has no 'key.fields' (nor PRIMARY KEY)",
            d.line,
            None,
            "Name the columns of one result row, e.g. 'key.fields' = 'window_start;window_end' "
            "or PRIMARY KEY (window_start, window_end) NOT ENFORCED",
        )
    mode = "upsert" if options["connector"].lower() == "upsert-kafka" else "changelog"
    return KafkaSink(options["topic"], options["properties.bootstrap.servers"], mode=mode, key=keys)


__all__ = ["CONNECTORS", "SINK_OPTIONS", "SOURCE_OPTIONS", "is_kafka", "kafka_sink", "kafka_source"]
