"""Durations and table definitions, as headwater's model needs them.

The model keeps every duration in milliseconds, so window sizes, delays and
watermark bounds are read from INTERVAL literals here once. ``CREATE TABLE``
declares a source (with its event time and watermark) or a sink; it becomes a
plain :class:`SourceDef` so the catalog never walks a syntax tree.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from headwater.model.time import to_millis
from headwater.sql.errors import SqlError, position

_UNIT_MS = {
    "MILLISECOND": 1,
    "SECOND": 1_000,
    "MINUTE": 60_000,
    "HOUR": 3_600_000,
    "DAY": 86_400_000,
}
#: The fields of a day-time span such as INTERVAL '1:30' MINUTE TO SECOND, largest first.
_SPAN_UNITS = ("DAY", "HOUR", "MINUTE", "SECOND")
_INTERVAL_HINT = "Write a fixed-length INTERVAL such as INTERVAL '10' MINUTE"
_WATERMARK_HINT = "Write WATERMARK FOR ts AS ts - INTERVAL '5' SECOND (or AS ts for no delay)"


def interval_ms(node: exp.Expr) -> int:
    """Milliseconds of an INTERVAL literal (SqlError if it has no fixed length)."""
    if isinstance(node, exp.Add):  # INTERVAL '1' HOUR '30' MINUTE
        return interval_ms(node.this) + interval_ms(node.expression)
    ms = _literal_ms(node) if isinstance(node, exp.Interval) else None
    if ms is None:
        raise SqlError(f"cannot read {node.sql()} as a duration", *position(node), _INTERVAL_HINT)
    return ms


def interval_sql(ms: int) -> str:
    """``ms`` as an INTERVAL in the largest unit that divides it, for readable explain() output."""
    unit = next(u for u in reversed(_UNIT_MS) if ms % _UNIT_MS[u] == 0)
    return f"INTERVAL '{ms // _UNIT_MS[unit]}' {unit}"


def _literal_ms(interval: exp.Interval) -> int | None:
    text = interval.this.name if interval.this else ""
    unit = interval.args.get("unit")
    if isinstance(unit, exp.IntervalSpan):
        ms = _span_ms(text, unit.this.name.upper(), unit.expression.name.upper())
    else:
        ms = _scaled(text, _unit_ms(unit.name if unit else ""))
    return int(ms) if ms is not None and ms == int(ms) else None


def _unit_ms(unit: str) -> int | None:
    """MINUTE and MINUTES alike (Flink writes plurals)."""
    unit = unit.upper()
    return _UNIT_MS.get(unit) or _UNIT_MS.get(unit.removesuffix("S"))


def _scaled(text: str, unit_ms: int | None) -> Decimal | None:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    return value * unit_ms if unit_ms is not None and value.is_finite() else None


def _span_ms(text: str, first: str, last: str) -> Decimal | None:
    """INTERVAL '1 02:03:04' DAY TO SECOND: one field per unit from ``first`` to ``last``."""
    if first not in _SPAN_UNITS or last not in _SPAN_UNITS:
        return None
    units = _SPAN_UNITS[_SPAN_UNITS.index(first) : _SPAN_UNITS.index(last) + 1]
    sign = -1 if text.strip().startswith("-") else 1
    fields = re.split(r"[ :]", text.strip().lstrip("-"))
    if len(fields) != len(units):
        return None
    parts = [_scaled(field, _UNIT_MS[unit]) for field, unit in zip(fields, units, strict=True)]
    return None if None in parts else sign * sum(parts)


@dataclass(frozen=True)
class SourceDef:
    """A table declared by CREATE TABLE: a source, or a sink (no watermark)."""

    name: str
    columns: dict[str, str]
    event_time: str | None
    watermark_delay_ms: int | None
    options: dict[str, str]
    line: int | None
    #: ``PRIMARY KEY (...) NOT ENFORCED``: the columns one version of a row is keyed by
    primary_key: tuple[str, ...] = ()

    def check_options(self, allowed: frozenset[str], what: str, hint: str | None = None) -> None:
        """Refuse an option the connector does not know, naming it (``what``: the
        table's kind, as the error names it)."""
        unknown = sorted(k for k in self.options if k not in allowed)
        if unknown:
            raise SqlError(
                f"{what} {self.name!r}: unknown option {unknown[0]!r}",
                self.line,
                None,
                hint or f"Use only {', '.join(sorted(allowed))}",
            )

    def key_fields(self) -> list[str]:
        """A sink's key: ``'key.fields'`` (``;``-separated), else its PRIMARY KEY
        (Flink's upsert-kafka takes the key from the PRIMARY KEY); SqlError if both
        are given and differ."""
        fields = [k.strip() for k in self.options.get("key.fields", "").split(";") if k.strip()]
        if fields and self.primary_key and fields != list(self.primary_key):
            raise SqlError(
                f"table {self.name!r}: 'key.fields' ({';'.join(fields)}) is not its PRIMARY KEY "
                f"({', '.join(self.primary_key)})",
                self.line,
                None,
                "Give one of them, or the same columns in both",
            )
        return fields or list(self.primary_key)


def source_def(create: exp.Create) -> SourceDef:
    """The table ``create`` declares (SqlError if headwater cannot use it)."""
    schema = create.this
    if create.kind != "TABLE" or not isinstance(schema, exp.Schema):
        raise SqlError(
            "CREATE TABLE needs a column list",
            *position(create),
            "Write CREATE TABLE name (col TYPE, ...) WITH ('path' = ..., 'format' = ...)",
        )
    columns = _columns(schema)
    event_time, delay = _watermark(schema, columns)
    return SourceDef(
        name=schema.this.name,
        columns=columns,
        event_time=event_time,
        watermark_delay_ms=delay,
        options=_options(create),
        line=position(create)[0],
        primary_key=_primary_key(schema, columns),
    )


def _columns(schema: exp.Schema) -> dict[str, str]:
    columns: dict[str, str] = {}
    for item in schema.expressions:
        if isinstance(item, exp.WatermarkColumnConstraint | exp.PrimaryKey):
            continue
        if not isinstance(item, exp.ColumnDef) or item.args.get("kind") is None:
            raise SqlError(
                f"{item.sql()} is not a column definition",
                *position(item),
                "A table lists columns (name TYPE), at most one PRIMARY KEY (...) NOT ENFORCED "
                "and at most one WATERMARK FOR clause",
            )
        if item.name in columns:
            raise SqlError(f"column {item.name!r} is declared twice", *position(item))
        columns[item.name] = re.sub(r",\s+", ",", item.args["kind"].sql()).upper()
    return columns


def _primary_key(schema: exp.Schema, columns: dict[str, str]) -> tuple[str, ...]:
    """The columns of ``PRIMARY KEY (...) NOT ENFORCED`` (or a column's own). headwater,
    as Flink, does not own the data and checks no key: it says what a versioned
    stream's rows are versions of (a temporal join)."""
    clauses: list[exp.Expr] = [e for e in schema.expressions if isinstance(e, exp.PrimaryKey)]
    names: list[tuple[str, exp.Expr]] = [
        (n.name, n) for clause in clauses for n in clause.expressions
    ]
    for c in schema.expressions:
        for k in c.constraints if isinstance(c, exp.ColumnDef) else []:
            if isinstance(k.kind, exp.PrimaryKeyColumnConstraint):
                clauses.append(k.kind)
                names.append((c.name, c))
    if len(clauses) > 1:
        raise SqlError("a table has at most one PRIMARY KEY", *position(clauses[-1]))
    for clause in clauses:
        options = [str(o).upper() for o in clause.args.get("options") or []]
        if "NOT ENFORCED" not in options:
            raise SqlError(
                "a PRIMARY KEY without NOT ENFORCED: headwater does not own the data to enforce it",
                *position(clause),
                "Write PRIMARY KEY (col) NOT ENFORCED, as in Flink",
            )
    for name, node in names:
        if name not in columns:
            raise SqlError(
                f"PRIMARY KEY names {name!r}, which is not a column of the table",
                *position(node),
                f"Its columns are {', '.join(columns)}",
            )
    return tuple(name for name, _ in names)


def _watermark(schema: exp.Schema, columns: dict[str, str]) -> tuple[str | None, int | None]:
    """(event-time column, watermark delay in ms) of the WATERMARK FOR clause, if any."""
    clauses = [e for e in schema.expressions if isinstance(e, exp.WatermarkColumnConstraint)]
    if not clauses:
        return None, None
    if len(clauses) > 1:
        raise SqlError("a table has at most one WATERMARK FOR clause", *position(clauses[1]))
    column, bound = clauses[0].this, clauses[0].expression
    if column.name not in columns:
        raise SqlError(
            f"WATERMARK FOR names {column.name!r}, which is not a column of the table",
            *position(column),
            f"Its columns are {', '.join(columns)}",
        )
    if not columns[column.name].startswith("TIMESTAMP"):
        raise SqlError(
            f"the event time {column.name!r} is {columns[column.name]}, not a TIMESTAMP",
            *position(column),
            "Declare the event-time column as TIMESTAMP",
        )
    return column.name, _watermark_delay(column, bound)


def _watermark_delay(column: exp.Column, bound: exp.Expr) -> int:
    """0 for ``AS ts``; the interval of ``AS ts - INTERVAL ...``."""
    if isinstance(bound, exp.Column) and bound.name == column.name:
        return 0
    if not (isinstance(bound, exp.Sub) and isinstance(bound.this, exp.Column)):
        raise SqlError(f"unsupported watermark {bound.sql()}", *position(bound), _WATERMARK_HINT)
    if bound.this.name != column.name:
        raise SqlError(
            f"the watermark of {column.name!r} is computed from {bound.this.name!r}",
            *position(bound),
            _WATERMARK_HINT,
        )
    delay = interval_ms(bound.expression)
    if delay < 0:
        raise SqlError("the watermark delay must not be negative", *position(bound.expression))
    return delay


#: Options of CREATE TABLE ... WITH (...) (:mod:`headwater.sql.execute.sources`), and the
#: prefixes of those checked where they are read (:mod:`headwater.sql.execute.hybrid`,
#: :mod:`headwater.sql.execute.correct`).
OPTIONS = ("format", "path", "allowed_lateness", "watermark", "slack", "table", "state.ttl")
OPTION_PREFIXES = ("quality.", "correction.")
#: Options that are durations, never negative.
_DURATIONS = ("allowed_lateness", "slack", "correction.gamma")


_TTL_HINT = "Write a positive duration such as '1 hour', '30 minutes' or INTERVAL '1' HOUR"


def state_ttl_ms(value: object, what: str, line: int | None = None, col: int | None = None) -> int:
    """Milliseconds of a state time-to-live ``value`` given as ``what`` (the table
    option, a keyword, a flag): SqlError naming both unless a positive duration."""
    try:
        ms = to_millis(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        message = f"{what}: cannot read {value!r} as a duration"
        raise SqlError(message, line, col, _TTL_HINT) from None
    if ms <= 0:
        raise SqlError(
            f"{what} must be a positive duration, not {value!r}",
            line,
            col,
            f"{_TTL_HINT}; leave it out to keep every key's state",
        )
    return ms


def _check_option(prop: exp.Property, key: str, value: str) -> None:
    """SqlError at an option headwater does not know, or a duration that is negative."""
    if key not in OPTIONS and not key.startswith(OPTION_PREFIXES):
        close = difflib.get_close_matches(key, OPTIONS, n=1)
        known = ", ".join(repr(o) for o in (*OPTIONS, *(f"{p}*" for p in OPTION_PREFIXES)))
        hint = f"Did you mean {close[0]!r}? " if close else ""
        raise SqlError(f"unknown table option {key!r}", *position(prop), f"{hint}Options: {known}")
    if key == "state.ttl":
        state_ttl_ms(value, "option 'state.ttl'", *position(prop.args["value"]))
    if key not in _DURATIONS:
        return
    at = position(prop.args["value"])
    try:
        ms = to_millis(value)
    except (TypeError, ValueError):
        raise SqlError(
            f"option {key!r}: cannot read {value!r} as a duration", *at, "Write e.g. '5 seconds'"
        ) from None
    if ms < 0:
        raise SqlError(
            f"option {key!r} must not be negative, not {value!r}",
            *at,
            "A negative lateness (or slack) would drop rows that are on time; write '0 seconds' "
            "or more",
        )


def _options(create: exp.Create) -> dict[str, str]:
    """WITH ('key' = 'value', ...), keys lower-case; an unquoted FORMAT = reads the same."""
    options: dict[str, str] = {}
    checked: list[tuple[exp.Property, str]] = []
    properties = create.args.get("properties")
    for prop in properties.expressions if properties else []:
        if isinstance(prop, exp.FileFormatProperty):
            options["format"] = prop.this.name
        elif isinstance(prop, exp.Property):
            value = prop.args["value"]
            key = prop.name.lower()
            options[key] = value.name if value.is_string else value.sql()
            checked.append((prop, key))
        else:
            raise SqlError(
                f"unsupported table option {prop.sql()}",
                *position(prop),
                "Write WITH ('path' = '...', 'format' = 'parquet')",
            )
    # A connector's table (Kafka, Delta) is checked by its own module's options.
    if "connector" not in options:
        for prop, key in checked:
            _check_option(prop, key, options[key])
    return options
