"""Helpers of the tests that run a query on a live Spark stream and compare it
with the local runner: a sink keeping each micro-batch's changelog, the steps of
a changelog as comparable rows, and the table a changelog leaves."""

from __future__ import annotations

import pandas as pd
from sql_helpers import rows

#: The changelog's columns that are no query column.
CHANGE_COLUMNS = ("undo", "ptime", "ver")


class Recorder:
    """A sink keeping each batch id's changelog (a batch run again replaces its
    own, as an idempotent sink does) and every call."""

    def __init__(self) -> None:
        self.batches: dict[int, pd.DataFrame] = {}
        self.calls: list[tuple[int, pd.DataFrame]] = []

    def __call__(self, batch, batch_id: int) -> None:
        frame = batch if isinstance(batch, pd.DataFrame) else batch.toPandas()
        self.batches[batch_id] = frame
        self.calls.append((batch_id, frame))

    def log(self) -> pd.DataFrame:
        return pd.concat([self.batches[b] for b in sorted(self.batches)], ignore_index=True)

    def steps(self) -> list[list[tuple]]:
        """Each micro-batch's changelog that is not empty, in batch order (as
        :func:`step_rows`): the runner's steps, whose clocks differ from a replay's."""
        found = [step_rows(self.batches[b]) for b in sorted(self.batches)]
        return [s for s in found if s]


def step_rows(part: pd.DataFrame) -> list[tuple]:
    """One step's changelog, without its processing time and the group columns
    (``__g*``) of a query in stages, as sorted comparable rows."""
    part = part.drop(columns=["ptime", *[c for c in part if c.startswith("__g")]])
    return sorted(rows(part), key=repr)


def local_steps(log: pd.DataFrame) -> list[list[tuple]]:
    """The local runner's changelog step by step (as :func:`step_rows`), the rows
    of the query's start (a ptime before the first arrival) in the first step, as
    a live stream emits them in its first micro-batch."""
    times = sorted(log["ptime"].unique())
    first = [t for t in times if t > 0][0]
    log = log.assign(ptime=log["ptime"].where(log["ptime"] >= first, first))
    return [step_rows(part) for _, part in log.groupby("ptime", sort=True)]


def final_rows(log: pd.DataFrame) -> list[tuple]:
    """The table a changelog leaves (its rows added less withdrawn, without the
    group columns ``__g*`` of a query in stages), sorted."""
    columns = [c for c in log.columns if c not in CHANGE_COLUMNS and not c.startswith("__g")]
    sign = log["undo"].map(lambda u: -1 if u else 1)
    counted = log[columns].astype(object).where(log[columns].notna(), None).assign(__n=sign)
    total = counted.groupby(columns, dropna=False, sort=False)["__n"].sum()
    assert (total >= 0).all(), "a row withdrawn that was never added"
    kept = total[total > 0]
    table = kept.index.repeat(kept.to_numpy()).to_frame(index=False)
    return sorted(rows(table), key=repr)
