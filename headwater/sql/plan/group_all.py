"""``GROUP BY ALL`` (DuckDB's) spelt out as the select items it groups by.

DuckDB groups by every select item that aggregates nothing. Written out before
planning, those items are the group columns the planner derives its key from
(the window bounds of a TVF, a key's columns): a windowed ``GROUP BY ALL`` is
maintained per window and completes under ``EMIT AFTER WATERMARK``, instead of
recomputing one group of every row.
"""

from __future__ import annotations

from sqlglot import exp


def expand_group_all(query: exp.Expression) -> exp.Expression:
    """``query`` with each ``GROUP BY ALL`` as the list of its select items that
    hold no aggregate or window function (left as is beside a star)."""
    for select in list(query.find_all(exp.Select)):
        group = select.args.get("group")
        if group is None or not group.args.get("all") or group.expressions:
            continue
        items = select.expressions
        if any(item.is_star for item in items):
            continue
        keys = [
            (item.this if isinstance(item, exp.Alias) else item).copy()
            for item in items
            if not item.find(exp.AggFunc, exp.Window)
        ]
        select.set("group", exp.Group(expressions=keys) if keys else None)
    return query
