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
