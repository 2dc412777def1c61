"""How refinements relate: accumulation modes, pane timing, timestamp combiners."""

from __future__ import annotations

from enum import Enum


class Accumulation(str, Enum):
    """How successive panes of one window relate to each other."""

    #: Each pane holds only what arrived since the previous pane.
    DISCARDING = "discarding"
    #: Each pane holds everything the window has seen so far.
    ACCUMULATING = "accumulating"
    #: Accumulating, and each new pane is preceded by a retraction of the
    #: previous one (and of panes of windows merged into it).
    RETRACTING = "retracting"

    @classmethod
    def of(cls, value: Accumulation | str) -> Accumulation:
        if isinstance(value, Accumulation):
            return value
        text = str(value).strip().lower().replace("-", "_").replace(" ", "_")
        aliases = {"accumulating_and_retracting": "retracting", "retractions": "retracting"}
        try:
            return cls(aliases.get(text, text))
        except ValueError:
            raise ValueError(
                f"unknown accumulation mode {value!r}: use discarding, accumulating or retracting"
            ) from None


class Timing(str, Enum):
    """When a pane fired relative to the watermark passing the end of its window."""

    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"


class TimestampCombiner(str, Enum):
    """Which output timestamp a pane carries."""

    END_OF_WINDOW = "OUTPUT_AT_EOW"
    EARLIEST = "OUTPUT_AT_EARLIEST"
    LATEST = "OUTPUT_AT_LATEST"
    EARLIEST_TRANSFORMED = "OUTPUT_AT_EARLIEST_TRANSFORMED"

    @classmethod
    def of(cls, value: TimestampCombiner | str) -> TimestampCombiner:
        if isinstance(value, TimestampCombiner):
            return value
        text = str(value).strip().upper()
        for member in cls:
            if text in (member.value, member.name, member.value.removeprefix("OUTPUT_AT_")):
                return member
        if text in ("EOW", "END_OF_WINDOW"):
            return cls.END_OF_WINDOW
        raise ValueError(f"unknown timestamp combiner {value!r}")


#: Column names of the pane metadata every runner emits, in order.
PANE_COLUMNS = (
    "timestamp",
    "pane_index",
    "nonspeculative_index",
    "timing",
    "is_first",
    "is_last",
    "is_retraction",
)
