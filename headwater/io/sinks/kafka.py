"""Kafka out: a pipeline's panes, or a SQL query's changelog, as a topic.

Two forms (``mode``):

* ``"upsert"`` (Flink's ``upsert-kafka``): the message key is the result's key
  (a pipeline's key columns and window bounds), the value the row as JSON; a
  result withdrawn with no replacement (a retraction that is the key's last
  change in the batch) is a tombstone (a null value). Each batch writes one
  message per key it changed: its last row. Read as a table (last value per
  key, tombstones delete: :func:`read_upserts`) the topic is the result's
  current table view.
* ``"changelog"``: every change, in order per key, its value with ``op``:
  ``+I`` (a window's first pane), ``+U`` (a later one), ``-U`` (a retraction
  followed by its replacement in the batch), ``-D`` (a retraction with none).

The batch may be panes (``is_retraction``, ordered by ``pane_index``: pane *p*,
its retraction, pane *p + 1*) or a SQL query's changelog (``undo``, ordered by
``ver``; give its ``key=``). A Spark batch is written by Spark's Kafka writer,
a pandas or Arrow one (the local runner) by ``confluent-kafka``.

Delivery is at least once: a micro-batch replayed after a failure writes its
messages again, the same keys and values, so an upsert consumer ends with the
same table (docs/kafka.md).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

MODES = ("upsert", "changelog")
#: The JSON timestamp form on both writers (UTC, microseconds: a TIMESTAMP's own).
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


class KafkaSink:
    """A ``foreachBatch`` sink writing results to a Kafka topic (see the module doc)."""

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        *,
        mode: str = "upsert",
        key: Sequence[str] | None = None,
        options: dict[str, str] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"KafkaSink mode must be one of {MODES}, got {mode!r}")
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.mode = mode
        self.key = list(key) if key is not None else None
        self.options = dict(options or {})

    def __call__(self, batch: Any, batch_id: int) -> None:
        self.write(batch)

    def layout(self, columns: Sequence[str]) -> tuple[list[str], str, list[str]]:
        """``(key columns, retraction column, order columns)`` of a batch."""
        columns = list(columns)
        if "is_retraction" in columns:
            key = self.key or [*columns[: columns.index("window_start")], "window_start"]
            if self.key is None:
                key.append("window_end")
            return key, "is_retraction", ["pane_index"]
        if "undo" in columns:
            if self.key is None:
                raise ValueError(
                    "KafkaSink: a SQL changelog has no known key: pass key=[...] "
                    "(the columns that name one result row, e.g. window_start, window_end)"
                )
            return self.key, "undo", [c for c in ("ptime", "ver") if c in columns]
        raise ValueError(
            "KafkaSink takes panes (with is_retraction) or a SQL changelog (with undo); "
            f"got columns {columns}"
        )

    def write(self, batch: Any) -> None:
        """Write one batch (Spark, pandas or Arrow)."""
        if type(batch).__module__.startswith("pyspark."):
            self._write_spark(batch)
            return
        frame = batch.to_pandas() if isinstance(batch, pa.Table) else batch
        self._write_pandas(frame)

    # -- Spark ----------------------------------------------------------------
    def _write_spark(self, df: Any) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if "kind" in df.columns:
            df = df.where(F.col("kind") == "pane").drop("kind", "dropped")
        key, retraction, order = self.layout(df.columns)
        by_key = Window.partitionBy(*key)
        ordered = by_key.orderBy(*order, F.col(retraction).cast("int"))
        value_cols = [c for c in df.columns if c != retraction]
        json_opts = {"timestampFormat": TIMESTAMP_FORMAT}
        key_json = F.to_json(F.struct(*key), json_opts)
        df = df.withColumn("__seq", F.row_number().over(ordered))
        if self.mode == "upsert":
            last = df.withColumn("__last", F.max("__seq").over(by_key))
            out = last.where(F.col("__seq") == F.col("__last")).select(
                key_json.alias("key"),
                F.when(~F.col(retraction), F.to_json(F.struct(*value_cols), json_opts)).alias(
                    "value"
                ),
            )
        else:
            replaced = F.lead(F.col(retraction)).over(ordered) == F.lit(False)
            op = (
                F.when(F.col(retraction) & replaced, F.lit("-U"))
                .when(F.col(retraction), F.lit("-D"))
                .when(F.col(first_of(order)) == 0, F.lit("+I"))
                .otherwise(F.lit("+U"))
            )
            with_op = df.withColumn("op", op)
            out = (
                with_op.repartition(*key)
                .sortWithinPartitions(*key, "__seq")
                .select(
                    key_json.alias("key"),
                    F.to_json(F.struct(*value_cols, "op"), json_opts).alias("value"),
                )
            )
        writer = (
            out.write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap_servers)
            .option("topic", self.topic)
        )
        for k, v in self.options.items():
            writer = writer.option(k, v)
        writer.save()

    # -- pandas (the local runner) -------------------------------------------
    def _write_pandas(self, frame: pd.DataFrame) -> None:
        if "kind" in frame.columns:
            panes = frame[frame["kind"] == "pane"]
            frame = panes.drop(columns=["kind", "dropped"], errors="ignore")
        messages = self.messages(frame)
        produce(self.topic, self.bootstrap_servers, messages, self.options)

    def messages(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The batch's messages (``key``, ``value`` JSON text; a null value is a
        tombstone), in write order: the same rules as the Spark writer."""
        key, retraction, order = self.layout(frame.columns)
        frame = frame.reset_index(drop=True)
        retracted = frame[retraction].astype(bool)
        frame = frame.assign(__r=retracted.astype(int)).sort_values([*order, "__r"], kind="stable")
        groups = frame.groupby(key, sort=False, dropna=False)
        value_cols = [c for c in frame.columns if c not in (retraction, "__r")]
        if self.mode == "upsert":
            last = frame[groups.cumcount(ascending=False) == 0]
            values = _json_lines(last[value_cols])
            values = values.where(~last[retraction].astype(bool).to_numpy(), None)
            return pd.DataFrame({"key": _json_lines(last[key]).to_numpy(), "value": values})
        replaced = groups[retraction].shift(-1).eq(False).to_numpy()
        is_retraction = frame[retraction].astype(bool).to_numpy()
        first = frame[first_of(order)] == 0
        op = pd.Series("+U", index=frame.index)
        op[first.to_numpy()] = "+I"
        op[is_retraction] = "-D"
        op[is_retraction & replaced] = "-U"
        with_op = frame[value_cols].assign(op=op)
        return pd.DataFrame(
            {"key": _json_lines(frame[key]).to_numpy(), "value": _json_lines(with_op).to_numpy()}
        )


def first_of(order: Sequence[str]) -> str:
    """The column that is 0 on a result's first change: ``pane_index`` or ``ver``."""
    return "pane_index" if "pane_index" in order else "ver"


def _json_lines(frame: pd.DataFrame) -> pd.Series:
    """One JSON object per row (pandas' C writer; timestamps as ISO UTC, µs)."""
    frame = frame.copy()
    for c in frame.columns:
        col = frame[c]
        if pd.api.types.is_datetime64_any_dtype(col):
            utc = col.dt.tz_convert("UTC") if col.dt.tz is not None else col
            text = utc.dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
            frame[c] = text.where(col.notna(), None)
    if not len(frame):
        return pd.Series([], dtype=object)
    lines = frame.to_json(orient="records", lines=True, date_format="iso").splitlines()
    return pd.Series(lines, index=frame.index, dtype=object)


def produce(
    topic: str, bootstrap_servers: str, messages: pd.DataFrame, options: dict | None = None
) -> None:
    """Write ``messages`` (``key``, ``value``; null value: a tombstone) in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, **(options or {})})
    keys = messages["key"].tolist()
    values = messages["value"].tolist()
    for k, v in zip(keys, values, strict=True):
        producer.produce(topic, key=k.encode(), value=None if v is None else v.encode())
        producer.poll(0)
    left = producer.flush(30)
    if left:
        raise TimeoutError(f"Kafka topic {topic!r}: {left} messages not delivered in 30 s")


def read_upserts(topic: str, bootstrap_servers: str, timeout: float = 30.0) -> pd.DataFrame:
    """An upsert topic as a table: the last value per key, tombstones delete."""
    from headwater.io.kafka import KafkaSource, consume

    source = KafkaSource(topic, bootstrap_servers, {"__t": "bigint"}, "__t")
    raw = consume(source, timeout).sort_values(["kafka_partition", "kafka_offset"])
    last = raw.drop_duplicates("kafka_key", keep="last")
    live = last["kafka_value"].dropna()
    if not len(live):
        return pd.DataFrame()
    return pd.read_json(io.StringIO("\n".join(live)), lines=True, convert_dates=False)


__all__ = ["KafkaSink", "MODES", "first_of", "produce", "read_upserts"]
