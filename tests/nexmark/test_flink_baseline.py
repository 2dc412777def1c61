"""The Flink baseline's query text and entries, without Flink (no JVM needed)."""

from __future__ import annotations

from pathlib import Path

from headwater.bench.baselines.flink_nexmark import flink_text, statements
from headwater.bench.baselines.nexmark_flink import entry
from headwater.bench.nexmark import progress

QUERIES = Path(__file__).parents[1] / "sql" / "nexmark" / "queries"


def _text(name: str, sink: Path | None, parquet: bool) -> str:
    ddl = (QUERIES / "ddl.sql").read_text()
    return flink_text(ddl, (QUERIES / f"{name}.sql").read_text(), Path("/d"), sink, parquet)


def test_the_timed_text_reads_parquet_with_the_watermark_into_the_blackhole():
    text = _text("q5", None, parquet=True)
    tables = {s.split()[2]: s for s in statements(text) if s.upper().startswith("CREATE TABLE")}
    for name in ("person", "auction", "bid"):
        source = tables[name]
        assert f"'format' = 'parquet', 'path' = '/d/{name}'" in source, name
        assert "WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND" in source
    assert "WITH ('connector' = 'blackhole')" in tables["nexmark_q5"]
    code = ";".join(statements(text))  # the comments name ${DATA} and replay files
    assert "${" not in code and "'table'" not in code and "replay" not in code


def test_the_check_text_writes_csv_and_reads_csv_without_the_jar():
    text = _text("q5", Path("/out/q5"), parquet=False)
    assert "'format' = 'csv', 'path' = '/d/bid.csv'" in text
    assert "'connector' = 'filesystem', 'format' = 'csv', 'path' = '/out/q5'" in text
    assert "blackhole" not in text and "parquet" not in text


def test_a_failed_check_keeps_the_timing_and_says_why(tmp_path):
    """A streaming run that ran but whose batch check failed is no silent 0 rows."""
    line = {"status": "ran", "mode": "streaming", "source": "parquet", "seconds": 2.0}
    failed = {**line, "check": "failed", "check_reason": "TableException: boom"}
    r = entry(failed, 1000, tmp_path / "q1", None)
    assert r["events_per_s_per_core"] == 250 and r["rows"] is None
    assert r["check"] == "failed" and "boom" in progress("q1", {"flink": r})
    assert "streaming mode, not checked (TableException: boom)" in progress("q1", {"flink": r})
    assert "rows not counted in 2.00s" in progress("q1", {"flink": r})
    assert "None rows" not in progress("q1", {"flink": r})
    assert entry({"status": "failed", "reason": "x"}, 1000, tmp_path, None)["reason"] == "x"


def test_a_checked_run_counts_the_batch_rows(tmp_path):
    check = tmp_path / "q1"
    check.mkdir()
    (check / "part-0").write_text("1,2\n3,4\n")
    line = {"status": "ran", "mode": "streaming", "source": "csv", "seconds": 1.0, "check": "ran"}
    r = entry(line, 10, check, None)
    assert (r["rows"], r["check"], r["mode"], r["source"]) == (2, "batch", "streaming", "csv")
    assert "matches_headwater" not in r
