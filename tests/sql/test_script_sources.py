"""A script reads only the tables its queries read: ``CREATE TABLE`` declares a
source, and the first statement that reads it reads it (as a Flink script's DDL
reads nothing until a query runs). A table no query reads is never opened, so a
NEXMark query over bids does not pay for reading people and auctions; a table
that is read and cannot be, fails that statement with the table's path."""

from __future__ import annotations

import json

import pytest

from headwater.sql.execute import sources
from headwater.sql.script import run_script

DDL = (
    "CREATE TABLE bid (auction BIGINT, price BIGINT, `dateTime` TIMESTAMP(3),"
    " WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND)"
    " WITH ('format' = 'replay', 'path' = '{bids}');\n"
    "CREATE TABLE person (id BIGINT, `dateTime` TIMESTAMP(3),"
    " WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND)"
    " WITH ('format' = 'replay', 'path' = '{people}');\n"
)


@pytest.fixture
def bids(tmp_path):
    path = tmp_path / "bid.jsonl"
    rows = [
        {"ptime": "2024-01-01T00:00:01", "row": {"auction": a, "price": p, "dateTime": t}}
        for a, p, t in [(1, 10, "2024-01-01T00:00:00"), (2, 20, "2024-01-01T00:00:00.5")]
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_table_no_query_reads_is_not_read(tmp_path, bids, monkeypatch):
    read = []
    local_source = sources.local_source
    monkeypatch.setattr(
        "headwater.sql.script.local_source", lambda d: read.append(d.name) or local_source(d)
    )
    people = tmp_path / "missing.jsonl"  # never written: reading it would fail
    text = DDL.format(bids=bids, people=people)
    text += "SELECT auction, price FROM bid; SELECT price FROM bid b WHERE b.price > 10;"
    first, second = list(run_script(text))
    assert sorted(first["auction"]) == [1, 2] and list(second["price"]) == [20]
    assert read == ["bid"]  # once, for both queries


def test_a_table_that_cannot_be_read_fails_the_query_that_reads_it(tmp_path, bids):
    people = tmp_path / "missing.jsonl"
    text = DDL.format(bids=bids, people=people)
    text += "SELECT auction FROM bid; SELECT price FROM bid; SELECT id FROM person;"
    results = run_script(text)
    assert len(next(results)) == 2 and len(next(results)) == 2
    with pytest.raises(Exception, match="missing.jsonl"):
        next(results)
