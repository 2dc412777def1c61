"""The end of a bounded input, as a stream Spark can read: one control row ``end``.

Spark's own watermark never reaches the end of time, and a query run with
``trigger(availableNow=True)`` stops after its last micro-batch without telling
its stateful operators that the input ended: windows past the watermark's last
value never fire ON_TIME, and processing-time timers (early panes) wait for a
clock that stops. headwater's streaming runner therefore unions a query over a
bounded input with this source: a stream of one column ``kind`` that stays empty
until its *signal* file exists, then plays one row ``kind = 'end'``. The runner
fans that row out to every shard, which advances the watermark to the end of
time (:data:`headwater.model.watermarks.END_OF_INPUT`): every pending window fires
and is collected, every timer is resolved (docs/semantics.md, "End of input").

The signal is a file so that the end is decided between two runs of the query
from one checkpoint: the first ``availableNow`` run reads the whole input; then
:class:`EndOfInput` creates the file and runs the query once more, and that
run's one micro-batch carries the ``end`` row. Offsets are ``{"ends": n}``
(ends played), so the end is played once and recorded in the checkpoint: the
end is final, and a later run from that checkpoint is refused (its rows would
all be late) instead of dropping what it reads.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from headwater.io.python_source import read_stream

FORMAT_NAME = "headwater_end_of_input"
#: The kind of the control row that ends the input.
END_KIND = "end"

try:  # pyspark is only needed when the source is actually used
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover
    DataSource = object  # type: ignore[misc,assignment]
    DataSourceStreamReader = object  # type: ignore[misc,assignment]
    InputPartition = object  # type: ignore[misc,assignment]
    SupportsTriggerAvailableNow = object  # type: ignore[misc,assignment]


@dataclass(frozen=True)
class EndOfInput:
    """Where a query learns that its bounded input ended: the ``signal`` file.
    ``ends``: whether this run ends the input; an incremental run (False) reads the
    control stream too, never signalled, so that every ``availableNow`` run of one
    checkpoint has the same sources and the last one can end the input."""

    signal: str
    ends: bool = True

    @staticmethod
    def new(ends: bool = True) -> EndOfInput:
        """A fresh signal (in a new temporary directory), not sent yet."""
        return EndOfInput(os.path.join(tempfile.mkdtemp(prefix="headwater-end-"), "end"), ends)

    def send(self) -> None:
        """End the input: the next run of the query plays the ``end`` row."""
        with open(self.signal, "w", encoding="utf-8") as fh:
            fh.write("end\n")

    def discard(self) -> None:
        """Remove the signal and its directory (after the run that played it)."""
        with contextlib.suppress(OSError):
            os.remove(self.signal)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self.signal))

    def stream(self, spark: Any) -> Any:
        """The control stream: column ``kind``, one ``end`` row once signalled."""
        return read_stream(spark, EndOfInputDataSource, {"signal": self.signal})


class EndPartition(InputPartition):  # type: ignore[misc]
    def __init__(self, index: int) -> None:
        self.index = index


class InputEndedError(RuntimeError):
    """A query resumed from a checkpoint whose input an earlier run ended."""


def ended_message(checkpoint: str) -> str:
    """Why a query cannot resume from ``checkpoint``, and what to do instead."""
    return (
        f"the input of the checkpoint {checkpoint} has ended: an earlier availableNow run "
        "ended it (end of input, docs/semantics.md), so its watermark is at the end of time "
        "and every row read now would be late and dropped. Start a bounded run over the "
        "whole input with a new checkpoint; for an incremental job that reads more of its "
        "source at each run, start every run but the last with end_of_input=False"
    )


class EndOfInputReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Offsets ``{"ends": n}``; a run whose signal exists plays one more end. A run
    that finds an end played by an earlier run refuses to go on: rows after the end
    of the input would all be late (:func:`ended_message`)."""

    def __init__(self, signal: str) -> None:
        self.signal = signal
        self._target: int | None = None
        self._played = False  # this run played the end (or replays its batch)

    def initialOffset(self) -> dict:
        return {"ends": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = None  # decided at the first offset of this run

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        done = 0 if start is None else int(start["ends"])
        if done and not self._played:
            raise InputEndedError(ended_message("of this query"))
        if self._target is None:
            self._target = done + (1 if os.path.exists(self.signal) else 0)
        return {"ends": max(self._target, done)}

    def partitions(self, start: dict, end: dict) -> Sequence[EndPartition]:
        if int(end["ends"]) > int(start["ends"]):
            self._played = True
        return [EndPartition(i) for i in range(int(start["ends"]), int(end["ends"]))]

    def read(self, partition: EndPartition) -> Iterator[tuple]:
        yield (END_KIND,)

    def commit(self, end: dict) -> None:
        pass


class EndOfInputDataSource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("headwater_end_of_input").option("signal", FILE)``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return "kind STRING"

    def streamReader(self, schema: Any) -> EndOfInputReader:
        signal = self.options.get("signal")
        if not signal:
            raise ValueError("headwater_end_of_input: option 'signal' (a file path) is required")
        return EndOfInputReader(signal)
