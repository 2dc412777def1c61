"""Pane transforms: a front end's own output, made from the panes of each step.

A runner executes a plan step by step and emits panes. A front end whose
output is not the panes themselves (SQL: the changelog of a query's result,
recomputed per fired event-time group) gives the runner a
:class:`PaneTransform`; the runner calls it after every step, in the same
place as the step (inside each shard of the Spark streaming runner), and keeps
its state next to the reducer's.
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd

from headwater.model.schema import Field


class PaneTransform(Protocol):
    """Turns a step's panes into output rows, with state of its own."""

    def output_fields(self) -> tuple[Field, ...]:
        """The columns (and logical types) of the rows :meth:`apply` returns."""
        ...

    def restore(self, blob: bytes | None) -> Any:
        """The state from its snapshot (``None``: a new state)."""
        ...

    def apply(self, panes: pd.DataFrame, now: int, state: Any) -> pd.DataFrame:
        """The output of one step's ``panes`` at processing time ``now`` (may update
        ``state``)."""
        ...

    def snapshot(self, state: Any) -> bytes:
        """The state as bytes, for a runner's state store."""
        ...

    # Optional: ``expire(state, horizon)``. A runner calls it after ``apply`` with
    # the reducer's ``settled()`` horizon, so that the transform can forget what
    # belongs to windows ending at or before it: the reducer collected them and no
    # live window contains them, so no pane (not even a merge's retraction) names
    # them again.
    #
    # Optional: ``forget(state, keys, now)`` and ``forget_versions(state, keys)``. A
    # runner with a state time-to-live calls ``forget`` before a step's ``apply``
    # with the keys whose state expired then (it returns the rows withdrawing their
    # results), and ``forget_versions`` after it with those not started again.
