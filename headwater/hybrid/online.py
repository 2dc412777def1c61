"""HPM's batch module fed online: a streaming query's micro-batches as they come.

:class:`OnlineCorrections` takes each micro-batch of the stream module's output
(panes and dead letters, each with the processing ``time`` of its step) and
feeds the :class:`~headwater.hybrid.hpm.BatchModule` in processing-time order,
as :func:`~headwater.hybrid.hpm.apply_corrections` does after the fact: the
registered late tuples (dead letters) accumulate until they span more than
Gamma in event time, and the batch module corrects them at that point's
processing time; at the end of the input (the watermarks at the end of time)
whatever is still registered is corrected. So the corrections are the same
however the stream is cut into micro-batches.

Restart safety (a micro-batch runs again after a failure, with the same rows):
its progress (the last micro-batch applied, the next chunk number, the late
tuples registered and not yet corrected) is written atomically after the
micro-batch, so a re-run starts from the progress of the micro-batch before;
chunk numbers, hence sink batch ids, come out the same, the changelog and the
results table skip or overwrite what they applied already, and the corrector
redoes an interrupted correction from its manifest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwater.hybrid.hpm import AppliedCorrection, BatchModule, in_chunk
from headwater.model.correction import correction_points


@dataclass(frozen=True)
class Progress:
    """Where the online batch module stands after micro-batch ``batch``."""

    batch: int
    chunk: int  # the next chunk number
    pending: pd.DataFrame  # registered late tuples not corrected yet (with ``time``)


class OnlineCorrections:
    """Feeds a :class:`BatchModule` with a stream run's micro-batches (Gamma in ms);
    its progress lives under ``<module directory>/online``."""

    def __init__(self, module: BatchModule, gamma: int) -> None:
        self.module, self.gamma = module, gamma
        self.dir = module.dir / "online"
        self.dir.mkdir(parents=True, exist_ok=True)

    def feed(
        self, batch_id: int, panes: pd.DataFrame, dead: pd.DataFrame, end: int | None
    ) -> list[AppliedCorrection]:
        """Micro-batch ``batch_id``: its panes and dead letters (with ``time``); ``end``:
        the processing time the input ended at, if it ended in this micro-batch."""
        progress = self.progress()
        if batch_id <= progress.batch:
            return []  # applied completely before a restart
        dead = dead.sort_values("time", kind="stable")
        register = pd.concat([progress.pending, dead]) if len(progress.pending) else dead
        register = register.reset_index(drop=True)
        times, event_times = register["time"].to_numpy(), register["event_time"].to_numpy()
        ends = correction_points(times, event_times, self.gamma)
        ends += [end] if end is not None else []
        chunk, lo, applied = progress.chunk, np.iinfo(np.int64).min, []
        for hi in ends:
            late = register[in_chunk(register["time"], lo, hi)]
            done = self.module.apply(chunk, panes[in_chunk(panes["time"], lo, hi)], late, hi)
            applied += [done] if done is not None else []
            chunk, lo = chunk + 1, hi
        rest = panes[panes["time"] > lo]
        if len(rest):
            self.module.apply(chunk, rest, register.iloc[:0], None)
            chunk += 1
        pending = register[register["time"] > lo] if end is None else register.iloc[:0]
        self._save(Progress(batch_id, chunk, pending))
        return applied

    def progress(self) -> Progress:
        path = self.dir / "progress.json"
        if not path.exists():
            return Progress(-1, 0, pd.DataFrame())
        spec = json.loads(path.read_text())
        pending = pd.read_parquet(self.dir / spec["pending"])
        return Progress(spec["batch"], spec["chunk"], pending)

    def _save(self, progress: Progress) -> None:
        """The pending tuples first (a file of their own), then the progress, atomically."""
        name = f"pending-{progress.batch}.parquet"
        progress.pending.reset_index(drop=True).to_parquet(self.dir / name)
        tmp = self.dir / "progress.tmp"
        spec = {"batch": progress.batch, "chunk": progress.chunk, "pending": name}
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, self.dir / "progress.json")
        for old in self.dir.glob("pending-*.parquet"):
            if old.name != name:
                old.unlink(missing_ok=True)
