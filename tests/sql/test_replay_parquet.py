"""A replay in columns (``.parquet``: ``ptime``, ``row``, ``watermark``) is the same
recorded stream as its JSON lines: the same table (rows, their types and ptimes,
watermarks) read whole or record by record, the same query results, and its
faults named by record number."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_replay_columnar import assert_same

from headwater.nexmark import NexmarkConfig, generate
from headwater.nexmark.output import write
from headwater.sql import sql
from headwater.sql.execute.replay import ReplayError, read_columns, read_replay

#: The DDL's declared types of NEXMark's tables (tests/sql/nexmark/queries/ddl.sql).
TYPES = {
    "bid": {"dateTime": "TIMESTAMP(3)", "auction": "BIGINT", "price": "BIGINT"},
    "auction": {"dateTime": "TIMESTAMP(3)", "expires": "TIMESTAMP(3)"},
    "person": {"dateTime": "TIMESTAMP(3)"},
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("replays")
    events = generate(NexmarkConfig(events=4000, seed=5))
    write(events, out, ["replay", "replay-parquet"], 500, watermark_every_ms=700, step_ms=300)
    return out


@pytest.mark.parametrize("name", sorted(TYPES))
def test_a_parquet_replay_is_its_json_lines(written, name: str) -> None:
    text = written / f"{name}.jsonl"
    columns = written / f"{name}.replay.parquet"
    assert read_columns(columns, "dateTime", TYPES[name]) is not None  # read whole
    reference = read_replay(text, name, "dateTime", TYPES[name])
    assert len(reference.frame) and len(reference.watermarks)
    for vectorized in (True, False):
        got = read_replay(columns, name, "dateTime", TYPES[name], vectorized=vectorized)
        assert_same(got, reference)


def test_a_query_over_either_replay_gives_one_changelog(written) -> None:
    text = (
        "SELECT auction, COUNT(*) AS n, MAX(price) AS top FROM TABLE(TUMBLE(TABLE bid,"
        " DESCRIPTOR(dateTime), INTERVAL '2' SECOND)) GROUP BY auction, window_start, window_end"
    )
    logs = []
    for path in (written / "bid.jsonl", written / "bid.replay.parquet"):
        table = read_replay(path, "bid", "dateTime", TYPES["bid"])
        logs.append(sql(text, {"bid": table}).changelog())
    assert len(logs[0]) > 0
    pd.testing.assert_frame_equal(logs[0], logs[1])


def _replay(path, records: list[dict], row_type=None) -> None:
    row_type = row_type or pa.struct([("t", pa.int64()), ("k", pa.string())])
    table = pa.table(
        {
            "ptime": pa.array([r.get("ptime") for r in records], pa.int64()),
            "row": pa.array([r.get("row") for r in records], row_type),
            "watermark": pa.array([r.get("watermark") for r in records], pa.int64()),
        }
    )
    pq.write_table(table, path)


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([{"ptime": 2, "row": {"t": 1}}, {"ptime": 1, "row": {"t": 2}}], "record 2: ptime goes"),
        ([{"ptime": 1, "row": {"t": 1}, "watermark": 1}], "record 1: a line has either"),
        ([{"ptime": 1, "row": {"t": 1}}, {"ptime": None, "row": {"t": 2}}], "record 2: each"),
        ([{"ptime": 1}], "record 1: a line has either"),
    ],
)
def test_a_fault_is_named_by_its_record(tmp_path, records, message: str) -> None:
    path = tmp_path / "r.parquet"
    _replay(path, records)
    assert read_columns(path, "t", {}) is None  # the record reader names the fault
    with pytest.raises(ReplayError, match=message):
        read_replay(path, "R", "t")


def test_a_nested_value_is_read_record_by_record(tmp_path) -> None:
    """A struct in a row: not a flat column, so the record reader reads it, as the
    line reader reads a JSON object: into its JSON text (tests/bad_input/test_files.py)."""
    path = tmp_path / "r.parquet"
    row_type = pa.struct([("t", pa.int64()), ("m", pa.struct([("a", pa.int64())]))])
    _replay(path, [{"ptime": 1, "row": {"t": 5, "m": {"a": 1}}}], row_type)
    table = read_replay(path, "R", "t")
    assert table.frame["m"].tolist() == ['{"a":1}']
    assert json.loads(json.dumps(table.frame["t"].tolist())) == [5]


def test_a_file_that_is_not_parquet_names_itself(tmp_path) -> None:
    path = tmp_path / "r.parquet"
    path.write_text('{"ptime": 1, "row": {"t": 1}}\n')
    with pytest.raises(ReplayError, match="r.parquet: not a Parquet replay"):
        read_replay(path, "R", "t")
