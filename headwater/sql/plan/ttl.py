"""State time-to-live: ``'state.ttl'``, as Flink's ``table.exec.state.ttl``.

A query whose maintenance key is plain columns (or nothing: one group) keeps a
key's state for as long as the query runs, so its state grows with the distinct
values of the key. A time-to-live bounds it: a key's state (its rows, its last
result) is dropped once no row of that key has arrived for the TTL, in
processing time; its result rows are withdrawn then, and a later row of the key
starts it afresh. It is opt-in, per source table (``WITH ('state.ttl' = '1 h')``)
or per query (``sql(..., state_ttl="1 hour")``, ``headwater sql --state-ttl``),
because a result over expired state is no longer the query over every row
arrived (docs/sql.md, "State time-to-live"). Keys the watermark frees (windows,
event times) are not changed by it.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from headwater.sql.errors import SqlError, position
from headwater.sql.plan.catalog import Table
from headwater.sql.plan.keys import MaintenanceKey


def with_ttl(
    key: MaintenanceKey, query: exp.Expression, streams: tuple[Table, ...], option: int | None
) -> MaintenanceKey:
    """``key`` with the TTL asked for: the query's ``option`` if given, else the
    largest of its streams' ``'state.ttl'`` (every stream must declare one: a key's
    state holds the rows of all of them). Where the watermark frees the state, the
    TTL is only recorded (``explain()`` says it does not apply)."""
    if option is not None:
        return dataclasses.replace(key, ttl=option)
    declared = [t for t in streams if t.state_ttl is not None]
    if not declared:
        return key
    missing = [t for t in streams if t.state_ttl is None]
    if missing and not key.freed_by_watermark:
        table = missing[0].name
        refs = [t for t in query.find_all(exp.Table) if t.name.lower() == table.lower()]
        raise SqlError(
            f"stream {declared[0].name!r} declares 'state.ttl' but {table!r} does not: "
            "a key's state holds the rows of both, so one TTL must cover both",
            *position(refs[0] if refs else query),
            f"Declare 'state.ttl' on {table!r} too, or give the query its own "
            "(state_ttl=... in Python, --state-ttl on the command line)",
        )
    return dataclasses.replace(key, ttl=max(t.state_ttl or 0 for t in declared))
