"""The local runner's step driver for SQL: a recorded stream replayed step by
step through the model's reducer, each step's panes through a maintainer to the
changelog. Both SQL paths (general and fast) run on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headwater.model.reducer import Reducer
from headwater.model.schema import DropReason
from headwater.model.steps import Bundle, MicroBatch, apply_step
from headwater.model.time import MIN_TIMESTAMP
from headwater.sql.plan.catalog import PTIME

Letters = Callable[[pd.DataFrame], pd.DataFrame]
#: The reason of a row whose event time is NULL.
NULL_EVENT_TIME = DropReason.NULL_EVENT_TIME.value


@dataclass(frozen=True)
class StepInput:
    """The replayed rows (with :data:`PTIME`) and the names of their event-time
    and key columns and of the columns the aggregations read."""

    rows: pd.DataFrame
    event_time: str
    key: str
    values: Sequence[str]


@dataclass(frozen=True)
class DeadLetterForms:
    """How the path turns rows into its dead letters: rows whose event time is
    NULL, and the rows the reducer dropped (the model's dropped frame)."""

    null_event_time: Letters
    dropped: Letters


def replay(
    data: StepInput,
    steps: tuple[np.ndarray, np.ndarray],
    reducer: Reducer,
    maintainer: Any,
    letters: DeadLetterForms,
    as_of: int | None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The changelog and the dead letters of the run up to ``as_of``. ``steps``:
    the processing times and the watermark after each."""
    ptimes, marks = steps
    rows = data.rows
    state = maintainer.restore(None)
    null = np.isnan(rows[data.event_time].to_numpy(np.float64))
    arrived = rows[PTIME].to_numpy(np.int64) <= (as_of if as_of is not None else np.inf)
    dead = [letters.null_event_time(rows[null & arrived])]
    valid = rows[~null].sort_values(PTIME, kind="stable")
    arrival = valid[PTIME].to_numpy(np.int64)
    begin = np.searchsorted(arrival, ptimes, side="left")
    end = np.searchsorted(arrival, ptimes, side="right")
    values = list(data.values)
    changes = []
    previous = MIN_TIMESTAMP
    for i, ptime in enumerate(ptimes):  # a step each: the model's processing time
        part = valid.iloc[begin[i] : end[i]]
        bundle = None
        if len(part):
            ts = part[data.event_time].to_numpy(np.float64).astype(np.int64)
            bundle = Bundle(part[data.key].to_numpy(), ts, part[values].reset_index(drop=True))
        wm = int(marks[i]) if marks[i] > previous else None
        previous = max(previous, int(marks[i]))
        emission = apply_step(reducer, MicroBatch(bundle, watermark=wm, now=int(ptime)))
        if len(emission.dropped):
            dead.append(letters.dropped(emission.dropped))
        changes.append(maintainer.apply(emission.panes, int(ptime), state))
        # every step: a group is forgotten at the step its window settles
        maintainer.expire(state, reducer.settled())
    full = [c for c in changes if len(c)]
    changelog = (
        pd.concat(full, ignore_index=True)
        if full
        else maintainer.apply(pd.DataFrame(), 0, maintainer.restore(None))
    )
    full_dead = [d for d in dead if len(d)]
    return changelog, pd.concat(full_dead, ignore_index=True) if full_dead else dead[0]
