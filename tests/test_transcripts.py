"""Every conformance transcript (Beam's suite and ours) on the local runner."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from headwater.testing.transcripts import Document, TranscriptError, local_runner, run_document

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "tests" / "transcripts").glob("*.yaml")) + sorted(
    (ROOT.parent / "shared" / "peer-tests").glob("*.yaml")
)


def _documents():
    for path in FILES:
        with open(path) as fh:
            for i, doc in enumerate(d for d in yaml.safe_load_all(fh) if d):
                yield pytest.param(doc, id=f"{path.stem}::{i}:{doc.get('name')}")


@pytest.mark.parametrize("doc", list(_documents()))
def test_transcript_local(doc):
    if "local" in (doc.get("broken_on") or []):
        pytest.skip("broken on the local runner")
    if doc.get("error"):
        with pytest.raises((TranscriptError, ValueError), match=re.compile(doc["error"])):
            run_document(Document.parse(doc), local_runner)
    else:
        run_document(Document.parse(doc), local_runner)


def test_transcript_suite_is_present():
    names = {p.name for p in FILES}
    assert "beam_trigger_transcripts.yaml" in names or not (ROOT.parent / "shared").exists()
