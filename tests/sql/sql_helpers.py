"""Helpers of the SQL tests: replay files, results as comparable rows, and Spark
runs batched so that the suite's streaming queries share their cost.

A Spark streaming run of a replay costs a second or two per micro-batch (one per
replay step). :func:`spark_runs` starts a whole batch of them at once on the
session's two cores, with one shuffle partition: one state store per micro-batch
instead of four, half the cost. (Results do not depend on how groups are spread
over shards; test_paper's command-line run of EMIT STREAM keeps the session's
four partitions to show it.)
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

MINUTE = 60_000


# ------------------------------------------------------------------ replays


def iso_time(day: str, clock: str) -> str:
    """``2024-01-01``, ``10:03`` or ``10:03:30`` -> an ISO timestamp."""
    return f"{day}T{clock}:00" if clock.count(":") == 1 else f"{day}T{clock}"


def write_replay(path, day: str, steps: Iterable[tuple], time_column: str, columns) -> str:
    """A replay file of ``steps``: ``(ptime, rows, watermark)`` with clock times on
    ``day``; each row a tuple of ``columns`` whose first value is the event time
    (``None``: NULL); ``watermark`` None for none. Returns the path."""
    lines = []
    for ptime, rows, watermark in steps:
        at = iso_time(day, ptime)
        for row in rows:
            values = dict(zip(columns, row, strict=True))
            t = values[time_column]
            values[time_column] = None if t is None else iso_time(day, t)
            lines.append({"ptime": at, "row": values})
        if watermark is not None:
            lines.append({"ptime": at, "watermark": iso_time(day, watermark)})
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(line) + "\n" for line in lines)
    return str(path)


def millis(day: str, clock: str) -> int:
    return int(pd.Timestamp(iso_time(day, clock)).value // 1_000_000)


# ------------------------------------------------------------------ comparable rows


def iso(value: Any) -> str:
    """A timestamp as the fixtures write it: seconds, or milliseconds when any, or
    microseconds when any (every path keeps them, as a bounded query does)."""
    ts = pd.Timestamp(value)
    fraction = ts.microsecond
    spec = "microseconds" if fraction % 1000 else "milliseconds" if fraction else "seconds"
    return ts.isoformat(timespec=spec)


def norm(value: Any) -> Any:
    """One cell, comparable across runners and dtypes: numbers as floats (rounded
    to 9 digits), times as ISO strings, NULL as None."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, pd.Timestamp | datetime | np.datetime64):
        return None if pd.isna(value) else iso(value)
    if isinstance(value, int | float | np.integer | np.floating):
        return None if math.isnan(float(value)) else round(float(value), 9)
    if hasattr(value, "is_nan") or type(value).__name__ == "Decimal":
        return round(float(value), 9)
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


def rows(frame: pd.DataFrame, columns: list[str] | None = None) -> list[tuple]:
    """The frame's rows (of ``columns``, default all) as tuples of normalized cells."""
    frame = frame if columns is None else frame[columns]
    return [tuple(norm(v) for v in row) for row in frame.astype(object).itertuples(index=False)]


def expected_rows(raw: Iterable[Iterable[Any]]) -> list[tuple]:
    """Fixture rows (numbers, ISO strings, booleans) normalized like :func:`rows`."""
    return [tuple(norm(v) for v in row) for row in raw]


def multiset(values: Iterable[tuple]) -> Counter:
    return Counter(values)


def assert_same_rows(actual: list[tuple], expected: list[tuple], ordered: bool, what="") -> None:
    if ordered:
        assert actual == expected, f"{what}\nactual:   {actual}\nexpected: {expected}"
    else:
        missing = multiset(expected) - multiset(actual)
        extra = multiset(actual) - multiset(expected)
        assert not missing and not extra, f"{what}\nmissing: {missing}\nextra:   {extra}"


def assert_frames_equal(actual: pd.DataFrame, expected: pd.DataFrame, ordered=False, what=""):
    """Same columns (in order) and the same rows (a multiset unless ``ordered``)."""
    assert list(actual.columns) == list(expected.columns), what
    assert_same_rows(rows(actual), rows(expected), ordered, what)


def changelog_order(log: pd.DataFrame) -> pd.DataFrame:
    """A changelog in a canonical order: by ptime, group, retraction first, ver."""
    keys = [c for c in ("ptime", "__gk", "__gs", "__ge", "ver") if c in log.columns]
    return log.sort_values(keys, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------ EMIT


_EMIT = re.compile(r"\bEMIT\b.*$", re.IGNORECASE | re.DOTALL)


def without_emit(query: str) -> str:
    """The query with its EMIT clause (and a final semicolon) removed."""
    return _EMIT.sub("", query.strip().rstrip(";")).rstrip()


def trigger_of(query: str) -> str:
    """The EMIT clause without STREAM: queries equal up to STREAM share one run."""
    match = _EMIT.search(query.strip().rstrip(";"))
    words = match.group(0).split()[1:] if match else []
    return " ".join(w for w in words if w.upper() != "STREAM").upper()


# ------------------------------------------------------------------ Spark


@contextmanager
def one_shuffle_partition(spark):
    """Streaming queries started inside use one shuffle partition (see the module)."""
    key = "spark.sql.shuffle.partitions"
    previous = spark.conf.get(key)
    spark.conf.set(key, "1")
    try:
        yield
    finally:
        spark.conf.set(key, previous)


def spark_runs(spark, jobs: Mapping[Any, Callable[[], Any]], workers: int = 4) -> dict:
    """Run ``jobs`` (key -> a function returning a result, e.g. a SparkSqlQuery's
    ``run(None)``) concurrently; key -> result, or the exception it raised (so that
    one failing query fails only the tests that read it)."""

    def call(job):
        try:
            return job()
        except Exception as exc:  # noqa: BLE001 - handed to the test that reads it
            return exc

    with one_shuffle_partition(spark):
        with ThreadPoolExecutor(workers) as pool:
            futures = {key: pool.submit(call, job) for key, job in jobs.items()}
            results = {key: future.result() for key, future in futures.items()}
        for key, value in results.items():  # once more, alone, what the machine failed
            if isinstance(value, Exception) and _TRANSIENT.search(str(value)):
                results[key] = call(jobs[key])
    return results


#: Failures of an overloaded machine or of Spark's concurrent queries, not of the
#: query: a Python worker that cannot connect back to the JVM in time; a task that
#: Spark cannot deserialize (``OptionalDataException`` reading a map, while other
#: queries ran in the session; seen once in a CI run, and the same queries then
#: passed). Each is run again alone, so the query is still checked.
_TRANSIENT = re.compile(
    r"Python worker failed to connect back|CANNOT_OPEN_SOCKET|java\.io\.OptionalDataException"
)


def result(results: Mapping, key):
    """A result of :func:`spark_runs`, raising the exception of its run."""
    value = results[key]
    if isinstance(value, BaseException):
        raise value
    return value
