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

#: ``end_of_input=NEVER``: the input of this checkpoint never ends (an open topic):
#: its ``availableNow`` runs read no control stream, as a long-running query's.
NEVER = "never"


def end_of_input_for(
    trigger: Mapping[str, Any] | None, requested: bool | str | None
) -> EndOfInput | None:
    """The end of input of a query started with ``trigger``: by default (``requested``
    None) a run with ``availableNow`` ends its input; with ``False`` it reads the
    control stream without ending it (an incremental run, whose checkpoint a later
    run can end); with :data:`NEVER` it reads no control stream (no run of its
    checkpoint will end the input, which spares every run the control stream's
    cost). Only an ``availableNow`` run has an end: a long-running query's input
    does not end."""
    if requested not in (None, True, False, NEVER):
        raise ValueError(
            f"end_of_input={requested!r}: pass None (the default), True, False or {NEVER!r}"
        )
    available_now = bool((trigger or {}).get("availableNow"))
    if requested == NEVER:
        return None
    if requested is None:
        requested = available_now
    if requested and not available_now:
        raise ValueError(
            "end_of_input=True needs trigger={'availableNow': True}: only a run that reads "
            "what is there has an end (a long-running query keeps its state in its checkpoint)"
        )
    return EndOfInput.new(ends=bool(requested)) if available_now else None


def refuse_ended(checkpoint_location: str, reads_control: bool | None = None) -> None:
    """Refuse, before it starts, a query resuming from a local checkpoint whose
    input an earlier run ended: every row it read would be late. (On another file
    system the control stream refuses it at its first micro-batch, before any row
    is read: :class:`~headwater.io.end_of_input.EndOfInputReader`.) With
    ``reads_control`` (whether this run's plan reads the control stream), also
    refuse a run whose plan has the control stream when the checkpoint's runs had
    none, or the reverse: Spark would fail it for a changed number of sources."""
    path = checkpoint_location.removeprefix("file:")
    offsets = os.path.join(path, "offsets")
    if "://" in path or not os.path.isdir(offsets):
        return
    batches = [int(n) for n in os.listdir(offsets) if n.isdigit()]
    if not batches:
        return
    with open(os.path.join(offsets, str(max(batches))), encoding="utf-8") as fh:
        ends = [int(m.group(1)) for m in map(_ENDS.match, (x.strip() for x in fh)) if m]
    if reads_control is not None and bool(ends) != reads_control:
        raise ValueError(_sources_changed(checkpoint_location, had_control=bool(ends)))
    if not os.path.exists(os.path.join(path, "commits", str(max(batches)))):
        return  # a batch to re-run first (it may be the ending one)
    if any(n > 0 for n in ends):
        raise InputEndedError(ended_message(checkpoint_location))


def _sources_changed(checkpoint_location: str, had_control: bool) -> str:
    """Why a run cannot resume ``checkpoint_location``: its plan reads the end-of-input
    control stream and the checkpoint's runs did not (or the reverse)."""
    if had_control:
        return (
            f"the checkpoint {checkpoint_location} was written by availableNow runs that "
            "read the end-of-input control stream (end_of_input None, True or False): "
            "resume it with trigger={'availableNow': True} and end_of_input None, True "
            "or False, or start a new checkpoint"
        )
    return (
        f"the checkpoint {checkpoint_location} was written without the end-of-input "
        f"control stream (end_of_input={NEVER!r}, or a long-running trigger): resume it "
        f"with end_of_input={NEVER!r} or a long-running trigger, or start a new checkpoint"
    )


_ENDS = re.compile(r'^\{"ends":\s*(\d+)\}$')


def started(launch: Callable[[], Any], end: EndOfInput | None, checkpoint_location: str) -> Any:
    """Start a query by ``launch``: a :class:`BoundedQuery` when the run ends its
    input, else ``launch()``'s ``StreamingQuery``; refused if its checkpoint's input
    has ended (:func:`refuse_ended`)."""
    refuse_ended(checkpoint_location, reads_control=end is not None)
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
