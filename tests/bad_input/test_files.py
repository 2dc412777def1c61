"""Bad lines of source files: each is a dead letter with its raw line, file,
line number and reason (``malformed``), never a crash from inside a reader.

Sources: ``CREATE TABLE ... WITH ('format' = 'csv' | 'json', 'path' = ...)`` in a
script (read by the local runner; a file on the Spark runner is a bounded
table read the same way) and replay files (JSON lines). The good lines are the
query's input; good rows plus dead letters account for every line.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import headwater as hw
from headwater.sql.cli import main
from headwater.sql.errors import SqlError
from headwater.sql.execute.replay import read_replay
from headwater.sql.script import run_script

pytestmark = pytest.mark.spark

CSV = """k,ts,n
a,2026-01-01T12:00:00,1
a,2026-01-01T12:00:05,2,surplus
b,2026-01-01T12:00:10,five
b,not a time,4
a,2026-01-01T12:00:20,5
b,,6
"""

JSON = """{"k": "a", "ts": "2026-01-01T12:00:00", "n": 1}
{"k": "a", "ts": "2026-01-01T12:00:05", "n": 2
{"k": "b", "ts": "2026-01-01T12:00:10", "n": "five"}
[1, 2, 3]

{"k": "a", "ts": "2026-01-01T12:00:20", "n": 5}
{"k": "b", "ts": null, "n": 6}
"""

SCRIPT = """
CREATE TABLE t (k VARCHAR, ts TIMESTAMP, n BIGINT,
                WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH ('format' = '{fmt}', 'path' = '{path}');
SELECT k, COUNT(*) AS c, SUM(n) AS total FROM t GROUP BY k;
"""


def letters_of(text: str, path, runner: str):
    """(result, dead letters) of the script's query."""
    got = []

    def sink(name):
        return lambda batch, i: got.append(batch)

    results = list(run_script(text, runner=runner, dead_letters=sink))
    letters = pd.concat(got, ignore_index=True) if got else pd.DataFrame()
    return results[0], letters


def malformed(letters: pd.DataFrame) -> list[tuple]:
    bad = letters[letters["reason"] == "malformed"]
    return sorted(zip(bad["source_line"].astype(int), bad["raw_record"], strict=True))


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_a_csv_source_dead_letters_its_malformed_lines(spark, tmp_path, runner):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    result, letters = letters_of(SCRIPT.format(fmt="csv", path=path), path, runner)
    lines = CSV.splitlines()
    assert malformed(letters) == [(3, lines[2]), (4, lines[3]), (5, lines[4])]
    bad = letters[letters["reason"] == "malformed"]
    assert set(bad["source_file"]) == {str(path)}
    assert bad["error"].str.contains("fields|five|not a time").all()
    # the line of no event time is a row: a null_event_time dead letter with its values
    nulls = letters[letters["reason"] == "null_event_time"]
    assert nulls[["k", "n"]].values.tolist() == [["b", 6]]
    assert int(result["c"].sum()) + len(letters) == len(lines) - 1
    assert sorted(zip(result["k"], result["total"].astype(int), strict=True)) == [("a", 6)]


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_a_json_source_dead_letters_its_malformed_lines(spark, tmp_path, runner):
    path = tmp_path / "t.jsonl"
    path.write_text(JSON)
    result, letters = letters_of(SCRIPT.format(fmt="json", path=path), path, runner)
    lines = JSON.splitlines()
    assert malformed(letters) == [(2, lines[1]), (3, lines[2]), (4, lines[3])]
    records = [line for line in lines if line.strip()]
    assert int(result["c"].sum()) + len(letters) == len(records)


def test_a_good_csv_source_has_no_dead_letters(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("k,ts,n\na,2026-01-01T12:00:00,1\n")
    result, letters = letters_of(SCRIPT.format(fmt="csv", path=path), path, "local")
    assert result["c"].tolist() == [1] and letters.empty


def test_a_csv_source_without_a_header_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n")
    with pytest.raises(SqlError, match=r"t\.csv, line 1: .*header"):
        letters_of(SCRIPT.format(fmt="csv", path=path), path, "local")


def test_a_csv_record_over_several_lines_is_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('k,ts,n\n"a\nb",2026-01-01T12:00:00,1\nc,2026-01-01T12:00:00,x\n')
    result, letters = letters_of(SCRIPT.format(fmt="csv", path=path), path, "local")
    assert result["k"].tolist() == ["a\nb"]
    bad = letters[letters["reason"] == "malformed"]
    assert bad["raw_record"].str.contains("x").all() and len(bad) == 1


REPLAY = """{"ptime": "2026-01-01T12:00:00", "row": {"k": "a", "ts": 1000, "n": 1}}
{"ptime": "2026-01-01T12:00:01", "row": {"k": "a", "ts": 2000, "n": "five"}}
{"ptime": "2026-01-01T12:00:02", "row": {"k": "b", "ts": 3000, "n": 3}}
{"ptime": "2026-01-01T12:00:03", "watermark": 120000}
"""

REPLAY_QUERY = """
SELECT k, wstart, COUNT(*) AS c, SUM(n) AS total
FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '1' MINUTE)
GROUP BY k, wstart, wend EMIT STREAM
"""


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_a_replay_value_of_the_wrong_type_is_a_dead_letter(spark, tmp_path, runner):
    path = tmp_path / "t.jsonl"
    path.write_text(REPLAY)
    table = read_replay(path, "t", "ts")
    q = hw.sql(REPLAY_QUERY, {"t": table}, runner=runner)
    log, letters = q.changelog(), q.dead_letters()
    assert malformed(letters) == [(2, REPLAY.splitlines()[1])]
    assert "'five' is not BIGINT" in letters["error"].iloc[0]
    assert int(log.loc[~log["undo"], "c"].sum()) + len(letters) == 3
    assert sorted(zip(log["k"], log["total"].astype(int), strict=True)) == [("a", 1), ("b", 3)]


def test_a_replay_event_time_that_is_not_a_time_is_a_dead_letter(tmp_path):
    path = tmp_path / "t.jsonl"
    text = REPLAY.replace('"n": "five"', '"n": 2').replace('"ts": 1000', '"ts": "soon"')
    path.write_text(text.replace('"ts": 2000', '"ts": "2026-01-01T00:00:02"'))
    table = read_replay(path, "t", "ts")
    assert table.frame["n"].tolist() == [2, 3]
    assert table.rejects["source_line"].tolist() == [1]
    assert "'soon' is not TIMESTAMP" in table.rejects["error"].iloc[0]


def test_the_cli_counts_malformed_lines_and_writes_them(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(REPLAY)
    out = tmp_path / "dead.csv"
    code = main(
        [REPLAY_QUERY, "--replay", f"t={path}", "--event-time", "t.ts", "--dead-letters", str(out)]
    )
    assert code == 0
    assert "1 input rows dropped (malformed: 1)" in capsys.readouterr().err
    written = pd.read_csv(out)
    assert written["raw_record"].tolist() == [REPLAY.splitlines()[1]]
    assert written["source_line"].tolist() == [2]


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_the_cli_prints_the_dead_letters_of_a_bounded_query(spark, tmp_path, capsys, runner):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    script = tmp_path / "q.sql"
    script.write_text(SCRIPT.format(fmt="csv", path=path))
    assert main(["-f", str(script), "--runner", runner]) == 0
    err = capsys.readouterr().err
    assert "4 input rows dropped (malformed: 3, null_event_time: 1)" in err


# ------------------------------------------------------------------ Spark file streams

STREAM_SCRIPT = """
CREATE TABLE t (k VARCHAR, ts TIMESTAMP, n BIGINT,
                WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH ('format' = '{fmt}', 'path' = '{path}');
CREATE TABLE out (k VARCHAR, wstart TIMESTAMP, c BIGINT)
  WITH ('format' = 'changelog', 'path' = '{out}');
INSERT INTO out
SELECT {select}
FROM Tumble(data => TABLE(t), timecol => DESCRIPTOR(ts), dur => INTERVAL '1' MINUTE)
{group}
EMIT STREAM;
"""
#: A windowed aggregate (the fast path) and a raw projection (the general path).
SHAPES = {
    "fast": ("k, wstart, COUNT(*) AS c", "GROUP BY k, wstart, wend"),
    "general": ("k, wstart, n AS c", ""),
}


@pytest.mark.parametrize("path", ["fast", "general"])
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_spark_file_stream_dead_letters_its_malformed_lines(spark, tmp_path, fmt, path):
    source = tmp_path / "in"
    source.mkdir()
    text = CSV if fmt == "csv" else JSON
    (source / f"t.{fmt}").write_text(text)
    select, group = SHAPES[path]
    script = STREAM_SCRIPT.format(
        fmt=fmt, path=source, out=tmp_path / "out", select=select, group=group
    )
    got = []
    list(
        run_script(
            script,
            runner="spark",
            dead_letters=lambda name: lambda b, i: got.append(b.toPandas()),
            checkpoint=str(tmp_path / "checkpoint"),
            spark=spark,
        )
    )
    letters = pd.concat(got, ignore_index=True)
    bad = letters[letters["reason"] == "malformed"]
    lines = [line for line in text.splitlines() if line.strip()]
    expected = lines[2:5] if fmt == "csv" else lines[1:4]
    assert sorted(bad["raw_record"]) == sorted(expected)
    assert bad["source_file"].str.endswith(f"t.{fmt}").all()
    nulls = letters[letters["reason"] == "null_event_time"]
    assert [(k, int(n)) for k, n in zip(nulls["k"], nulls["n"], strict=True)] == [("b", 6)]
    log = pd.read_parquet(tmp_path / "out")
    total = len(log) if path == "general" else int(log["c"].sum())
    assert total + len(letters) == len(lines) - (fmt == "csv")


NESTED = """{"ptime": "2026-01-01T12:00:00", "row": {"k": "a", "ts": 1000, "v": {"a": 1, "b": [2]}}}
{"ptime": "2026-01-01T12:00:01", "row": {"k": "b", "ts": 2000, "v": [1, {"a": 2}]}}
{"ptime": "2026-01-01T12:00:02", "row": {"k": "a", "ts": 3000, "v": 7}}
{"ptime": "2026-01-01T12:00:03", "row": {"k": "c", "ts": 4000, "v": null}}
{"ptime": "2026-01-01T12:00:04", "watermark": 120000}
"""


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_a_nested_replay_value_is_its_json_text(spark, tmp_path, runner):
    """An object or list in a row (any mix of shapes in one column) is its compact
    JSON text, and a number among them its text, as Flink's and Spark's JSON
    formats read them into a STRING column: the column groups as text and
    JSON_VALUE reads into it, streamed or bounded."""
    path = tmp_path / "t.jsonl"
    path.write_text(NESTED)
    text = "SELECT k, v, JSON_VALUE(v, '$.a') AS a, COUNT(*) AS c FROM t GROUP BY k, v EMIT STREAM"
    q = hw.sql(text, {"t": read_replay(path, "t", "ts")}, runner=runner)
    got = q.changelog()
    assert q.dead_letters().empty
    rows = sorted(zip(got["k"], got["v"].fillna("-"), got["a"].fillna("-"), got["c"], strict=True))
    expected = [
        ("a", '{"a":1,"b":[2]}', "1", 1),
        ("a", "7", "-", 1),
        ("b", '[1,{"a":2}]', "-", 1),
        ("c", "-", "-", 1),
    ]
    assert rows == sorted(expected)
    bounded = hw.sql(text.replace(" EMIT STREAM", ""), {"t": read_replay(path, "t", "ts")})
    assert sorted(bounded.to_pandas()["v"].fillna("-")) == sorted(r[1] for r in expected)


#: Text in a JSON column: an object (whose "s" is JSON text itself), text that is not
#: JSON, an object cut short, an object whose "s" is not JSON, a string and an array.
NOT_JSON = [
    {"a": 1, "s": '{"b": 2}'},
    "not json",
    '{"a": 2',
    {"s": "plain"},
    {"a": "x"},
    {"a": [1]},
]


@pytest.mark.parametrize("runner", ["local", "spark"])
def test_json_value_reads_as_flinks(spark, tmp_path, runner):
    """JSON_VALUE of malformed text, or of an array, is NULL (Flink's NULL ON ERROR
    and NULL ON EMPTY), and of a string its characters, streamed on both runners
    and bounded, in a select item, a group key and a nested call. Malformed text
    used to fail the query (DuckDB's "Malformed JSON"; on Spark, the stream), and
    a string came back quoted."""
    path = tmp_path / "t.jsonl"
    lines = [
        {"ptime": f"2026-01-01T12:00:0{i}", "row": {"k": k, "ts": 1000 * i, "v": json.dumps(v)}}
        for i, (k, v) in enumerate(zip("abcdef", NOT_JSON, strict=True))
    ]
    lines[1]["row"]["v"] = lines[1]["row"]["v"].strip('"')  # "not json", unquoted
    lines[2]["row"]["v"] = NOT_JSON[2]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    a, ab = "JSON_VALUE(v, '$.a')", "JSON_VALUE(JSON_VALUE(v, '$.s'), '$.b')"
    texts = {
        "rows": f"SELECT k, {a} AS a, {ab} AS b FROM t EMIT STREAM",
        "groups": f"SELECT {a} AS a, COUNT(*) AS c FROM t GROUP BY {a} EMIT STREAM",
    }
    want = {
        "rows": [("a", "1", "2"), *((k, "-", "-") for k in "bcdf"), ("e", "x", "-")],
        "groups": [("1", 1), ("x", 1), ("-", 4)],
    }
    for name, text in texts.items():
        for bounded in (False, True):
            q = hw.sql(
                text.replace(" EMIT STREAM", "") if bounded else text,
                {"t": read_replay(path, "t", "ts")},
                runner=runner,
            )
            got = q.to_pandas() if bounded else q.run().table(None)  # its table view at the end
            got = got[[c for c in got.columns if c in ("k", "a", "b", "c")]].astype(object)
            rows = sorted(tuple("-" if pd.isna(v) else v for v in r) for r in got.values)
            assert rows == sorted(want[name]), (name, bounded)


def test_a_nested_value_in_a_source_file_is_text_or_a_dead_letter(tmp_path):
    """A JSON source's nested value is its JSON text in a STRING column, and a
    malformed line (the whole line kept) in a column declared a number."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"k": "a", "ts": "2026-01-01T12:00:00", "n": 1, "v": {"x": [1]}}\n'
        '{"k": "b", "ts": "2026-01-01T12:00:01", "n": {"x": 2}, "v": [true]}\n'
    )
    script = (
        "CREATE TABLE t (k VARCHAR, ts TIMESTAMP, n BIGINT, v STRING) "
        f"WITH ('format' = 'json', 'path' = '{path}');\nSELECT k, n, v FROM t;\n"
    )
    result, letters = letters_of(script, path, "local")
    assert result.values.tolist() == [["a", 1, '{"x":[1]}']]
    assert malformed(letters) == [(2, path.read_text().splitlines()[1])]
    assert "'{\"x\":2}' is not BIGINT" in letters["error"].iloc[0]


@pytest.mark.parametrize("declared", ["ARRAY<INT>", "DATE", "BIGNT", "INTERVAL"])
def test_a_type_no_source_reads_is_refused_at_its_table(tmp_path, declared):
    """A declared type without a reader (a typo, an ARRAY) used to pass the values
    through unread: it is refused at the table's line, with the types that read."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"k": "a", "ts": "2026-01-01T12:00:00", "v": [1]}\n')
    script = (
        f"CREATE TABLE t (k VARCHAR, ts TIMESTAMP,\n  v {declared}) "
        f"WITH ('format' = 'json', 'path' = '{path}');\nSELECT k, v FROM t;\n"
    )
    with pytest.raises(SqlError, match=r"line 1: table 't': column 'v' is declared .*VARCHAR"):
        letters_of(script, path, "local")
    replay = tmp_path / "t.replay.jsonl"
    replay.write_text(NESTED)
    with pytest.raises(SqlError, match=rf"t\.replay\.jsonl: column 'v' is declared '{declared}'"):
        read_replay(replay, "t", "ts", types={"v": declared})


def test_a_declared_column_no_record_has_is_null(tmp_path):
    """As Flink reads a missing field: NULL of the declared type in each row."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"k": "a", "ts": "2026-01-01T12:00:00"}\n')
    script = (
        "CREATE TABLE t (k VARCHAR, ts TIMESTAMP, n BIGINT) "
        f"WITH ('format' = 'json', 'path' = '{path}');\nSELECT k, n, n + 1 AS m FROM t;\n"
    )
    result, letters = letters_of(script, path, "local")
    assert result["k"].tolist() == ["a"] and result[["n", "m"]].isna().all().all()
    table = read_replay(_written(tmp_path, NESTED), "t", "ts", types={"z": "DOUBLE"})
    assert table.frame["z"].isna().all() and table.frame["z"].dtype == "float64"


def _written(tmp_path, text: str):
    path = tmp_path / "r.jsonl"
    path.write_text(text)
    return path
