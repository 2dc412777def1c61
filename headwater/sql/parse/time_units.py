"""Differences and sums of times in a unit, one meaning on every engine.

Three spellings a user pastes, each parsed into nodes that DuckDB and Spark
read the same way (sqlglot's own nodes do not: its ``DateDiff`` is DuckDB's
count of unit boundaries but Spark's count of whole units):

* DuckDB's ``DATE_DIFF('second', start, end)`` (also ``DATEDIFF``): how many
  unit boundaries lie between ``start`` and ``end``. Written as the whole units
  between the two times truncated to the unit, which is the same number.
* Flink's and Spark's ``TIMESTAMPDIFF(SECOND, start, end)``: how many whole
  units fit between them, toward zero. Written as the microseconds between them
  divided by the unit's, so only units of one length are read (a month is not:
  Flink counts January 31 to February 29 as one month, Spark as none).
* ``TIMESTAMPADD(SECOND, n, ts)``: ``ts`` plus ``n`` units (a month added to
  January 31 is February's last day on every engine).

``DATEDIFF(end, start)`` with two arguments (Spark's and Hive's: days between
the dates) keeps sqlglot's reading, which both engines agree on.
"""

from __future__ import annotations

from sqlglot import exp

from headwater.sql.errors import SqlError, position

#: The units of one length, in microseconds.
FIXED_UNITS = {
    "MICROSECOND": 1,
    "MILLISECOND": 1_000,
    "SECOND": 1_000_000,
    "MINUTE": 60_000_000,
    "HOUR": 3_600_000_000,
    "DAY": 86_400_000_000,
    "WEEK": 604_800_000_000,
}
#: The units DATE_DIFF counts the boundaries of: those both engines truncate a
#: time to. Not WEEK: DuckDB's DATE_DIFF counts seven days, not Mondays passed.
BOUNDARY_UNITS = (*(u for u in FIXED_UNITS if u != "WEEK"), "MONTH", "QUARTER", "YEAR")
#: The units TIMESTAMPADD adds.
ADDED_UNITS = (*FIXED_UNITS, "MONTH", "QUARTER", "YEAR")


def _where(args: list[exp.Expr]) -> tuple[int | None, int | None]:
    placed = [position(a) for a in args if position(a)[0] is not None]
    return placed[0] if placed else (None, None)


def _unit(name: str, arg: exp.Expr, args: list[exp.Expr], units: tuple[str, ...], usage: str):
    """The unit ``arg`` spells (``'second'``, ``SECOND``, ``seconds``), one of ``units``."""
    if isinstance(arg, exp.Literal | exp.Column | exp.Var) and not (
        isinstance(arg, exp.Column) and arg.table
    ):
        spelled = arg.name.upper()
        unit = spelled if spelled in units else spelled.removesuffix("S")
        if unit in units:
            return exp.var(unit)
        problem = f"{name} does not take the unit {arg.name!r}"
    else:
        problem = f"{name}'s unit must be written out, not computed"
    raise SqlError(problem, *_where(args), f"The units are {', '.join(units)}: {usage}")


def _arity(name: str, args: list[exp.Expr], count: int, usage: str) -> None:
    if len(args) != count:
        raise SqlError(f"{name} takes {count} arguments", *_where(args), f"Write {usage}")


def _truncated(time: exp.Expr, unit: exp.Var) -> exp.Expr:
    if isinstance(time, exp.TimestampTrunc) and time.text("unit").upper() == unit.name:
        return time  # read back from the text this module's node is written as
    return exp.TimestampTrunc(this=time, unit=exp.Literal.string(unit.name))


def date_diff(args: list[exp.Expr]) -> exp.Expr:
    """DuckDB's ``DATE_DIFF(unit, start, end)``: the unit boundaries between the
    times; ``DATEDIFF(end, start)``: the days between their dates."""
    usage = "DATE_DIFF('second', start, end)"
    if len(args) == 2:
        return exp.DateDiff(this=args[0], expression=args[1])
    _arity("DATE_DIFF", args, 3, usage)
    unit = _unit("DATE_DIFF", args[0], args, BOUNDARY_UNITS, usage)
    start, end = args[1], args[2]
    if unit.name == "MICROSECOND":  # a time is whole microseconds: nothing to truncate
        return exp.DateDiff(this=end, expression=start, unit=unit)
    return exp.DateDiff(
        this=_truncated(end, unit), expression=_truncated(start, unit), unit=unit.copy()
    )


def timestamp_diff(args: list[exp.Expr]) -> exp.Expr:
    """Flink's ``TIMESTAMPDIFF(unit, start, end)``: whole units, toward zero."""
    usage = "TIMESTAMPDIFF(SECOND, start, end)"
    _arity("TIMESTAMPDIFF", args, 3, usage)
    unit = _unit("TIMESTAMPDIFF", args[0], args, tuple(FIXED_UNITS), usage)
    micros = exp.DateDiff(this=args[2], expression=args[1], unit=exp.var("MICROSECOND"))
    if unit.name == "MICROSECOND":
        return micros
    # DuckDB's // and Spark's DIV both truncate toward zero, as TIMESTAMPDIFF does
    size = exp.Literal.number(FIXED_UNITS[unit.name])
    return exp.Paren(this=exp.IntDiv(this=micros, expression=size))


def timestamp_add(args: list[exp.Expr]) -> exp.Expr:
    """Flink's and Spark's ``TIMESTAMPADD(unit, n, ts)``: ``ts`` plus ``n`` units."""
    usage = "TIMESTAMPADD(SECOND, n, ts)"
    _arity("TIMESTAMPADD", args, 3, usage)
    unit = _unit("TIMESTAMPADD", args[0], args, ADDED_UNITS, usage)
    return exp.TimestampAdd(this=args[2], expression=args[1], unit=unit)
