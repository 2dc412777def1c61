"""The append-only path (headwater/sql/maintain/append.py): a query of selections,
projections and inner joins, each stream read once, has each step's changes
evaluated from the new rows' terms only. Its changelog and dead letters must be
those of evaluating and diffing every fired group's rows, on the fuzzer's random
out-of-order replays (late rows, NULL keys, window joins), and a query that is
not linear must keep the full evaluation."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from fuzz_grammar import joined, make_replay

from headwater.sql import sql
from headwater.sql.errors import SqlError
from headwater.sql.execute.local import compile_sql
from headwater.sql.maintain import groups
from headwater.sql.maintain.append import append_why_not

#: Joins of the fuzzer's streams, by hand: the path each must take.
APPEND = [
    "SELECT b.bid_id, b.price, a.id, a.reserve FROM Bid b JOIN Auction a "
    "ON b.auction = a.id WHERE a.category = 10",
    "SELECT b.bid_id, a.id, p.pid, p.city FROM Bid b JOIN Auction a ON b.auction = a.id "
    "JOIN Person p ON a.seller = p.pid",
    "SELECT b.bid_id, b.price * 0.0 AS zero, a.reserve / 2.0 AS half FROM Bid b "
    "JOIN Auction a ON b.auction = a.id",
]
FULL = {
    "SELECT b.bid_id, a.id FROM Bid b LEFT JOIN Auction a ON b.auction = a.id": "LEFT join",
    "SELECT b.auction, COUNT(*) AS n FROM Bid b JOIN Auction a ON b.auction = a.id "
    "GROUP BY b.auction": "GROUP BY",
    "SELECT b.bid_id, c.bid_id AS other FROM Bid b JOIN Bid c ON b.auction = c.auction": "2 times",
    "SELECT DISTINCT b.auction FROM Bid b JOIN Auction a ON b.auction = a.id": "DISTINCT",
    "SELECT a.bidder AS k FROM Bid a WHERE a.price > 14 UNION ALL "
    "SELECT b.pid AS k FROM Person b WHERE b.pid % 2 = 1": "UNION",
}


def _runs(text: str, replay, monkeypatch):
    """The run of ``text`` on the append path, if it takes it, and the run with the
    full evaluation; and whether it took the append path."""
    query = sql(text, tables=replay.tables)
    taken = compile_sql(query.plan, fast=False).maintainer.append is None
    fast = query.run(None)
    with monkeypatch.context() as patch:
        patch.setattr(groups, "append_why_not", lambda text, streams: "off")
        full = sql(text, tables=replay.tables).run(None)
    return fast, full, taken


def _same(fast, full) -> None:
    pd.testing.assert_frame_equal(fast.changelog, full.changelog)
    pd.testing.assert_frame_equal(fast.dead_letters, full.dead_letters)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_random_joins_give_the_full_evaluations_changelog(tmp_path, monkeypatch, seed):
    replay = make_replay(seed, tmp_path)
    taken = []
    for number in range(8):
        text = joined(random.Random(f"append-{seed}-{number}"))
        try:
            fast, full, took = _runs(text, replay, monkeypatch)
        except SqlError:
            continue  # refused by the planner: no run to compare
        assert len(fast.changelog) or len(full.changelog) == 0, text
        _same(fast, full)
        taken.append(took)
    assert any(taken), "no random join took the append-only path"


@pytest.mark.parametrize("text", APPEND)
def test_linear_joins_take_the_append_path_and_keep_the_changelog(tmp_path, monkeypatch, text):
    replay = make_replay(3, tmp_path)
    fast, full, taken = _runs(text, replay, monkeypatch)
    assert taken
    assert (~fast.changelog["undo"]).all()  # only inserts
    assert len(fast.changelog)
    _same(fast, full)
    assert "append-only" in sql(text, tables=replay.tables).explain()


@pytest.mark.parametrize("text", FULL)
def test_queries_that_are_not_linear_keep_the_full_evaluation(tmp_path, monkeypatch, text):
    replay = make_replay(3, tmp_path)
    query = sql(text, tables=replay.tables)
    maintainer = compile_sql(query.plan, fast=False).maintainer
    assert FULL[text] in maintainer.append
    assert "diffed against its last result because" in query.explain()
    fast, full, taken = _runs(text, replay, monkeypatch)
    assert not taken
    _same(fast, full)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("SELECT * FROM b JOIN a ON b.x = a.x", None),
        ("SELECT * FROM b, a WHERE b.x = a.x", None),
        ("SELECT x FROM b UNION ALL SELECT x FROM a", "UNION"),
        ("SELECT * FROM b RIGHT JOIN a ON b.x = a.x", "RIGHT join"),
        ("SELECT * FROM b WHERE b.x IN (SELECT x FROM a)", "IN subquery"),
        ("SELECT * FROM b WHERE EXISTS (SELECT 1 FROM a WHERE a.x = b.x)", "EXISTS"),
        ("SELECT (SELECT x FROM a LIMIT 1) AS m FROM b", "subquery expression"),
        ("SELECT *, ROW_NUMBER() OVER (ORDER BY x) FROM b, a", "window function"),
        ("SELECT random() AS r FROM b JOIN a ON b.x = a.x", "random"),
        ("SELECT my_udf(b.x) FROM b JOIN a ON b.x = a.x", "deterministic"),
        ("SELECT * FROM b JOIN a ON b.x = a.x LIMIT 3", "LIMIT"),
        ("WITH t AS (SELECT * FROM b) SELECT * FROM t JOIN a ON t.x = a.x", "WITH"),
    ],
)
def test_what_is_linear(text, why):
    found = append_why_not(text, ["b", "a"])
    assert found is None if why is None else why in found
