"""The seconds the interpreter's cycle collector takes while a block runs, read
from ``gc.callbacks`` (added for the block, removed after): a state of many
tracked containers makes every full collection walk all of them, a cost no
profile of headwater's own functions names."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class CollectorTime:
    """What the collector took: seconds and collections, by generation."""

    seconds: float = 0.0
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    _began: float = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._began
        self.collections[info["generation"]] += 1


@contextmanager
def collector_time() -> Iterator[CollectorTime]:
    """Time the cycle collector in this process while the block runs."""
    timed = CollectorTime()
    gc.callbacks.append(timed)
    try:
        yield timed
    finally:
        gc.callbacks.remove(timed)
