"""The output schemas of a windowed aggregation, defined once.

Every runner emits panes as: the key columns, ``window_start``,
``window_end``, one column per aggregation, then the pane metadata below; and
dead letters (elements no window received) as: the key columns, the window
the element was assigned to, its event time, the ``reason`` and the input
columns. Runners map these logical types to their own (numpy/pandas locally,
Spark SQL types on Spark); sinks and tests read the names from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from headwater.model.types import BOOLEAN, INT64, STRING, TIMESTAMP, DataType


@dataclass(frozen=True)
class Field:
    """A named, typed column."""

    name: str
    type: DataType


#: The window of a pane or dead letter: ``[window_start, window_end)``.
WINDOW_FIELDS: tuple[Field, ...] = (
    Field("window_start", TIMESTAMP),
    Field("window_end", TIMESTAMP),
)

#: Pane metadata, after the aggregation outputs, in this order.
PANE_METADATA: tuple[Field, ...] = (
    Field("timestamp", TIMESTAMP),  # the pane's output timestamp (timestamp combiner)
    Field("pane_index", INT64),  # 0, 1, ... within the window
    Field("nonspeculative_index", INT64),  # index among non-EARLY panes; -1 if EARLY
    Field("timing", STRING),  # EARLY / ON_TIME / LATE
    Field("is_first", BOOLEAN),
    Field("is_last", BOOLEAN),
    Field("is_retraction", BOOLEAN),  # withdraws the pane with the same window and index
)
PANE_COLUMNS: tuple[str, ...] = tuple(f.name for f in PANE_METADATA)
WINDOW_COLUMNS: tuple[str, ...] = tuple(f.name for f in WINDOW_FIELDS)


class DropReason(str, Enum):
    """Why an element reached the dead letters instead of a window."""

    #: window end + allowed lateness was at or before the watermark at its arrival
    LATE = "late"
    #: its window's trigger had finished (the window is closed)
    CLOSED = "closed"
    #: the window function assigned it no window (sliding windows with gaps)
    NO_WINDOW = "no_window"
    #: its event time is null
    NULL_EVENT_TIME = "null_event_time"
    #: a line of a source file that is not a record of its table: not CSV or
    #: JSON, a wrong number of fields, or a value not of its column's type
    MALFORMED = "malformed"


#: Dead-letter metadata, after the key columns; the input columns follow.
DEAD_LETTER_METADATA: tuple[Field, ...] = (
    *WINDOW_FIELDS,
    Field("event_time", TIMESTAMP),
    Field("reason", STRING),  # a DropReason value
    Field("elements", INT64),  # 1, or the element count of a pre-aggregated (lifted) row
)
DEAD_LETTER_COLUMNS: tuple[str, ...] = tuple(f.name for f in DEAD_LETTER_METADATA)

#: Where a dead letter read from a file came from, after the input columns (a
#: malformed line has no input columns: its raw text is the record).
RAW_RECORD_FIELDS: tuple[Field, ...] = (
    Field("source_file", STRING),
    Field("source_line", INT64),  # 1-based, the header included; null when not known
    Field("raw_record", STRING),  # the line as it is in the file
    Field("error", STRING),  # what is wrong with it
)
RAW_RECORD_COLUMNS: tuple[str, ...] = tuple(f.name for f in RAW_RECORD_FIELDS)

#: Names no key or aggregation may take (they would clash with the outputs).
RESERVED_NAMES: frozenset[str] = frozenset(
    {*WINDOW_COLUMNS, *PANE_COLUMNS, *DEAD_LETTER_COLUMNS, "kind", "dropped"}
)


def pane_fields(keys: tuple[Field, ...], outputs: tuple[Field, ...]) -> tuple[Field, ...]:
    """All columns of a pane: keys, window, aggregation outputs, metadata."""
    return (*keys, *WINDOW_FIELDS, *outputs, *PANE_METADATA)


def dead_letter_fields(keys: tuple[Field, ...], inputs: tuple[Field, ...]) -> tuple[Field, ...]:
    """All columns of a dead letter: keys, window, event time, reason, count, inputs."""
    return (*keys, *DEAD_LETTER_METADATA, *inputs)
