"""A recorded stream's watermark after each step of a run, from its rows: the
one place a source's watermark strategy meets its data."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from headwater.model.slack import SlackStrategy, slack_trace
from headwater.model.time import MIN_TIMESTAMP
from headwater.model.watermarks import BoundedOutOfOrderness
from headwater.sql.execute.hybrid import quality_driven
from headwater.sql.plan.catalog import PTIME, Table, event_millis
from headwater.sql.plan.quality import QualityQuery


def watermark_after_steps(table: Table, ptimes: np.ndarray) -> np.ndarray:
    """The table's watermark after each step (processing times ``ptimes``, sorted):
    a K-slack strategy's, its replay's watermark events, or the largest event
    time so far minus the declared delay."""
    if isinstance(table.watermark, QualityQuery):
        table = replace(table, watermark=quality_driven(table))
    if isinstance(table.watermark, SlackStrategy) and table.frame is not None:
        return _slack_after_steps(table, ptimes)
    out = np.full(len(ptimes), MIN_TIMESTAMP, dtype=np.int64)
    if table.watermarks is not None and len(table.watermarks):
        wm = table.watermarks.sort_values("ptime", kind="stable")
        idx = np.searchsorted(wm["ptime"].to_numpy(np.int64), ptimes, side="right") - 1
        marks = np.maximum.accumulate(wm["watermark"].to_numpy(np.int64))
        out = np.where(idx >= 0, marks[np.maximum(idx, 0)], MIN_TIMESTAMP)
        return out
    if isinstance(table.watermark, BoundedOutOfOrderness) and table.frame is not None:
        et = event_millis(table.frame[table.event_time])
        arrival = table.frame[PTIME].to_numpy(np.int64)
        order = np.argsort(arrival, kind="stable")
        seen = np.maximum.accumulate(np.where(np.isnan(et[order]), -np.inf, et[order]))
        idx = np.searchsorted(arrival[order], ptimes, side="right") - 1
        top = np.where(idx >= 0, seen[np.maximum(idx, 0)], -np.inf)
        valid = np.isfinite(top)
        out[valid] = top[valid].astype(np.int64) - table.watermark.delay
    return out


def _slack_after_steps(table: Table, ptimes: np.ndarray) -> np.ndarray:
    """A K-slack watermark: the stream is one shard, each processing time a batch of
    its rows in arrival order (as the local runner replays a frame); a step without
    rows of this table keeps the watermark of the last one that had some."""
    et = event_millis(table.frame[table.event_time])
    arrival = table.frame[PTIME].to_numpy(np.int64)
    order = np.argsort(arrival, kind="stable")
    order = order[~np.isnan(et[order])]  # a NULL event time is a dead letter
    times, starts = np.unique(arrival[order], return_index=True)
    batches = np.split(np.arange(len(order)), starts[1:])
    marks = slack_trace(table.watermark, et[order].astype(np.int64), batches).watermarks
    idx = np.searchsorted(times, ptimes, side="right") - 1
    return np.where(idx >= 0, marks[np.maximum(idx, 0)], MIN_TIMESTAMP)
