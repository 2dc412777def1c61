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
(ends played), so the end is played once and recorded in the checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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
    """Where a query learns that its bounded input ended: the ``signal`` file."""

    signal: str

    @staticmethod
    def new() -> EndOfInput:
        """A fresh signal (in a new temporary directory), not sent yet."""
        return EndOfInput(os.path.join(tempfile.mkdtemp(prefix="headwater-end-"), "end"))

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
        spark.dataSource.register(EndOfInputDataSource)
        return spark.readStream.format(FORMAT_NAME).option("signal", self.signal).load()


class EndPartition(InputPartition):  # type: ignore[misc]
    def __init__(self, index: int) -> None:
        self.index = index


class EndOfInputReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Offsets ``{"ends": n}``; a run whose signal exists plays one more end."""

    def __init__(self, signal: str) -> None:
        self.signal = signal
        self._target: int | None = None

    def initialOffset(self) -> dict:
        return {"ends": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = None  # decided at the first offset of this run

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        done = 0 if start is None else int(start["ends"])
        if self._target is None:
            self._target = done + (1 if os.path.exists(self.signal) else 0)
        return {"ends": max(self._target, done)}

    def partitions(self, start: dict, end: dict) -> Sequence[EndPartition]:
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
