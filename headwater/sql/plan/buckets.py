"""Event-time buckets: expressions of a timestamp whose value fixes a bucket of
fixed size aligned to the epoch (``CAST(ts AS DATE)``: the day).

A query grouped by such a bucket of its event time (NEXMark Query 15's
``DATE_FORMAT(dateTime, 'yyyy-MM-dd')``) has groups the watermark completes, as
a tumbling window of the bucket's size: a group whose bucket ends at or before
the watermark gets no more rows (:mod:`headwater.sql.plan.keys`).

Only buckets of fixed bounds qualify: the rows a group holds carry their event
times as zone-free TIMESTAMPs (epoch ms), so a day is a UTC day of 86,400,000 ms
and a bucket ``[k * size, (k + 1) * size)``. Weeks (aligned to a weekday),
months, quarters and years (of varying length), a truncation in a time zone and
a format that does not fix the bucket (``'HH:mm'``, ``'yyyy-MM'``) are no bucket:
such a key stays a plain key, exact, its state kept.
"""

from __future__ import annotations

from sqlglot import exp

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

#: Truncation units of fixed size (DATE_TRUNC / TIMESTAMP_TRUNC).
_UNITS = {"SECOND": SECOND, "MINUTE": MINUTE, "HOUR": HOUR, "DAY": DAY}

#: strftime formats (Flink's DATE_FORMAT patterns as the parser writes them) that
#: fix a bucket: the prefixes of ``yyyy-MM-dd HH:mm:ss`` from the day on.
_FORMATS = {
    "%Y-%m-%d": DAY,
    "%Y-%m-%d %H": HOUR,
    "%Y-%m-%d %H:%M": MINUTE,
    "%Y-%m-%d %H:%M:%S": SECOND,
}


def bucket_of(node: exp.Expression) -> tuple[int, exp.Expression] | None:
    """``(size in ms, the timestamp it buckets)`` when ``node``'s value fixes one
    bucket of that size of its argument, else None. (Flink's ``FLOOR(ts TO DAY)``
    is parsed as a truncation; ``CEIL(ts TO DAY)`` is none: a row at midnight
    shares its value with the day before's rows.)"""
    if isinstance(node, exp.Cast):  # TRY_CAST too
        if node.to.this == exp.DataType.Type.DATE:
            return DAY, node.this
        return None
    if isinstance(node, exp.DateTrunc | exp.TimestampTrunc):
        unit = node.args.get("unit")
        size = _UNITS.get(unit.name.upper()) if unit is not None else None
        if size is None or node.args.get("zone") is not None:
            return None
        return size, node.this
    if isinstance(node, exp.TimeToStr):
        fmt = node.args.get("format")
        if isinstance(fmt, exp.Literal) and fmt.is_string and node.args.get("zone") is None:
            size = _FORMATS.get(fmt.name)
            return (size, node.this) if size is not None else None
    return None


#: strftime directives back as the Java pattern letters DATE_FORMAT was written with.
_JAVA = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss"}


def written(node: exp.Expression, dialect) -> str:
    """A bucket expression as the user wrote it (a strftime format back as
    DATE_FORMAT's Java pattern, Flink's FLOOR(ts TO unit) as FLOOR)."""
    if isinstance(node, exp.TimeToStr):
        pattern = node.args["format"].name
        for directive, letters in _JAVA.items():
            pattern = pattern.replace(directive, letters)
        return f"DATE_FORMAT({node.this.sql(dialect=dialect)}, '{pattern}')"
    if node.meta.get("written") == "FLOOR":
        return f"FLOOR({node.this.sql(dialect=dialect)} TO {node.args['unit'].name})"
    return node.sql(dialect=dialect)


def describe(size: int) -> str:
    """A bucket's size in words (``day``, ``hour``)."""
    names = {DAY: "day", HOUR: "hour", MINUTE: "minute", SECOND: "second"}
    return names.get(size, f"{size} ms")
