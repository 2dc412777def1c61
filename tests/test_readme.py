"""The README's examples run as written (in order, sharing one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    text = README.read_text()
    start = text.index("## The model: What / Where / When / How")
    end = text.index("## Conformance transcripts")
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


@pytest.mark.spark
def test_readme_model_examples_run(spark):
    blocks = _blocks()
    assert len(blocks) >= 6
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102


@pytest.mark.spark
@pytest.mark.kafka
def test_readme_kafka_section_runs(spark, capsys, kafka_bootstrap):
    """The Kafka section against the broker of HEADWATER_TEST_KAFKA (scripts/kafka.sh)."""
    text = README.read_text()
    start = text.index("## Kafka in and out")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
    table = namespace["read_upserts"](namespace["results"], namespace["bootstrap"])
    got = sorted(zip(table["team"], table["window_start"], table["total"], strict=True))
    assert got == [  # the run ends its input: the last window closes too
        ("blue", "2026-01-01T09:00:00.000000Z", 4),
        ("red", "2026-01-01T09:00:00.000000Z", 3),
        ("red", "2026-01-01T09:01:00.000000Z", 1),
    ]
    lake = namespace["DeltaTable"](namespace["lake"]).to_pandas()
    rows = sorted(zip(lake["team"], lake["window_start"].astype(str), lake["total"], strict=True))
    assert rows == [
        ("blue", "2026-01-01 09:00:00", 4),
        ("red", "2026-01-01 09:00:00", 3),
        ("red", "2026-01-01 09:01:00", 1),
    ]
    letters = namespace["local"].dead_letters()
    assert letters["kafka_value"].tolist() == ["not json"]
    out = capsys.readouterr().out
    assert "not json" in out
