"""Avro record values of a Kafka topic: the declared schema's columns, decoded.

A value is one record in Avro's binary encoding, written with the declared
writer schema and nothing around it (no schema-registry framing, no container
file). Decoding maps Avro types to the Kafka source's (``string``, ``long`` ->
``bigint``, ``int``, ``float``/``double`` -> ``double``, ``boolean``, ``long``
with logical type ``timestamp-millis``/``timestamp-micros`` -> ``timestamp``;
``["null", T]`` as ``T``, nullable). A value that does not decode (truncated,
not Avro of that schema, a null value) has the error :data:`NOT_AVRO` on both
runners; :mod:`headwater.io.kafka` turns it into a dead letter.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pandas as pd

NOT_AVRO = "not an Avro record of the declared schema"

_PRIMITIVES = {
    "string": "string",
    "long": "bigint",
    "int": "int",
    "float": "double",
    "double": "double",
    "boolean": "boolean",
}
_TIME_UNITS = {"timestamp-millis": "ms", "timestamp-micros": "us"}
#: The sync marker of the in-memory container the local decoder reads.
_SYNC = b"headwater-avro!!"
#: The field Spark's reader schema adds (its default marks a decoded value).
_DECODED = "__headwater_decoded"


def _record(avro_schema: str) -> dict[str, Any]:
    try:
        parsed = json.loads(avro_schema)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"avro_schema is not a JSON Avro schema: {exc}") from None
    if (
        not isinstance(parsed, dict)
        or parsed.get("type") != "record"
        or not isinstance(parsed.get("fields"), list)
    ):
        raise ValueError(
            'avro_schema must be an Avro record schema ({"type": "record", "fields": [...]})'
        )
    return parsed


def _column_type(avro_type: Any) -> str | None:
    """The source's type of one Avro field type; None when it has none."""
    if isinstance(avro_type, list):
        rest = [t for t in avro_type if t != "null"]
        return _column_type(rest[0]) if len(rest) == 1 and len(avro_type) == 2 else None
    if isinstance(avro_type, dict):
        logical, inner = avro_type.get("logicalType"), avro_type.get("type")
        if logical is not None:  # others (date, decimal, local-timestamp-*): none
            return "timestamp" if inner == "long" and logical in _TIME_UNITS else None
        return _PRIMITIVES.get(inner) if isinstance(inner, str) else None
    return _PRIMITIVES.get(avro_type)


def avro_columns(avro_schema: str) -> dict[str, str | None]:
    """``{field: source type}`` of an Avro record schema (None: a type the source
    cannot read, e.g. a map; fine as long as no column is declared for it)."""
    return {f["name"]: _column_type(f["type"]) for f in _record(avro_schema)["fields"]}


def all_columns(avro_schema: str) -> dict[str, str]:
    """Every field of the Avro record as a column (the default schema)."""
    fields = avro_columns(avro_schema)
    for name, kind in fields.items():
        if kind is None:
            raise ValueError(
                f"avro_schema: field {name!r} has a type the Kafka source cannot read; "
                "pass schema= naming only the columns to read"
            )
    return {n: t for n, t in fields.items() if t is not None}


def check_columns(topic: str, schema: dict[str, str], avro_schema: str) -> None:
    """Every declared column is a field of the Avro record, of the same type; the
    schema is valid Avro (checked by fastavro where it is installed)."""
    try:
        import fastavro
    except ModuleNotFoundError:  # pragma: no cover - Spark alone: from_avro checks it
        fastavro = None
    if fastavro is not None:
        try:
            fastavro.parse_schema(_record(avro_schema))
        except Exception as exc:  # noqa: BLE001 - fastavro's schema errors vary
            raise ValueError(f"Kafka source {topic!r}: avro_schema is not valid: {exc}") from None
    fields = avro_columns(avro_schema)
    for name, kind in schema.items():
        found = fields.get(name, "missing")
        same = {found, kind} <= {"bigint", "long"} or {found, kind} <= {"int", "integer"}
        if found != kind and not same:
            raise ValueError(
                f"Kafka source {topic!r}: column {name!r} {kind} is "
                + (
                    "not a field of avro_schema"
                    if found == "missing"
                    else f"Avro type {found or 'unsupported'}"
                )
            )


def _time_units(avro_schema: str) -> dict[str, str]:
    """``{field: 'ms' | 'us'}`` of the timestamp fields."""
    out = {}
    for f in _record(avro_schema)["fields"]:
        t = f["type"]
        t = next((x for x in t if x != "null"), None) if isinstance(t, list) else t
        if isinstance(t, dict) and t.get("logicalType") in _TIME_UNITS:
            out[f["name"]] = _TIME_UNITS[t["logicalType"]]
    return out


def _without_logical_types(node: Any) -> Any:
    """The schema with no logical types: the same binary encoding, read as plain
    numbers (timestamps become epoch ms/us, converted column-wise after)."""
    if isinstance(node, dict):
        return {k: _without_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_without_logical_types(v) for v in node]
    return node


def _varint(n: int) -> bytes:
    """Avro's zig-zag varint of a non-negative ``n``."""
    n, out = n << 1, bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Chained(io.RawIOBase):
    """The container's header, then its blocks from one value on: read without
    copying the blocks (a failed value restarts the pass right after it)."""

    def __init__(self, header: bytes, body: memoryview) -> None:
        self.parts = [memoryview(header), body]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self.parts and not len(self.parts[0]):
            self.parts.pop(0)
        if not self.parts:
            return 0
        n = min(len(buffer), len(self.parts[0]))
        buffer[:n] = self.parts[0][:n]
        self.parts[0] = self.parts[0][n:]
        return n


def _decode_all(values: list[bytes], parsed: Any) -> tuple[list[dict], list[int]]:
    """Decode ``values`` in fastavro's compiled loop: each value one block of an
    in-memory container file (its size framed, so no value can shift the next).
    A value that fails ends the pass: it is recorded, the pass resumes after it.
    Returns (records in order of the good values, indexes of the bad ones)."""
    import fastavro

    head = io.BytesIO()
    fastavro.writer(head, parsed, [], sync_marker=_SYNC)
    header = head.getvalue()
    blocks = [b"\x02" + _varint(len(v)) + v + _SYNC for v in values]
    body = memoryview(b"".join(blocks))
    ends = np.cumsum([len(b) for b in blocks])
    records: list[dict] = []
    bad: list[int] = []
    start = 0
    while start < len(values):
        done = 0
        offset = int(ends[start - 1]) if start else 0
        try:
            for rec in fastavro.reader(io.BufferedReader(_Chained(header, body[offset:]))):
                records.append(rec)
                done += 1
        except Exception:  # noqa: BLE001 - any failure is this value's: a dead letter
            bad.append(start + done)
            done += 1
        start += done
    return records, bad


def decode_avro_pandas(
    values: pd.Series, schema: dict[str, str], avro_schema: str
) -> tuple[pd.DataFrame, pd.Series]:
    """``(typed columns, error)`` of raw values (bytes or None), index-aligned."""
    import fastavro

    parsed = fastavro.parse_schema(_without_logical_types(_record(avro_schema)))
    present = values.notna().to_numpy()
    given = values[present]
    records, bad = _decode_all(list(given), parsed)
    good = given.index.delete(bad)
    decoded = pd.DataFrame.from_records(records, columns=list(schema), index=good)
    for name, unit in _time_units(avro_schema).items():
        if name in decoded:
            decoded[name] = pd.to_datetime(decoded[name], unit=unit, utc=True)
    typed = decoded.reindex(values.index)
    error = pd.Series(NOT_AVRO, index=values.index, dtype=object)
    error[good] = None
    return typed, error


def decode_avro_spark(
    raw: Any, schema: dict[str, str], spark_types: dict[str, str], avro_schema: str
) -> tuple[Any, list, Any]:
    """``(raw with an __avro struct, typed columns, error)`` over the binary
    ``kafka_value``, with ``from_avro`` in PERMISSIVE mode. A value that does not
    decode gives a struct of nulls there, not a null; so the reader schema is the
    writer's plus a field with a default (Avro schema resolution): null only then."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    reader = _record(avro_schema)
    marker = {"name": _DECODED, "type": "boolean", "default": True}
    reader = {**reader, "fields": [*reader["fields"], marker]}
    options = {"mode": "PERMISSIVE", "avroSchema": json.dumps(reader)}
    struct = from_avro(F.col("kafka_value"), avro_schema, options)
    out = raw.withColumn("__avro", struct)
    typed = [F.col(f"__avro.`{n}`").cast(spark_types[n]).alias(n) for n in schema]
    error = F.when(F.col(f"__avro.{_DECODED}").isNull(), F.lit(NOT_AVRO))
    return out, typed, error


__all__ = [
    "NOT_AVRO",
    "all_columns",
    "avro_columns",
    "check_columns",
    "decode_avro_pandas",
    "decode_avro_spark",
]
