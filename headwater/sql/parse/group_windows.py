"""Flink's legacy group windows, rewritten to the windowing table functions.

Before its windowing TVFs, Flink windowed an aggregate in GROUP BY::

    SELECT bidder, COUNT(*), SESSION_START(dateTime, INTERVAL '10' SECOND)
    FROM bid GROUP BY bidder, SESSION(dateTime, INTERVAL '10' SECOND)

which means exactly::

    SELECT bidder, COUNT(*), window_start
    FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(dateTime),
                       INTERVAL '10' SECOND))
    GROUP BY bidder, window_start, window_end

``TUMBLE(t, size)``, ``HOP(t, slide, size)`` and ``SESSION(t, gap)`` in GROUP BY
become the TVF over the query's one table; ``<KIND>_START``, ``<KIND>_END`` and
``<KIND>_ROWTIME`` become ``window_start``, ``window_end``, ``window_time``. A
legacy session window is per group key (the other GROUP BY columns), so they
become the session's PARTITION BY. The parser reads the call (:class:`GroupWindow`);
:func:`to_window_tvfs` rewrites each SELECT, or says what to write instead.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from headwater.sql.errors import SqlError, position
from headwater.sql.parse.ddl import interval_ms


class GroupWindow(exp.Expression):
    """``TUMBLE(t, size)``, ``HOP(t, slide, size)`` or ``SESSION(t, gap)`` as written
    in GROUP BY: ``kind`` and the arguments (``expressions``)."""

    arg_types = {"kind": True, "expressions": True}


#: Arguments after the time column, per kind, and the WindowTVF arg each fills.
_ARGS = {"TUMBLE": ("size",), "HOP": ("slide", "size"), "SESSION": ("gap",)}
#: Auxiliary functions' suffix -> the TVF's window column.
_AUXILIARY = {"START": "window_start", "END": "window_end", "ROWTIME": "window_time"}


def _usage(kind: str) -> str:
    after = {"TUMBLE": "size", "HOP": "slide, size", "SESSION": "gap"}[kind]
    return f"Write GROUP BY ..., {kind}(time_column, {after}) with INTERVALs"


def _hint(kind: str) -> str:
    return (
        f"Write the windowing table function: FROM TABLE({kind}(TABLE t, "
        "DESCRIPTOR(time_column), ...)) GROUP BY window_start, window_end, ..."
    )


def _arguments(window: GroupWindow) -> dict[str, int]:
    kind, args = window.args["kind"], window.expressions
    names = _ARGS[kind]
    if len(args) != 1 + len(names) or not isinstance(args[0], exp.Column):
        raise SqlError(f"{kind}(...) in GROUP BY takes a time column and {', '.join(names)}",
                       *position(window), _usage(kind))  # fmt: skip
    values = {}
    for name, arg in zip(names, args[1:], strict=True):
        if not isinstance(arg.unnest(), exp.Interval | exp.Add):
            raise SqlError(f"{kind}'s {name} must be an INTERVAL", *position(arg), _usage(kind))
        values[name] = interval_ms(arg.unnest())
        if values[name] <= 0:
            raise SqlError(f"{kind}'s {name} must be positive", *position(arg), _usage(kind))
    return values


def _own(select: exp.Select, node: exp.Expression) -> bool:
    """Whether ``node`` is in ``select``'s own clauses (not a nested query's)."""
    return node.find_ancestor(exp.Select) is select


def _source(select: exp.Select, window: GroupWindow) -> exp.Table:
    """The query's one table, which the window's TVF reads."""
    source = select.args.get("from_")
    kind = window.args["kind"]
    if select.args.get("joins") or source is None or not isinstance(source.this, exp.Table):
        raise SqlError(
            f"a group window ({kind}(...) in GROUP BY) reads one table, not a join or a subquery",
            *position(window),
            _hint(kind),
        )
    return source.this


def _keys(select: exp.Select, window: GroupWindow, table: exp.Table) -> list[exp.Column]:
    """A session's keys: the other GROUP BY items, columns of the table."""
    keys = []
    for item in select.args["group"].expressions:
        if item is window:
            continue
        if not isinstance(item, exp.Column) or item.table.lower() not in (
            "",
            table.alias_or_name.lower(),
        ):
            raise SqlError(
                "a session window groups by columns of its table only (its keys)",
                *position(item),
                "Group by the table's columns, and compute expressions of them in SELECT",
            )
        keys.append(exp.column(item.name, quoted=item.this.quoted))
    return keys


def _window_column(name: str, table: exp.Table) -> exp.Column:
    alias = table.alias
    return exp.column(name, table=exp.to_identifier(alias) if alias else None)


def _auxiliaries(select: exp.Select, window: GroupWindow, table: exp.Table) -> set[str]:
    """``KIND_START(t, ...)`` etc. of ``select`` as the window columns; the columns used."""
    used = set()
    kind = window.args["kind"]
    written = [a.sql() for a in window.expressions]
    for call in list(select.find_all(exp.Anonymous)):
        name = call.name.upper()
        prefix, _, suffix = name.partition("_")
        if prefix not in _ARGS or not _own(select, call) or not suffix:
            continue
        if prefix != kind or suffix not in _AUXILIARY:
            raise SqlError(
                f"{name} does not name a column of the {kind} window of this query",
                *position(call),
                f"Write {', '.join(f'{kind}_{s}' for s in _AUXILIARY)}",
            )
        if [a.sql() for a in call.expressions] != written:
            raise SqlError(
                f"{name} must repeat the arguments of {kind}(...) in GROUP BY",
                *position(call),
                f"Write {name}({', '.join(written)})",
            )
        call.replace(_window_column(_AUXILIARY[suffix], table))
        used.add(_AUXILIARY[suffix])
    return used


def _rewrite(select: exp.Select, window: GroupWindow, make_tvf: Callable) -> None:
    kind = window.args["kind"]
    values = _arguments(window)
    table = _source(select, window)
    timecol = window.expressions[0]
    if timecol.table and timecol.table.lower() != table.alias_or_name.lower():
        raise SqlError(f"{timecol.sql()} is not a column of {table.sql()}", *position(timecol))
    keys = _keys(select, window, table) if kind == "SESSION" else []
    used = _auxiliaries(select, window, table)
    data = exp.table_(table.this.copy(), db=table.args.get("db"))
    tvf = make_tvf(
        kind=kind,
        flink=True,
        this=data,
        timecol=exp.column(timecol.name, quoted=timecol.this.quoted),
        alias=table.args.get("alias"),
        **values,
        **({"keys": keys} if keys else {}),
    )
    tvf.meta.update(window.meta)  # errors about the TVF point at the GROUP BY
    table.replace(tvf)
    group = select.args["group"]
    items = [i for i in group.expressions if i is not window]
    bounds = ["window_start", "window_end"] + (["window_time"] if "window_time" in used else [])
    group.set("expressions", [*items, *(_window_column(c, table) for c in bounds)])


def to_window_tvfs(statement: exp.Expression, make_tvf: Callable) -> exp.Expression:
    """``statement`` with every legacy group window rewritten to ``make_tvf(...)``
    (the dialect's WindowTVF); SqlError where one is not in GROUP BY."""
    for window in list(statement.find_all(GroupWindow)):
        select = window.parent.parent if isinstance(window.parent, exp.Group) else None
        kind = window.args["kind"]
        if window.find_ancestor(exp.From, exp.Join) is not None:
            raise SqlError(
                f"{kind} in FROM reads TABLE(name) and DESCRIPTOR(time_column)",
                *position(window),
                f"Write FROM TABLE({kind}(TABLE t, DESCRIPTOR(time_column), ...))",
            )
        if not isinstance(select, exp.Select):
            raise SqlError(
                f"{kind}(time_column, ...) is a group window: it goes in GROUP BY",
                *position(window),
                _hint(kind),
            )
        others = [w for w in select.args["group"].expressions if isinstance(w, GroupWindow)]
        if len(others) > 1:
            raise SqlError("a GROUP BY has one group window", *position(others[1]))
    for window in list(statement.find_all(GroupWindow)):
        _rewrite(window.parent.parent, window, make_tvf)
    for call in statement.find_all(exp.Anonymous):
        prefix, _, suffix = call.name.upper().partition("_")
        if prefix in _ARGS and suffix:
            raise SqlError(
                f"{call.name.upper()} names the window of a GROUP BY {prefix}(...)",
                *position(call),
                f"Group by {prefix}(time_column, ...) in the same SELECT",
            )
    return statement
