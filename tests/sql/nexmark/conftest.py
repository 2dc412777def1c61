"""Prints which NEXMark queries ran and why the others were refused; puts
tests/sql (its helpers) on the import path as for the tests there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_terminal_summary(terminalreporter):
    module = sys.modules.get("test_nexmark_queries")
    status = getattr(module, "STATUS", None)
    if not status:
        return
    terminalreporter.section("NEXMark queries on headwater (local runner)")
    for name in sorted(status, key=lambda n: int(n[1:])):
        terminalreporter.write_line(f"{name:>4}: {status[name]}")
    equal = sum(s.endswith("equal to the bounded query in DuckDB") for s in status.values())
    differ = sum("DIFFERS" in s for s in status.values())
    refused = sum(s.startswith("refused") for s in status.values())
    terminalreporter.write_line(
        f"of {len(status)}: {equal} ran and equal the bounded query, {differ} ran and differ, "
        f"{refused} refused"
    )
