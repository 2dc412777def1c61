"""NEXMark: the auction benchmark's event generator and its outputs (docs/nexmark.md).

``generate(NexmarkConfig(events=N, seed=S))`` makes the three tables ``person``,
``auction`` and ``bid`` (the Flink NEXMark views' columns) in arrival order;
:mod:`headwater.nexmark.output` writes them as Parquet files, replay files or CSV.
This package builds on the model and io layers only; the CLI and bench use it.
"""

from __future__ import annotations

from headwater.nexmark.config import NexmarkConfig
from headwater.nexmark.generator import TABLES, NexmarkEvents, generate

__all__ = ["TABLES", "NexmarkConfig", "NexmarkEvents", "generate"]
