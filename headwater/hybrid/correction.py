"""The batch module of the hybrid model: an archive of raw tuples, and corrections.

Every raw tuple is archived as it arrives (:class:`Archive`: Parquet, one
directory per event-time bucket, so a time range reads few files). The stream
module's dead letters are the register of extremely late tuples; when they
span more than Gamma in event time
(:func:`headwater.model.correction.correction_points`), the
:class:`Corrector` recomputes every affected window exactly from the archive
with the query's bounded plan and applies the result: the changelog gets a
retraction of the window's current row plus the new value, and the
current-results table is upserted (docs/hybrid.md, "Corrections").

The recomputation is pluggable (:data:`Recompute`): :func:`recompute_locally`
runs the local runner's ``run_frame``; ``headwater.hybrid.sparkrun.SparkRecompute``
the bounded Spark plan (``compile_bounded``) over the same Parquet files. A
correction at processing time ``t`` reads the tuples archived with a batch time
at or before ``t`` (those that had arrived), so it does not matter how far
ahead of the stream the archive is.

Restart safety: correction ``k`` first writes a manifest (the affected windows,
the archive files it reads, the time ``t``, the rows it retracts, the late
tuples it consumes); the changelog batch and the table's upsert carry the batch
id ``2k + 1`` (both idempotent per batch id); the new rows are kept with the
manifest; the checkpoint moves to ``k + 1`` last. A correction interrupted
anywhere is redone from its manifest with the same result, and one already
applied is skipped (:func:`applied_corrections` reads them back).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from headwater.hybrid.pipeline import BATCH_TIME, Query
from headwater.io.sinks import ChangelogSink, CurrentResultsSink
from headwater.model.schema import PANE_COLUMNS
from headwater.runners.local import run_frame


def stream_batch_id(chunk: int) -> int:
    """The sink batch id of the stream's panes of chunk ``chunk`` (corrections: odd ids)."""
    return 2 * chunk


def correction_batch_id(correction: int) -> int:
    return 2 * correction + 1


class Archive:
    """Raw tuples in Parquet under ``<path>/bucket=<event time // bucket_ms>/``."""

    def __init__(self, path: str | os.PathLike, query: Query, bucket_ms: int = 10_000) -> None:
        self.path, self.query, self.bucket_ms = Path(path), query, bucket_ms

    def append(self, rows: pd.DataFrame, chunk: int) -> None:
        """Archive the tuples that arrived in ``chunk`` (rewriting it is idempotent)."""
        buckets = rows[self.query.event_time].to_numpy() // self.bucket_ms
        for bucket in np.unique(buckets):
            target = self.path / f"bucket={bucket}" / f"chunk-{chunk:08d}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            part = pa.Table.from_pandas(rows[buckets == bucket], preserve_index=False)
            pq.write_table(part, f"{target}.tmp")
            os.replace(f"{target}.tmp", target)

    def files(self, lo: int, hi: int) -> list[str]:
        """The files that may hold event times in ``[lo, hi)``."""
        out = []
        for bucket in range(lo // self.bucket_ms, (hi - 1) // self.bucket_ms + 1):
            folder = self.path / f"bucket={bucket}"
            if folder.is_dir():
                out += sorted(str(f) for f in folder.glob("chunk-*.parquet"))
        return out

    def read(self, files: list[str], lo: int, hi: int, until: int | None = None) -> pd.DataFrame:
        """The archived tuples of ``files`` with event times in ``[lo, hi)`` (and a batch
        time at or before ``until``, when given)."""
        return read_archive(files, self.query, lo, hi, until)


def read_archive(
    files: list[str], query: Query, lo: int, hi: int, until: int | None = None
) -> pd.DataFrame:
    """See :meth:`Archive.read`."""
    et = query.event_time
    if not files:
        return pd.DataFrame()
    frame = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
    keep = (frame[et] >= lo) & (frame[et] < hi)
    if until is not None:
        keep &= frame[BATCH_TIME] <= until
    return frame[keep]


@dataclass(frozen=True)
class Correction:
    """What correction ``number`` changed: the new rows (one per window whose value moved)."""

    number: int
    rows: pd.DataFrame


@dataclass(frozen=True)
class Affected:
    """What a correction recomputes: the (key, window) rows of ``windows`` from the
    archive's ``files``, event times in ``[lo, hi)``, tuples arrived by ``until``."""

    windows: pd.DataFrame
    files: list[str]
    lo: int
    hi: int
    until: int | None


#: ``f(affected, query) -> panes``: the exact panes of (at least) the affected windows,
#: the query's bounded plan over the archived tuples (key, window, output, metadata).
Recompute = Callable[[Affected, Query], pd.DataFrame]


def recompute_locally(affected: Affected, query: Query) -> pd.DataFrame:
    """The bounded plan on the local runner (``run_frame``) over the archive's tuples."""
    rows = read_archive(affected.files, query, affected.lo, affected.hi, affected.until)
    if not len(rows):
        return pd.DataFrame(columns=[*affected.windows.columns, query.output, "timestamp"])
    rows = rows[rows[query.key].isin(affected.windows[query.key].unique())]
    return run_frame(rows, query.plan(rows, None)).panes


class Corrector:
    """Applies corrections to a changelog and a current-results table; its checkpoint
    and manifests live under ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike,
        query: Query,
        archive: Archive,
        results: CurrentResultsSink,
        changelog: ChangelogSink,
        recompute: Recompute = recompute_locally,
    ) -> None:
        self.dir, self.query, self.archive = Path(directory), query, archive
        self.results, self.changelog, self.recompute = results, changelog, recompute
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def next_correction(self) -> int:
        """The first correction not yet applied completely (the checkpoint)."""
        path = self.dir / "checkpoint.json"
        return json.loads(path.read_text())["next_correction"] if path.exists() else 0

    def correct(
        self, number: int, late: pd.DataFrame, until: int | None = None
    ) -> Correction | None:
        """Correction ``number`` at processing time ``until`` for the dead letters ``late``
        (key, window, event time); ``None`` if it was applied already."""
        if number < self.next_correction:
            return None
        affected, previous = self._manifest(number, late, until)
        fresh = self._recompute(affected)
        rows = _changed(fresh, previous, self.query)
        rows.to_parquet(self.dir / f"correction={number}" / "rows.parquet")
        batch = correction_batch_id(number)
        self.changelog(_changelog_rows(rows, previous, self.query), batch)
        self.results.write(rows, batch)
        _write_json(self.dir / "checkpoint.json", {"next_correction": number + 1})
        return Correction(number, rows)

    def _manifest(self, number: int, late: pd.DataFrame, until: int | None):
        folder = self.dir / f"correction={number}"
        done = folder / "files.json"
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            keys = [self.query.key, "window_start", "window_end"]
            windows = late[keys].drop_duplicates().reset_index(drop=True)
            lo, hi = int(windows.window_start.min()), int(windows.window_end.max())
            current = self.results.read()
            previous = current.merge(windows, on=keys) if len(current) else current
            windows.to_parquet(folder / "windows.parquet")
            previous.to_parquet(folder / "previous.parquet")
            late.reset_index(drop=True).to_parquet(folder / "late.parquet")
            spec = {"files": self.archive.files(lo, hi), "range": [lo, hi], "until": until}
            _write_json(done, spec)
        spec = json.loads(done.read_text())
        windows = pd.read_parquet(folder / "windows.parquet")
        previous = pd.read_parquet(folder / "previous.parquet")
        lo, hi = spec["range"]
        return Affected(windows, spec["files"], lo, hi, spec.get("until")), previous

    def _recompute(self, affected: Affected) -> pd.DataFrame:
        """The exact panes of the affected windows from the archive: the query's bounded
        plan (:attr:`recompute`)."""
        panes = self.recompute(affected, self.query)
        windows = affected.windows
        return panes.merge(windows, on=list(windows.columns)) if len(panes) else panes


def applied_corrections(
    directory: str | os.PathLike,
) -> list[tuple[int, int, pd.DataFrame, pd.DataFrame]]:
    """The corrections applied under ``directory`` (a :class:`Corrector`'s), in order:
    ``(number, time, new rows, late tuples)``."""
    folder = Path(directory)
    path = folder / "checkpoint.json"
    last = json.loads(path.read_text())["next_correction"] if path.exists() else 0
    out = []
    for entry in sorted(folder.glob("correction=*"), key=lambda f: int(f.name.split("=")[1])):
        number = int(entry.name.split("=")[1])
        if number < last and (entry / "rows.parquet").exists():
            spec = json.loads((entry / "files.json").read_text())
            rows = pd.read_parquet(entry / "rows.parquet")
            out.append((number, spec["until"], rows, pd.read_parquet(entry / "late.parquet")))
    return out


def _changed(fresh: pd.DataFrame, previous: pd.DataFrame, q: Query) -> pd.DataFrame:
    """New pane rows for the windows whose recomputed value differs from the current one."""
    keys = [q.key, "window_start", "window_end"]
    cols = [*keys, q.output, "timestamp"]
    if len(previous):
        old = previous[[*keys, q.output, "pane_index"]].rename(columns={q.output: "__old"})
        merged = fresh[cols].merge(old, on=keys, how="left")
    else:
        merged = fresh[cols].assign(__old=np.nan, pane_index=np.nan)
    merged = merged[merged[q.output] != merged["__old"]]
    first = merged["pane_index"].isna().to_numpy()
    index = np.where(first, 1, merged["pane_index"].fillna(0).to_numpy() + 1).astype(np.int64)
    out = merged[cols].reset_index(drop=True)
    out["pane_index"] = index
    out["nonspeculative_index"] = index
    out["timing"] = "LATE"
    out["is_first"] = first
    out["is_last"] = True
    out["is_retraction"] = False
    return out[[*cols, *PANE_COLUMNS[1:]]]


def _changelog_rows(rows: pd.DataFrame, previous: pd.DataFrame, q: Query) -> pd.DataFrame:
    """A retraction of each replaced row (its stored metadata repeated), then the new rows."""
    keys = [q.key, "window_start", "window_end"]
    if not len(previous) or not len(rows):
        return rows
    withdrawn = previous.merge(rows[keys], on=keys)[[*keys, q.output, *PANE_COLUMNS[:-1]]]
    withdrawn = withdrawn.assign(is_retraction=True)
    return pd.concat([withdrawn, rows], ignore_index=True).astype(rows.dtypes.to_dict())


def _write_json(path: Path, value: dict) -> None:
    """Write ``value`` atomically (a reader sees the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
