"""Running a streaming query over a bounded input to its end (docs/semantics.md,
"End of input").

With ``trigger(availableNow=True)`` Spark stops after the last micro-batch of
what is there: Spark's watermark is then the largest event time minus the delay,
and a processing-time timer (an early pane) never fires. A demanding user who
runs a query over a bounded input expects what the bounded run gives. So, by
default, a headwater query started with ``availableNow`` ends its input: the
plan reads an :class:`~headwater.io.end_of_input.EndOfInput` control stream too,
and :class:`BoundedQuery` runs the query a second time from its checkpoint once
the first run is over, with the signal sent: that run's one micro-batch moves
every shard's watermark to the end of time. Pass ``end_of_input=False`` for an
incremental job that will read more of the source later: nothing is flushed and
the pending windows wait in the checkpoint for the next run. The end is final: a
run from a checkpoint whose input ended is refused (:func:`refuse_ended`), since
every row it read would be late.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from headwater.io.end_of_input import EndOfInput, InputEndedError, ended_message


def end_of_input_for(
    trigger: Mapping[str, Any] | None, requested: bool | None
) -> EndOfInput | None:
    """The end of input of a query started with ``trigger``: by default (``requested``
    None) a run with ``availableNow`` ends its input; with ``False`` it reads the
    control stream without ending it (an incremental run, whose checkpoint a later
    run can end). Only an ``availableNow`` run has an end: a long-running query's
    input does not end."""
    available_now = bool((trigger or {}).get("availableNow"))
    if requested is None:
        requested = available_now
    if requested and not available_now:
        raise ValueError(
            "end_of_input=True needs trigger={'availableNow': True}: only a run that reads "
            "what is there has an end (a long-running query keeps its state in its checkpoint)"
        )
    return EndOfInput.new(ends=requested) if available_now else None


def refuse_ended(checkpoint_location: str) -> None:
    """Refuse, before it starts, a query resuming from a local checkpoint whose
    input an earlier run ended: every row it read would be late. (On another file
    system the control stream refuses it at its first micro-batch, before any row
    is read: :class:`~headwater.io.end_of_input.EndOfInputReader`.)"""
    path = checkpoint_location.removeprefix("file:")
    offsets = os.path.join(path, "offsets")
    if "://" in path or not os.path.isdir(offsets):
        return
    batches = [int(n) for n in os.listdir(offsets) if n.isdigit()]
    if not batches or not os.path.exists(os.path.join(path, "commits", str(max(batches)))):
        return  # nothing run, or a batch to re-run first (it may be the ending one)
    with open(os.path.join(offsets, str(max(batches))), encoding="utf-8") as fh:
        for line in fh:
            match = _ENDS.match(line.strip())
            if match and int(match.group(1)) > 0:
                raise InputEndedError(ended_message(checkpoint_location))


_ENDS = re.compile(r'^\{"ends":\s*(\d+)\}$')


def started(launch: Callable[[], Any], end: EndOfInput | None, checkpoint_location: str) -> Any:
    """Start a query by ``launch``: a :class:`BoundedQuery` when the run ends its
    input, else ``launch()``'s ``StreamingQuery``; refused if its checkpoint's input
    has ended (:func:`refuse_ended`)."""
    refuse_ended(checkpoint_location)
    if end is None or not end.ends:
        return launch()
    return BoundedQuery(launch, end)


class BoundedQuery:
    """A ``StreamingQuery`` over a bounded input that ends it: :meth:`awaitTermination`
    waits for the run over the input, then runs the query once more from its
    checkpoint with the end of input signalled, and waits for that run. Every other
    attribute is the current run's ``StreamingQuery``'s."""

    def __init__(self, start: Callable[[], Any], end: EndOfInput) -> None:
        self._start = start
        self._end = end
        self._stopped = False
        self._ending = False
        self._earlier: list[Any] = []  # the runs before the current one
        self.query = start()

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        done = self._wait(timeout)
        if done and not self._ending and not self._stopped and self.query.exception() is None:
            self._ending = True
            self._end.send()
            self._earlier.append(self.query)
            self.query = self._start()
            done = self._wait(timeout)
        if done and self._ending:
            self._end.discard()
        return done if timeout is not None else None

    def _wait(self, timeout: float | None) -> bool:
        if timeout is None:
            self.query.awaitTermination()
            return True
        return bool(self.query.awaitTermination(timeout))

    @property
    def recentProgress(self) -> list:  # noqa: N802 (StreamingQuery's name)
        """The progress of every run, the input's and the ending one's, in order."""
        return [p for q in (*self._earlier, self.query) for p in q.recentProgress]

    def stop(self) -> None:
        """Stop the current run; a stopped query does not end its input."""
        self._stopped = True
        self.query.stop()

    def __getattr__(self, name: str) -> Any:
        if name == "query":  # not started (its start raised)
            raise AttributeError(name)
        return getattr(self.query, name)
